//! The definitions file: sources, triggers and rules as YAML, parsed and validated with every
//! problem reported at once, each with the path of the offending key and what would fix it.

use std::fmt;
use std::time::Duration;

use jiff::SignedDuration;
use jiff::tz::TimeZone;
use serde_yaml_ng::Value as Yaml;

use crate::cadence::Cadence;
use crate::sql_guard::Dialect;

/// The name of the source a trigger reads when it names none (the top-level `source` block).
pub const DEFAULT_SOURCE: &str = "default";
/// Default poll interval per trigger.
pub const DEFAULT_POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(60);
/// Default lookback per trigger.
pub const DEFAULT_LOOKBACK: SignedDuration = SignedDuration::from_mins(10);
/// Default statement timeout on sources.
pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default page size per source query.
pub const DEFAULT_PAGE_SIZE: usize = 10_000;
/// Most names a source's `allow_functions` may list.
pub const MAX_ALLOW_FUNCTIONS: usize = 100;

/// A validated definitions document.
#[derive(Debug, Clone)]
pub struct Definitions {
    /// The document's `version` (always 2 today).
    pub version: u32,
    /// Named sources; the first is always [`DEFAULT_SOURCE`].
    pub sources: Vec<SourceDef>,
    /// Triggers, in file order.
    pub triggers: Vec<Trigger>,
    /// Rules, in file order.
    pub rules: Vec<Rule>,
    /// Integrations, in file order.
    pub integrations: Vec<IntegrationDef>,
}

/// An integration declared in the definitions: a catalogue entry, never its credentials.
#[derive(Debug, Clone, PartialEq)]
pub struct IntegrationDef {
    /// The name bindings use.
    pub name: String,
    /// The catalogue entry it instantiates, with its base URL applied.
    pub spec: catalog::Integration,
}

/// A rule's binding to an action: parameter templates and a recipient template.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The integration's name.
    pub integration: String,
    /// The action's name.
    pub action: String,
    /// Parameter templates by name.
    pub params: std::collections::BTreeMap<String, serde_json::Value>,
    /// Who receives it (a template); defaults to the rule's key.
    pub recipient: Option<String>,
}

/// A read-only connection to a customer database, described without its DSN.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceDef {
    /// The source's name.
    pub name: String,
    /// The declared engine, or `None` to take it from the DSN's scheme.
    pub kind: Option<Dialect>,
    /// The environment variable holding the DSN.
    pub dsn_env: String,
    /// The statement timeout applied to every query.
    pub statement_timeout: Duration,
    /// Rows per page (`max_rows` in version 2 documents: Rowfire pages, never truncates).
    pub page_size: usize,
    /// False for a source a trigger names but the file does not declare: its DSN can only come
    /// from the control plane (`rowfire sources add`), and `dsn_env` is empty.
    pub declared: bool,
    /// Functions beyond the guard's read-only list that triggers on this source may call
    /// (`fn` or `schema.fn`), as written; the user owns the risk of each.
    pub allow_functions: Vec<String>,
}

/// One read-only SELECT on a source, with the column that places rows in time and the key.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// The trigger's name.
    pub name: String,
    /// What the trigger means, for people.
    pub description: Option<String>,
    /// The source it reads.
    pub source: String,
    /// The author's SQL (checked by the guard before it runs).
    pub sql: String,
    /// The clock column; empty when the document names none (accepted, as the original Rowfire
    /// accepts it, but never polled, backtested or explained: see [`Trigger::has_clock`]).
    pub event_time: String,
    /// The key columns.
    pub key: Vec<String>,
    /// Columns that tell two occurrences with one key and one instant apart.
    pub occurrence: Vec<String>,
    /// How often it is polled.
    pub poll_interval: SignedDuration,
    /// How far behind the watermark each poll re-reads.
    pub lookback: SignedDuration,
}

