//! Where a rendered request goes, checked: the rendered path is joined to the integration's base
//! URL and the result parsed again, so that no row value can change the scheme, the host, the
//! port or the credentials part of the URL, leave the base URL's path, or form a dot segment; and
//! no rendered header value can hold a line break or another control character.

use reqwest::Url;

use crate::template::TemplateError;
use crate::template::url::is_dot_segment;

/// A binding that cannot be rendered into a request that is safe to send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A template names a value the row lacks.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The rendered URL is not under the integration's base URL.
    #[error(
        "the rendered URL {what}; row values must stay inside their place in the path or query, so it was not sent (check the action's path template and the row's values)"
    )]
    Url {
        /// What changed, in words.
        what: String,
    },
    /// A stored URL is not under the integration's base URL in force (rendered under another
    /// base_url, or by a version before URLs were checked).
    #[error(
        "the stored URL is not under the integration's base_url in force (it {what}); it was not sent, so its credentials go nowhere else (if base_url changed on purpose, the delivery must be fired again)"
    )]
    Stored {
        /// What differs, in words.
        what: String,
    },
    /// A rendered header value holds CR, LF or another control character.
    #[error(
        "the rendered value of header {name} holds a line break or another control character, so it was not sent (a row value cannot add header lines; fix the row's value or the header template)"
    )]
    Header {
        /// The header's name.
        name: String,
    },
    /// A rendered part is larger than a request may carry.
    #[error(
        "the rendered {what} is {size} bytes, more than the {max} a request may carry, so it was not sent (a row value is too large for its place: select less of it in the trigger's SQL, or use it elsewhere in the template)"
    )]
    TooLarge {
        /// Which part: `URL`, `body`, `recipient` or `value of header NAME`.
        what: String,
        /// Its size.
        size: usize,
        /// The most it may be.
        max: usize,
    },
}

/// The longest rendered URL (many servers refuse longer ones).
pub const MAX_URL: usize = 8 * 1024;
/// The longest rendered header value.
pub const MAX_HEADER_VALUE: usize = 8 * 1024;
/// The largest rendered body, as JSON.
pub const MAX_BODY: usize = 1024 * 1024;
/// The longest rendered recipient.
pub const MAX_RECIPIENT: usize = 1024;

/// `size` of `what`, refused past `max`.
pub fn at_most(what: &str, size: usize, max: usize) -> Result<(), RenderError> {
    if size > max {
        return Err(RenderError::TooLarge {
            what: what.to_string(),
            size,
            max,
        });
    }
    Ok(())
}

fn url_error(what: impl Into<String>) -> RenderError {
    RenderError::Url { what: what.into() }
}

/// Joins a rendered path (and query) to `base` and checks that the result keeps the base's
/// scheme, host, port and (empty) credentials, stays under its path, and has no dot segment. A
/// non-empty path that starts with neither `/`, `?` nor `#` is joined with a `/`.
pub fn join(base: &str, path: &str) -> Result<String, RenderError> {
    let base_url = parse_base(base)?;
    let trimmed = base.trim_end_matches('/');
    let separator = if path.is_empty() || path.starts_with(['/', '?', '#']) {
        ""
    } else {
        "/"
    };
    let full = format!("{trimmed}{separator}{path}");
    let raw_path = path.split(['?', '#']).next().unwrap_or_default();
    if raw_path.split(['/', '\\']).any(is_dot_segment) {
        return Err(url_error(
            "has a dot segment (. or ..) in its path, which would climb out of the action's path",
        ));
    }
    under_base(&base_url, &full)?;
    Ok(full)
}

/// Checks that `url` keeps `base`'s scheme, host, port and (empty) credentials and stays under
/// its path. The sender asks this again of a stored URL before credentials are added, so they go
/// only where the integration in force points.
pub fn check_under(base: &str, url: &str) -> Result<(), RenderError> {
    let base_url = parse_base(base)?;
    under_base(&base_url, url).map_err(|e| match e {
        RenderError::Url { what } => RenderError::Stored { what },
        other => other,
    })
}

