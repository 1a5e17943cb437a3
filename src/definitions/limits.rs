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
/// The most bytes YAML aliases (`*name`) may add to a document when expanded: each alias copies
/// its anchor's node, so a small file could otherwise expand to gigabytes in the parser.
pub const MAX_ALIAS_BYTES: u64 = 1 << 20;

/// The longest `poll_interval`.
pub const MAX_POLL_INTERVAL: SignedDuration = SignedDuration::from_hours(24 * 7);
/// The longest `lookback`.
pub const MAX_LOOKBACK: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest anchor `lead`.
pub const MAX_LEAD: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest anchor `look_ahead`.
pub const MAX_LOOK_AHEAD: SignedDuration = SignedDuration::from_hours(24 * 90);
/// The longest interval between sweeps of a time-anchored rule's look-ahead.
pub const MAX_SWEEP_INTERVAL: SignedDuration = SignedDuration::from_hours(24);
/// The longest lead a row's lead column may give, in minutes (90 days).
pub const MAX_LEAD_MINUTES: i64 = 60 * 24 * 90;
/// The longest grace for a time-anchored send.
pub const MAX_GRACE: SignedDuration = SignedDuration::from_hours(24 * 7);
/// The longest `statement_timeout_ms` (one hour).
pub const MAX_STATEMENT_TIMEOUT_MS: u64 = 3_600_000;
/// The longest name of a trigger, rule, source or integration, in bytes.
pub const MAX_NAME: usize = 100;
/// The longest column name a trigger or an anchor names, in bytes (as the HTTP API's).
pub const MAX_COLUMN_NAME: usize = 128;
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

/// Refuses a document too large or too deeply nested to parse quickly, before it is parsed.
///
/// The YAML scanner spends time in proportion to the current nesting on every token, so a
/// document of nothing but nested brackets costs time quadratic in its size. The nesting is
/// therefore measured with the same scanner, event by event, stopping at the first collection
/// deeper than [`MAX_DEPTH`]: every token then costs at most that much, and the whole check is
/// linear in the document's size. (A count of bracket characters cannot do this: brackets
/// inside quoted scalars do not nest, and quotes inside plain scalars do not quote.)
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
    match scan(text, MAX_DEPTH, MAX_ALIAS_BYTES) {
        Some(Finding::Deep(line)) => Err(too(format!(
            "line {line}: collections are nested more than {MAX_DEPTH} deep; definitions never need that, flatten it"
        ))),
        Some(Finding::Aliases(line)) => Err(too(format!(
            "line {line}: YAML aliases (*name) would copy more than {MAX_ALIAS_BYTES} bytes (1 MiB) of anchored text; write the repeated parts out or anchor smaller parts"
        ))),
        None => Ok(()),
    }
}

/// What the pre-scan refuses, with the line (from 1) where it was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finding {
    /// A collection nested deeper than allowed.
    Deep(usize),
    /// The alias that took the expanded size past the bound.
    Aliases(usize),
}

/// The line (from 1) of the first collection nested deeper than `max`, if any.
#[cfg(test)]
fn deeper_than(text: &str, max: usize) -> Option<usize> {
    match scan(text, max, u64::MAX) {
        Some(Finding::Deep(line)) => Some(line),
        _ => None,
    }
}

/// One open collection while scanning: its anchor (if any), where it starts, and the bytes the
/// aliases inside it expand to.
struct Open {
    anchor: Option<Vec<u8>>,
    start: u64,
    aliased: u64,
}

/// The anchor name an event carries, copied (`ptr` may be null).
///
/// # Safety
/// `ptr` is null or points to a NUL-terminated string that lives until the event is deleted.
#[allow(
    unsafe_code,
    reason = "reads an anchor name the YAML scanner wrote, for `scan`"
)]
unsafe fn anchor_name(ptr: *const u8) -> Option<Vec<u8>> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: as the caller promises.
    Some(
        unsafe { std::ffi::CStr::from_ptr(ptr.cast()) }
            .to_bytes()
            .to_vec(),
    )
}

