//! Decoding MySQL and MariaDB values, each column type to its [`Value`] in exact form: DECIMAL
//! as its digits, unsigned 64-bit integers past `i64` as digits, BIT as its number, JSON as a
//! document, binary strings as bytes, and `DATETIME`/`TIMESTAMP` (read in the session's UTC)
//! to the microsecond.

use compact_str::{CompactString, ToCompactString};
use sqlx::mysql::{MySql, MySqlRow, MySqlTypeInfo};
use sqlx::{Row as _, TypeInfo, ValueRef};

use crate::row::Value;

#[derive(Clone, Copy, Debug)]
pub(super) enum Kind {
    /// `TINYINT(1)`, MySQL's BOOLEAN: 0 and 1 as booleans, any other number as it is.
    Bool,
    Int,
    UInt,
    Bit,
    Float,
    Double,
    Decimal,
    Text,
    Bytes,
    DateTime,
    Date,
    Time,
    Year,
    Json,
}

pub(super) fn kind_of(ty: &MySqlTypeInfo) -> Option<Kind> {
    use sqlx::Type;
    let textual = <String as Type<MySql>>::compatible(ty);
    Some(match ty.name() {
        "BOOLEAN" => Kind::Bool,
        "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" => Kind::Int,
        "TINYINT UNSIGNED" | "SMALLINT UNSIGNED" | "MEDIUMINT UNSIGNED" | "INT UNSIGNED"
        | "BIGINT UNSIGNED" => Kind::UInt,
        "BIT" => Kind::Bit,
        "FLOAT" => Kind::Float,
        "DOUBLE" => Kind::Double,
        "DECIMAL" => Kind::Decimal,
        "DATETIME" | "TIMESTAMP" => Kind::DateTime,
        "DATE" => Kind::Date,
        "TIME" => Kind::Time,
        "YEAR" => Kind::Year,
        "JSON" => Kind::Json,
        "CHAR" | "VARCHAR" | "TINYTEXT" | "TEXT" | "MEDIUMTEXT" | "LONGTEXT" | "ENUM" | "SET"
        | "BINARY" | "VARBINARY" | "TINYBLOB" | "BLOB" | "MEDIUMBLOB" | "LONGBLOB" => {
            // The type's name follows the BINARY flag, which a `_bin` collation also sets; only
            // the `binary` collation holds bytes.
            if textual { Kind::Text } else { Kind::Bytes }
        }
        _ => return None,
    })
}

fn bad(what: &str) -> sqlx::Error {
    sqlx::Error::Decode(format!("malformed {what} value").into())
}

/// An unsigned number as an integer when it fits, else as its exact digits.
fn unsigned(n: u64) -> Value {
    match i64::try_from(n) {
        Ok(i) => Value::Int(i),
        Err(_) => Value::Decimal(n.to_compact_string()),
    }
}

pub(super) fn decode(row: &MySqlRow, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    if row.try_get_raw(i)?.is_null() {
        return Ok(Value::Null);
    }
    let raw = || row.try_get_unchecked::<&[u8], _>(i);
    let text = || {
        raw().and_then(|b| {
            CompactString::from_utf8(b).map_err(|e| sqlx::Error::ColumnDecode {
                index: i.to_string(),
                source: e.into(),
            })
        })
    };
    Ok(match kind {
        Kind::Bool => match row.try_get_unchecked::<i64, _>(i)? {
            0 => Value::Bool(false),
            1 => Value::Bool(true),
            n => Value::Int(n),
        },
        Kind::Int | Kind::Year => Value::Int(row.try_get_unchecked(i)?),
        Kind::UInt | Kind::Bit => unsigned(row.try_get_unchecked::<u64, _>(i)?),
        Kind::Float => Value::Float(row.try_get_unchecked::<f32, _>(i)?.into()),
        Kind::Double => Value::Float(row.try_get_unchecked(i)?),
        Kind::Decimal => {
            let digits = text()?;
            if !digits
                .bytes()
                .all(|b| b.is_ascii_digit() || b == b'.' || b == b'-')
            {
                return Err(bad("DECIMAL"));
            }
            Value::Decimal(digits)
        }
        Kind::Text => Value::Text(text()?),
        Kind::Bytes => Value::Bytes(raw()?.to_vec()),
        Kind::Json => {
            let doc = text()?;
            Value::Json(serde_json::from_str(&doc).map_err(|e| sqlx::Error::Decode(e.into()))?)
        }
        Kind::DateTime => match binary_datetime(raw()?)? {
            Some((date, time)) => Value::Timestamp(
                date.to_datetime(time)
                    .to_zoned(jiff::tz::TimeZone::UTC)
                    .map_err(|e| sqlx::Error::Decode(e.into()))?
                    .timestamp(),
            ),
            // `0000-00-00 00:00:00`, MySQL's "zero" date, is no instant.
            None => Value::Null,
        },
        Kind::Date => match binary_datetime(raw()?)? {
            Some((date, _)) => Value::Date(date),
            None => Value::Null,
        },
        Kind::Time => Value::Text(
            row.try_get_unchecked::<sqlx::mysql::types::MySqlTime, _>(i)?
                .to_compact_string(),
        ),
    })
}

/// Reads the binary protocol's DATE, DATETIME and TIMESTAMP: a length byte (0, 4, 7 or 11),
/// then year (2 bytes), month, day, hour, minute, second and microseconds (4 bytes), little
/// endian, trailing zero parts left out. `None` for the zero date.
fn binary_datetime(
    bytes: &[u8],
) -> Result<Option<(jiff::civil::Date, jiff::civil::Time)>, sqlx::Error> {
    let (&len, rest) = bytes.split_first().ok_or_else(|| bad("DATETIME"))?;
    let len = usize::from(len);
    if !matches!(len, 0 | 4 | 7 | 11) || rest.len() < len {
        return Err(bad("DATETIME"));
    }
    if len == 0 {
        return Ok(None);
    }
    let year = i16::from_le_bytes([rest[0], rest[1]]);
    let (month, day) = (rest[2] as i8, rest[3] as i8);
    let (hour, minute, second) = if len >= 7 {
        (rest[4] as i8, rest[5] as i8, rest[6] as i8)
    } else {
        (0, 0, 0)
    };
    let micros = if len == 11 {
        i32::from_le_bytes([rest[7], rest[8], rest[9], rest[10]])
    } else {
        0
    };
    if year == 0 || month == 0 || day == 0 {
        return Ok(None);
    }
    let date = jiff::civil::Date::new(year, month, day).map_err(|_| bad("DATE"))?;
    let time =
        jiff::civil::Time::new(hour, minute, second, micros * 1000).map_err(|_| bad("DATETIME"))?;
    Ok(Some((date, time)))
}

#[cfg(test)]
mod tests {
    use super::binary_datetime;

    #[test]
    fn binary_datetimes_are_read_to_the_microsecond() {
        let bytes = [11, 0xEA, 0x07, 11, 29, 23, 59, 58, 0x3F, 0x42, 0x0F, 0x00];
        let (date, time) = binary_datetime(&bytes).unwrap().unwrap();
        assert_eq!(date.to_string(), "2026-11-29");
        assert_eq!(time.to_string(), "23:59:58.999999");
        let (date, time) = binary_datetime(&[4, 0xEA, 0x07, 3, 8]).unwrap().unwrap();
        assert_eq!(
            (date.to_string(), time.to_string()),
            ("2026-03-08".into(), "00:00:00".into())
        );
        assert!(binary_datetime(&[0]).unwrap().is_none());
        assert!(binary_datetime(&[7, 1]).is_err());
        assert!(binary_datetime(&[]).is_err());
    }
}
