//! `rowfire why RULE KEY`: which fires a key has, in which buckets and modes, from which poll;
//! and for each recent row of that key that did not fire, which earlier fire took its bucket.

pub mod plan;

use std::fmt;

use jiff::{SignedDuration, Timestamp};

use crate::cadence::{self, Placement};
use crate::definitions::{DEFAULT_SOURCE, Definitions};
use crate::ledger::{self, Fire};
use crate::poll::DsnResolver;
use crate::schedule::upcoming::{self, ScheduledSend};
use crate::source::{Source, UnreadableClocks};
use crate::sql_guard::Window;
use crate::store::WorkspaceId;
use crate::store::{Store, StoreError};

/// What the ledger and the source say about one key of one rule.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The rule.
    pub rule: String,
    /// The key as stored (its encoding).
    pub key: String,
    /// Its fires, oldest first.
    pub fires: Vec<Fire>,
    /// `once_per_n`: occurrences counted per mode.
    pub occurrences: Vec<(String, i64)>,
    /// Recent rows of this key and what became of each.
    pub rows: Vec<RowFate>,
    /// Why the rows could not be read, if they could not.
    pub rows_unavailable: Option<String>,
    /// Days of rows looked at.
    pub days: u32,
    /// Rows of the whole query whose clock is not a time (they never fire, whatever their key).
    pub unreadable_clocks: UnreadableClocks,
    /// A time-anchored rule's sends for this key, in the order they were made: scheduled,
    /// moved (a cancelled send for the old instant, a new one for the new) and cancelled.
    /// `None` for other rules.
    pub sends: Option<Vec<ScheduledSend>>,
}

/// One recent row of the key.
#[derive(Debug, Clone)]
pub struct RowFate {
    /// Its clock.
    pub clock: Timestamp,
    /// Its bucket, when the cadence has one per row.
    pub bucket: Option<String>,
    /// The fire for that bucket, if any.
    pub fire: Option<Fire>,
}

/// The stored encodings a key typed on the command line may have: as given when it is already a
/// JSON array, else as one text value and, when it looks like a number, as one number.
pub fn key_candidates(typed: &str) -> Vec<String> {
    let t = typed.trim();
    if t.starts_with('[') {
        return vec![t.to_string()];
    }
    let mut out = vec![serde_json::Value::Array(vec![t.into()]).to_string()];
    if t.parse::<i64>().is_ok() || t.parse::<f64>().is_ok() {
        out.push(format!("[{t}]"));
    }
    out
}

/// A stored key as `why` prints it, the same whether or not it has fires: a one-column key as
/// its value (`5`, `acct_012`), a key of several columns as its JSON array.
pub fn shown_key(encoded: &str) -> String {
    match serde_json::from_str::<Vec<serde_json::Value>>(encoded).as_deref() {
        Ok([serde_json::Value::String(s)]) => s.clone(),
        Ok([v]) if !v.is_array() && !v.is_object() => v.to_string(),
        _ => encoded.to_string(),
    }
}

/// A dedup bucket as `why` prints it: once-ever rules have one bucket, the empty text.
fn shown_bucket(bucket: &str) -> String {
    if bucket.is_empty() {
        "once ever".to_string()
    } else {
        format!("bucket {bucket}")
    }
}

/// What `why` is asked.
#[derive(Debug, Clone, Copy)]
pub struct Question<'a> {
    /// The rule.
    pub rule: &'a str,
    /// The key as typed.
    pub key: &'a str,
    /// Days of rows to look at, back from `now`.
    pub days: u32,
    /// The end of the rows' window.
    pub now: Timestamp,
}

/// Why a question could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum WhyError {
    /// The question names no such rule (or the rule's trigger is missing).
    #[error("{0}")]
    Question(String),
    /// The control plane could not be read.
    #[error(transparent)]
    ControlPlane(#[from] StoreError),
}

