//! Walking the YAML document: every key checked, every problem collected with its path.

use std::time::Duration;

use jiff::SignedDuration;
use jiff::tz::TimeZone;
use serde_yaml_ng::{Mapping, Value as Yaml};

use super::*;
use crate::cadence::{Anchor, Cadence, Period};
use crate::sql_guard::{self, Dialect};

#[derive(Default)]
pub(super) struct Cx {
    pub(super) problems: Vec<Problem>,
}

const TOP_KEYS: &[&str] = &[
    "version",
    "source",
    "sources",
    "integrations",
    "triggers",
    "rules",
];
const INTEGRATION_KEYS: &[&str] = &["catalog", "base_url"];
const BINDING_KEYS: &[&str] = &["action", "params", "recipient"];
const SOURCE_KEYS: &[&str] = &["type", "dsn_env", "statement_timeout_ms", "max_rows"];
const TRIGGER_KEYS: &[&str] = &[
    "description",
    "source",
    "sql",
    "event_time",
    "key",
    "occurrence",
    "poll_interval",
    "lookback",
];
const RULE_KEYS: &[&str] = &[
    "trigger",
    "description",
    "policy",
    "period",
    "n",
    "timezone",
    "anchor",
    "actions",
];
const ANCHOR_KEYS: &[&str] = &[
    "column",
    "lead",
    "lead_column",
    "look_ahead",
    "grace",
    "recheck",
];

