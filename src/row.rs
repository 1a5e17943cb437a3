//! Rows read from a source: named columns and typed values that keep their exact form.

use std::fmt;
use std::sync::Arc;

use compact_str::CompactString;
use jiff::Timestamp;
use jiff::civil::{Date, DateTime};

/// One value from a source row. Decimals keep their digits (`1.10` stays `1.10`). Text and
/// decimals up to 24 bytes are held inline ([`CompactString`]): decoding them allocates nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// Any integer type.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// An exact decimal, as its plain digits.
    Decimal(CompactString),
    /// Text of any kind (also UUIDs and enum labels).
    Text(CompactString),
    /// An instant in time (UTC).
    Timestamp(Timestamp),
    /// A calendar date without a time.
    Date(Date),
    /// A JSON document.
    Json(serde_json::Value),
    /// Raw bytes.
    Bytes(Vec<u8>),
}

impl Value {
    /// True for SQL NULL.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// The value as an instant: timestamps as they are, dates at UTC midnight, and text in
    /// RFC 3339 or `YYYY-MM-DD[ HH:MM:SS[.fff]]` (read as UTC) form.
    pub fn as_timestamp(&self) -> Option<Timestamp> {
        match self {
            Value::Timestamp(ts) => Some(*ts),
            Value::Date(d) => d
                .to_zoned(jiff::tz::TimeZone::UTC)
                .ok()
                .map(|z| z.timestamp()),
            Value::Text(s) => parse_timestamp(s),
            _ => None,
        }
    }

