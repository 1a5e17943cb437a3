// Rowfire's one script: served from the binary at /assets/rowfire.js.
"use strict";

// ---- Operator pages (Activity, Demo inbox, Integrations): live feeds and API forms. ----

// Live feeds: every element with data-stream opens the server-sent event stream at that URL,
// from the ids the page was drawn with (data-after-*), and keeps its lists current: an event
// carries the item's HTML; an item already shown (same data-*-id) is replaced, a new one is
// put first and the list's empty state hidden.
function rowfireLiveFeeds() {
  document.querySelectorAll("[data-stream]").forEach(function (root) {
    var params = new URLSearchParams();
    params.set("topics", root.dataset.topics || "run,fire,delivery,inbox,status");
    ["run", "fire", "delivery", "inbox"].forEach(function (topic) {
      var after = root.dataset["after" + topic.charAt(0).toUpperCase() + topic.slice(1)];
      if (after !== undefined) params.set(topic, after);
    });
    var source = new EventSource(root.dataset.stream + "?" + params.toString());
    var lists = {
      run: ["runs-feed", "runs-empty", "data-run-id", "id"],
      fire: ["fires-feed", "fires-empty", "data-fire-id", "id"],
      delivery: ["deliveries-feed", "deliveries-empty", "data-delivery-id", "id"],
      inbox: ["inbox-feed", "inbox-empty", "data-delivery-id", "delivery_id"]
    };
    Object.keys(lists).forEach(function (topic) {
      source.addEventListener(topic, function (e) {
        var spec = lists[topic];
        var list = document.getElementById(spec[0]);
        if (!list) return;
        var item = JSON.parse(e.data);
        rowfireUpsert(list, spec[2], item[spec[3]], item.html);
        var empty = document.getElementById(spec[1]);
        if (empty) empty.hidden = true;
      });
    });
    source.addEventListener("status", function (e) {
      var shown = document.getElementById("halt-state");
      if (!shown) return;
      // The kill switch's form changes with the state: draw the page again.
      window.location.reload();
    });
  });
}

// Puts `html` (one element) into `list`: in place of the element whose `attr` is `id`, else first.
function rowfireUpsert(list, attr, id, html) {
  var holder = document.createElement("div");
  holder.innerHTML = html;
  var fresh = holder.firstElementChild;
  if (!fresh) return;
  var old = list.querySelector("[" + attr + "=\"" + String(id) + "\"]");
  if (old) {
    old.replaceWith(fresh);
  } else {
    list.insertBefore(fresh, list.firstElementChild);
  }
}

// API forms: a form with data-api is sent as JSON (fields with data-json parsed as JSON, empty
// fields left out) to that URL with data-method. An error is shown next to the field it names
// ([data-error-for]); on success the page reloads (data-then="reload") or the answer is shown
// in the element data-result names.
function rowfireApiForms() {
  document.querySelectorAll("form[data-api]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      form.querySelectorAll("[data-error-for]").forEach(function (p) { p.textContent = ""; });
      form.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
      var body = {};
      try {
        Array.prototype.forEach.call(form.elements, function (el) {
          if (!el.name || el.value === "") return;
          if (el.hasAttribute("data-json")) {
            try { body[el.name] = JSON.parse(el.value); } catch (e) { throw { field: el.name }; }
          } else {
            body[el.name] = el.value;
          }
        });
      } catch (bad) {
        rowfireFieldError(form, bad.field, "This is not valid JSON.");
        return;
      }
      var button = form.querySelector("button[type=submit]");
      if (button) button.disabled = true;
      fetch(form.dataset.api, {
        method: form.dataset.method || "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
        credentials: "same-origin"
      }).then(function (response) {
        return response.text().then(function (text) {
          var json = null;
          try { json = text ? JSON.parse(text) : null; } catch (e) { json = null; }
          if (!response.ok) {
            var error = (json && json.error) || { message: "The server answered " + response.status + "." };
            rowfireFieldError(form, error.field || "body", error.message);
            return;
          }
          if (form.dataset.then === "reload") { window.location.reload(); return; }
          var result = document.getElementById(form.dataset.result || "");
          if (result) result.textContent = JSON.stringify(json, null, 2);
        });
      }).catch(function () {
        rowfireFieldError(form, "body", "The server could not be reached.");
      }).finally(function () {
        if (button) button.disabled = false;
      });
    });
  });
}

// Shows `message` next to the form's field `field` (or the form's general error line).
function rowfireFieldError(form, field, message) {
  var slot = form.querySelector("[data-error-for=\"" + field + "\"]") ||
    form.querySelector("[data-error-for=\"body\"]");
  if (slot) slot.textContent = message;
  var input = form.querySelector("[name=\"" + field + "\"]");
  if (input) { input.setAttribute("aria-invalid", "true"); input.focus(); }
}

document.addEventListener("DOMContentLoaded", function () {
  rowfireLiveFeeds();
  rowfireApiForms();
});
