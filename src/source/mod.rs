//! Sources: named, read-only connections to customer databases, and the paged reading of a
//! trigger's time window through the SQL guard.
//!
//! Every session is read-only (PostgreSQL: `default_transaction_read_only` plus a read-only
//! transaction; SQLite: opened read-only with `query_only`), carries a statement timeout that the
//! query cannot lift (PostgreSQL: set transaction-locally before every statement and backed by a
//! client-side deadline that ends the backend; SQLite: a wall-clock interrupt), leaves nothing
//! behind (PostgreSQL connections are reused only after `DISCARD ALL`, closed on any failure),
//! and is shown as `host:port/db` at most: a DSN never appears in output or errors.

mod postgres;
mod sqlite;
mod window;

use std::time::Duration;

use sqlx::{PgPool, SqlitePool};

use crate::definitions::SourceDef;
use crate::sql_guard::{self, CheckedQuery, Dialect, GuardError, Rendered, Shape, Window};

pub use window::WindowReader;
pub(crate) use window::{FetchError, Fetched};
use window::{Session, positions};

/// What went wrong reaching or reading a source. Messages never contain a DSN or a password.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The DSN's environment variable is not set.
    #[error(
        "source {name}: the environment variable {var} is not set; export it with the source's DSN (postgres://… or sqlite://path)"
    )]
    MissingDsn {
        /// The source.
        name: String,
        /// The variable.
        var: String,
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
        "source {name}: the DSN in {var} is not a postgres:// or sqlite:// URL Rowfire can read"
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

/// An output column of a trigger's query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its database type name (`TIMESTAMPTZ`, `TEXT`, …; may be empty on SQLite).
    pub type_name: String,
}

impl Column {
    /// The output columns of a statement the driver prepared, on either engine.
    fn list<C: sqlx::Column>(columns: &[C]) -> Vec<Column> {
        use sqlx::TypeInfo;
        columns
            .iter()
            .map(|c| Column {
                name: c.name().to_string(),
                type_name: c.type_info().name().to_string(),
            })
            .collect()
    }
}

/// Rows whose clock cannot be read as a time, and one of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableClocks {
    /// How many rows, over the whole query.
    pub rows: u64,
    /// One such row, when there is any.
    pub example: Option<UnreadableExample>,
}

/// One row whose clock cannot be read as a time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableExample {
    /// The clock's value as stored (cut to 80 characters).
    pub clock: String,
    /// The row's key, encoded as dedup keys are (a JSON array).
    pub key: String,
}

impl std::fmt::Display for UnreadableClocks {
    /// `3 row(s) with an unreadable clock, e.g. 'yesterday' (key ["a"])`, or nothing.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} row(s) with an unreadable clock", self.rows)?;
        if let Some(e) = &self.example {
            write!(f, ", e.g. {:?} (key {})", e.clock, e.key)?;
        }
        Ok(())
    }
}

/// Cuts `s` to at most `max` characters, marking the cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max).collect();
        out.push('…');
        out
    }
}

/// A connected, read-only source.
#[derive(Debug, Clone)]
pub struct Source {
    name: String,
    dialect: Dialect,
    shown: String,
    /// The most one page's values may hold in memory (both engines).
    page_bytes: usize,
    timeout: Duration,
    page_size: usize,
    allow_functions: Vec<String>,
    pool: Pool,
}

#[derive(Debug, Clone)]
enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// The engine a DSN names, from its scheme (kept with [`Dialect`] in the guard).
pub use crate::sql_guard::dialect_of;

