//! Decoding PostgreSQL values: the column types Rowfire reads, each to its [`Value`], and the
//! binary NUMERIC read as decimal text with its display scale.

use compact_str::CompactString;
use sqlx::postgres::{PgRow, PgTypeInfo, PgTypeKind, PgValueFormat, PgValueRef};
use sqlx::{Column as _, Decode, Postgres, Row as _, TypeInfo, ValueRef};

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

/// One raw value decoded as `T`, its error naming the column.
fn take<'r, T: Decode<'r, Postgres>>(raw: PgValueRef<'r>, i: usize) -> Result<T, sqlx::Error> {
    T::decode(raw).map_err(|source| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source,
    })
}

/// PostgreSQL's epoch for binary times: 2000-01-01T00:00:00Z.
const PG_EPOCH: jiff::Timestamp = jiff::Timestamp::constant(946_684_800, 0);

/// Decodes column `i` of `row` as `kind` and pushes it onto `out`; answers what it takes in
/// memory (by `window::value_bytes`). Common binary values are looked up once and built where
/// they are kept (anything else takes a slower path that looks again). Binary integers, floats,
/// booleans and instants are read from their bytes here, and only when they have exactly their
/// type's width (a shorter or longer value is malformed, never read past its end); text up to 24
/// bytes and decimals are held inline, with no allocation.
pub(super) fn decode_into(
    row: &PgRow,
    i: usize,
    kind: Kind,
    out: &mut Vec<Value>,
) -> Result<usize, sqlx::Error> {
    match binary(row, i).map(|bytes| push_binary(bytes, kind, out)) {
        Some(Ok(size)) => Ok(size),
        Some(Err(Refused::Malformed)) => Err(sqlx::Error::ColumnDecode {
            index: i.to_string(),
            source: format!(
                "malformed {} value",
                row.columns().get(i).map_or("", |c| c.type_info().name())
            )
            .into(),
        }),
        Some(Err(Refused::Other)) | None => decode_slow(row, i, kind, out),
    }
}

/// The bytes of column `i` when it is a binary value that is not NULL; `None` otherwise.
#[inline]
fn binary(row: &PgRow, i: usize) -> Option<&[u8]> {
    // Matched by reference where it was returned: moving the handle out of the `Result` costs
    // a copy that the processor cannot forward from the stores that built it.
    match &row.try_get_raw(i) {
        Ok(raw) if !raw.is_null() && raw.format() == PgValueFormat::Binary => raw.as_bytes().ok(),
        _ => None,
    }
}

/// A value [`push_binary`] read, or `Refused::Malformed`.
fn or_malformed<T>(value: Option<T>) -> Result<T, Refused> {
    value.ok_or(Refused::Malformed)
}

/// Why [`push_binary`] pushed nothing.
enum Refused {
    /// A kind it does not read: the driver's decoders do.
    Other,
    /// The bytes are not a value of the kind (a wrong width, text that is not UTF-8, a time out
    /// of range).
    Malformed,
}

/// The common binary values, each pushed as it is built, with what it takes (by
/// `window::value_bytes`); nothing is pushed when it refuses.
#[inline]
fn push_binary(bytes: &[u8], kind: Kind, out: &mut Vec<Value>) -> Result<usize, Refused> {
    match kind {
        Kind::Bool => match bytes {
            [b] => out.push(Value::Bool(*b != 0)),
            _ => return Err(Refused::Malformed),
        },
        Kind::I2 => out.push(Value::Int(i16::from_be_bytes(exact(bytes)?).into())),
        Kind::I4 => out.push(Value::Int(i32::from_be_bytes(exact(bytes)?).into())),
        Kind::I8 => out.push(Value::Int(i64::from_be_bytes(exact(bytes)?))),
        Kind::F4 => out.push(Value::Float(f32::from_be_bytes(exact(bytes)?).into())),
        Kind::F8 => out.push(Value::Float(f64::from_be_bytes(exact(bytes)?))),
        Kind::TimestampTz => {
            let micros = i64::from_be_bytes(exact(bytes)?);
            if let Some(word) = infinite_i64(micros) {
                out.push(Value::Text(CompactString::const_new(word)));
                return Ok(8);
            }
            let at = PG_EPOCH.checked_add(jiff::SignedDuration::from_micros(micros));
            out.push(Value::Timestamp(or_malformed(at.ok())?));
        }
        Kind::Text => {
            let text = or_malformed(std::str::from_utf8(bytes).ok())?;
            out.push(Value::Text(CompactString::new(text)));
            return Ok(text.len().max(8));
        }
        Kind::Numeric => {
            let text = or_malformed(numeric_text(bytes))?;
            let size = text.len().max(8);
            out.push(Value::Decimal(text));
            return Ok(size);
        }
        _ => return Err(Refused::Other),
    }
    Ok(8)
}

