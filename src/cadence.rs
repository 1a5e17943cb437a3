//! Cadences: how a (rule, row) maps to a dedup key and a dedup bucket. Pure; no I/O.
//!
//! Shared by backtests (counted in memory) and by the live ledger (claimed in the database), so
//! both agree on what "the same fire" means.

use std::fmt;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

use crate::row::{Row, Value};

/// A calendar period for `once_per_period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// A local calendar day.
    Day,
    /// A week starting on Monday.
    Week,
    /// A calendar month.
    Month,
}

impl Period {
    /// Parses `day`, `week` or `month`.
    pub fn parse(s: &str) -> Option<Period> {
        match s {
            "day" => Some(Period::Day),
            "week" => Some(Period::Week),
            "month" => Some(Period::Month),
            _ => None,
        }
    }

    /// The local date this period starts on, for an instant seen in `tz`.
    pub fn start(self, tz: &TimeZone, at: Timestamp) -> Date {
        let date = at.to_zoned(tz.clone()).date();
        match self {
            Period::Day => date,
            Period::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(jiff::Span::new().days(back))
                    .expect("a Monday within six days of a valid date is valid")
            }
            Period::Month => date.first_of_month(),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
        })
    }
}

/// When a time-anchored rule sends, relative to a timestamp column of the row.
#[derive(Debug, Clone, PartialEq)]
pub struct Anchor {
    /// The column holding the anchor instant (for example `starts_at`).
    pub column: String,
    /// How long before the anchor to send.
    pub lead: SignedDuration,
    /// A column holding the lead in minutes, used when present and not NULL.
    pub lead_column: Option<String>,
    /// How far ahead anchors are materialised.
    pub look_ahead: SignedDuration,
    /// How often the look-ahead is swept (not part of what the rule means).
    pub interval: SignedDuration,
    /// How late a send may still go out.
    pub grace: SignedDuration,
    /// Whether the row is re-read just before sending.
    pub recheck: bool,
}

impl Anchor {
    /// How often the look-ahead is actually swept: its `interval`, or sooner when the
    /// look-ahead is too short for it (look-ahead minus lead, at least a minute), so every
    /// anchor is read by some sweep before its send falls due at the rule's lead.
    pub fn sweep_every(&self) -> SignedDuration {
        let covered = (self.look_ahead - self.lead).max(SignedDuration::from_mins(1));
        self.interval.min(covered)
    }

    /// Whether a send `lead` before its anchor is read by no sweep until its grace has run out,
    /// however the sweeps fall: a lead of at least the look-ahead plus the grace. A sweep
    /// reads anchors up to the look-ahead ahead of it, so it first finds such a send after its
    /// due time plus grace, and records it as expired instead of queueing it. (A lead shorter
    /// than that by less than one sweep interval may be found too late as well, depending on
    /// when the sweeps run; a look-ahead of at least the longest lead plus the sweep interval
    /// leaves none late.)
    pub fn read_too_late(&self, lead: SignedDuration) -> bool {
        lead >= self.look_ahead.saturating_add(self.grace)
    }
}

/// How often one key of a rule may fire.
#[derive(Debug, Clone, PartialEq)]
pub enum Cadence {
    /// At most once, ever.
    OnceEver,
    /// At most once per calendar period in a time zone.
    OncePerPeriod {
        /// The period.
        period: Period,
        /// The rule's time zone.
        tz: TimeZone,
    },
    /// On occurrences 1, n+1, 2n+1, … of a key.
    OncePerN {
        /// The stride, at least 1.
        n: u32,
    },
    /// At a moment relative to a timestamp in the row.
    Anchored(Anchor),
}

/// Why a row cannot fire. Counted and reported; never silently dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// The clock column is NULL or unreadable.
    NullClock,
    /// A key column is NULL.
    NullKey {
        /// The first NULL key column.
        column: String,
    },
    /// A time-anchored rule's anchor column is NULL or not a timestamp.
    NullAnchor {
        /// The anchor column.
        column: String,
    },
}

impl fmt::Display for Skip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Skip::NullClock => f.write_str("its clock is NULL"),
            Skip::NullKey { column } => write!(f, "key column {column} is NULL"),
            Skip::NullAnchor { column } => {
                write!(f, "anchor column {column} is NULL or not a time")
            }
        }
    }
}

