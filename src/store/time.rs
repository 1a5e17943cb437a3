//! Control-plane instants: `timestamptz` on PostgreSQL, fixed-width RFC 3339 UTC text on SQLite
//! (`2026-11-29T07:00:00.000000Z`), so that text order is time order.

use jiff::{SignedDuration, Timestamp};
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

/// An instant stored in the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DbTime(pub Timestamp);

impl DbTime {
    /// The earliest instant the control plane stores: anything before it (a watermark rewound
    /// millennia, planted by hand) is out of range and repaired by `rewind` or `push`.
    pub const EARLIEST: Timestamp = Timestamp::constant(-2_208_988_800, 0); // 1900-01-01
    /// The latest instant the control plane stores.
    pub const LATEST: Timestamp = Timestamp::constant(253_370_764_800, 0); // 9999-01-01

    /// Whether an instant is inside the stored range [`DbTime::EARLIEST`, `DbTime::LATEST`].
    pub fn in_range(ts: Timestamp) -> bool {
        (Self::EARLIEST..=Self::LATEST).contains(&ts)
    }

    /// The fixed-width text form used on SQLite.
    pub fn text(self) -> String {
        self.0.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
    }
}

/// `at + by`, saturating at the stored range's ends instead of overflowing: no arithmetic on
/// a due time, lease or watermark can panic or leave the range the control plane stores.
pub fn later(at: Timestamp, by: SignedDuration) -> Timestamp {
    match at.checked_add(by) {
        Ok(t) => t.clamp(DbTime::EARLIEST, DbTime::LATEST),
        Err(_) if by.is_negative() => DbTime::EARLIEST,
        Err(_) => DbTime::LATEST,
    }
}

/// `at - by`, saturating at the stored range's ends instead of overflowing.
pub fn earlier(at: Timestamp, by: SignedDuration) -> Timestamp {
    match at.checked_sub(by) {
        Ok(t) => t.clamp(DbTime::EARLIEST, DbTime::LATEST),
        Err(_) if by.is_negative() => DbTime::LATEST,
        Err(_) => DbTime::EARLIEST,
    }
}

impl From<Timestamp> for DbTime {
    fn from(ts: Timestamp) -> Self {
        DbTime(ts)
    }
}

impl Type<Postgres> for DbTime {
    fn type_info() -> PgTypeInfo {
        <jiff_sqlx::Timestamp as Type<Postgres>>::type_info()
    }
}

impl Encode<'_, Postgres> for DbTime {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Postgres>::encode(jiff_sqlx::Timestamp::from(self.0), buf)
    }
}

impl<'r> Decode<'r, Postgres> for DbTime {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(DbTime(
            <jiff_sqlx::Timestamp as Decode<Postgres>>::decode(value)?.to_jiff(),
        ))
    }
}

impl Type<Sqlite> for DbTime {
    fn type_info() -> SqliteTypeInfo {
        <str as Type<Sqlite>>::type_info()
    }
}

impl Encode<'_, Sqlite> for DbTime {
    fn encode_by_ref(&self, buf: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
        Encode::<Sqlite>::encode(self.text(), buf)
    }
}

impl<'r> Decode<'r, Sqlite> for DbTime {
    fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Sqlite>>::decode(value)?;
        Ok(DbTime(text.parse()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_on_stored_times_saturates_at_the_range_ends() {
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let huge = SignedDuration::MAX;
        assert_eq!(later(now, huge), DbTime::LATEST);
        assert_eq!(earlier(now, huge), DbTime::EARLIEST);
        assert_eq!(later(now, SignedDuration::MIN), DbTime::EARLIEST);
        assert_eq!(
            earlier(now, SignedDuration::from_hours(24 * 3_000_000)),
            DbTime::EARLIEST
        );
        assert_eq!(
            later(now, SignedDuration::from_secs(1)).to_string(),
            "2026-11-29T12:00:01Z"
        );
        assert_eq!(DbTime::EARLIEST.to_string(), "1900-01-01T00:00:00Z");
        assert_eq!(DbTime::LATEST.to_string(), "9999-01-01T00:00:00Z");
        assert!(DbTime::in_range(now) && !DbTime::in_range(Timestamp::MIN));
    }

    #[test]
    fn sqlite_text_sorts_as_time_sorts() {
        let a = DbTime("2026-11-29T07:00:00Z".parse().unwrap()).text();
        let b = DbTime("2026-11-29T07:00:00.5Z".parse().unwrap()).text();
        assert_eq!(a, "2026-11-29T07:00:00.000000Z");
        assert!(a < b);
    }
}