fn parse_base(base: &str) -> Result<Url, RenderError> {
    Url::parse(base).map_err(|e| {
        url_error(format!(
            "cannot be checked: the integration's base_url does not parse ({e}); fix base_url"
        ))
    })
}

fn under_base(base_url: &Url, full: &str) -> Result<(), RenderError> {
    let url = Url::parse(full).map_err(|e| url_error(format!("does not parse ({e})")))?;
    if url.scheme() != base_url.scheme() {
        return Err(url_error(format!(
            "changed the scheme from {} to {}",
            base_url.scheme(),
            url.scheme()
        )));
    }
    if url.host_str() != base_url.host_str() {
        return Err(url_error(format!(
            "changed the host from {} to {}",
            base_url.host_str().unwrap_or("none"),
            url.host_str().unwrap_or("none")
        )));
    }
    if url.port_or_known_default() != base_url.port_or_known_default() {
        let port = |u: &Url| {
            u.port_or_known_default()
                .map_or("none".into(), |p| p.to_string())
        };
        return Err(url_error(format!(
            "changed the port from {} to {}",
            port(base_url),
            port(&url)
        )));
    }
    if url.username() != base_url.username() || url.password() != base_url.password() {
        return Err(url_error("changed the user name or password part"));
    }
    let base_path = base_url.path().trim_end_matches('/');
    let under = url.path() == base_path
        || url
            .path()
            .strip_prefix(base_path)
            .is_some_and(|rest| rest.starts_with('/'));
    if !under {
        return Err(url_error(format!(
            "left the base URL's path {}",
            base_url.path()
        )));
    }
    Ok(())
}