impl Cx {
    fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    fn mapping<'a>(&mut self, v: &'a Yaml, path: &str, known: &[&str]) -> Option<&'a Mapping> {
        let Yaml::Mapping(m) = v else {
            self.problem(
                path,
                format!("expected a mapping with keys such as {}", known.join(", ")),
            );
            return None;
        };
        for (k, _) in m {
            let Some(k) = k.as_str() else {
                self.problem(path, format!("keys must be text, found {k:?}"));
                continue;
            };
            if !known.contains(&k) {
                let hint = known
                    .iter()
                    .map(|c| (strsim::levenshtein(k, c), c))
                    .filter(|(d, _)| *d <= 3)
                    .min()
                    .map(|(_, c)| format!("did you mean \"{c}\"? "))
                    .unwrap_or_default();
                self.problem(
                    format!("{path}.{k}"),
                    format!("unknown key; {hint}known keys: {}", known.join(", ")),
                );
            }
        }
        Some(m)
    }

    fn named_entries<'a>(&mut self, v: Option<&'a Yaml>, path: &str) -> Vec<(String, &'a Yaml)> {
        match v {
            None | Some(Yaml::Null) => Vec::new(),
            Some(Yaml::Mapping(m)) => m
                .iter()
                .filter_map(|(k, v)| match k.as_str() {
                    Some(name) if valid_name(name) => Some((name.to_string(), v)),
                    _ => {
                        self.problem(
                            format!("{path}.{}", yaml_text(k)),
                            "names use letters, digits, '_' and '-' and start with a letter",
                        );
                        None
                    }
                })
                .collect(),
            Some(_) => {
                self.problem(path, "expected a mapping from names to definitions");
                Vec::new()
            }
        }
    }

    fn string(&mut self, m: &Mapping, key: &str, path: &str, required: bool) -> Option<String> {
        match m.get(key) {
            None | Some(Yaml::Null) if required => {
                self.problem(format!("{path}.{key}"), "required; add it");
                None
            }
            None | Some(Yaml::Null) => None,
            Some(Yaml::String(s)) if !s.trim().is_empty() => Some(s.clone()),
            Some(Yaml::String(_)) => {
                self.problem(format!("{path}.{key}"), "must not be empty");
                None
            }
            Some(other) => {
                self.problem(
                    format!("{path}.{key}"),
                    format!("expected text, found {}", yaml_text(other)),
                );
                None
            }
        }
    }

    fn positive(&mut self, m: &Mapping, key: &str, path: &str) -> Option<u64> {
        let v = m.get(key)?;
        match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.problem(
                    format!("{path}.{key}"),
                    format!("expected a whole number above 0, found {}", yaml_text(v)),
                );
                None
            }
        }
    }

    fn duration(
        &mut self,
        m: &Mapping,
        key: &str,
        path: &str,
        default: SignedDuration,
    ) -> SignedDuration {
        let Some(v) = m.get(key) else { return default };
        let parsed = match v {
            Yaml::String(s) => s.parse::<SignedDuration>().ok(),
            Yaml::Number(n) => n.as_u64().map(|s| SignedDuration::from_secs(s as i64)),
            _ => None,
        };
        match parsed {
            Some(d) if d.is_positive() || (d.is_zero() && key == "lookback") => d,
            _ => {
                self.problem(
                    format!("{path}.{key}"),
                    format!(
                        "expected a duration such as \"90s\", \"10m\" or \"1h30m\", found {}",
                        yaml_text(v)
                    ),
                );
                default
            }
        }
    }

    fn columns(&mut self, m: &Mapping, key: &str, path: &str, required: bool) -> Vec<String> {
        let p = format!("{path}.{key}");
        match m.get(key) {
            None | Some(Yaml::Null) => {
                if required {
                    self.problem(p, "required; list the column(s), e.g. [account_id]");
                }
                Vec::new()
            }
            Some(Yaml::String(s)) if !s.trim().is_empty() => vec![s.clone()],
            Some(Yaml::Sequence(items)) if !items.is_empty() => {
                let cols: Vec<String> = items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect();
                if cols.len() != items.len() || cols.iter().any(|c| c.trim().is_empty()) {
                    self.problem(p, "expected a list of column names");
                } else if let Some(dup) = cols
                    .iter()
                    .enumerate()
                    .find(|(i, c)| cols[..*i].contains(c))
                {
                    self.problem(p, format!("column \"{}\" is listed twice", dup.1));
                }
                cols
            }
            Some(other) => {
                self.problem(
                    p,
                    format!(
                        "expected a list of column names, found {}",
                        yaml_text(other)
                    ),
                );
                Vec::new()
            }
        }
    }

    pub(super) fn document(&mut self, doc: &Yaml) -> Option<Definitions> {
        let top = self.mapping(doc, "(document)", TOP_KEYS)?;
        match top.get("version").map(|v| (v, v.as_u64())) {
            Some((_, Some(2))) => {}
            None => self.problem("version", "required; add `version: 2`"),
            Some((v, _)) => self.problem(
                "version",
                format!(
                    "unsupported version {}; this Rowfire reads version 2",
                    yaml_text(v)
                ),
            ),
        }
        let mut sources = vec![match top.get("source") {
            Some(v) => self.source(DEFAULT_SOURCE, v, "source"),
            None => default_source(DEFAULT_SOURCE),
        }];
        for (name, v) in self.named_entries(top.get("sources"), "sources") {
            if name == DEFAULT_SOURCE {
                self.problem(
                    "sources.default",
                    "the name \"default\" is the top-level `source` block; pick another name",
                );
                continue;
            }
            let def = self.source(&name, v, &format!("sources.{name}"));
            sources.push(def);
        }
        let mut integrations = Vec::new();
        for (name, v) in self.named_entries(top.get("integrations"), "integrations") {
            if let Some(i) = self.integration(&name, v) {
                integrations.push(i);
            }
        }
        let trigger_entries = self.named_entries(top.get("triggers"), "triggers");
        let trigger_names: Vec<String> = trigger_entries.iter().map(|(n, _)| n.clone()).collect();
        let mut triggers = Vec::new();
        for (name, v) in trigger_entries {
            if let Some(t) = self.trigger(&name, v, &sources) {
                triggers.push(t);
            }
        }
        let mut rules = Vec::new();
        for (name, v) in self.named_entries(top.get("rules"), "rules") {
            if let Some(r) = self.rule(&name, v, &trigger_names, &integrations) {
                rules.push(r);
            }
        }
        Some(Definitions {
            version: 2,
            sources,
            triggers,
            rules,
            integrations,
        })
    }

    fn source(&mut self, name: &str, v: &Yaml, path: &str) -> SourceDef {
        let mut def = default_source(name);
        let Some(m) = self.mapping(v, path, SOURCE_KEYS) else {
            return def;
        };
        if let Some(kind) = self.string(m, "type", path, false) {
            match kind.as_str() {
                "postgres" | "postgresql" => def.kind = Some(Dialect::Postgres),
                "sqlite" => def.kind = Some(Dialect::Sqlite),
                "mysql" | "mariadb" => self.problem(
                    format!("{path}.type"),
                    "MySQL/MariaDB sources are not supported yet; use postgres or sqlite",
                ),
                other => self.problem(
                    format!("{path}.type"),
                    format!("unknown source type \"{other}\"; use postgres or sqlite"),
                ),
            }
        }
        if let Some(env) = self.string(m, "dsn_env", path, false) {
            let is_name = env
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if is_name {
                def.dsn_env = env;
            } else {
                // Never echo the value: it may be a DSN with a password, pasted by mistake.
                self.problem(
                    format!("{path}.dsn_env"),
                    "must name an environment variable (letters, digits, '_'), not hold the DSN itself; put the DSN in that variable",
                );
            }
        }
        if let Some(ms) = self.positive(m, "statement_timeout_ms", path) {
            def.statement_timeout = Duration::from_millis(ms);
        }
        if let Some(rows) = self.positive(m, "max_rows", path) {
            def.page_size = rows as usize;
        }
        def
    }

    fn trigger(&mut self, name: &str, v: &Yaml, sources: &[SourceDef]) -> Option<Trigger> {
        let path = format!("triggers.{name}");
        let m = self.mapping(v, &path, TRIGGER_KEYS)?;
        let source = self
            .string(m, "source", &path, false)
            .unwrap_or_else(|| DEFAULT_SOURCE.to_string());
        let source_def = sources.iter().find(|s| s.name == source);
        if source_def.is_none() {
            let msg = unknown("source", &source, sources.iter().map(|s| s.name.as_str()));
            self.problem(format!("{path}.source"), msg);
        }
        let sql = self.string(m, "sql", &path, true);
        if let Some(sql) = &sql {
            let checked = match source_def.and_then(|s| s.kind) {
                Some(dialect) => sql_guard::check(sql, dialect).map(|_| ()),
                None => sql_guard::check_any_dialect(sql),
            };
            if let Err(e) = checked {
                self.problem(format!("{path}.sql"), e.to_string());
            }
        }
        let event_time = self.string(m, "event_time", &path, true);
        let key = self.columns(m, "key", &path, true);
        let occurrence = self.columns(m, "occurrence", &path, false);
        let poll_interval = self.duration(m, "poll_interval", &path, DEFAULT_POLL_INTERVAL);
        let lookback = self.duration(m, "lookback", &path, DEFAULT_LOOKBACK);
        let description = self.string(m, "description", &path, false);
        Some(Trigger {
            name: name.to_string(),
            description,
            source,
            sql: sql?,
            event_time: event_time?,
            key,
            occurrence,
            poll_interval,
            lookback,
        })
    }

    fn integration(&mut self, name: &str, v: &Yaml) -> Option<IntegrationDef> {
        let path = format!("integrations.{name}");
        let m = self.mapping(v, &path, INTEGRATION_KEYS)?;
        let catalog = self.string(m, "catalog", &path, true)?;
        let Some(mut spec) = crate::deliver::catalog::built_in(&catalog) else {
            let known: Vec<String> = crate::deliver::catalog::all()
                .into_iter()
                .map(|i| i.name)
                .collect();
            self.problem(
                format!("{path}.catalog"),
                unknown(
                    "catalogue entry",
                    &catalog,
                    known.iter().map(String::as_str),
                ),
            );
            return None;
        };
        if let Some(base_url) = self.string(m, "base_url", &path, false) {
            spec.base_url = base_url;
        }
        Some(IntegrationDef {
            name: name.to_string(),
            spec,
        })
    }

    fn bindings(
        &mut self,
        m: &Mapping,
        path: &str,
        integrations: &[IntegrationDef],
    ) -> Vec<Binding> {
        let Some(v) = m.get("actions") else {
            return Vec::new();
        };
        let Yaml::Sequence(items) = v else {
            self.problem(
                format!("{path}.actions"),
                "expected a list of bindings, each with `action: INTEGRATION.ACTION`",
            );
            return Vec::new();
        };
        let mut out = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let p = format!("{path}.actions[{i}]");
            let Some(b) = self.mapping(item, &p, BINDING_KEYS) else {
                continue;
            };
            let Some(action) = self.string(b, "action", &p, true) else {
                continue;
            };
            let Some((integration, action_name)) = action.split_once('.') else {
                self.problem(
                    format!("{p}.action"),
                    format!("\"{action}\" is not INTEGRATION.ACTION, for example inbox.ticket"),
                );
                continue;
            };
            let Some(def) = integrations.iter().find(|d| d.name == integration) else {
                self.problem(
                    format!("{p}.action"),
                    unknown(
                        "integration",
                        integration,
                        integrations.iter().map(|d| d.name.as_str()),
                    ),
                );
                continue;
            };
            let Some(spec) = def.spec.actions.get(action_name) else {
                self.problem(
                    format!("{p}.action"),
                    unknown(
                        "action",
                        action_name,
                        def.spec.actions.keys().map(String::as_str),
                    ),
                );
                continue;
            };
            let mut params = std::collections::BTreeMap::new();
            match b.get("params") {
                None | Some(Yaml::Null) => {}
                Some(Yaml::Mapping(given)) => {
                    for (k, v) in given {
                        let key = k.as_str().unwrap_or_default().to_string();
                        if !spec.params.contains_key(&key) {
                            let msg =
                                unknown("parameter", &key, spec.params.keys().map(String::as_str));
                            self.problem(format!("{p}.params.{key}"), msg);
                            continue;
                        }
                        params.insert(
                            key,
                            serde_json::to_value(v).unwrap_or(serde_json::Value::Null),
                        );
                    }
                }
                Some(_) => self.problem(
                    format!("{p}.params"),
                    "expected a mapping from parameter names to templates",
                ),
            }
            for (name, declared) in &spec.params {
                if declared.required && !params.contains_key(name) {
                    self.problem(
                        format!("{p}.params.{name}"),
                        format!("required by {action}; add it"),
                    );
                }
            }
            let recipient = self.string(b, "recipient", &p, false);
            out.push(Binding {
                integration: integration.to_string(),
                action: action_name.to_string(),
                params,
                recipient,
            });
        }
        out
    }

    fn rule(
        &mut self,
        name: &str,
        v: &Yaml,
        triggers: &[String],
        integrations: &[IntegrationDef],
    ) -> Option<Rule> {
        let path = format!("rules.{name}");
        let m = self.mapping(v, &path, RULE_KEYS)?;
        let trigger = self.string(m, "trigger", &path, true);
        if let Some(t) = &trigger
            && !triggers.contains(t)
        {
            let msg = unknown("trigger", t, triggers.iter().map(String::as_str));
            self.problem(format!("{path}.trigger"), msg);
        }
        let timezone = match self.string(m, "timezone", &path, false) {
            None => Some(TimeZone::UTC),
            Some(tz) => match TimeZone::get(&tz) {
                Ok(zone) => Some(zone),
                Err(_) => {
                    self.problem(format!("{path}.timezone"), format!("unknown time zone \"{tz}\"; use an IANA name such as America/New_York or Europe/Berlin"));
                    None
                }
            },
        };
        let cadence = self.cadence(m, &path, timezone.clone().unwrap_or(TimeZone::UTC));
        let description = self.string(m, "description", &path, false);
        let actions = self.bindings(m, &path, integrations);
        Some(Rule {
            name: name.to_string(),
            trigger: trigger?,
            description,
            cadence: cadence?,
            timezone: timezone?,
            actions,
        })
    }

    fn cadence(&mut self, m: &Mapping, path: &str, tz: TimeZone) -> Option<Cadence> {
        let policy = self.string(m, "policy", path, false);
        let period = self.string(m, "period", path, false);
        let n = m.get("n");
        if let Some(anchor) = m.get("anchor") {
            if policy.is_some() {
                self.problem(
                    format!("{path}.policy"),
                    "a rule with `anchor` is time-anchored; remove `policy`",
                );
            }
            return self
                .anchor(anchor, &format!("{path}.anchor"))
                .map(Cadence::Anchored);
        }
        let Some(policy) = policy else {
            if !matches!(m.get("policy"), Some(v) if !v.is_null()) {
                self.problem(
                    format!("{path}.policy"),
                    "required; use once_ever, once_per_period or once_per_n (or give an `anchor`)",
                );
            }
            return None;
        };
        if policy != "once_per_period" && period.is_some() {
            self.problem(
                format!("{path}.period"),
                format!("`period` applies only to once_per_period, not {policy}; remove it"),
            );
        }
        if policy != "once_per_n" && n.is_some() {
            self.problem(
                format!("{path}.n"),
                format!("`n` applies only to once_per_n, not {policy}; remove it"),
            );
        }
        match policy.as_str() {
            "once_ever" => Some(Cadence::OnceEver),
            "once_per_period" => {
                let Some(p) = period else {
                    self.problem(
                        format!("{path}.period"),
                        "required with once_per_period; use day, week or month",
                    );
                    return None;
                };
                match Period::parse(&p) {
                    Some(period) => Some(Cadence::OncePerPeriod { period, tz }),
                    None => {
                        self.problem(
                            format!("{path}.period"),
                            format!("unknown period \"{p}\"; use day, week or month"),
                        );
                        None
                    }
                }
            }
            "once_per_n" => match n.map(|v| (v, v.as_u64())) {
                Some((_, Some(n))) if (1..=u64::from(u32::MAX)).contains(&n) => {
                    Some(Cadence::OncePerN { n: n as u32 })
                }
                None => {
                    self.problem(
                        format!("{path}.n"),
                        "required with once_per_n; e.g. `n: 3` fires on occurrences 1, 4, 7 …",
                    );
                    None
                }
                Some((v, _)) => {
                    self.problem(
                        format!("{path}.n"),
                        format!(
                            "expected a whole number of at least 1, found {}",
                            yaml_text(v)
                        ),
                    );
                    None
                }
            },
            other => {
                self.problem(
                    format!("{path}.policy"),
                    format!(
                        "unknown policy \"{other}\"; use once_ever, once_per_period or once_per_n"
                    ),
                );
                None
            }
        }
    }

    fn anchor(&mut self, v: &Yaml, path: &str) -> Option<Anchor> {
        let m = self.mapping(v, path, ANCHOR_KEYS)?;
        let column = self.string(m, "column", path, true);
        let lead = self.duration(m, "lead", path, SignedDuration::from_mins(10));
        let lead_column = self.string(m, "lead_column", path, false);
        let look_ahead = self.duration(m, "look_ahead", path, SignedDuration::from_hours(3));
        let grace = self.duration(m, "grace", path, SignedDuration::from_mins(5));
        let recheck = match m.get("recheck") {
            None => true,
            Some(Yaml::Bool(b)) => *b,
            Some(other) => {
                self.problem(
                    format!("{path}.recheck"),
                    format!("expected true or false, found {}", yaml_text(other)),
                );
                true
            }
        };
        Some(Anchor {
            column: column?,
            lead,
            lead_column,
            look_ahead,
            grace,
            recheck,
        })
    }
}

fn default_source(name: &str) -> SourceDef {
    SourceDef {
        name: name.to_string(),
        kind: None,
        dsn_env: "DATABASE_URL".to_string(),
        statement_timeout: DEFAULT_STATEMENT_TIMEOUT,
        page_size: DEFAULT_PAGE_SIZE,
    }
}

fn valid_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn yaml_text(v: &Yaml) -> String {
    match v {
        Yaml::Null => "nothing".into(),
        Yaml::Bool(b) => b.to_string(),
        Yaml::Number(n) => n.to_string(),
        Yaml::String(s) => format!("\"{s}\""),
        Yaml::Sequence(_) => "a list".into(),
        Yaml::Mapping(_) => "a mapping".into(),
        Yaml::Tagged(t) => format!("a tagged value {}", t.tag),
    }
}