/// Where a row lands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Claim this dedup bucket.
    Bucket(String),
    /// `once_per_n`: count the occurrence first; [`nth_bucket`] then says whether it fires.
    Occurrence,
}

impl Cadence {
    /// The anchor of a time-anchored rule; `None` for the other cadences.
    pub fn anchor(&self) -> Option<&Anchor> {
        match self {
            Cadence::Anchored(a) => Some(a),
            _ => None,
        }
    }

    /// Places a row whose clock is `clock` (already known not to be NULL).
    pub fn place(&self, clock: Timestamp, row: &Row) -> Result<Placement, Skip> {
        match self {
            Cadence::OnceEver => Ok(Placement::Bucket(String::new())),
            Cadence::OncePerPeriod { period, tz } => {
                Ok(Placement::Bucket(period.start(tz, clock).to_string()))
            }
            Cadence::OncePerN { .. } => Ok(Placement::Occurrence),
            Cadence::Anchored(anchor) => {
                let at = row
                    .get(&anchor.column)
                    .and_then(Value::as_timestamp)
                    .ok_or_else(|| Skip::NullAnchor {
                        column: anchor.column.clone(),
                    })?;
                Ok(Placement::Bucket(at.to_string()))
            }
        }
    }

    /// The cadence as canonical JSON: what it means, for checksums that notice a changed rule.
    pub fn canonical(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Cadence::OnceEver => json!({ "policy": "once_ever" }),
            Cadence::OncePerPeriod { period, tz } => {
                json!({ "policy": "once_per_period", "period": period.to_string(), "timezone": tz.iana_name().unwrap_or("UTC") })
            }
            Cadence::OncePerN { n } => json!({ "policy": "once_per_n", "n": n }),
            Cadence::Anchored(a) => json!({
                "policy": "anchored",
                "column": a.column,
                "lead_ms": a.lead.as_millis(),
                "lead_column": a.lead_column,
                "look_ahead_ms": a.look_ahead.as_millis(),
                "grace_ms": a.grace.as_millis(),
                "recheck": a.recheck,
            }),
        }
    }

    /// The time zone period buckets and per-day counts are computed in.
    pub fn time_zone(&self) -> TimeZone {
        match self {
            Cadence::OncePerPeriod { tz, .. } => tz.clone(),
            _ => TimeZone::UTC,
        }
    }

    /// A short phrase for people: "once per account_id per week, America/New_York".
    pub fn describe(&self, key: &[String]) -> String {
        let key = key.join(", ");
        match self {
            Cadence::OnceEver => format!("once ever per {key}"),
            Cadence::OncePerPeriod { period, tz } => {
                let zone = tz.iana_name().unwrap_or("UTC");
                format!("once per {key} per {period}, {zone}")
            }
            Cadence::OncePerN { n: 1 } => format!("every occurrence per {key}"),
            Cadence::OncePerN { n } => {
                let n = u64::from(*n);
                format!("occurrences 1, {}, {} … per {key}", n + 1, 2 * n + 1)
            }
            Cadence::Anchored(a) => {
                format!("{:#} before {} per {key}", a.lead, a.column)
            }
        }
    }
}

/// For `once_per_n`: the bucket of the `ordinal`th (1-based) occurrence of a key, if it fires.
/// Occurrences 1, n+1, 2n+1, … fire; the bucket is the ordinal itself.
pub fn nth_bucket(n: u32, ordinal: u64) -> Option<String> {
    let n = u64::from(n.max(1));
    (ordinal >= 1 && (ordinal - 1).is_multiple_of(n)).then(|| ordinal.to_string())
}

/// The dedup key of a row: its key columns' values encoded so that different tuples never
/// collide. The encoding is a JSON array; text is always a JSON string, numbers keep their
/// exact digits (`1.10` is not `1.1`), and JSON or byte values are tagged objects.
pub fn dedup_key(row: &Row, key_columns: &[String]) -> Result<String, Skip> {
    let mut out = String::new();
    dedup_key_into(row, key_columns, &mut out)?;
    Ok(out)
}