/// [`decode_into`] for what the fast path leaves (NULLs, text-format values and the rarer
/// kinds), through the driver's decoders.
fn decode_slow(
    row: &PgRow,
    i: usize,
    kind: Kind,
    out: &mut Vec<Value>,
) -> Result<usize, sqlx::Error> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        out.push(Value::Null);
        return Ok(8);
    }
    let value = decode_value(raw, i, kind)?;
    let size = super::super::window::value_bytes(&value);
    out.push(value);
    Ok(size)
}

/// A binary value of exactly `N` bytes, as an array (any other width is malformed).
fn exact<const N: usize>(bytes: &[u8]) -> Result<[u8; N], Refused> {
    bytes.try_into().map_err(|_| Refused::Malformed)
}

/// PostgreSQL's `infinity` and `-infinity` as a binary time holds them (the largest and the
/// smallest microseconds), by name.
fn infinite_i64(micros: i64) -> Option<&'static str> {
    match micros {
        i64::MAX => Some("infinity"),
        i64::MIN => Some("-infinity"),
        _ => None,
    }
}

/// A time or date that is `infinity` or `-infinity` (a common "never"), in either format, as
/// the text PostgreSQL prints for it: no instant holds it, and one such row must not stop the
/// read.
fn infinite(raw: &PgValueRef<'_>, kind: Kind) -> Option<Value> {
    let word = match (raw.format(), kind) {
        (PgValueFormat::Binary, Kind::TimestampTz | Kind::Timestamp) => {
            infinite_i64(i64::from_be_bytes(raw.as_bytes().ok()?.try_into().ok()?))
        }
        (PgValueFormat::Binary, Kind::Date) => {
            match i32::from_be_bytes(raw.as_bytes().ok()?.try_into().ok()?) {
                i32::MAX => Some("infinity"),
                i32::MIN => Some("-infinity"),
                _ => None,
            }
        }
        (PgValueFormat::Text, Kind::TimestampTz | Kind::Timestamp | Kind::Date) => {
            match raw.as_str().ok()? {
                "infinity" => Some("infinity"),
                "-infinity" => Some("-infinity"),
                _ => None,
            }
        }
        _ => None,
    }?;
    Some(Value::Text(CompactString::const_new(word)))
}

