//! The limits a definitions document must stay within, and the cheap pre-scan that refuses an
//! oversized or too deeply nested document in one linear pass before the YAML parser sees it.
//!
//! Every number a document gives is bounded where it is read (see `parse.rs`), so no duration
//! can push a watermark, due time or lease out of the range the control plane stores.

use jiff::SignedDuration;

use super::Problem;

/// The largest definitions file read, in bytes.
pub const MAX_FILE_BYTES: usize = 1 << 20;
/// The deepest nesting accepted: flow collections (`[`, `{`) or indentation levels.
pub const MAX_DEPTH: usize = 64;
/// The most sources a document may declare.
pub const MAX_SOURCES: usize = 100;
/// The most integrations a document may declare.
pub const MAX_INTEGRATIONS: usize = 100;
/// The most triggers a document may declare.
pub const MAX_TRIGGERS: usize = 1_000;
/// The most rules a document may declare.
pub const MAX_RULES: usize = 2_000;
/// The most columns a trigger's `key` (or `occurrence`) may list.
pub const MAX_KEY_COLUMNS: usize = 16;
/// The most actions one rule may bind.
pub const MAX_ACTIONS_PER_RULE: usize = 20;

/// The longest `poll_interval`.
pub const MAX_POLL_INTERVAL: SignedDuration = SignedDuration::from_hours(24 * 7);
/// The longest `lookback`.
pub const MAX_LOOKBACK: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest anchor `lead` (also bounds a row's lead column).
pub const MAX_LEAD: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest anchor `look_ahead`.
pub const MAX_LOOK_AHEAD: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest anchor `grace`.
pub const MAX_GRACE: SignedDuration = SignedDuration::from_hours(24 * 7);
/// The longest `statement_timeout_ms` (one hour).
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = 3_600_000;
/// The largest `max_rows` (rows per page).
pub const MAX_PAGE_ROWS: u64 = 100_000;

/// A duration as a person writes it: whole days as `90d`, else `{:#}` (`36h`, `90s`).
pub fn shown(d: SignedDuration) -> String {
    let secs = d.as_secs();
    if secs != 0 && secs % 86_400 == 0 && d.subsec_nanos() == 0 {
        format!("{}d", secs / 86_400)
    } else {
        format!("{d:#}")
    }
}

/// Refuses, in one pass over the bytes, a document too large or too deeply nested to parse
/// quickly. Flow nesting counts every `[`/`{` against every `]`/`}`, quoted or not (which can
/// only overcount); indentation depth counts the levels of leading spaces in force on a line.
pub(super) fn prescan(text: &str) -> Result<(), Problem> {
    let too = |message: String| Problem {
        path: "(document)".into(),
        message,
    };
    if text.len() > MAX_FILE_BYTES {
        return Err(too(format!(
            "the file is {} bytes; a definitions file may be at most {MAX_FILE_BYTES} bytes (1 MiB); split it or remove unused definitions",
            text.len()
        )));
    }
    let mut flow = 0usize;
    let mut indents: Vec<usize> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let body = line.trim_start_matches(' ');
        if !body.is_empty() && !body.starts_with('#') {
            let indent = line.len() - body.len();
            while indents.last().is_some_and(|&top| top > indent) {
                indents.pop();
            }
            if indents.last() != Some(&indent) {
                indents.push(indent);
            }
            if indents.len() > MAX_DEPTH {
                return Err(too(format!(
                    "line {}: indentation is nested more than {MAX_DEPTH} levels deep; definitions never need that, flatten it",
                    n + 1
                )));
            }
        }
        for b in line.bytes() {
            match b {
                b'[' | b'{' => {
                    flow += 1;
                    if flow > MAX_DEPTH {
                        return Err(too(format!(
                            "line {}: brackets are nested more than {MAX_DEPTH} deep; definitions never need that, flatten it",
                            n + 1
                        )));
                    }
                }
                b']' | b'}' => flow = flow.saturating_sub(1),
                _ => {}
            }
        }
    }
    Ok(())
}
