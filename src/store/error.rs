//! What went wrong with the control plane: [`StoreError`], which keeps the driver's error as its
//! source and says what kind of failure it was ([`ErrorKind`]), so callers match on a kind, never
//! on a message.

use super::DATABASE_URL_ENV;

/// What went wrong with the control plane.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is not postgres:// or sqlite://.
    #[error("{DATABASE_URL_ENV} must be a postgres:// or sqlite:// URL")]
    BadUrl,
    /// The schema is older than this Rowfire.
    #[error(
        "the control plane at {shown} is not migrated (schema {have} of {want}); run `rowfire migrate`"
    )]
    NotMigrated {
        /// Where, without secrets.
        shown: String,
        /// Its schema version.
        have: i64,
        /// This Rowfire's.
        want: i64,
    },
    /// The database failed. The message is the driver's, without the connection's secrets; the
    /// driver's error itself is the source.
    #[error("control plane ({shown}): {message}")]
    Database {
        /// Where, without secrets.
        shown: String,
        /// The database's message.
        message: String,
        /// What kind of failure.
        kind: ErrorKind,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// The control plane holds something this Rowfire cannot accept (a missing row it needs).
    #[error("control plane ({shown}): {message}")]
    Invalid {
        /// Where, without secrets.
        shown: String,
        /// What is wrong and what to do.
        message: String,
    },
}

/// The kinds of control-plane failure a caller may act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A unique key refused the row (SQLSTATE 23505; SQLite's UNIQUE or PRIMARY KEY constraint).
    UniqueViolation,
    /// Concurrent transactions conflicted; the same work may be tried again (40001, 40P01; a
    /// busy or locked SQLite database).
    SerializationFailure,
    /// The connection was lost, refused or timed out; the database may be back soon.
    ConnectionLost,
    /// The role may not do this (SQLSTATE 42501): a grant or an owner is missing.
    PermissionDenied,
    /// Anything else: a bad statement, a constraint, a value the database refused.
    Other,
}

impl ErrorKind {
    /// Whether the same work, tried again shortly, may succeed.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorKind::SerializationFailure | ErrorKind::ConnectionLost
        )
    }

    /// Classifies a driver error.
    pub fn of(e: &sqlx::Error) -> ErrorKind {
        match e {
            sqlx::Error::Database(db) => {
                if db.is_unique_violation() {
                    return ErrorKind::UniqueViolation;
                }
                let code = db.code();
                let code = code.as_deref().unwrap_or_default();
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    // SQLite: BUSY and LOCKED, with their extended codes (whose low byte is the
                    // primary code).
                    return match sqlite_primary(code) {
                        Some(5 | 6) => ErrorKind::SerializationFailure,
                        _ => ErrorKind::Other,
                    };
                }
                match code {
                    // PostgreSQL: serialization failure, deadlock; a lost connection or a
                    // server shutting down.
                    "40001" | "40P01" => ErrorKind::SerializationFailure,
                    "42501" => ErrorKind::PermissionDenied,
                    c if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03") => {
                        ErrorKind::ConnectionLost
                    }
                    _ => ErrorKind::Other,
                }
            }
            sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::WorkerCrashed
            | sqlx::Error::Protocol(_) => ErrorKind::ConnectionLost,
            _ => ErrorKind::Other,
        }
    }
}

/// A SQLite result code's primary code (the low byte), when `code` is a number.
fn sqlite_primary(code: &str) -> Option<i64> {
    code.parse::<i64>().ok().map(|c| c & 0xff)
}

impl StoreError {
    /// Wraps a driver error, with the control plane named as `shown`.
    pub(crate) fn database(shown: &str, e: sqlx::Error) -> StoreError {
        let message = match &e {
            sqlx::Error::Database(db) => db.message().to_string(),
            other => other.to_string(),
        };
        StoreError::Database {
            shown: shown.to_string(),
            message,
            kind: ErrorKind::of(&e),
            source: e,
        }
    }

    /// What kind of failure this is ([`ErrorKind::Other`] for a bad URL or an old schema).
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Database { kind, .. } => *kind,
            _ => ErrorKind::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_busy_and_locked_are_serialization_failures_by_their_primary_code() {
        assert_eq!(sqlite_primary("517"), Some(5)); // SQLITE_BUSY_SNAPSHOT
        assert_eq!(sqlite_primary("262"), Some(6)); // SQLITE_LOCKED_SHAREDCACHE
        assert_eq!(sqlite_primary("19"), Some(19));
        assert_eq!(sqlite_primary("busy"), None);
    }

    #[test]
    fn lost_pools_are_connection_failures_and_a_missing_row_is_not() {
        assert_eq!(
            ErrorKind::of(&sqlx::Error::PoolTimedOut),
            ErrorKind::ConnectionLost
        );
        assert!(ErrorKind::of(&sqlx::Error::PoolClosed).is_transient());
        assert_eq!(ErrorKind::of(&sqlx::Error::RowNotFound), ErrorKind::Other);
    }
}