/// Checks every rendered header value (a JSON object of values): a string value may hold no
/// control character but tab. Other values are written as JSON, which escapes them.
pub fn check_headers(headers: &serde_json::Value) -> Result<(), RenderError> {
    let Some(map) = headers.as_object() else {
        return Ok(());
    };
    for (name, value) in map {
        // A value that is not text is sent as its JSON, which is checked the same way.
        let json;
        let text = match value.as_str() {
            Some(text) => text,
            None => {
                json = value.to_string();
                &json
            }
        };
        if text.chars().any(|c| c.is_control() && c != '\t') {
            return Err(RenderError::Header { name: name.clone() });
        }
        at_most(
            &format!("value of header {name}"),
            text.len(),
            MAX_HEADER_VALUE,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_value_that_is_not_text_is_checked_as_the_json_it_is_sent_as() {
        let del = serde_json::json!({ "X-Meta": { "note": "a\u{7f}b" } });
        assert!(matches!(
            check_headers(&del),
            Err(RenderError::Header { name }) if name == "X-Meta"
        ));
        let long = serde_json::json!({ "X-Meta": ["x".repeat(MAX_HEADER_VALUE)] });
        assert!(matches!(
            check_headers(&long),
            Err(RenderError::TooLarge { .. })
        ));
        let fine = serde_json::json!({ "X-Meta": { "n": 1 }, "X-Text": "plain\ttab" });
        assert!(check_headers(&fine).is_ok());
    }

    fn what(base: &str, path: &str) -> String {
        match join(base, path) {
            Err(RenderError::Url { what }) => what,
            other => panic!("{base} + {path}: {other:?}"),
        }
    }

    #[test]
    fn a_path_under_the_base_is_joined() {
        assert_eq!(
            join("https://api.example.com/v2/", "/tickets/1.json?x=1").unwrap(),
            "https://api.example.com/v2/tickets/1.json?x=1"
        );
        assert_eq!(
            join("http://127.0.0.1:8080", "%40127.0.0.1%3A18082%2Fstolen").unwrap(),
            "http://127.0.0.1:8080/%40127.0.0.1%3A18082%2Fstolen"
        );
        assert_eq!(
            join("https://h/hooks", "").unwrap(),
            "https://h/hooks",
            "an empty path is the base"
        );
        assert_eq!(
            join("https://h/hooks", "?a=1").unwrap(),
            "https://h/hooks?a=1"
        );
    }

    #[test]
    fn a_dot_segment_or_an_unreadable_base_is_refused_with_the_reason() {
        assert_eq!(
            join("http://127.0.0.1:18081", "@127.0.0.1:18082/x").unwrap(),
            "http://127.0.0.1:18081/@127.0.0.1:18082/x",
            "a path without / is joined with /, so @ is a path character"
        );
        assert!(what("https://h/api", "/../admin").contains("dot segment"));
        assert!(what("https://h/api", "/a/%2E%2E/%2e%2E/b").contains("dot segment"));
        assert!(what("https://h/api", "/a/.").contains("dot segment"));
        assert!(what("https://h/api", "\\..\\x").contains("dot segment"));
        assert!(what("https://h/api", "/a/%2e./b").contains("dot segment"));
        assert!(what("not a url", "/x").contains("base_url does not parse"));
    }

    #[test]
    fn a_stored_url_is_judged_against_the_base_in_force() {
        let base = "https://api.example.com:8443/v2";
        assert_eq!(
            check_under(base, "https://api.example.com:8443/v2/x?y=1"),
            Ok(())
        );
        assert_eq!(check_under(base, "https://api.example.com:8443/v2"), Ok(()));
        for (url, part) in [
            ("http://api.example.com:8443/v2/x", "scheme"),
            ("https://evil.example.com:8443/v2/x", "host"),
            ("https://api.example.com/v2/x", "port"),
            ("https://u:p@api.example.com:8443/v2/x", "user name"),
            ("https://api.example.com:8443/v2x", "path /v2"),
            ("https://api.example.com:8443/admin", "path /v2"),
            ("https://api.example.com:8443/v2/../admin", "path /v2"),
        ] {
            let err = check_under(base, url).unwrap_err().to_string();
            assert!(err.contains(part), "{url}: {err}");
        }
    }

    #[test]
    fn a_header_value_with_a_line_break_names_the_header() {
        let ok = serde_json::json!({ "X-Note": "tab\tand unicode é", "X-Count": 3 });
        assert_eq!(check_headers(&ok), Ok(()));
        for bad in [
            "a\r\nX-Evil: 1",
            "a\nb",
            "a\rb",
            "nul\0",
            "del\u{7f}",
            "nel\u{85}",
        ] {
            let headers = serde_json::json!({ "X-Note": bad });
            assert_eq!(
                check_headers(&headers),
                Err(RenderError::Header {
                    name: "X-Note".into()
                }),
                "{bad:?}"
            );
        }
        let err = check_headers(&serde_json::json!({ "X-Note": "a\nb" })).unwrap_err();
        assert!(err.to_string().contains("X-Note"), "{err}");
    }

    proptest::proptest! {
        #[test]
        fn no_value_changes_the_target_or_the_segments_of_a_rendered_url(
            value in "\\PC{0,24}|[./%?#@:&=+\\\\ \r\n]{0,8}",
        ) {
            let ctx = serde_json::json!({ "v": value });
            let rendered = crate::template::url::render_url("/a/{{ v }}/b?q={{ v }}&n=1", &ctx, None);
            if value.is_empty() {
                // An empty segment would name another resource: refused before any URL exists.
                proptest::prop_assert!(rendered.is_err());
                return Ok(());
            }
            let path = rendered.unwrap();
            let joined = join("https://api.example.com:8443/v2", &path);
            if value == "." || value == ".." {
                proptest::prop_assert!(joined.is_err());
            } else {
                let url = Url::parse(&joined.unwrap()).unwrap();
                proptest::prop_assert_eq!(url.host_str(), Some("api.example.com"));
                proptest::prop_assert_eq!(url.port(), Some(8443));
                proptest::prop_assert_eq!(url.scheme(), "https");
                let segments: Vec<&str> = url.path_segments().unwrap().collect();
                proptest::prop_assert_eq!(segments.len(), 4, "{:?}", segments);
                proptest::prop_assert_eq!((segments[0], segments[1], segments[3]), ("v2", "a", "b"));
                let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
                proptest::prop_assert_eq!(
                    pairs,
                    vec![("q".to_string(), value.clone()), ("n".to_string(), "1".to_string())]
                );
                proptest::prop_assert_eq!(url.fragment(), None);
            }
        }
    }
}