/// A rule: a trigger, a cadence and (later) actions.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// The rule's name.
    pub name: String,
    /// The trigger it subscribes to.
    pub trigger: String,
    /// What the rule is for, for people.
    pub description: Option<String>,
    /// How often one key may fire.
    pub cadence: Cadence,
    /// The rule's IANA time zone: its own `timezone`, else the workspace's (default UTC).
    pub timezone: TimeZone,
    /// What happens when it fires.
    pub actions: Vec<Binding>,
    /// A delivery not sent this long after it was due is expired, never sent.
    pub expire_after: Option<jiff::SignedDuration>,
    /// At most this many deliveries per recipient over a rolling window, per mode.
    pub frequency_cap: Option<FrequencyCap>,
}

/// A rule's cap on deliveries to one recipient over a rolling window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrequencyCap {
    /// Deliveries allowed in the window.
    pub max: u32,
    /// The window's length.
    pub per: jiff::SignedDuration,
}

/// A SHA-256 hex digest of a canonical JSON value.
fn digest(value: &serde_json::Value) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(value.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// What a trigger without `event_time` is told wherever it is read (after "trigger NAME").
pub const NO_CLOCK: &str = "names no event_time, the column that places each row in time; Rowfire polls, backtests and explains a trigger by it: add `event_time: COLUMN` to the trigger";

impl Trigger {
    /// Whether the trigger names its clock column (`event_time`): a trigger without one is
    /// stored, listed and shown, but every read of it says it needs one.
    pub fn has_clock(&self) -> bool {
        !self.event_time.is_empty()
    }

    /// The clock and key columns the trigger's window is paged by.
    pub fn shape(&self) -> crate::sql_guard::Shape<'_> {
        crate::sql_guard::Shape {
            clock: &self.event_time,
            key: &self.key,
        }
    }

    /// A checksum over what the trigger reads: its source, SQL, clock, key and occurrence columns.
    pub fn checksum(&self) -> String {
        digest(&self.canonical())
    }

    fn canonical(&self) -> serde_json::Value {
        serde_json::json!({
            "source": self.source,
            "sql": self.sql,
            "event_time": self.event_time,
            "key": self.key,
            "occurrence": self.occurrence,
        })
    }
}

