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
/// The longest anchor `lead`.
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
    match deeper_than(text, MAX_DEPTH) {
        Some(line) => Err(too(format!(
            "line {line}: collections are nested more than {MAX_DEPTH} deep; definitions never need that, flatten it"
        ))),
        None => Ok(()),
    }
}

/// The line (from 1) of the first collection nested deeper than `max`, if any. A document that
/// is not valid YAML yields `None` at its first error: the parser that follows reports it.
fn deeper_than(text: &str, max: usize) -> Option<usize> {
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
        let mut depth = 0usize;
        let mut found = None;
        loop {
            let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
            if unsafe_yaml::yaml_parser_parse(parser, event.as_mut_ptr()).fail {
                break;
            }
            let kind = (*event.as_ptr()).type_;
            let line = (*event.as_ptr()).start_mark.line;
            unsafe_yaml::yaml_event_delete(event.as_mut_ptr());
            match kind {
                unsafe_yaml::YAML_SEQUENCE_START_EVENT | unsafe_yaml::YAML_MAPPING_START_EVENT => {
                    depth += 1;
                    if depth > max {
                        found = Some(
                            usize::try_from(line)
                                .unwrap_or(usize::MAX)
                                .saturating_add(1),
                        );
                        break;
                    }
                }
                unsafe_yaml::YAML_SEQUENCE_END_EVENT | unsafe_yaml::YAML_MAPPING_END_EVENT => {
                    depth = depth.saturating_sub(1)
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