/// [`dedup_key`] written into `out` (cleared first), so a caller reading many rows reuses one
/// buffer. On a NULL or missing key column `out` holds nothing useful.
pub fn dedup_key_into(row: &Row, key_columns: &[String], out: &mut String) -> Result<(), Skip> {
    out.clear();
    out.push('[');
    for (i, column) in key_columns.iter().enumerate() {
        match row.get(column) {
            Some(v) if !v.is_null() => {
                if i > 0 {
                    out.push(',');
                }
                encode_one(out, v);
            }
            _ => {
                return Err(Skip::NullKey {
                    column: column.clone(),
                });
            }
        }
    }
    out.push(']');
    Ok(())
}

/// Encodes a tuple of values as the collision-free JSON array described on [`dedup_key`].
pub fn encode_values(values: &[&Value]) -> String {
    let mut out = String::from("[");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        encode_one(&mut out, v);
    }
    out.push(']');
    out
}

/// Appends `s` as a JSON string, exactly as `serde_json` writes it: text with nothing to
/// escape (no quote, backslash or control character) is copied as it is, without an allocation.
fn push_quoted(out: &mut String, s: &str) {
    if s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(&serde_json::Value::String(s.to_owned()).to_string());
    } else {
        out.push('"');
        out.push_str(s);
        out.push('"');
    }
}

fn encode_one(out: &mut String, v: &Value) {
    use std::fmt::Write as _;
    let quoted = |s: &str| serde_json::Value::String(s.to_owned()).to_string();
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        // `{:?}` keeps a trailing `.0`, so the float 1.0 never meets the integer 1.
        Value::Float(f) if f.is_finite() => out.push_str(&format!("{f:?}")),
        Value::Float(f) => out.push_str(&format!("{{\"float\":{}}}", quoted(&f.to_string()))),
        Value::Decimal(d) => out.push_str(d),
        Value::Text(s) => push_quoted(out, s),
        Value::Timestamp(ts) => out.push_str(&quoted(&ts.to_string())),
        Value::Date(d) => out.push_str(&quoted(&d.to_string())),
        Value::Json(j) => out.push_str(&format!("{{\"json\":{j}}}")),
        Value::Bytes(_) => out.push_str(&format!("{{\"bytes\":{}}}", quoted(&v.to_string()))),
    }
}

