//! Standard output for every command. `print!` and `println!` in this binary (defined in
//! `main.rs`) write through [`write`], so a reader that goes away (`rowfire status | head -1`)
//! ends the process quietly with exit code 0, as careful command-line tools do, instead of
//! panicking with "failed printing to stdout". Any other write error is reported and exits 1.

use std::io::{self, Write};

/// Writes formatted output to standard output; on a closed pipe, exits quietly.
pub(crate) fn write(args: std::fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        failed(e)
    }
}

fn failed(e: io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "error: cannot write to standard output: {e}");
    std::process::exit(1)
}