/// Explains a key of a rule, reading fires from the ledger and recent rows from the trigger's
/// source. A source that cannot be read is reported in the explanation, not as an error.
pub async fn why(
    store: &Store,
    workspace: &WorkspaceId,
    defs: &Definitions,
    q: Question<'_>,
    dsn: &DsnResolver,
) -> Result<Explanation, WhyError> {
    let Question {
        rule: rule_name,
        key: typed_key,
        days,
        now,
    } = q;
    let (rule, trigger) = defs
        .rule_and_trigger(rule_name)
        .map_err(|e| WhyError::Question(e.to_string()))?;
    let failed = |e: sqlx::Error| WhyError::ControlPlane(store.error(e));
    let mut tx = store.begin(workspace).await?;
    let mut fires = Vec::new();
    let mut key = key_candidates(typed_key)[0].clone();
    for candidate in key_candidates(typed_key) {
        let found = ledger::fires(&mut tx, workspace, rule_name, Some(&candidate))
            .await
            .map_err(failed)?;
        if !found.is_empty() {
            key = candidate;
            fires = found;
            break;
        }
    }
    let occurrences = ledger::occurrences(&mut tx, workspace, rule_name, &key)
        .await
        .map_err(failed)?;
    let sends = match rule.cadence {
        cadence::Cadence::Anchored(_) => {
            let q = upcoming::Query {
                rule: Some(rule_name),
                key: Some(&key),
                ..Default::default()
            };
            let found = upcoming::sends(&mut tx, workspace, &q)
                .await
                .map_err(failed)?;
            Some(found)
        }
        _ => None,
    };
    tx.rollback().await.map_err(failed)?;

    let mut explanation = Explanation {
        rule: rule.name.clone(),
        key: key.clone(),
        fires,
        occurrences,
        rows: Vec::new(),
        rows_unavailable: None,
        days,
        unreadable_clocks: UnreadableClocks::default(),
        sends,
    };
    let def = defs
        .source(&trigger.source)
        .or_else(|| defs.source(DEFAULT_SOURCE))
        .expect("validated");
    let Some(url) = dsn(workspace, def) else {
        explanation.rows_unavailable = Some(if def.declared {
            format!(
                "{} is not set, so the source's rows were not read",
                def.dsn_env
            )
        } else {
            format!("{}, so the source's rows were not read", def.missing_dsn())
        });
        return Ok(explanation);
    };
    let read = async {
        let source = Source::connect_resolved(def, &url)
            .await
            .map_err(|e| e.to_string())?;
        let window = Window {
            since: crate::store::earlier(now, SignedDuration::from_hours(24 * i64::from(days))),
            until: now,
        };
        let query = source
            .prepare(defs, trigger, window)
            .await
            .map_err(|e| e.to_string())?;
        let shape = trigger.shape();
        let mut reader = source
            .read_window(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        let mut rows = Vec::new();
        while let Some(page) = reader.next_page().await.map_err(|e| e.to_string())? {
            for row in page {
                if cadence::dedup_key(&row, &trigger.key).ok().as_deref() != Some(key.as_str()) {
                    continue;
                }
                let Some(clock) = row.clock else { continue };
                let bucket = match rule.cadence.place(clock, &row) {
                    Ok(Placement::Bucket(b)) => Some(b),
                    _ => None,
                };
                rows.push((clock, bucket));
            }
        }
        reader.finish().await;
        let unreadable = source
            .count_unreadable_clocks(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((rows, unreadable))
    };
    match read.await {
        Ok((rows, unreadable)) => {
            explanation.unreadable_clocks = unreadable;
            explanation.rows = rows
                .into_iter()
                .map(|(clock, bucket)| {
                    let fire = bucket
                        .as_ref()
                        .and_then(|b| explanation.fires.iter().find(|f| &f.bucket == b).cloned());
                    RowFate {
                        clock,
                        bucket,
                        fire,
                    }
                })
                .collect();
        }
        Err(e) => explanation.rows_unavailable = Some(e),
    }
    Ok(explanation)
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} for key {}:", self.rule, shown_key(&self.key))?;
        if self.fires.is_empty() {
            writeln!(f, "  no fires")?;
        }
        let width = self
            .fires
            .iter()
            .map(|fire| shown_bucket(&fire.bucket).chars().count())
            .max()
            .unwrap_or(0);
        for fire in &self.fires {
            writeln!(
                f,
                "  fire #{} {:<6} {:<width$}  row clock {}  claimed by poll #{} at {}",
                fire.id,
                fire.mode.to_string(),
                shown_bucket(&fire.bucket),
                fire.clock,
                fire.run_id,
                fire.fired_at
            )?;
        }
        if let Some(sends) = &self.sends {
            write_sends(f, sends)?;
        }
        for (mode, count) in &self.occurrences {
            writeln!(f, "  {count} occurrence(s) counted in {mode}")?;
        }
        match &self.rows_unavailable {
            Some(why) => writeln!(f, "rows: not read ({why})")?,
            None => {
                writeln!(
                    f,
                    "rows of this key in the last {} days: {}",
                    self.days,
                    self.rows.len()
                )?;
                if self.unreadable_clocks.rows > 0 {
                    writeln!(
                        f,
                        "  the trigger has {} (any key, never fired); write the clock as a time, or cast it in the SQL",
                        self.unreadable_clocks
                    )?;
                }
                for row in &self.rows {
                    match (&row.bucket, &row.fire) {
                        (Some(_), Some(fire)) if fire.clock == row.clock => {
                            writeln!(f, "  {}  fired (fire #{})", row.clock, fire.id)?
                        }
                        (Some(b), Some(fire)) => writeln!(
                            f,
                            "  {}  did not fire: {} was taken by fire #{} (row clock {})",
                            row.clock,
                            shown_bucket(b),
                            fire.id,
                            fire.clock
                        )?,
                        (Some(b), None) => writeln!(
                            f,
                            "  {}  not fired yet: {} is free (not polled yet, or the rule was added later)",
                            row.clock,
                            shown_bucket(b)
                        )?,
                        (None, _) => writeln!(
                            f,
                            "  {}  counted as an occurrence; only every nth fires",
                            row.clock
                        )?,
                    }
                }
            }
        }
        Ok(())
    }
}

