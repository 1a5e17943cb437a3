//! Decoding PostgreSQL values: the column types Rowfire reads, each to its [`Value`], and the
//! binary NUMERIC read as decimal text with its display scale.

use sqlx::postgres::{PgRow, PgTypeInfo, PgTypeKind};
use sqlx::{Row as _, TypeInfo, ValueRef};

use crate::row::Value;

#[derive(Clone, Copy)]
pub(super) enum Kind {
    Bool,
    I2,
    I4,
    I8,
    F4,
    F8,
    Numeric,
    Text,
    TimestampTz,
    Timestamp,
    Date,
    Json,
    Uuid,
    Bytes,
}

pub(super) fn kind_of(ty: &PgTypeInfo) -> Option<Kind> {
    Some(match ty.name() {
        "BOOL" => Kind::Bool,
        "INT2" => Kind::I2,
        "INT4" => Kind::I4,
        "INT8" => Kind::I8,
        "FLOAT4" => Kind::F4,
        "FLOAT8" => Kind::F8,
        "NUMERIC" => Kind::Numeric,
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CITEXT" | "citext" => Kind::Text,
        "TIMESTAMPTZ" => Kind::TimestampTz,
        "TIMESTAMP" => Kind::Timestamp,
        "DATE" => Kind::Date,
        "JSON" | "JSONB" => Kind::Json,
        "UUID" => Kind::Uuid,
        "BYTEA" => Kind::Bytes,
        _ if matches!(ty.kind(), PgTypeKind::Enum(_)) => Kind::Text,
        _ => return None,
    })
}

/// Whether values of the type named `type_name` (as [`kind_of`] names them) decode to a
/// [`Value`] whose equality is SQL's, so a window's pages may be cut between two that differ:
/// integers, booleans, times, dates and bytes. Text (under its collation), decimals, floats,
/// JSON and UUIDs (read as text) never cut, so the pass is not ordered by them.
pub(super) fn cuts(type_name: &str) -> bool {
    matches!(
        type_name,
        "BOOL" | "INT2" | "INT4" | "INT8" | "TIMESTAMPTZ" | "TIMESTAMP" | "DATE" | "BYTEA"
    )
}

pub(super) fn decode(row: &PgRow, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    if row.try_get_raw(i)?.is_null() {
        return Ok(Value::Null);
    }
    Ok(match kind {
        Kind::Bool => Value::Bool(row.try_get_unchecked(i)?),
        Kind::I2 => Value::Int(row.try_get_unchecked::<i16, _>(i)?.into()),
        Kind::I4 => Value::Int(row.try_get_unchecked::<i32, _>(i)?.into()),
        Kind::I8 => Value::Int(row.try_get_unchecked(i)?),
        Kind::F4 => Value::Float(row.try_get_unchecked::<f32, _>(i)?.into()),
        Kind::F8 => Value::Float(row.try_get_unchecked(i)?),
        Kind::Numeric => {
            let raw = row.try_get_raw(i)?;
            let bytes = raw.as_bytes().map_err(sqlx::Error::Decode)?;
            let text = numeric_text(bytes)
                .ok_or_else(|| sqlx::Error::Decode("malformed NUMERIC value".into()))?;
            Value::Decimal(text)
        }
        Kind::Text => Value::Text(row.try_get_unchecked(i)?),
        Kind::TimestampTz => Value::Timestamp(
            row.try_get_unchecked::<jiff_sqlx::Timestamp, _>(i)?
                .to_jiff(),
        ),
        Kind::Timestamp => {
            let civil = row
                .try_get_unchecked::<jiff_sqlx::DateTime, _>(i)?
                .to_jiff();
            match civil.to_zoned(jiff::tz::TimeZone::UTC) {
                Ok(z) => Value::Timestamp(z.timestamp()),
                Err(_) => Value::Null,
            }
        }
        Kind::Date => Value::Date(row.try_get_unchecked::<jiff_sqlx::Date, _>(i)?.to_jiff()),
        Kind::Json => Value::Json(row.try_get_unchecked(i)?),
        Kind::Uuid => Value::Text(
            row.try_get_unchecked::<sqlx::types::Uuid, _>(i)?
                .to_string(),
        ),
        Kind::Bytes => Value::Bytes(row.try_get_unchecked(i)?),
    })
}

/// Reads PostgreSQL's binary NUMERIC (base-10000 digit groups with a weight, a sign and a
/// display scale) as plain decimal text with exactly the display scale: `1.10` stays `1.10`.
/// Written here because the decimal crates' decoders drop the display scale. The text is built
/// in place: its one allocation is the value itself.
fn numeric_text(bytes: &[u8]) -> Option<String> {
    let word = |i: usize| {
        bytes
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    if bytes.len() < 8 + 2 * ndigits {
        return None;
    }
    // Digit group `index` (0 is the most significant), zero past the stored ones.
    let group = |index: i32| {
        usize::try_from(index)
            .ok()
            .filter(|&i| i < ndigits)
            .and_then(|i| word(8 + 2 * i))
            .unwrap_or(0)
    };
    let whole = usize::try_from(weight + 1).unwrap_or(1).max(1);
    let mut text = String::with_capacity(1 + 4 * whole + 1 + dscale);
    if sign == 0x4000 {
        text.push('-');
    }
    let push4 = |text: &mut String, g: u16| {
        for d in [g / 1000, g / 100 % 10, g / 10 % 10, g % 10] {
            text.push(char::from(b'0' + d as u8));
        }
    };
    if weight < 0 {
        text.push('0');
    } else {
        // The first group without leading zeros, the rest four digits each.
        let first = group(0);
        let start = text.len();
        push4(&mut text, first);
        let zeros = text[start..]
            .bytes()
            .take(3)
            .take_while(|&b| b == b'0')
            .count();
        text.drain(start..start + zeros);
        for w in 1..=weight {
            push4(&mut text, group(w));
        }
    }
    if dscale > 0 {
        text.push('.');
        let start = text.len();
        let mut index = weight + 1;
        while text.len() - start < dscale {
            push4(&mut text, group(index));
            index += 1;
        }
        text.truncate(start + dscale);
    }
    Some(text)
}
#[cfg(test)]
mod tests {
    use super::numeric_text;

    fn numeric(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        for word in [digits.len() as u16, weight as u16, sign, dscale]
            .into_iter()
            .chain(digits.iter().copied())
        {
            out.extend_from_slice(&word.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_keep_their_display_scale() {
        assert_eq!(numeric_text(&numeric(0, 0, 2, &[1, 1000])).unwrap(), "1.10");
        assert_eq!(numeric_text(&numeric(0, 0, 1, &[1, 1000])).unwrap(), "1.1");
        assert_eq!(
            numeric_text(&numeric(-2, 0, 7, &[10])).unwrap(),
            "0.0000001"
        );
        assert_eq!(
            numeric_text(&numeric(1, 0x4000, 1, &[1, 2345, 6000])).unwrap(),
            "-12345.6"
        );
        assert_eq!(numeric_text(&numeric(2, 0, 0, &[1])).unwrap(), "100000000");
        assert_eq!(numeric_text(&numeric(0, 0, 3, &[])).unwrap(), "0.000");
        assert_eq!(numeric_text(&numeric(0, 0xC000, 0, &[])).unwrap(), "NaN");
        assert_eq!(numeric_text(&[0, 1]), None);
    }
}