/// Decodes one raw value that is not NULL as `kind`, through the driver's decoders (any
/// format).
fn decode_value(raw: PgValueRef<'_>, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    let failed = |source| sqlx::Error::ColumnDecode {
        index: i.to_string(),
        source,
    };
    if let Some(never) = infinite(&raw, kind) {
        return Ok(never);
    }
    Ok(match kind {
        Kind::Bool => Value::Bool(take(raw, i)?),
        Kind::I2 => Value::Int(take::<i16>(raw, i)?.into()),
        Kind::I4 => Value::Int(take::<i32>(raw, i)?.into()),
        Kind::I8 => Value::Int(take(raw, i)?),
        Kind::F4 => Value::Float(take::<f32>(raw, i)?.into()),
        Kind::F8 => Value::Float(take(raw, i)?),
        Kind::Numeric => {
            let bytes = raw.as_bytes().map_err(failed)?;
            let text =
                numeric_text(bytes).ok_or_else(|| failed("malformed NUMERIC value".into()))?;
            Value::Decimal(text)
        }
        Kind::Text => Value::Text(CompactString::new(take::<&str>(raw, i)?)),
        Kind::TimestampTz => Value::Timestamp(take::<jiff_sqlx::Timestamp>(raw, i)?.to_jiff()),
        Kind::Timestamp => {
            let civil = take::<jiff_sqlx::DateTime>(raw, i)?.to_jiff();
            match civil.to_zoned(jiff::tz::TimeZone::UTC) {
                Ok(z) => Value::Timestamp(z.timestamp()),
                Err(_) => Value::Null,
            }
        }
        Kind::Date => Value::Date(take::<jiff_sqlx::Date>(raw, i)?.to_jiff()),
        Kind::Json => Value::Json(take(raw, i)?),
        Kind::Uuid => {
            let uuid = take::<sqlx::types::Uuid>(raw, i)?;
            let mut text = [0u8; sqlx::types::uuid::fmt::Hyphenated::LENGTH];
            Value::Text(CompactString::new(
                uuid.hyphenated().encode_lower(&mut text),
            ))
        }
        Kind::Bytes => Value::Bytes(take(raw, i)?),
    })
}