impl Definitions {
    /// Columns besides the clock and key that a trigger's query must return: its occurrence
    /// columns and the anchor (and lead) columns of its rules.
    pub fn extra_columns<'a>(&'a self, trigger: &'a Trigger) -> Vec<&'a str> {
        let mut out: Vec<&str> = trigger.occurrence.iter().map(String::as_str).collect();
        for rule in self.rules.iter().filter(|r| r.trigger == trigger.name) {
            if let Cadence::Anchored(a) = &rule.cadence {
                out.push(&a.column);
                out.extend(a.lead_column.as_deref());
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

impl Rule {
    /// A checksum over the rule's meaning: its cadence and time zone and its trigger's meaning.
    /// A rule whose checksum changes goes back to shadow.
    pub fn checksum(&self, trigger: &Trigger) -> String {
        digest(&serde_json::json!({
            "cadence": self.cadence.canonical(),
            "timezone": self.timezone.iana_name().unwrap_or("UTC"),
            "trigger": trigger.canonical(),
        }))
    }
}

/// A checksum of a whole document's text.
pub fn document_checksum(text: &str) -> String {
    digest(&serde_json::Value::String(text.to_string()))
}

impl Definitions {
    /// A trigger by name.
    pub fn trigger(&self, name: &str) -> Option<&Trigger> {
        self.triggers.iter().find(|t| t.name == name)
    }

    /// How often `trigger` is polled: its `poll_interval`, or sooner when a time-anchored rule
    /// on it sweeps more often (a sweep runs inside its trigger's poll).
    pub fn poll_every(&self, trigger: &Trigger) -> jiff::SignedDuration {
        self.rules
            .iter()
            .filter(|r| r.trigger == trigger.name)
            .filter_map(|r| match &r.cadence {
                crate::cadence::Cadence::Anchored(a) => Some(a.sweep_every()),
                _ => None,
            })
            .fold(trigger.poll_interval, jiff::SignedDuration::min)
    }

    /// A rule by name.
    pub fn rule(&self, name: &str) -> Option<&Rule> {
        self.rules.iter().find(|r| r.name == name)
    }

    /// An integration by name.
    pub fn integration(&self, name: &str) -> Option<&IntegrationDef> {
        self.integrations.iter().find(|i| i.name == name)
    }

    /// A source by name.
    pub fn source(&self, name: &str) -> Option<&SourceDef> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// A rule and its trigger, or an error that lists the known rules.
    pub fn rule_and_trigger(&self, name: &str) -> Result<(&Rule, &Trigger), Problems> {
        let rule = self.rule(name).ok_or_else(|| {
            Problems::one(
                format!("rules.{name}"),
                unknown("rule", name, self.rules.iter().map(|r| r.name.as_str())),
            )
        })?;
        let trigger = self
            .trigger(&rule.trigger)
            .expect("validated: every rule's trigger exists");
        Ok((rule, trigger))
    }

    /// A trigger, or an error that lists the known triggers.
    pub fn trigger_named(&self, name: &str) -> Result<&Trigger, Problems> {
        self.trigger(name).ok_or_else(|| {
            Problems::one(
                format!("triggers.{name}"),
                unknown(
                    "trigger",
                    name,
                    self.triggers.iter().map(|t| t.name.as_str()),
                ),
            )
        })
    }
}

/// One thing wrong with a definitions document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where, as a dotted path (`rules.billing_ticket.period`).
    pub path: String,
    /// What is wrong and what would fix it.
    pub message: String,
}

/// Everything wrong with a definitions document, reported together.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Problems(pub Vec<Problem>);

impl Problems {
    /// A single problem at `path`.
    pub fn one(path: String, message: String) -> Problems {
        Problems(vec![Problem { path, message }])
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "{n} problem{} in the definitions:",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.0 {
            writeln!(f, "  {}: {}", p.path, p.message)?;
        }
        Ok(())
    }
}

fn unknown<'a>(what: &str, name: &str, known: impl Iterator<Item = &'a str>) -> String {
    let known: Vec<&str> = known.collect();
    let name = quoted(name);
    if known.is_empty() {
        format!("unknown {what} {name}; none are defined")
    } else {
        format!("unknown {what} {name}; known {what}s: {}", known.join(", "))
    }
}

/// Whether a value from the file may be shown in a problem: at most 40 characters, each a
/// letter, a digit, `_`, `-` or `.` (a name or a setting, not a DSN or a phrase).
pub(crate) fn plain(value: &str) -> bool {
    value.chars().count() <= 40
        && value
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Where a deserializer's error lies, as a path: `under`, then each key of `at` (`.key`, or
/// `[i]` for a position), then the field a "missing field" message names. `None` when a key is
/// not `shown` (in a definitions file, one that is not [`plain`]: a value pasted where a key goes
/// is not echoed) or the place is unknown. The definitions parser and the API's body extractor
/// both place their deserializers' errors with it.
pub(crate) fn serde_path(
    under: &str,
    at: &serde_path_to_error::Path,
    message: &str,
    shown: impl Fn(&str) -> bool,
) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut out = under.to_string();
    let key = |out: &mut String, key: &str| {
        if !shown(key) {
            return false;
        }
        if !out.is_empty() {
            out.push('.');
        }
        out.push_str(key);
        true
    };
    for segment in at {
        let placed = match segment {
            Segment::Seq { index } => {
                out.push_str(&format!("[{index}]"));
                true
            }
            Segment::Map { key: k } | Segment::Enum { variant: k } => key(&mut out, k),
            Segment::Unknown => false,
        };
        if !placed {
            return None;
        }
    }
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    match missing {
        Some(field) if !key(&mut out, field) => None,
        _ => Some(out),
    }
}

/// A value from the file as a problem shows it: quoted when it is short and made only of
/// characters a name or a setting uses, else described by its length alone. A DSN, a token or
/// a password pasted into the wrong key is never echoed into output and logs.
pub(crate) fn quoted(value: &str) -> String {
    if plain(value) {
        format!("\"{value}\"")
    } else {
        format!(
            "a text of {} characters (not shown, as it may hold a secret)",
            value.chars().count()
        )
    }
}

/// Whether an environment variable may hold a source's DSN: any but Rowfire's own settings
/// (`ROWFIRE_…`: the control plane's URL, the master key), which no trigger may read.
pub fn may_hold_dsn(var: &str) -> bool {
    !var.to_ascii_uppercase().starts_with("ROWFIRE_")
}

/// Parses and validates a definitions document, reporting every problem at once. Rules that name
/// no time zone are in UTC.
pub fn parse(text: &str) -> Result<Definitions, Problems> {
    parse_in_zone(text, &TimeZone::UTC)
}

/// Parses and validates a definitions document whose rules that name no time zone are in
/// `default_zone` (the workspace's).
pub fn parse_in_zone(text: &str, default_zone: &TimeZone) -> Result<Definitions, Problems> {
    parse_with(text, default_zone, false)
}

/// Parses a version already stored in the control plane: as [`parse_in_zone`], except that the
/// checks added after it was pushed do not refuse it (see `parse::Cx::stored`).
pub fn parse_stored(text: &str, default_zone: &TimeZone) -> Result<Definitions, Problems> {
    parse_with(text, default_zone, true)
}

fn parse_with(text: &str, default_zone: &TimeZone, stored: bool) -> Result<Definitions, Problems> {
    limits::prescan(text).map_err(|p| Problems(vec![p]))?;
    let mut doc: Yaml = serde_yaml_ng::from_str(text)
        .map_err(|e| Problems::one("(document)".into(), format!("not valid YAML: {e}")))?;
    parse::drop_nulls(&mut doc);
    let mut cx = parse::Cx {
        problems: Vec::new(),
        default_zone: default_zone.clone(),
        stored,
    };
    let defs = cx.document(&doc);
    match defs {
        Some(defs) if cx.problems.is_empty() => Ok(defs),
        _ => Err(Problems(cx.problems)),
    }
}

/// Reads and parses a definitions file.
pub fn load_file(path: &std::path::Path) -> Result<Definitions, Problems> {
    parse(&read_file(path)?)
}

/// Reads a definitions file's text, reading no more than the largest file accepted (a larger
/// file is refused without being read whole).
pub fn read_file(path: &std::path::Path) -> Result<String, Problems> {
    use std::io::Read;
    let cannot = |e: std::io::Error| {
        Problems::one(
            path.display().to_string(),
            format!("cannot read the definitions file: {e}"),
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| {
            f.take(limits::MAX_FILE_BYTES as u64 + 1)
                .read_to_end(&mut bytes)
        })
        .map_err(cannot)?;
    if bytes.len() > limits::MAX_FILE_BYTES {
        return Err(Problems::one(
            path.display().to_string(),
            format!(
                "the file is larger than {} bytes (1 MiB), the most a definitions file may be; split it or remove unused definitions",
                limits::MAX_FILE_BYTES
            ),
        ));
    }
    String::from_utf8(bytes).map_err(|_| {
        Problems::one(
            path.display().to_string(),
            "the definitions file is not UTF-8 text".to_string(),
        )
    })
}

pub mod catalog;
pub mod edit;
pub mod limits;
mod parse;
pub(crate) use parse::reserved_action_header;
mod undeclared;

pub mod versions;

#[cfg(test)]
mod original_tests;
#[cfg(test)]
mod tests;
