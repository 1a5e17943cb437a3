// Rowfire's one script: served from the binary at /assets/rowfire.js.
"use strict";
