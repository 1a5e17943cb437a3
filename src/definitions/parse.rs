//! Walking the YAML document: every key checked, every problem collected with its path.

use std::time::Duration;

use jiff::SignedDuration;
use serde_yaml_ng::{Mapping, Value as Yaml};

use super::*;
use crate::sql_guard::{self, Dialect};

pub(super) struct Cx {
    pub(super) problems: Vec<Problem>,
    /// The zone of rules that name none: the workspace's.
    pub(super) default_zone: jiff::tz::TimeZone,
    /// Reading a version already stored: checks added since it was pushed (a `ROWFIRE_…`
    /// `dsn_env`, headers Rowfire sets) do not refuse it, as what they guard against is kept
    /// out where it is used (the variable is never read; the headers are dropped at sending).
    pub(super) stored: bool,
}

mod headers;
mod rule;
mod words;

pub(crate) use headers::reserved_action_header;

/// Drops the known settings written as `null` (as the original Rowfire's files may hold them: an
/// absent setting) at the top, in sources, triggers and rules and in a rule's anchor; never
/// inside an integration or an action, where a `null` may be a value a request sends. An unknown
/// key stays, to be reported.
pub(super) fn drop_nulls(doc: &mut Yaml) {
    fn drop(v: &mut Yaml, known: &[&str]) {
        if let Yaml::Mapping(m) = v {
            m.retain(|key, value| {
                !value.is_null() || !key.as_str().is_some_and(|k| known.contains(&k))
            });
        }
    }
    let Yaml::Mapping(top) = doc else { return };
    top.retain(|key, value| {
        !value.is_null()
            || !key
                .as_str()
                .is_some_and(|k| k != "version" && TOP_KEYS.contains(&k))
    });
    if let Some(source) = top.get_mut("source") {
        drop(source, SOURCE_KEYS);
    }
    for (section, known) in [
        ("sources", SOURCE_KEYS),
        ("triggers", TRIGGER_KEYS),
        ("rules", RULE_KEYS),
    ] {
        if let Some(Yaml::Mapping(entries)) = top.get_mut(section) {
            for (_, entry) in entries.iter_mut() {
                drop(entry, known);
                if let (true, Yaml::Mapping(rule)) = (section == "rules", entry)
                    && let Some(anchor) = rule.get_mut("anchor")
                {
                    drop(anchor, ANCHOR_KEYS);
                }
            }
        }
    }
}

use words::*;