/// The first collection nested deeper than `max`, or the first alias after which the aliases
/// seen so far expand to more than `max_alias_bytes` (each alias counts its anchor's text plus
/// what the aliases inside that anchor expand to), in one linear pass. A document that is not
/// valid YAML yields `None` at its first error: the parser that follows reports it.
#[allow(
    unsafe_code,
    reason = "drives the YAML scanner event by event, to bound nesting before parsing"
)]
fn scan(text: &str, max: usize, max_alias_bytes: u64) -> Option<Finding> {
    use std::mem::MaybeUninit;
    use unsafe_libyaml as unsafe_yaml;

    let mut parser = MaybeUninit::<unsafe_yaml::yaml_parser_t>::uninit();
    // SAFETY: `yaml_parser_initialize` fully initialises the parser (it zeroes it and allocates
    // its buffers) before anything reads it, and `yaml_parser_delete` frees it on every path
    // below. The input pointer and length describe `text`, which outlives the parser. An event
    // is read only after `yaml_parser_parse` succeeded and so wrote it, and deleted at once.
    unsafe {
        if unsafe_yaml::yaml_parser_initialize(parser.as_mut_ptr()).fail {
            return None;
        }
        let parser = parser.as_mut_ptr();
        unsafe_yaml::yaml_parser_set_input_string(parser, text.as_ptr(), text.len() as _);
        let mut open: Vec<Open> = Vec::new();
        let mut anchors: std::collections::HashMap<Vec<u8>, u64> = Default::default();
        let mut expanded = 0u64;
        let mut found = None;
        loop {
            let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
            if unsafe_yaml::yaml_parser_parse(parser, event.as_mut_ptr()).fail {
                break;
            }
            let ev = &*event.as_ptr();
            let kind = ev.type_;
            let (start, end): (u64, u64) = (ev.start_mark.index, ev.end_mark.index);
            let line = usize::try_from(ev.start_mark.line)
                .unwrap_or(usize::MAX)
                .saturating_add(1);
            let anchor = match kind {
                unsafe_yaml::YAML_SEQUENCE_START_EVENT => {
                    anchor_name(ev.data.sequence_start.anchor)
                }
                unsafe_yaml::YAML_MAPPING_START_EVENT => anchor_name(ev.data.mapping_start.anchor),
                unsafe_yaml::YAML_SCALAR_EVENT => anchor_name(ev.data.scalar.anchor),
                unsafe_yaml::YAML_ALIAS_EVENT => anchor_name(ev.data.alias.anchor),
                _ => None,
            };
            unsafe_yaml::yaml_event_delete(event.as_mut_ptr());
            match kind {
                unsafe_yaml::YAML_SEQUENCE_START_EVENT | unsafe_yaml::YAML_MAPPING_START_EVENT => {
                    open.push(Open {
                        anchor,
                        start,
                        aliased: 0,
                    });
                    if open.len() > max {
                        found = Some(Finding::Deep(line));
                        break;
                    }
                }
                unsafe_yaml::YAML_SEQUENCE_END_EVENT | unsafe_yaml::YAML_MAPPING_END_EVENT => {
                    if let Some(done) = open.pop() {
                        if let Some(name) = done.anchor {
                            let size = end.saturating_sub(done.start).saturating_add(done.aliased);
                            anchors.insert(name, size);
                        }
                        if let Some(parent) = open.last_mut() {
                            parent.aliased = parent.aliased.saturating_add(done.aliased);
                        }
                    }
                }
                unsafe_yaml::YAML_SCALAR_EVENT => {
                    if let Some(name) = anchor {
                        anchors.insert(name, end.saturating_sub(start));
                    }
                }
                unsafe_yaml::YAML_ALIAS_EVENT => {
                    let size = anchor.and_then(|n| anchors.get(&n).copied()).unwrap_or(0);
                    expanded = expanded.saturating_add(size);
                    if let Some(parent) = open.last_mut() {
                        parent.aliased = parent.aliased.saturating_add(size);
                    }
                    if expanded > max_alias_bytes {
                        found = Some(Finding::Aliases(line));
                        break;
                    }
                }
                unsafe_yaml::YAML_STREAM_END_EVENT => break,
                _ => {}
            }
        }
        unsafe_yaml::yaml_parser_delete(parser);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_maximum_is_shown_in_days_when_it_is_whole_days() {
        assert_eq!(shown(MAX_LOOKBACK), "90d");
        assert_eq!(shown(SignedDuration::from_secs(90)), "1m 30s");
        assert_eq!(shown(SignedDuration::from_hours(36)), "36h");
    }

    #[test]
    fn aliases_are_counted_by_the_text_they_copy_including_nested_aliases() {
        let small = "d: &d {a: 1}\nx: [*d, *d, *d]\n";
        assert_eq!(scan(small, 64, 1 << 20), None);
        let big = format!(
            "s: &s \"{}\"\ny: [{}]\n",
            "A".repeat(1000),
            ["*s"; 2000].join(",")
        );
        assert_eq!(scan(&big, 64, 1 << 20), Some(Finding::Aliases(2)));
        // Billion laughs: each level is small in the file but nine times the one before.
        let mut laughs = "l0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n".to_string();
        for i in 1..10 {
            laughs += &format!(
                "l{i}: &a{i} [{}]\n",
                vec![format!("*a{}", i - 1); 9].join(",")
            );
        }
        assert!(matches!(
            scan(&laughs, 64, 1 << 20),
            Some(Finding::Aliases(_))
        ));
    }

    #[test]
    fn nesting_counts_block_and_flow_collections_but_not_brackets_in_scalars() {
        let block: String = (0..10)
            .map(|i| format!("{}k{i}:\n", "  ".repeat(i)))
            .collect();
        // Eleven mappings: the document and one per key; the eleventh starts on line 11.
        assert_eq!(
            deeper_than(&format!("{block}{}v: 1\n", "  ".repeat(10)), 10),
            Some(11)
        );
        assert_eq!(
            deeper_than(&format!("{block}{}v: 1\n", "  ".repeat(10)), 11),
            None
        );
        assert_eq!(deeper_than("a: [[[1]]]\n", 4), None);
        assert_eq!(deeper_than("a: [[[[1]]]]\n", 4), Some(1));
        assert_eq!(deeper_than("a: \"[[[[[[\"\nb: '{{{{{{'\n", 2), None);
        assert_eq!(deeper_than("sql: |\n  SELECT a[1][2][3][4]\n", 1), None);
        assert_eq!(
            deeper_than("a: [\n", 2),
            None,
            "invalid YAML is left to the parser"
        );
    }
}
