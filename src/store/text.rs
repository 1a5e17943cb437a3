//! States stored as text: [`stored_enum!`](crate::store::stored_enum) defines an enum with one
//! fixed spelling per variant, read and written as `TEXT` on both engines. A stored spelling this
//! Rowfire does not know is an error ([`UnknownValue`]), never a default.

/// A stored state's spelling that no variant has.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the control plane holds {what} \"{value}\", which this Rowfire does not know (is a newer Rowfire writing to it?)"
)]
pub struct UnknownValue {
    /// What kind of state (`delivery status`, `mode`, …).
    pub what: &'static str,
    /// The spelling found.
    pub value: String,
}

/// Defines an enum stored as text: `as_str`, `ALL`, `Display`, `FromStr` (unknown spellings are
/// [`UnknownValue`] errors) and sqlx's `Type`, `Encode` and `Decode` on PostgreSQL and SQLite.
macro_rules! stored_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident as $what:literal {
            $($(#[$vmeta:meta])* $variant:ident = $text:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant),+];

            /// The stored spelling.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::store::UnknownValue;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err($crate::store::UnknownValue {
                        what: $what,
                        value: other.chars().take(64).collect(),
                    }),
                }
            }
        }

        impl sqlx::Type<sqlx::Postgres> for $name {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <str as sqlx::Type<sqlx::Postgres>>::type_info()
            }

            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, sqlx::Postgres> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $name {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?.parse::<$name>()?)
            }
        }

        impl sqlx::Type<sqlx::Sqlite> for $name {
            fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
                <str as sqlx::Type<sqlx::Sqlite>>::type_info()
            }

            fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
                <str as sqlx::Type<sqlx::Sqlite>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, sqlx::Sqlite> for $name {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::sqlite::SqliteArgumentsBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Sqlite>>::encode(self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, sqlx::Sqlite> for $name {
            fn decode(
                value: sqlx::sqlite::SqliteValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&str as sqlx::Decode<sqlx::Sqlite>>::decode(value)?.parse::<$name>()?)
            }
        }
    };
}

pub(crate) use stored_enum;