impl Source {
    /// Connects to the source `def` describes, reading its DSN from the environment.
    pub async fn from_env(def: &SourceDef) -> Result<Source, SourceError> {
        if !def.declared {
            return Err(SourceError::Undeclared {
                name: def.name.clone(),
            });
        }
        #[expect(
            clippy::disallowed_methods,
            reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
        )]
        let dsn = std::env::var(&def.dsn_env)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| SourceError::MissingDsn {
                name: def.name.clone(),
                var: def.dsn_env.clone(),
            })?;
        Source::connect(def, &dsn).await
    }

    /// Connects to `dsn` with the settings of `def`. Sessions are read-only.
    pub async fn connect(def: &SourceDef, dsn: &str) -> Result<Source, SourceError> {
        let bad = || SourceError::BadDsn {
            name: def.name.clone(),
            var: def.dsn_env.clone(),
        };
        let dialect = dialect_of(dsn).ok_or_else(bad)?;
        if let Some(declared) = def.kind
            && declared != dialect
        {
            return Err(SourceError::KindMismatch {
                name: def.name.clone(),
                declared,
                actual: dialect,
            });
        }
        let (pool, shown) = match dialect {
            Dialect::Postgres => {
                let (pool, shown) = postgres::connect(dsn, def.statement_timeout)
                    .await
                    .map_err(|e| match e {
                        postgres::ConnectError::Dsn => bad(),
                        postgres::ConnectError::Connect { shown, message } => {
                            SourceError::Connect {
                                name: def.name.clone(),
                                shown,
                                message: scrub(&message, dsn),
                            }
                        }
                    })?;
                (Pool::Postgres(pool), shown)
            }
            Dialect::Sqlite => {
                let (pool, shown) = sqlite::connect(dsn).await.map_err(|e| match e {
                    sqlite::ConnectError::Dsn => bad(),
                    sqlite::ConnectError::Connect { shown, message } => SourceError::Connect {
                        name: def.name.clone(),
                        shown,
                        message: scrub(&message, dsn),
                    },
                })?;
                (Pool::Sqlite(pool), shown)
            }
        };
        Ok(Source {
            name: def.name.clone(),
            dialect,
            shown,
            page_bytes: sqlite::MAX_PAGE_BYTES,
            timeout: def.statement_timeout,
            page_size: def.page_size,
            allow_functions: def.allow_functions.clone(),
            pool,
        })
    }

    /// The source's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source's engine.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Where the source is, without secrets: `host:port/db` or `sqlite:file`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Rows per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Checks a trigger's SQL in this source's dialect, admitting the functions the source
    /// opted in to (`allow_functions`).
    pub fn check(&self, trigger: &str, sql: &str) -> Result<CheckedQuery, SourceError> {
        sql_guard::check_allowing(sql, self.dialect, &self.allow_functions).map_err(|error| {
            SourceError::Guard {
                trigger: trigger.to_string(),
                error,
            }
        })
    }

    fn timeout_error(&self) -> SourceError {
        SourceError::Timeout {
            name: self.name.clone(),
            shown: self.shown.clone(),
            timeout: self.timeout,
        }
    }

    fn pg_error(&self, e: postgres::PgFail) -> SourceError {
        match e {
            postgres::PgFail::Sql(e) => self.query_error(e),
            postgres::PgFail::Deadline => self.timeout_error(),
        }
    }

    fn query_error(&self, e: sqlx::Error) -> SourceError {
        let timed_out = match &e {
            sqlx::Error::Database(db) => match self.dialect {
                Dialect::Postgres => db.code().as_deref() == Some("57014"),
                Dialect::Sqlite => db.message().contains("interrupted"),
            },
            _ => false,
        };
        if timed_out {
            self.timeout_error()
        } else {
            let message = match &e {
                sqlx::Error::Database(db) => db.message().to_string(),
                other => other.to_string(),
            };
            SourceError::Query {
                name: self.name.clone(),
                shown: self.shown.clone(),
                message,
            }
        }
    }

    /// The query's output columns, found by running it with `LIMIT 0`.
    pub async fn columns(
        &self,
        query: &CheckedQuery,
        window: Window,
    ) -> Result<Vec<Column>, SourceError> {
        let rendered = query.columns_sql(window);
        match &self.pool {
            Pool::Postgres(pool) => postgres::columns(pool, &rendered, self.timeout)
                .await
                .map_err(|e| self.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::columns(pool, &rendered, self.timeout)
                .await
                .map_err(|e| self.query_error(e)),
        }
    }

    /// Prepares a trigger to read: its SQL through the guard in this source's dialect, then its
    /// clock, key, occurrence and anchor columns checked against the query's output (`LIMIT 0`).
    pub async fn prepare(
        &self,
        defs: &crate::definitions::Definitions,
        trigger: &crate::definitions::Trigger,
        window: Window,
    ) -> Result<CheckedQuery, SourceError> {
        let query = self.check(&trigger.name, &trigger.sql)?;
        self.check_shape(
            &trigger.name,
            &query,
            trigger.shape(),
            &defs.extra_columns(trigger),
            window,
        )
        .await?;
        Ok(query)
    }

    /// Checks that the clock, every key column and the `also` columns (occurrence and anchor
    /// columns) are among the query's output columns, and
    /// (on PostgreSQL) that the clock is a timestamp or a date.
    pub async fn check_shape(
        &self,
        trigger: &str,
        query: &CheckedQuery,
        shape: Shape<'_>,
        also: &[&str],
        window: Window,
    ) -> Result<(), SourceError> {
        let columns = self.columns(query, window).await?;
        let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        let mut missing = Vec::new();
        let wanted = std::iter::once(shape.clock)
            .chain(shape.key.iter().map(String::as_str))
            .chain(also.iter().copied());
        for wanted in wanted {
            if !names.contains(&wanted) {
                missing.push(wanted);
            }
        }
        if !missing.is_empty() {
            return Err(SourceError::Shape {
                trigger: trigger.to_string(),
                message: format!(
                    "the query returns no column named {}; it returns: {} (alias a column with AS, or fix event_time, key, occurrence or anchor)",
                    missing.join(", "),
                    names.join(", ")
                ),
            });
        }
        if self.dialect == Dialect::Postgres {
            let clock = columns
                .iter()
                .find(|c| c.name == shape.clock)
                .expect("checked above");
            if !matches!(
                clock.type_name.as_str(),
                "TIMESTAMPTZ" | "TIMESTAMP" | "DATE"
            ) {
                return Err(SourceError::Shape {
                    trigger: trigger.to_string(),
                    message: format!(
                        "the clock column {} is {}, not a time; cast it in the SQL, for example {}::timestamptz",
                        clock.name, clock.type_name, clock.name
                    ),
                });
            }
        }
        Ok(())
    }

    async fn count(&self, rendered: &Rendered) -> Result<u64, SourceError> {
        match &self.pool {
            Pool::Postgres(pool) => postgres::count(pool, rendered, self.timeout)
                .await
                .map_err(|e| self.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::count(pool, rendered, self.timeout)
                .await
                .map_err(|e| self.query_error(e)),
        }
    }

    /// Rows whose clock is NULL, over the whole query, not just the window.
    pub async fn count_null_clocks(
        &self,
        query: &CheckedQuery,
        shape: Shape<'_>,
        window: Window,
    ) -> Result<u64, SourceError> {
        self.count(&query.null_clock_count_sql(shape, window)).await
    }

    /// Rows whose clock is there but cannot be read as a time (`'yesterday'`, `'\N'`, a blob),
    /// over the whole query, with one such row's clock and key. Always none on PostgreSQL,
    /// where the clock must be a typed time.
    pub async fn count_unreadable_clocks(
        &self,
        query: &CheckedQuery,
        shape: Shape<'_>,
        window: Window,
    ) -> Result<UnreadableClocks, SourceError> {
        let (Some(rendered), Pool::Sqlite(pool)) =
            (query.unreadable_clock_sql(shape, window), &self.pool)
        else {
            return Ok(UnreadableClocks::default());
        };
        let (rows, values) = sqlite::count_with_example(pool, &rendered, self.timeout)
            .await
            .map_err(|e| self.query_error(e))?;
        let example = (rows > 0 && !values.is_empty()).then(|| {
            let key: Vec<&crate::row::Value> = values[1..].iter().collect();
            UnreadableExample {
                clock: shorten(&values[0].to_string(), 80),
                key: crate::cadence::encode_values(&key),
            }
        });
        Ok(UnreadableClocks { rows, example })
    }

    /// Rows in the window with a NULL key column. They are read by no page and fire nothing.
    pub async fn count_null_keys(
        &self,
        query: &CheckedQuery,
        shape: Shape<'_>,
        window: Window,
    ) -> Result<u64, SourceError> {
        self.count(&query.null_key_count_sql(shape, window)).await
    }

    /// Opens a paged read of a trigger's window, in one read-only snapshot.
    pub async fn read_window<'a>(
        &'a self,
        query: &'a CheckedQuery,
        shape: Shape<'a>,
        window: Window,
    ) -> Result<WindowReader<'a>, SourceError> {
        let session = match &self.pool {
            Pool::Postgres(pool) => Session::Postgres(
                postgres::PgSession::open(pool, self.timeout)
                    .await
                    .map_err(|e| self.pg_error(e))?,
            ),
            Pool::Sqlite(pool) => {
                Session::Sqlite(sqlite::begin(pool).await.map_err(|e| self.query_error(e))?)
            }
        };
        Ok(WindowReader::new(self, query, shape, window, session))
    }

    /// Lowers the memory bound of one page (256 MiB by default), so tests can show it
    /// without building hundreds of megabytes; Rowfire never calls it.
    #[doc(hidden)]
    pub fn limit_page_bytes(&mut self, bytes: usize) {
        self.page_bytes = bytes;
    }

    /// Runs a statement on a source session without the guard. It exists so tests can show that
    /// the session itself refuses writes; Rowfire never calls it.
    #[doc(hidden)]
    pub async fn execute_unguarded(&self, sql: &str) -> Result<(), SourceError> {
        match &self.pool {
            Pool::Postgres(pool) => postgres::execute(pool, sql, self.timeout)
                .await
                .map_err(|e| self.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::execute(pool, sql)
                .await
                .map_err(|e| self.query_error(e)),
        }
    }
}

