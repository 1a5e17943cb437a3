//! Templates in URLs. Text written in an action's path template is kept as written; every value
//! taken from the context (row data) is percent-encoded so that it stays inside its place: one
//! path segment before the first `?` (or `#`) of the written text, one query value after it. A
//! value can then never add a segment, climb out with `..`, start a query, a fragment or an
//! authority, or end a line.

use serde_json::Value;

use super::{TemplateError, Token, as_text, lookup, tokens};

/// Text written by the same author as the path template (a binding's parameter, say), standing
/// in for one of its placeholders. Its own text is kept as written and its placeholders are
/// rendered, encoded, against `ctx`.
pub struct Inline<'a> {
    /// The text that stands in for a placeholder's dotted name, if any.
    pub text: &'a dyn Fn(&str) -> Option<String>,
    /// The context the inlined text's placeholders are rendered against.
    pub ctx: &'a Value,
}

/// Bytes that never need encoding anywhere in a URL (RFC 3986 "unreserved").
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if unreserved(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `value` as one path segment: everything but letters, digits and `-._~` is percent-encoded
/// (UTF-8 bytes), and a value that is `.` or `..` has its dots encoded. (Parsers following the
/// WHATWG URL standard still treat `%2E%2E` as `..`, so the rendered URL is checked for dot
/// segments too.)
pub fn encode_path_segment(value: &str) -> String {
    if value == "." || value == ".." {
        return value.replace('.', "%2E");
    }
    percent_encode(value)
}

/// `value` as one query value: everything but letters, digits and `-._~` is percent-encoded, so
/// `&`, `=`, `#`, `+` and spaces cannot end it.
pub fn encode_query_value(value: &str) -> String {
    percent_encode(value)
}

/// Renders a URL path (and query) template. Written text is kept; each value is encoded with
/// [`encode_path_segment`] until the written text has had a `?` or `#`, and with
/// [`encode_query_value`] after. A placeholder that `inline` has text for is replaced by that
/// text, rendered the same way in place (one level deep).
pub fn render_url(
    template: &str,
    ctx: &Value,
    inline: Option<&Inline<'_>>,
) -> Result<String, TemplateError> {
    let mut out = Renderer {
        out: String::with_capacity(template.len()),
        in_query: false,
        segment: Segment::default(),
    };
    for token in tokens(template) {
        match token {
            Token::Text(text) => out.text(text)?,
            Token::Name(name) => match inline.and_then(|i| (i.text)(name).map(|t| (i, t))) {
                Some((inline, text)) => {
                    for inner in tokens(&text) {
                        match inner {
                            Token::Text(text) => out.text(text)?,
                            Token::Name(name) => out.value(inline.ctx, name)?,
                        }
                    }
                }
                None => out.value(ctx, name)?,
            },
        }
    }
    out.end_segment()?;
    Ok(out.out)
}

struct Renderer {
    out: String,
    in_query: bool,
    segment: Segment,
}

/// The path segment being rendered: where it starts, whether written text is in it, and the
/// first value that fills it.
#[derive(Default)]
struct Segment {
    start: usize,
    written: bool,
    value: Option<String>,
}

impl Renderer {
    fn text(&mut self, text: &str) -> Result<(), TemplateError> {
        for c in text.chars() {
            if !self.in_query {
                match c {
                    // A WHATWG URL parser reads `\` as `/` in an http(s) path.
                    '/' | '\\' => {
                        self.end_segment()?;
                        self.out.push(c);
                        self.segment = Segment {
                            start: self.out.len(),
                            ..Segment::default()
                        };
                        continue;
                    }
                    '?' | '#' => {
                        self.end_segment()?;
                        self.in_query = true;
                    }
                    _ => self.segment.written = true,
                }
            }
            self.out.push(c);
        }
        Ok(())
    }

    /// A path segment made of values alone that all rendered empty would send the request to
    /// another resource (`DELETE /users/` for `/users/{{ id }}`): refused, as a missing value is.
    fn end_segment(&self) -> Result<(), TemplateError> {
        match &self.segment.value {
            Some(name)
                if !self.in_query
                    && !self.segment.written
                    && self.out.len() == self.segment.start =>
            {
                Err(TemplateError::EmptySegment { name: name.clone() })
            }
            _ => Ok(()),
        }
    }

    fn value(&mut self, ctx: &Value, name: &str) -> Result<(), TemplateError> {
        let value = lookup(ctx, name).ok_or_else(|| TemplateError::Missing {
            name: name.to_string(),
        })?;
        let text = as_text(value);
        if self.in_query {
            self.out.push_str(&encode_query_value(&text));
        } else {
            self.segment.value.get_or_insert_with(|| name.to_string());
            self.out.push_str(&encode_path_segment(&text));
        }
        Ok(())
    }
}

/// Whether one path segment, as written in a URL, is a dot segment to a WHATWG URL parser
/// (`.`, `..`, or either spelled with `%2e`).
pub fn is_dot_segment(segment: &str) -> bool {
    let lower = segment.to_ascii_lowercase();
    matches!(
        lower.as_str(),
        "." | ".." | "%2e" | ".%2e" | "%2e." | "%2e%2e"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn path(template: &str, value: &str) -> String {
        render_url(template, &json!({ "v": value, "n": 7 }), None).unwrap()
    }

    /// `DELETE /users/{{ id }}` with no id would delete at the collection: refused instead.
    #[test]
    fn an_empty_or_null_value_that_fills_a_whole_path_segment_is_refused() {
        let ctx = json!({ "empty": "", "none": null, "id": "u1" });
        for template in [
            "/users/{{ empty }}",
            "/users/{{ none }}/posts",
            "{{ none }}",
        ] {
            assert_eq!(
                render_url(template, &ctx, None),
                Err(TemplateError::EmptySegment {
                    name: if template.contains("empty") {
                        "empty"
                    } else {
                        "none"
                    }
                    .into()
                }),
                "{template}"
            );
        }
        assert_eq!(
            render_url("/u/{{ empty }}{{ none }}/x", &ctx, None),
            Err(TemplateError::EmptySegment {
                name: "empty".into()
            })
        );
        // `\` ends a segment as `/` does, to the parsers that read the URL.
        assert!(render_url("/users\\{{ empty }}", &ctx, None).is_err());
        assert!(render_url("/users\\{{ empty }}\\notes", &ctx, None).is_err());
        for (template, rendered) in [
            ("/users/u{{ empty }}", "/users/u"),
            ("/users/{{ id }}?note={{ none }}", "/users/u1?note="),
            ("/u/{{ empty }}{{ id }}/x", "/u/u1/x"),
            ("/users/{{ id }}/{{ empty }}x", "/users/u1/x"),
        ] {
            assert_eq!(render_url(template, &ctx, None).unwrap(), rendered);
        }
    }

    #[test]
    fn a_value_in_the_path_is_encoded_as_one_segment() {
        for (value, encoded) in [
            (
                "../../admin/delete-everything?x=",
                "..%2F..%2Fadmin%2Fdelete-everything%3Fx%3D",
            ),
            ("@127.0.0.1:18082/stolen", "%40127.0.0.1%3A18082%2Fstolen"),
            ("a#frag", "a%23frag"),
            ("a?b", "a%3Fb"),
            ("already%2Fencoded", "already%252Fencoded"),
            ("line\r\nX-Evil: 1", "line%0D%0AX-Evil%3A%201"),
            ("back\\slash", "back%5Cslash"),
            ("héllo wörld", "h%C3%A9llo%20w%C3%B6rld"),
            ("..", "%2E%2E"),
            (".", "%2E"),
            ("...", "..."),
            ("plain-Value_1.2~", "plain-Value_1.2~"),
        ] {
            assert_eq!(
                path("/accounts/{{ v }}/notes", value),
                format!("/accounts/{encoded}/notes"),
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_value_after_the_question_mark_is_encoded_as_one_query_value() {
        assert_eq!(
            path("/search?q={{ v }}&page={{ n }}", "a&b=c#d+e f"),
            "/search?q=a%26b%3Dc%23d%2Be%20f&page=7"
        );
        assert_eq!(path("/x#{{ v }}", "a/b"), "/x#a%2Fb");
    }

    #[test]
    fn written_text_is_kept_and_a_missing_name_is_an_error() {
        assert_eq!(path("/a/b.json?x=1&y=2", "unused"), "/a/b.json?x=1&y=2");
        assert_eq!(path("{{ not a name }}/{{ v }}", "x"), "{{ not a name }}/x");
        assert_eq!(
            render_url("/{{ missing }}", &json!({}), None).unwrap_err(),
            TemplateError::Missing {
                name: "missing".into()
            }
        );
    }

    #[test]
    fn inlined_text_is_kept_as_written_and_its_values_are_encoded() {
        let row = json!({ "id": "../x?y" });
        let full = json!({ "params": { "path": "ignored" }, "v": "a/b" });
        let text = |name: &str| (name == "params.path").then(|| "/orders/{{ id }}".to_string());
        let inline = Inline {
            text: &text,
            ctx: &row,
        };
        assert_eq!(
            render_url("{{ params.path }}/{{ v }}", &full, Some(&inline)).unwrap(),
            "/orders/..%2Fx%3Fy/a%2Fb"
        );
        let text = |_: &str| Some("?q={{ id }}".to_string());
        let inline = Inline {
            text: &text,
            ctx: &row,
        };
        assert_eq!(
            render_url("/s{{ params.path }}", &full, Some(&inline)).unwrap(),
            "/s?q=..%2Fx%3Fy",
            "a ? in inlined text starts the query"
        );
    }

    #[test]
    fn dot_segments_are_recognised_in_every_spelling() {
        for s in [".", "..", "%2e", "%2E", ".%2e", "%2E.", "%2e%2E"] {
            assert!(is_dot_segment(s), "{s}");
        }
        for s in ["", "...", "a.", "%2e%2e%2e", "x"] {
            assert!(!is_dot_segment(s), "{s}");
        }
    }
}