/// A time-anchored rule's sends for one key: anchor, due, lead source, mode, status and reason.
fn write_sends(f: &mut fmt::Formatter<'_>, sends: &[ScheduledSend]) -> fmt::Result {
    if sends.is_empty() {
        return writeln!(f, "  no scheduled sends");
    }
    let at = |t: Timestamp| t.strftime("%Y-%m-%d %H:%M:%SZ").to_string();
    writeln!(f, "  scheduled sends, in the order they were made:")?;
    for s in sends {
        let reason = s
            .reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let when = match (s.sent_at, s.unscheduled_at) {
            (Some(t), _) => format!(" at {}", at(t)),
            (None, Some(t)) => format!(" by the sweep at {}", at(t)),
            _ => String::new(),
        };
        writeln!(
            f,
            "  #{:<7} anchor {}  due {}  lead {:<7}  {:<6}  {}{reason}{when}",
            s.id,
            at(s.anchor_at),
            at(s.due_at),
            s.lead_from.map_or("-", |l| l.as_str()),
            s.mode.to_string(),
            s.status,
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_typed_key_is_tried_as_text_and_as_a_number() {
        assert_eq!(super::key_candidates("acct_012"), vec![r#"["acct_012"]"#]);
        assert_eq!(super::key_candidates("42"), vec![r#"["42"]"#, "[42]"]);
        assert_eq!(super::key_candidates(r#"["a","b"]"#), vec![r#"["a","b"]"#]);
    }

    #[test]
    fn a_key_prints_the_same_way_whether_stored_as_text_or_as_a_number() {
        assert_eq!(super::shown_key("[5]"), "5");
        assert_eq!(super::shown_key(r#"["3"]"#), "3");
        assert_eq!(super::shown_key(r#"["acct_012"]"#), "acct_012");
        assert_eq!(super::shown_key(r#"["a",2]"#), r#"["a",2]"#);
        assert_eq!(super::shown_bucket(""), "once ever");
        assert_eq!(super::shown_bucket("2026-W47"), "bucket 2026-W47");
    }
}
