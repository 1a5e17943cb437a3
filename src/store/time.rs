//! Control-plane instants: `timestamptz` on PostgreSQL, fixed-width RFC 3339 UTC text on SQLite
//! (`2026-11-29T07:00:00.000000Z`), so that text order is time order.

use jiff::Timestamp;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef};
use sqlx::sqlite::{SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef};
use sqlx::{Decode, Encode, Postgres, Sqlite, Type};

/// An instant stored in the control plane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct DbTime(pub Timestamp);

impl DbTime {
    /// The fixed-width text form used on SQLite.
    pub fn text(self) -> String {
        self.0.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
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
    fn sqlite_text_sorts_as_time_sorts() {
        let a = DbTime("2026-11-29T07:00:00Z".parse().unwrap()).text();
        let b = DbTime("2026-11-29T07:00:00.5Z".parse().unwrap()).text();
        assert_eq!(a, "2026-11-29T07:00:00.000000Z");
        assert!(a < b);
    }
}