/// The identity of one occurrence for `once_per_n`: its key, its clock and, when the trigger
/// names `occurrence` columns, their values. A re-read row has the same identity.
pub fn occurrence_id(
    key: &str,
    clock: Timestamp,
    row: &Row,
    occurrence_columns: &[String],
) -> String {
    let extra: Vec<&Value> = occurrence_columns
        .iter()
        .map(|c| row.get(c).unwrap_or(&Value::Null))
        .collect();
    format!(
        "{key}@{clock}{}",
        if extra.is_empty() {
            String::new()
        } else {
            encode_values(&extra)
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_send_is_read_too_late_from_a_lead_of_the_look_ahead_plus_the_grace() {
        let anchor = Anchor {
            column: "starts_at".into(),
            lead: SignedDuration::from_mins(10),
            lead_column: Some("lead".into()),
            look_ahead: SignedDuration::from_hours(3),
            interval: SignedDuration::from_mins(15),
            grace: SignedDuration::from_mins(5),
            recheck: false,
        };
        let edge = SignedDuration::from_mins(185);
        assert!(anchor.read_too_late(edge));
        assert!(anchor.read_too_late(SignedDuration::from_hours(48)));
        assert!(!anchor.read_too_late(edge - SignedDuration::from_nanos(1)));
        assert!(!anchor.read_too_late(SignedDuration::from_hours(3)));
    }

    fn row(cols: &[&str], values: Vec<Value>) -> Row {
        let columns: Arc<[String]> = cols.iter().map(|s| s.to_string()).collect();
        Row {
            columns,
            values,
            clock: None,
        }
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn bucket(c: &Cadence, at: &str) -> String {
        match c.place(ts(at), &row(&[], vec![])).unwrap() {
            Placement::Bucket(b) => b,
            Placement::Occurrence => panic!("not a bucket"),
        }
    }

    fn weekly(zone: &str) -> Cadence {
        Cadence::OncePerPeriod {
            period: Period::Week,
            tz: TimeZone::get(zone).unwrap(),
        }
    }

    #[test]
    fn once_ever_has_one_empty_bucket() {
        assert_eq!(bucket(&Cadence::OnceEver, "2026-11-23T10:00:00Z"), "");
    }

    #[test]
    fn weeks_start_on_monday() {
        let c = weekly("UTC");
        // Monday 23 November 2026 through Sunday 29 November 2026 share one bucket.
        assert_eq!(bucket(&c, "2026-11-23T00:00:00Z"), "2026-11-23");
        assert_eq!(bucket(&c, "2026-11-26T12:00:00Z"), "2026-11-23");
        assert_eq!(bucket(&c, "2026-11-29T23:59:59Z"), "2026-11-23");
        assert_eq!(bucket(&c, "2026-11-30T00:00:00Z"), "2026-11-30");
        // A Sunday belongs to the week that started six days earlier.
        assert_eq!(bucket(&c, "2026-11-22T12:00:00Z"), "2026-11-16");
    }

    #[test]
    fn months_start_on_the_first_local_day() {
        let utc = Cadence::OncePerPeriod {
            period: Period::Month,
            tz: TimeZone::UTC,
        };
        assert_eq!(bucket(&utc, "2026-02-28T23:59:59Z"), "2026-02-01");
        assert_eq!(bucket(&utc, "2026-03-01T00:00:00Z"), "2026-03-01");
        // 02:00 UTC on 1 March is still 28 February in New York.
        let ny = Cadence::OncePerPeriod {
            period: Period::Month,
            tz: TimeZone::get("America/New_York").unwrap(),
        };
        assert_eq!(bucket(&ny, "2026-03-01T02:00:00Z"), "2026-02-01");
        assert_eq!(bucket(&ny, "2026-03-01T05:00:00Z"), "2026-03-01");
    }

    #[test]
    fn a_23_hour_day_in_new_york_is_one_daily_bucket() {
        // 8 March 2026: clocks spring forward at 02:00 EST; local midnight is 05:00Z and the
        // next local midnight is 04:00Z on 9 March, 23 hours later.
        let c = Cadence::OncePerPeriod {
            period: Period::Day,
            tz: TimeZone::get("America/New_York").unwrap(),
        };
        assert_eq!(bucket(&c, "2026-03-08T04:59:59Z"), "2026-03-07");
        assert_eq!(bucket(&c, "2026-03-08T05:00:00Z"), "2026-03-08");
        assert_eq!(bucket(&c, "2026-03-08T06:59:59Z"), "2026-03-08"); // 01:59:59 EST
        assert_eq!(bucket(&c, "2026-03-08T07:00:00Z"), "2026-03-08"); // 03:00:00 EDT
        assert_eq!(bucket(&c, "2026-03-09T03:59:59Z"), "2026-03-08");
        assert_eq!(bucket(&c, "2026-03-09T04:00:00Z"), "2026-03-09");
    }

    #[test]
    fn a_25_hour_day_in_new_york_is_one_daily_bucket() {
        // 1 November 2026: clocks fall back at 02:00 EDT; local midnight is 04:00Z and the
        // next is 05:00Z on 2 November, 25 hours later. 01:30 happens twice.
        let c = Cadence::OncePerPeriod {
            period: Period::Day,
            tz: TimeZone::get("America/New_York").unwrap(),
        };
        assert_eq!(bucket(&c, "2026-11-01T03:59:59Z"), "2026-10-31");
        assert_eq!(bucket(&c, "2026-11-01T04:00:00Z"), "2026-11-01");
        assert_eq!(bucket(&c, "2026-11-01T05:30:00Z"), "2026-11-01"); // first 01:30 (EDT)
        assert_eq!(bucket(&c, "2026-11-01T06:30:00Z"), "2026-11-01"); // second 01:30 (EST)
        assert_eq!(bucket(&c, "2026-11-02T04:59:59Z"), "2026-11-01");
        assert_eq!(bucket(&c, "2026-11-02T05:00:00Z"), "2026-11-02");
    }

    #[test]
    fn a_week_spanning_a_dst_change_is_one_bucket() {
        let c = weekly("America/New_York");
        // Monday 26 October 2026 00:00 EDT = 04:00Z; Monday 2 November 00:00 EST = 05:00Z.
        assert_eq!(bucket(&c, "2026-10-26T04:00:00Z"), "2026-10-26");
        assert_eq!(bucket(&c, "2026-11-02T04:59:59Z"), "2026-10-26");
        assert_eq!(bucket(&c, "2026-11-02T05:00:00Z"), "2026-11-02");
        // Monday 9 March 2026 00:00 EDT = 04:00Z, after the spring change.
        assert_eq!(bucket(&c, "2026-03-09T03:59:59Z"), "2026-03-02");
        assert_eq!(bucket(&c, "2026-03-09T04:00:00Z"), "2026-03-09");
    }

    #[test]
    fn different_key_tuples_never_share_an_encoding() {
        let key = |values: Vec<Value>| {
            let cols: Vec<String> = (0..values.len()).map(|i| format!("k{i}")).collect();
            let names: Vec<&str> = cols.iter().map(String::as_str).collect();
            dedup_key(&row(&names, values), &cols).unwrap()
        };
        let t = |s: &str| Value::Text(s.into());
        let cases = vec![
            key(vec![t("a|b")]),
            key(vec![t("a"), t("b")]),
            key(vec![Value::Decimal("1.10".into())]),
            key(vec![Value::Decimal("1.1".into())]),
            key(vec![t("1.1")]),
            key(vec![Value::Int(1)]),
            key(vec![Value::Float(1.0)]),
            key(vec![t("1")]),
            key(vec![t("[\"a\",\"b\"]")]),
            key(vec![t("{\"json\":1}")]),
            key(vec![Value::Json(serde_json::json!(1))]),
            key(vec![t("a,b")]),
            key(vec![t("a\",\"b")]),
            key(vec![t("")]),
            key(vec![t(""), t("")]),
        ];
        for (i, a) in cases.iter().enumerate() {
            for b in &cases[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(key(vec![t("a|b")]), r#"["a|b"]"#);
        assert_eq!(key(vec![t("a"), t("b")]), r#"["a","b"]"#);
    }

    #[test]
    fn a_null_key_column_is_reported_by_name() {
        let r = row(
            &["account_id", "region"],
            vec![Value::Text("a".into()), Value::Null],
        );
        let keys = vec!["account_id".to_string(), "region".to_string()];
        assert_eq!(
            dedup_key(&r, &keys),
            Err(Skip::NullKey {
                column: "region".into()
            })
        );
    }

    #[test]
    fn once_per_n_with_n_1_fires_every_occurrence() {
        let fired: Vec<u64> = (1..=5).filter(|o| nth_bucket(1, *o).is_some()).collect();
        assert_eq!(fired, vec![1, 2, 3, 4, 5]);
    }

    #[test]
    fn once_per_n_with_n_3_fires_on_1_4_7() {
        let fired: Vec<u64> = (1..=9).filter(|o| nth_bucket(3, *o).is_some()).collect();
        assert_eq!(fired, vec![1, 4, 7]);
        assert_eq!(nth_bucket(3, 4).as_deref(), Some("4"));
        assert_eq!(nth_bucket(3, 0), None);
    }

    #[test]
    fn an_anchored_rule_buckets_by_its_anchor_instant() {
        let anchor = Anchor {
            column: "starts_at".into(),
            lead: SignedDuration::from_mins(10),
            lead_column: None,
            look_ahead: SignedDuration::from_hours(3),
            interval: SignedDuration::from_mins(15),
            grace: SignedDuration::from_mins(5),
            recheck: true,
        };
        let c = Cadence::Anchored(anchor);
        let r = row(
            &["starts_at"],
            vec![Value::Text("2026-11-30 15:00:00".into())],
        );
        let at = ts("2026-11-29T00:00:00Z");
        assert_eq!(
            c.place(at, &r),
            Ok(Placement::Bucket("2026-11-30T15:00:00Z".into()))
        );
        let null = row(&["starts_at"], vec![Value::Null]);
        assert_eq!(
            c.place(at, &null),
            Err(Skip::NullAnchor {
                column: "starts_at".into()
            })
        );
    }
}
