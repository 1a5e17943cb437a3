//! The parser's vocabulary: the keys each mapping admits, and the small readers for names,
//! durations and how a value is shown in a problem.

use jiff::SignedDuration;
use serde_yaml_ng::Value as Yaml;

use super::super::*;

pub(super) const TOP_KEYS: &[&str] = &[
    "version",
    "source",
    "sources",
    "integrations",
    "triggers",
    "rules",
];
pub(super) const INTEGRATION_KEYS: &[&str] = &[
    "catalog",
    "description",
    "base_url",
    "auth",
    "signing",
    "timeout_ms",
    "rate_limit",
    "actions",
];
pub(super) const BINDING_KEYS: &[&str] = &["action", "params", "recipient"];
pub(super) const SOURCE_KEYS: &[&str] = &[
    "type",
    "dsn_env",
    "statement_timeout_ms",
    "max_rows",
    "allow_functions",
];
pub(super) const TRIGGER_KEYS: &[&str] = &[
    "description",
    "source",
    "sql",
    "event_time",
    "key",
    "occurrence",
    "poll_interval",
    "lookback",
];
pub(super) const RULE_KEYS: &[&str] = &[
    "trigger",
    "description",
    "policy",
    "period",
    "n",
    "timezone",
    "anchor",
    "actions",
    "expire_after",
    "frequency_cap",
];
pub(super) const ANCHOR_KEYS: &[&str] = &[
    "column",
    "lead",
    "lead_column",
    "look_ahead",
    "interval",
    "grace",
    "recheck",
];

pub(super) fn default_source(name: &str) -> SourceDef {
    SourceDef {
        name: name.to_string(),
        kind: None,
        dsn_env: "DATABASE_URL".to_string(),
        statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        page_size: DEFAULT_PAGE_SIZE,
        declared: true,
        allow_functions: Vec::new(),
    }
}

/// A duration such as `90s`, `10m`, `1h30m`, or whole days such as `7d`.
pub(super) fn parse_duration(s: &str) -> Option<SignedDuration> {
    let t = s.trim();
    if let Some(days) = t.strip_suffix('d')
        && !days.is_empty()
        && days.bytes().all(|b| b.is_ascii_digit())
    {
        let days: i64 = days.parse().ok()?;
        return days.checked_mul(86_400).map(SignedDuration::from_secs);
    }
    t.parse().ok()
}

pub(super) fn valid_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(super) fn yaml_text(v: &Yaml) -> String {
    match v {
        Yaml::Null => "nothing".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.to_string(),
        Yaml::String(s) => crate::definitions::quoted(s),
        Yaml::Sequence(_) => "a list".into(),
        Yaml::Mapping(_) => "a mapping".into(),
        Yaml::Tagged(t) => format!("a tagged value {}", t.tag),
    }
}