    /// The value as JSON. Decimals become strings so no digit is lost; timestamps are RFC 3339;
    /// a float JSON cannot hold (NaN, ±infinity) is its name, as the key encodes it, never null.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match self {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => {
                serde_json::Number::from_f64(*f).map_or_else(|| J::String(f.to_string()), J::Number)
            }
            Value::Decimal(d) => J::String(d.to_string()),
            Value::Text(s) => J::String(s.to_string()),
            Value::Timestamp(ts) => J::String(ts.to_string()),
            Value::Date(d) => J::String(d.to_string()),
            Value::Json(j) => j.clone(),
            Value::Bytes(b) => J::String(hex(b)),
        }
    }

    /// The value as text a database reads back through `CAST(text AS type)`. `None` for NULL.
    pub fn to_sql_text(&self) -> Option<String> {
        Some(match self {
            Value::Null => return None,
            Value::Bool(b) => b.to_string(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) => f.to_string(),
            Value::Decimal(d) | Value::Text(d) => d.to_string(),
            Value::Timestamp(ts) => ts.to_string(),
            Value::Date(d) => d.to_string(),
            Value::Json(j) => j.to_string(),
            Value::Bytes(b) => hex(b),
        })
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Null => f.write_str("NULL"),
            Value::Text(s) => f.write_str(s),
            other => f.write_str(&other.to_sql_text().unwrap_or_default()),
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(2 + bytes.len() * 2);
    out.push_str("\\x");
    for b in bytes {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Reads an instant from text: RFC 3339 with an offset, or a civil date-time (with `T` or a
/// space, optional fraction) or a bare date, both taken as UTC.
pub fn parse_timestamp(s: &str) -> Option<Timestamp> {
    let s = s.trim();
    if let Ok(ts) = s.parse::<Timestamp>() {
        return Some(ts);
    }
    if let Ok(dt) = s.parse::<DateTime>() {
        return dt
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()
            .map(|z| z.timestamp());
    }
    if let Ok(d) = s.parse::<Date>() {
        return d
            .to_zoned(jiff::tz::TimeZone::UTC)
            .ok()
            .map(|z| z.timestamp());
    }
    None
}

/// A text clock as integer microseconds since the Unix epoch (rounded to the nearest
/// microsecond), read as [`parse_timestamp`] reads it: how SQLite sources compare clocks.
pub fn text_clock_micros(s: &str) -> Option<i64> {
    let ts = parse_timestamp(s)?;
    let rounded = ts.round(jiff::Unit::Microsecond).ok()?;
    Some(rounded.as_microsecond())
}

/// A number of Unix seconds (a fraction allowed) as integer microseconds since the Unix epoch,
/// rounded to the nearest; `None` when it is not finite or outside the times Rowfire handles.
pub fn unix_seconds_micros(seconds: f64) -> Option<i64> {
    if !seconds.is_finite() {
        return None;
    }
    let micros = (seconds * 1_000_000.0).round();
    let min = Timestamp::MIN.as_microsecond() as f64;
    let max = Timestamp::MAX.as_microsecond() as f64;
    if !(min..=max).contains(&micros) {
        return None;
    }
    Some(micros as i64)
}

/// Whole Unix seconds as integer microseconds since the Unix epoch; `None` outside the times
/// Rowfire handles.
pub fn unix_int_seconds_micros(seconds: i64) -> Option<i64> {
    let micros = seconds.checked_mul(1_000_000)?;
    Timestamp::from_microsecond(micros).ok()?;
    Some(micros)
}

/// The column names shared by every row of one result.
pub type Columns = Arc<[String]>;

/// One row of a trigger's result, with its clock already read.
#[derive(Debug, Clone)]
pub struct Row {
    /// Column names, shared by the rows of one page.
    pub columns: Columns,
    /// Values, in column order.
    pub values: Vec<Value>,
    /// The row's clock (`event_time`), or `None` when it is NULL or unreadable.
    pub clock: Option<Timestamp>,
}

impl Row {
    /// The value of a named column.
    pub fn get(&self, name: &str) -> Option<&Value> {
        let i = self.columns.iter().position(|c| c == name)?;
        self.values.get(i)
    }

    /// The row as a JSON object, columns in order.
    pub fn to_json(&self) -> serde_json::Value {
        let map = self
            .columns
            .iter()
            .zip(&self.values)
            .map(|(c, v)| (c.clone(), v.to_json()))
            .collect();
        serde_json::Value::Object(map)
    }
}

#[cfg(test)]
mod tests {
    /// A float JSON cannot hold is shown by name, as its key says it (a NULL in the row while the
    /// key held `NaN` made the template and the key disagree).
    #[test]
    fn a_float_json_cannot_hold_is_its_name_not_null() {
        use super::Value;
        assert_eq!(Value::Float(f64::NAN).to_json(), serde_json::json!("NaN"));
        assert_eq!(
            Value::Float(f64::INFINITY).to_json(),
            serde_json::json!("inf")
        );
        assert_eq!(
            Value::Float(f64::NEG_INFINITY).to_json(),
            serde_json::json!("-inf")
        );
        assert_eq!(Value::Float(1.5).to_json(), serde_json::json!(1.5));
    }

    use super::*;

    #[test]
    fn text_clocks_in_common_shapes_are_read_as_utc() {
        let want: Timestamp = "2026-03-08T06:30:00Z".parse().unwrap();
        for s in [
            "2026-03-08T06:30:00Z",
            "2026-03-08T01:30:00-05:00",
            "2026-03-08 06:30:00",
            "2026-03-08T06:30:00.000",
        ] {
            assert_eq!(parse_timestamp(s), Some(want), "{s}");
        }
        assert_eq!(parse_timestamp("yesterday"), None);
    }

    #[test]
    fn clocks_are_compared_to_the_microsecond() {
        let at = text_clock_micros("2026-11-28 23:00:00.000001").unwrap();
        assert_eq!(
            text_clock_micros("2026-11-29T00:00:00.000001+01:00"),
            Some(at)
        );
        assert_eq!(text_clock_micros("2026-11-28T23:00:00.000001Z"), Some(at));
        assert_eq!(
            text_clock_micros("2026-11-28 23:00:00").map(|us| us + 1),
            Some(at)
        );
        assert_eq!(text_clock_micros("2026-11-28 23:00:00.0000014"), Some(at));
        assert_eq!(
            unix_int_seconds_micros(1_795_906_800).map(|us| us + 1),
            Some(at)
        );
        assert_eq!(unix_seconds_micros(1_795_906_800.000_001), Some(at));
        for unreadable in ["yesterday", "\\N", "now", ""] {
            assert_eq!(text_clock_micros(unreadable), None, "{unreadable}");
        }
        assert_eq!(unix_seconds_micros(f64::NAN), None);
        assert_eq!(unix_seconds_micros(1e300), None);
        assert_eq!(unix_int_seconds_micros(i64::MAX), None);
    }

    #[test]
    fn decimals_keep_their_digits_in_json() {
        assert_eq!(
            Value::Decimal("1.10".into()).to_json(),
            serde_json::json!("1.10")
        );
    }
}
