//! What can go wrong reaching or reading a source, worded for the person who fixes it.

use std::time::Duration;

use crate::sql_guard::{Dialect, GuardError};

/// What went wrong reaching or reading a source. Messages never contain a DSN or a password.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The DSN's environment variable is not set.
    #[error(
        "source {name}: the environment variable {var} is not set; export it with the source's DSN (postgres://…, mysql://… or sqlite://path)"
    )]
    MissingDsn {
        /// The source.
        name: String,
        /// The variable.
        var: String,
    },
    /// A tenant's DSN that may not be connected (see `source::pin`).
    #[error("source {name}: {why}")]
    Refused {
        /// The source.
        name: String,
        /// Why, without the DSN.
        why: String,
    },
    /// No DSN is stored for a source of a workspace that does not read this process's
    /// environment (a tenant's).
    #[error(
        "source {name}: no DSN is stored for it, and this workspace does not read the server's environment; store one (POST /api/sources, or `rowfire sources add`)"
    )]
    NotStored {
        /// The source.
        name: String,
    },
    /// The trigger names no clock column, so it has no window to read.
    #[error("trigger {trigger} {}", crate::definitions::NO_CLOCK)]
    NoClock {
        /// The trigger.
        trigger: String,
    },
    /// The source is not declared in the definitions file, so no variable names its DSN.
    #[error(
        "source \"{name}\" is not declared in the definitions file; declare it under `sources:` with the environment variable that holds its DSN"
    )]
    Undeclared {
        /// The source.
        name: String,
    },
    /// The DSN is not a URL Rowfire reads.
    #[error(
        "source {name}: the DSN in {var} is not a postgres://, mysql:// or sqlite:// URL Rowfire can read"
    )]
    BadDsn {
        /// The source.
        name: String,
        /// The variable.
        var: String,
    },
    /// The declared `type` and the DSN disagree.
    #[error(
        "source {name} is declared as type {declared} but its DSN is a {actual} URL; fix `type` or the DSN"
    )]
    KindMismatch {
        /// The source.
        name: String,
        /// Declared engine.
        declared: Dialect,
        /// The DSN's engine.
        actual: Dialect,
    },
    /// Connecting failed.
    #[error("source {name} ({shown}): cannot connect: {message}")]
    Connect {
        /// The source.
        name: String,
        /// Where, without secrets.
        shown: String,
        /// Why.
        message: String,
    },
    /// A query ran past the statement timeout.
    #[error("source {name} ({shown}): the query ran past its {}s statement timeout; narrow it: index the clock column, read a shorter window (fewer --days), or raise statement_timeout_ms", .timeout.as_secs_f64())]
    Timeout {
        /// The source.
        name: String,
        /// Where, without secrets.
        shown: String,
        /// The timeout in force.
        timeout: Duration,
    },
    /// The database refused or failed a query.
    #[error("source {name} ({shown}): {message}")]
    Query {
        /// The source.
        name: String,
        /// Where, without secrets.
        shown: String,
        /// The database's message.
        message: String,
    },
    /// The guard refused the trigger's SQL in the source's dialect.
    #[error("trigger {trigger}: {error}")]
    Guard {
        /// The trigger.
        trigger: String,
        /// Why.
        error: GuardError,
    },
    /// A column's type cannot be read.
    #[error(
        "source {name}: column {column} has type {type_name}, which Rowfire does not read; cast it in the trigger's SQL, for example {column}::text"
    )]
    UnsupportedType {
        /// The source.
        name: String,
        /// The column.
        column: String,
        /// Its database type.
        type_name: String,
    },
    /// The clock or a key column is not among the query's output columns, or the clock is not a time.
    #[error("trigger {trigger}: {message}")]
    Shape {
        /// The trigger.
        trigger: String,
        /// What is wrong and how to fix it.
        message: String,
    },
}