/// Removes a DSN, and the password inside it, from a message.
fn scrub(message: &str, dsn: &str) -> String {
    let mut out = message.replace(dsn, "<dsn>");
    if let Some(password) = dsn
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .and_then(|(userinfo, _)| userinfo.split_once(':'))
        .map(|(_, pw)| pw)
        .filter(|pw| !pw.is_empty())
    {
        out = out.replace(password, "<redacted>");
        let decoded = percent_decode(password);
        if !decoded.is_empty() {
            out = out.replace(&decoded, "<redacted>");
        }
    }
    out
}

/// Decodes `%XX` escapes (as in a URL's userinfo); leaves anything else as it is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dsn_and_its_password_never_survive_in_a_message() {
        let dsn = "postgres://app:s3cr%21t@db.example:5432/prod";
        let msg = format!("failed to connect to {dsn} with password s3cr%21t");
        let clean = scrub(&msg, dsn);
        assert!(!clean.contains("s3cr"), "{clean}");
        let decoded = scrub("auth failed for password s3cr!t", dsn);
        assert!(!decoded.contains("s3cr"), "{decoded}");
        assert!(!clean.contains(dsn));
    }

    #[test]
    fn the_engine_comes_from_the_dsn_scheme() {
        assert_eq!(dialect_of("postgres://x/y"), Some(Dialect::Postgres));
        assert_eq!(dialect_of("postgresql://x/y"), Some(Dialect::Postgres));
        assert_eq!(dialect_of("sqlite://demo/sample.db"), Some(Dialect::Sqlite));
        assert_eq!(dialect_of("mysql://x/y"), None);
    }
}