/// The problem of a column name over [`limits::MAX_COLUMN_NAME`] bytes.
fn column_too_long() -> String {
    format!(
        "a column name may be at most {} bytes",
        limits::MAX_COLUMN_NAME
    )
}

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
                    Some(name) if name.len() > limits::MAX_NAME => {
                        self.problem(
                            format!("{path}.{}", yaml_text(k)),
                            format!("names may be at most {} characters", limits::MAX_NAME),
                        );
                        None
                    }
                    Some(name) if valid_name(name) => Some((name.to_string(), v)),
                    None if matches!(k, Yaml::Bool(_) | Yaml::Null) => {
                        self.problem(
                            format!("{path}.{}", yaml_text(k)),
                            "YAML reads this name as a value, not text; quote it (\"true\") or pick another name",
                        );
                        None
                    }
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

    /// An optional `description`: text, where an empty one means none.
    fn description(&mut self, m: &Mapping, path: &str) -> Option<String> {
        match m.get("description") {
            Some(Yaml::String(s)) if s.trim().is_empty() => None,
            _ => self.string(m, "description", path, false),
        }
    }

    fn positive(&mut self, m: &Mapping, key: &str, path: &str, max: u64) -> Option<u64> {
        let v = m.get(key)?;
        match v.as_u64() {
            Some(n) if n > 0 && n <= max => Some(n),
            Some(n) if n > max => {
                self.problem(
                    format!("{path}.{key}"),
                    format!("{key} may be at most {max}, found {n}"),
                );
                None
            }
            _ => {
                self.problem(
                    format!("{path}.{key}"),
                    format!(
                        "expected a whole number from 1 to {max}, found {}",
                        yaml_text(v)
                    ),
                );
                None
            }
        }
    }

    fn optional_duration(
        &mut self,
        m: &Mapping,
        key: &str,
        path: &str,
        max: SignedDuration,
    ) -> Option<SignedDuration> {
        m.get(key)?;
        Some(self.duration(m, key, path, SignedDuration::ZERO, max))
    }

    /// A positive duration (`lookback` may be zero) of at most `max`, or `default` when absent.
    fn duration(
        &mut self,
        m: &Mapping,
        key: &str,
        path: &str,
        default: SignedDuration,
        max: SignedDuration,
    ) -> SignedDuration {
        let Some(v) = m.get(key) else { return default };
        let parsed = match v {
            Yaml::String(s) => parse_duration(s),
            Yaml::Number(n) => n
                .as_u64()
                .and_then(|s| i64::try_from(s).ok())
                .map(SignedDuration::from_secs),
            _ => None,
        };
        match parsed {
            Some(d) if d > max => {
                self.problem(
                    format!("{path}.{key}"),
                    format!(
                        "{key} may be at most {}, found {}",
                        limits::shown(max),
                        yaml_text(v)
                    ),
                );
                default.min(max)
            }
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
            Some(Yaml::String(s)) if s.len() > limits::MAX_COLUMN_NAME => {
                self.problem(p, column_too_long());
                Vec::new()
            }
            Some(Yaml::String(s)) if !s.trim().is_empty() => vec![s.clone()],
            Some(Yaml::Sequence(items)) if items.len() > limits::MAX_KEY_COLUMNS => {
                self.problem(
                    p,
                    format!(
                        "{key} may list at most {} columns, found {}",
                        limits::MAX_KEY_COLUMNS,
                        items.len()
                    ),
                );
                Vec::new()
            }
            Some(Yaml::Sequence(items)) if !items.is_empty() => {
                let cols: Vec<String> = items
                    .iter()
                    .filter_map(|i| i.as_str().map(str::to_string))
                    .collect();
                if cols.len() != items.len() || cols.iter().any(|c| c.trim().is_empty()) {
                    self.problem(p, "expected a list of column names");
                } else if cols.iter().any(|c| c.len() > limits::MAX_COLUMN_NAME) {
                    self.problem(p, column_too_long());
                } else if let Some(dup) = cols
                    .iter()
                    .enumerate()
                    .find(|(i, c)| cols[..*i].contains(c))
                {
                    let dup = crate::definitions::quoted(dup.1);
                    self.problem(p, format!("column {dup} is listed twice"));
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

    /// Refuses a section with more entries than `max` before any entry is read.
    fn count(&mut self, top: &Mapping, key: &str, max: usize) -> bool {
        let n = match top.get(key) {
            Some(Yaml::Mapping(m)) => m.len(),
            _ => 0,
        };
        if n > max {
            self.problem(
                key,
                format!("{n} {key}; a definitions file may have at most {max}; split the workspace or remove unused ones"),
            );
        }
        n <= max
    }

    pub(super) fn document(&mut self, doc: &Yaml) -> Option<Definitions> {
        let top = self.mapping(doc, "(document)", TOP_KEYS)?;
        let counted = [
            ("sources", limits::MAX_SOURCES),
            ("integrations", limits::MAX_INTEGRATIONS),
            ("triggers", limits::MAX_TRIGGERS),
            ("rules", limits::MAX_RULES),
        ];
        if !counted
            .into_iter()
            .fold(true, |ok, (key, max)| self.count(top, key, max) && ok)
        {
            return None;
        }
        // No version means 2, as the original Rowfire reads it.
        match top.get("version").map(|v| (v, v.as_u64())) {
            Some((_, Some(2))) | None => {}
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
        for t in &triggers {
            if !sources.iter().any(|s| s.name == t.source) {
                sources.push(SourceDef {
                    declared: false,
                    dsn_env: String::new(),
                    ..default_source(&t.source)
                });
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
                // Supabase is PostgreSQL (the original Rowfire's files may name it).
                "postgres" | "postgresql" | "supabase" => def.kind = Some(Dialect::Postgres),
                "sqlite" => def.kind = Some(Dialect::Sqlite),
                "mysql" | "mariadb" => def.kind = Some(Dialect::Mysql),
                other => self.problem(
                    format!("{path}.type"),
                    format!(
                        "unknown source type {}; use postgres, mysql or sqlite",
                        crate::definitions::quoted(other)
                    ),
                ),
            }
        }
        if let Some(env) = self.string(m, "dsn_env", path, false) {
            let is_name = env
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if is_name && !self.stored && !crate::definitions::may_hold_dsn(&env) {
                self.problem(
                    format!("{path}.dsn_env"),
                    "names one of Rowfire's own settings (ROWFIRE_…), which no source may read; name the variable that holds the source's DSN",
                );
            } else if is_name {
                def.dsn_env = env;
            } else {
                // Never echo the value: it may be a DSN with a password, pasted by mistake.
                self.problem(
                    format!("{path}.dsn_env"),
                    "must name an environment variable (letters, digits, '_'), not hold the DSN itself; put the DSN in that variable",
                );
            }
        }
        let max_ms = limits::MAX_STATEMENT_TIMEOUT_MS;
        if let Some(ms) = self.positive(m, "statement_timeout_ms", path, max_ms) {
            def.statement_timeout = Duration::from_millis(ms);
        }
        // `max_rows` is read as the page size: Rowfire pages and never truncates, so a larger
        // value (written for a reader that stopped at it) means "large pages" and is held to the
        // largest page Rowfire reads at once.
        if let Some(rows) = self.positive(m, "max_rows", path, u64::MAX) {
            def.page_size = rows.min(limits::MAX_PAGE_ROWS) as usize;
        }
        def.allow_functions = self.allow_functions(m, path);
        def
    }

    /// A source's `allow_functions`: at most [`MAX_ALLOW_FUNCTIONS`] names, each `fn` or
    /// `schema.fn` made of identifiers.
    fn allow_functions(&mut self, m: &Mapping, path: &str) -> Vec<String> {
        let p = format!("{path}.allow_functions");
        let items = match m.get("allow_functions") {
            None | Some(Yaml::Null) => return Vec::new(),
            Some(Yaml::Sequence(items)) => items,
            Some(other) => {
                self.problem(
                    p,
                    format!(
                        "expected a list of function names such as [my_schema.my_fn], found {}",
                        yaml_text(other)
                    ),
                );
                return Vec::new();
            }
        };
        if items.len() > MAX_ALLOW_FUNCTIONS {
            self.problem(
                p,
                format!(
                    "lists {} functions; at most {MAX_ALLOW_FUNCTIONS} may be allowed per source",
                    items.len()
                ),
            );
            return Vec::new();
        }
        let mut names = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match item.as_str() {
                Some(name) if sql_guard::is_allowable_function_name(name) => {
                    if !names.iter().any(|n: &String| n.eq_ignore_ascii_case(name)) {
                        names.push(name.to_string());
                    }
                }
                _ => self.problem(
                    format!("{p}[{i}]"),
                    format!(
                        "expected a function name, `fn` or `schema.fn` (letters, digits, '_', '$', at most {} characters per part)",
                        sql_guard::MAX_NAME_PART
                    ),
                ),
            }
        }
        names
    }

    fn trigger(&mut self, name: &str, v: &Yaml, sources: &[SourceDef]) -> Option<Trigger> {
        let path = format!("triggers.{name}");
        let m = self.mapping(v, &path, TRIGGER_KEYS)?;
        let source = self
            .string(m, "source", &path, false)
            .unwrap_or_else(|| DEFAULT_SOURCE.to_string());
        // A source the file does not declare may be stored in the control plane: not a problem
        // here (see `Definitions::unresolved_sources`), as long as it is a name.
        let source_def = sources.iter().find(|s| s.name == source);
        if source_def.is_none() && !valid_name(&source) {
            let msg = unknown("source", &source, sources.iter().map(|s| s.name.as_str()));
            self.problem(format!("{path}.source"), msg);
        }
        let sql = self.string(m, "sql", &path, true);
        if let Some(sql) = &sql {
            let allow = source_def.map_or(&[][..], |s| &s.allow_functions[..]);
            let checked = match source_def.and_then(|s| s.kind) {
                Some(dialect) => sql_guard::check_allowing(sql, dialect, allow).map(|_| ()),
                None => sql_guard::check_any_dialect_allowing(sql, allow),
            };
            if let Err(e) = checked {
                self.problem(format!("{path}.sql"), e.to_string());
            }
        }
        // The original Rowfire reads a trigger without a clock (only its backtest totals); so
        // does this one, and says at every read that it needs one (`Trigger::has_clock`).
        let event_time = self
            .string(m, "event_time", &path, false)
            .unwrap_or_default();
        let key = self.columns(m, "key", &path, true);
        let occurrence = self.columns(m, "occurrence", &path, false);
        let (interval, max) = (DEFAULT_POLL_INTERVAL, limits::MAX_POLL_INTERVAL);
        let poll_interval = self.duration(m, "poll_interval", &path, interval, max);
        let (lookback, max) = (DEFAULT_LOOKBACK, limits::MAX_LOOKBACK);
        let lookback = self.duration(m, "lookback", &path, lookback, max);
        let description = self.description(m, &path);
        Some(Trigger {
            name: name.to_string(),
            description,
            source,
            sql: sql?,
            event_time,
            key,
            occurrence,
            poll_interval,
            lookback,
        })
    }
}
