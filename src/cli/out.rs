//! Standard output for every command. `print!` and `println!` in this binary (defined in
//! `main.rs`) write through [`write`], so a reader that goes away (`rowfire status | head -1`)
//! ends the process quietly with exit code 0, as careful command-line tools do, instead of
//! panicking with "failed printing to stdout". Any other write error is reported and exits 1.
//!
//! Output carries text Rowfire does not control (row values in recipients, what a destination
//! answered, database errors), so control characters other than newline and tab are written as
//! visible escapes (`\u{1b}`): a value cannot move the cursor, retitle or clear the terminal,
//! set the clipboard (OSC 52) or overwrite a line with `\r`.

use std::borrow::Cow;
use std::io::{self, Write};

/// Writes formatted output to standard output, control characters escaped; on a closed pipe,
/// exits quietly.
pub(crate) fn write(args: std::fmt::Arguments<'_>) {
    let text = match args.as_str() {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(args.to_string()),
    };
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_all(printable(&text).as_bytes()) {
        failed(e)
    }
}

/// `text` with every control character but newline and tab (C0, DEL and C1) written as a
/// visible `\u{…}` escape.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// An error as one line: its message and the causes behind it, each said once. A control-plane
/// error already carries its driver's message, so the driver's own error behind it (kept as its
/// source for callers) is not repeated, nor is any cause whose text the line already holds.
pub(crate) fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if !line.contains(&text) {
            if !line.is_empty() {
                line.push_str(": ");
            }
            line.push_str(&text);
        }
        if cause.is::<rowfire::store::StoreError>() {
            break;
        }
    }
    line
}

fn failed(e: io::Error) -> ! {
    if e.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    let _ = writeln!(io::stderr(), "error: cannot write to standard output: {e}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    use super::{error_line, printable};

    #[test]
    fn an_error_line_says_each_cause_once_and_stops_at_the_control_plane() {
        let store = rowfire::store::StoreError::Invalid {
            shown: "sqlite:x.db".into(),
            message: "workspace \"w\" does not exist".into(),
        };
        let e = anyhow::Error::new(store).context("cannot list rules");
        assert_eq!(
            error_line(&e),
            "cannot list rules: control plane (sqlite:x.db): workspace \"w\" does not exist"
        );
        let repeated = anyhow::anyhow!("disk full").context("cannot push: disk full");
        assert_eq!(error_line(&repeated), "cannot push: disk full");
    }

    #[test]
    fn terminal_control_sequences_in_output_are_shown_not_obeyed() {
        assert_eq!(printable("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            printable("Evil\u{1b}[2J\u{1b}]52;c;aGk=\u{7}\rX\u{9b}31m"),
            "Evil\\u{1b}[2J\\u{1b}]52;c;aGk=\\u{7}\\u{d}X\\u{9b}31m"
        );
    }
}
