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
/// [`UnknownValue`] errors) and sqlx's `Type`, `Encode` and `Decode` ([`text_column!`]).
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

        $crate::store::text_column!($name);
    };
}

/// Reads and writes a type as a `TEXT` column on every engine sqlx knows: written as its
/// `as_str()`, read back through its `FromStr`, so a value it refuses is a decode error.
macro_rules! text_column {
    ($name:ty) => {
        impl<DB: sqlx::Database> sqlx::Type<DB> for $name
        where
            str: sqlx::Type<DB>,
        {
            fn type_info() -> DB::TypeInfo {
                <str as sqlx::Type<DB>>::type_info()
            }

            fn compatible(ty: &DB::TypeInfo) -> bool {
                <str as sqlx::Type<DB>>::compatible(ty)
            }
        }

        impl<'q, DB: sqlx::Database> sqlx::Encode<'q, DB> for $name
        where
            String: sqlx::Encode<'q, DB>,
        {
            fn encode_by_ref(
                &self,
                buf: &mut <DB as sqlx::Database>::ArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <String as sqlx::Encode<'q, DB>>::encode(self.as_str().to_string(), buf)
            }
        }

        impl<'r, DB: sqlx::Database> sqlx::Decode<'r, DB> for $name
        where
            &'r str: sqlx::Decode<'r, DB>,
        {
            fn decode(
                value: <DB as sqlx::Database>::ValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(<&'r str as sqlx::Decode<'r, DB>>::decode(value)?.parse::<$name>()?)
            }
        }
    };
}

pub(crate) use {stored_enum, text_column};