/// Reads PostgreSQL's binary NUMERIC (base-10000 digit groups with a weight, a sign and a
/// display scale) as plain decimal text with exactly the display scale: `1.10` stays `1.10`.
/// Written here because the decimal crates' decoders drop the display scale. The digits are
/// written into a stack buffer and copied once into the value, held inline when it is at most
/// 24 bytes long (most are): then it allocates nothing. `None` when the bytes are malformed
/// (too short, or a digit group past 9999).
fn numeric_text(bytes: &[u8]) -> Option<CompactString> {
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
    if bytes.len() < 8 + 2 * ndigits
        || (0..ndigits).any(|i| word(8 + 2 * i).is_none_or(|g| g > 9999))
    {
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
    // Written into a buffer on the stack when it fits (it nearly always does), then copied
    // once into the value; the fraction is written in whole groups and cut to the scale.
    let bound = 1 + 4 * whole + 1 + dscale + 4;
    let mut stack = [0u8; 64];
    let mut heap = Vec::new();
    let mut out = Out {
        buf: if bound <= stack.len() {
            &mut stack
        } else {
            heap.resize(bound, 0);
            &mut heap
        },
        len: 0,
    };
    let digits = |g: u16| [g / 1000, g / 100 % 10, g / 10 % 10, g % 10].map(|d| b'0' + d as u8);
    if sign == 0x4000 {
        out.put(b"-");
    }
    if weight < 0 {
        out.put(b"0");
    } else {
        // The first group without leading zeros, the rest four digits each.
        let first = digits(group(0));
        let zeros = first.iter().take(3).take_while(|&&d| d == b'0').count();
        out.put(&first[zeros..]);
        for w in 1..=weight {
            out.put(&digits(group(w)));
        }
    }
    let mut len = out.len;
    if dscale > 0 {
        out.put(b".");
        len = out.len + dscale;
        let mut index = weight + 1;
        while out.len < len {
            out.put(&digits(group(index)));
            index += 1;
        }
    }
    let text = CompactString::from_utf8(&out.buf[..len]).ok()?;
    Some(text)
}

/// Digits written one after the other into a buffer long enough for them.
struct Out<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl Out<'_> {
    fn put(&mut self, digits: &[u8]) {
        self.buf[self.len..self.len + digits.len()].copy_from_slice(digits);
        self.len += digits.len();
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Refused, numeric_text, push_binary};
    use crate::row::Value;

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
        // A digit group is base 10000: one past it is malformed, not text.
        assert_eq!(numeric_text(&numeric(0, 0, 0, &[10000])), None);
        // Longer than the stack buffer: written on the heap, the same digits.
        let long = numeric_text(&numeric(20, 0x4000, 70, &[12, 3400])).unwrap();
        assert_eq!(
            long,
            format!("-123400{}.{}", "0".repeat(76), "0".repeat(70))
        );
        assert_eq!(
            numeric_text(&numeric(-1, 0x4000, 1, &[5000])).unwrap(),
            "-0.5"
        );
    }

    /// What `push_binary` makes of `bytes` as `kind`: the value and its size, or why not.
    fn read(bytes: &[u8], kind: Kind) -> Result<(Value, usize), &'static str> {
        let mut out = Vec::new();
        match push_binary(bytes, kind, &mut out) {
            Ok(size) => {
                assert_eq!(out.len(), 1, "one value pushed");
                Ok((out.remove(0), size))
            }
            Err(refused) => {
                assert!(out.is_empty(), "nothing pushed when refused");
                Err(match refused {
                    Refused::Other => "other",
                    Refused::Malformed => "malformed",
                })
            }
        }
    }

    #[test]
    fn binary_values_of_exact_width_are_read_and_any_other_width_is_malformed() {
        assert_eq!(read(&[0, 0, 0, 7], Kind::I4), Ok((Value::Int(7), 8)));
        assert_eq!(
            read(&(-2i16).to_be_bytes(), Kind::I2),
            Ok((Value::Int(-2), 8))
        );
        assert_eq!(
            read(&i64::MIN.to_be_bytes(), Kind::I8),
            Ok((Value::Int(i64::MIN), 8))
        );
        assert_eq!(read(&[1], Kind::Bool), Ok((Value::Bool(true), 8)));
        assert_eq!(
            read(&1.5f64.to_be_bytes(), Kind::F8),
            Ok((Value::Float(1.5), 8))
        );
        for (bytes, kind) in [
            (&[0u8, 0, 7][..], Kind::I4),
            (&[0, 0, 0, 0, 7][..], Kind::I4),
            (&[][..], Kind::I8),
            (&[0, 1][..], Kind::Bool),
            (&[0; 4][..], Kind::F8),
            (&[0; 9][..], Kind::TimestampTz),
        ] {
            assert_eq!(read(bytes, kind), Err("malformed"), "{bytes:?}");
        }
    }

    #[test]
    fn hostile_binary_text_times_and_decimals_are_malformed_not_read() {
        // Not UTF-8.
        assert_eq!(read(&[0xff, 0xfe], Kind::Text), Err("malformed"));
        // PostgreSQL's infinity and -infinity (the extreme microseconds) read as their names.
        assert_eq!(
            read(&i64::MAX.to_be_bytes(), Kind::TimestampTz),
            Ok((Value::Text("infinity".into()), 8))
        );
        assert_eq!(
            read(&i64::MIN.to_be_bytes(), Kind::TimestampTz),
            Ok((Value::Text("-infinity".into()), 8))
        );
        // Microseconds past what an instant can hold otherwise.
        assert_eq!(
            read(&(i64::MAX - 1).to_be_bytes(), Kind::TimestampTz),
            Err("malformed")
        );
        // A NUMERIC header claiming more digit groups than it has.
        assert_eq!(
            read(&[0, 9, 0, 0, 0, 0, 0, 0], Kind::Numeric),
            Err("malformed")
        );
        // Text longer than the inline limit is read whole, sized by its length.
        let long = "ü".repeat(40);
        assert_eq!(
            read(long.as_bytes(), Kind::Text),
            Ok((Value::Text(long.as_str().into()), 80))
        );
        // The epoch itself.
        assert_eq!(
            read(&0i64.to_be_bytes(), Kind::TimestampTz),
            Ok((Value::Timestamp(super::PG_EPOCH), 8))
        );
    }

    #[test]
    fn kinds_left_to_the_driver_are_refused_as_other() {
        for kind in [
            Kind::Uuid,
            Kind::Json,
            Kind::Date,
            Kind::Timestamp,
            Kind::Bytes,
        ] {
            assert_eq!(read(&[0; 16], kind), Err("other"));
        }
    }
}
