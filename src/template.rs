//! Templates: `{{ name }}` and `{{ a.b }}` substitution and nothing else. No expressions, no
//! filters; anything that is not a plain dotted name stays literal text. A string that is
//! exactly one placeholder keeps the value's type; a name the context lacks is an error that
//! names it, never a hole in the output.

use serde_json::Value;

pub mod url;

/// A template that cannot be rendered against its context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// The context has no value at this name.
    #[error(
        "the template uses {{{{ {name} }}}} but the row has no value named {name}; add the column to the trigger's SQL or fix the name"
    )]
    Missing {
        /// The dotted name.
        name: String,
    },
    /// A value that fills a whole path segment of the URL is empty (or NULL).
    #[error(
        "{{{{ {name} }}}} is empty (or NULL) where it fills a whole segment of the URL's path, so the request would go to another resource; it was not sent (filter such rows out in the trigger's SQL)"
    )]
    EmptySegment {
        /// The dotted name.
        name: String,
    },
}

/// A dotted name: an identifier, then identifiers or list indexes (`meta.tags.1`).
fn is_path(s: &str) -> bool {
    let ident = |seg: &str| {
        let mut chars = seg.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    };
    let index = |seg: &str| !seg.is_empty() && seg.chars().all(|c| c.is_ascii_digit());
    let mut segs = s.split('.');
    segs.next().is_some_and(ident) && segs.all(|seg| ident(seg) || index(seg))
}

fn lookup<'a>(ctx: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(ctx, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Renders one string template. Exactly one placeholder and nothing else keeps the value's type.
pub fn render_str(template: &str, ctx: &Value) -> Result<Value, TemplateError> {
    let trimmed = template.trim();
    if let Some(inner) = trimmed
        .strip_prefix("{{")
        .and_then(|t| t.strip_suffix("}}"))
        && !inner.contains("{{")
        && !inner.contains("}}")
        && is_path(inner.trim())
    {
        let name = inner.trim();
        return lookup(ctx, name)
            .cloned()
            .ok_or_else(|| TemplateError::Missing {
                name: name.to_string(),
            });
    }
    let mut out = String::with_capacity(template.len());
    for token in tokens(template) {
        match token {
            Token::Text(text) => out.push_str(text),
            Token::Name(name) => {
                let value = lookup(ctx, name).ok_or_else(|| TemplateError::Missing {
                    name: name.to_string(),
                })?;
                out.push_str(&as_text(value));
            }
        }
    }
    Ok(Value::String(out))
}

/// One piece of a template: text kept as written, or a placeholder's dotted name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    Text(&'a str),
    Name(&'a str),
}

/// Splits a template into text and placeholders. Anything between `{{` and `}}` that is not a
/// plain dotted name is text; an unclosed `{{` and what follows it is text.
fn tokens(template: &str) -> Vec<Token<'_>> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push(Token::Text(&rest[..start]));
        let after = &rest[start + 2..];
        let Some(end) = after.find("}}") else {
            out.push(Token::Text(&rest[start..]));
            return out;
        };
        let inner = after[..end].trim();
        if is_path(inner) {
            out.push(Token::Name(inner));
        } else {
            out.push(Token::Text(&rest[start..start + 2 + end + 2]));
        }
        rest = &after[end + 2..];
    }
    out.push(Token::Text(rest));
    out
}

/// Renders every string inside a JSON template (objects and arrays are walked; keys are not).
pub fn render(template: &Value, ctx: &Value) -> Result<Value, TemplateError> {
    Ok(match template {
        Value::String(s) => render_str(s, ctx)?,
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|i| render(i, ctx))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render(v, ctx)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ctx() -> Value {
        json!({
            "account_id": "acct_1",
            "amount": "1.10",
            "attempts": 3,
            "paid": false,
            "meta": { "plan": { "name": "Growth" }, "tags": ["a", "b"] },
            "note": null,
        })
    }

    #[test]
    fn a_string_that_is_one_placeholder_keeps_the_values_type() {
        assert_eq!(render_str("{{ attempts }}", &ctx()).unwrap(), json!(3));
        assert_eq!(render_str("  {{paid}} ", &ctx()).unwrap(), json!(false));
        assert_eq!(
            render_str("{{ meta.plan }}", &ctx()).unwrap(),
            json!({ "name": "Growth" })
        );
        assert_eq!(
            render_str("{{ amount }}", &ctx()).unwrap(),
            json!("1.10"),
            "decimals stay exact"
        );
    }

    #[test]
    fn placeholders_inside_text_are_substituted() {
        let out = render_str(
            "Card declined for {{ account_id }} ({{ meta.plan.name }}, try {{attempts}}, tag {{ meta.tags.1 }})",
            &ctx(),
        );
        assert_eq!(
            out.unwrap(),
            json!("Card declined for acct_1 (Growth, try 3, tag b)")
        );
    }

    #[test]
    fn a_missing_name_fails_with_the_name_and_never_renders_a_hole() {
        let err = render_str("Hi {{ owner_email }}", &ctx()).unwrap_err();
        assert_eq!(
            err,
            TemplateError::Missing {
                name: "owner_email".into()
            }
        );
        assert!(err.to_string().contains("{{ owner_email }}"), "{err}");
        assert!(render_str("{{ meta.plan.price }}", &ctx()).is_err());
    }

    #[test]
    fn anything_but_a_plain_name_stays_literal() {
        for t in [
            "{{ account_id | upper }}",
            "{{ 1 + 1 }}",
            "{{ }}",
            "{{ a-b }}",
            "open {{ without close",
            "{% if x %}",
        ] {
            assert_eq!(render_str(t, &ctx()).unwrap(), json!(t), "{t}");
        }
        assert_eq!(
            render_str("{{ x | y }} and {{ account_id }}", &ctx()).unwrap(),
            json!("{{ x | y }} and acct_1")
        );
    }

    #[test]
    fn json_templates_are_walked() {
        let t = json!({ "subject": "Declined: {{ account_id }}", "count": "{{ attempts }}", "list": ["{{ paid }}", 7] });
        assert_eq!(
            render(&t, &ctx()).unwrap(),
            json!({ "subject": "Declined: acct_1", "count": 3, "list": [false, 7] })
        );
    }
}
