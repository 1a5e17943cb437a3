//! Sources: named, read-only connections to customer databases, and the paged reading of a
//! trigger's time window through the SQL guard.
//!
//! Every session is read-only (PostgreSQL: `default_transaction_read_only` plus a read-only
//! transaction; MySQL/MariaDB: `SET SESSION TRANSACTION READ ONLY` plus `START TRANSACTION READ
//! ONLY, WITH CONSISTENT SNAPSHOT`; SQLite: opened read-only with `query_only`), carries a
//! statement timeout that the query cannot lift (PostgreSQL: set transaction-locally before every
//! statement; MySQL: the session's `max_execution_time` or MariaDB's `max_statement_time`, which
//! only a statement the guard refuses can change; both backed by a client-side deadline that ends
//! the server's side; SQLite: a wall-clock interrupt), leaves nothing behind (PostgreSQL
//! connections are reused only after `DISCARD ALL`, MySQL ones after a rollback and the session
//! settings applied again, closed on any failure), and is shown as `host:port/db` at most: a
//! DSN never appears in output or errors.
//!
//! Here: [`Source`] (connecting, the guard in the source's dialect, the shape check, counts and
//! opening a paged read). Beside it: `engine.rs` (the one fork between engines), `postgres.rs`,
//! `mysql.rs` and `sqlite.rs` (each engine's sessions and decoding), `window.rs` (the paged
//! [`WindowReader`]), `error.rs`, `unreadable.rs` (clocks that are not times) and `redact.rs`
//! (DSNs out of messages).

mod catalogue;
mod connections;
mod engine;
mod error;
mod mysql;
mod postgres;
mod redact;
mod sqlite;
mod tenant;
mod unreadable;
mod window;

use std::time::Duration;

use crate::definitions::SourceDef;
use crate::sql_guard::{self, CheckedQuery, Dialect, Rendered, Shape, Window};

pub use catalogue::{Catalogue, CatalogueColumn, CatalogueTable, MAX_FACTS};
pub use connections::Connections;
use engine::{ConnectError, Pool};
pub use error::SourceError;
use redact::scrub;
pub use tenant::{AddressCheck, Pinned, pin};
use unreadable::shorten;
pub use unreadable::{UnreadableClocks, UnreadableExample};
pub use window::WindowReader;
pub(crate) use window::{FetchError, Fetched};
use window::{MAX_PAGE_BYTES, positions};

/// Finds the DSN of a workspace's source (see `worker::source_dsns`): what the workspace stored,
/// and the environment variable the definitions name only for the workspaces the operator runs.
pub type DsnResolver = std::sync::Arc<
    dyn Fn(&crate::store::WorkspaceId, &crate::definitions::SourceDef) -> Option<Dsn> + Send + Sync,
>;

/// A source's DSN as resolved for one workspace, and how it may be reached.
#[derive(Clone)]
pub struct Dsn {
    /// The DSN.
    pub url: String,
    /// For a tenant's source (a workspace the operator does not run): the check every address
    /// its host resolves to must pass when it connects ([`pin`]); `None` for the operator's.
    pub tenant: Option<AddressCheck>,
}

impl From<String> for Dsn {
    /// The operator's DSN: connected as it is.
    fn from(url: String) -> Dsn {
        Dsn { url, tenant: None }
    }
}

impl std::fmt::Debug for Dsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the DSN itself: it may hold a password.
        write!(f, "Dsn {{ tenant: {} }}", self.tenant.is_some())
    }
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

/// How many statements a source was sent, by what they read (tests count them to show a poll
/// reads only its window).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Statements {
    /// Statements that read rows of a window only: its one pass.
    pub windowed: u64,
    /// Statements that read the whole query, outside any window: NULL and unreadable clock
    /// counts.
    pub whole_query: u64,
    /// Statements that read no row: the query's columns (`LIMIT 0`).
    pub no_rows: u64,
}

impl std::ops::Add for Statements {
    type Output = Statements;

    fn add(self, other: Statements) -> Statements {
        Statements {
            windowed: self.windowed + other.windowed,
            whole_query: self.whole_query + other.whole_query,
            no_rows: self.no_rows + other.no_rows,
        }
    }
}

/// The running tally behind [`Statements`], shared by a source's clones.
#[derive(Debug, Default)]
struct Sent {
    windowed: std::sync::atomic::AtomicU64,
    whole_query: std::sync::atomic::AtomicU64,
    no_rows: std::sync::atomic::AtomicU64,
}

impl Sent {
    fn one(counter: &std::sync::atomic::AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    sent: std::sync::Arc<Sent>,
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

    /// Connects to a resolved DSN: the operator's as it is ([`Source::connect`]), a tenant's only
    /// at an address its check admits, pinned, with nothing from this process's environment.
    pub async fn connect_resolved(def: &SourceDef, dsn: &Dsn) -> Result<Source, SourceError> {
        let Some(check) = &dsn.tenant else {
            return Source::connect(def, &dsn.url).await;
        };
        let pinned = pin(&dsn.url, check)
            .await
            .map_err(|why| SourceError::Refused {
                name: def.name.clone(),
                why,
            })?;
        Source::connect_pinned(def, &dsn.url, Some(&pinned)).await
    }

    /// Connects to `dsn` with the settings of `def`. Sessions are read-only.
    pub async fn connect(def: &SourceDef, dsn: &str) -> Result<Source, SourceError> {
        Source::connect_pinned(def, dsn, None).await
    }

    async fn connect_pinned(
        def: &SourceDef,
        dsn: &str,
        pinned: Option<&Pinned>,
    ) -> Result<Source, SourceError> {
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
        let (pool, shown) = Pool::connect(dialect, dsn, def.statement_timeout, pinned)
            .await
            .map_err(|e| match e {
                ConnectError::Dsn => bad(),
                ConnectError::Connect { shown, message } => SourceError::Connect {
                    name: def.name.clone(),
                    shown,
                    message: scrub(&message, dsn),
                },
            })?;
        Ok(Source {
            name: def.name.clone(),
            dialect,
            shown,
            page_bytes: MAX_PAGE_BYTES,
            timeout: def.statement_timeout,
            page_size: def.page_size,
            allow_functions: def.allow_functions.clone(),
            pool,
            sent: Default::default(),
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

    /// The statements this source (and its clones) was sent so far, by what they read.
    #[doc(hidden)]
    pub fn statements(&self) -> Statements {
        use std::sync::atomic::Ordering::Relaxed;
        Statements {
            windowed: self.sent.windowed.load(Relaxed),
            whole_query: self.sent.whole_query.load(Relaxed),
            no_rows: self.sent.no_rows.load(Relaxed),
        }
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

    fn my_error(&self, e: mysql::MyFail) -> SourceError {
        match e {
            mysql::MyFail::Sql(e) => self.query_error(e),
            mysql::MyFail::Deadline => self.timeout_error(),
        }
    }

    fn query_error(&self, e: sqlx::Error) -> SourceError {
        if engine::timed_out(self.dialect, &e) {
            self.timeout_error()
        } else {
            let mut message = match &e {
                sqlx::Error::Database(db) => db.message().to_string(),
                other => other.to_string(),
            };
            if let Some(advice) = engine::advice(self.dialect, &e) {
                message = format!("{message}; {advice}");
            }
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
        Sent::one(&self.sent.no_rows);
        self.pool.columns(self, &rendered).await
    }

    /// Prepares a trigger to read: its SQL through the guard in this source's dialect, then its
    /// clock, key, occurrence and anchor columns checked against the query's output (`LIMIT 0`).
    pub async fn prepare(
        &self,
        defs: &crate::definitions::Definitions,
        trigger: &crate::definitions::Trigger,
        window: Window,
    ) -> Result<CheckedQuery, SourceError> {
        if !trigger.has_clock() {
            return Err(SourceError::NoClock {
                trigger: trigger.name.clone(),
            });
        }
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
    /// (on PostgreSQL and MySQL) that the clock is a timestamp or a date.
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
        let wanted: Vec<&str> = std::iter::once(shape.clock)
            .chain(shape.key.iter().map(String::as_str))
            .chain(also.iter().copied())
            .collect();
        // A row holds one value per name: with two columns named as the clock, a key column or
        // an occurrence or anchor column, the key and the row's value could differ (PostgreSQL
        // returns both, as `SELECT *` over a join does). Other repeated names are left be.
        if let Some(twice) = wanted
            .iter()
            .find(|w| names.iter().filter(|n| n == w).count() > 1)
        {
            return Err(SourceError::Shape {
                trigger: trigger.to_string(),
                message: format!(
                    "the query returns two columns named {twice}, which the trigger reads; give each its own name with AS"
                ),
            });
        }
        let mut missing = Vec::new();
        for &wanted in &wanted {
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
        let clock = columns
            .iter()
            .find(|c| c.name == shape.clock)
            .expect("checked above");
        let (times, cast): (&[&str], _) = match self.dialect {
            Dialect::Postgres => (
                &["TIMESTAMPTZ", "TIMESTAMP", "DATE"],
                format!("{}::timestamptz", clock.name),
            ),
            Dialect::Mysql => (
                &["DATETIME", "TIMESTAMP", "DATE"],
                format!("CAST({} AS DATETIME(6))", clock.name),
            ),
            Dialect::Sqlite => (&[], String::new()),
        };
        if !times.is_empty() && !times.contains(&clock.type_name.as_str()) {
            return Err(SourceError::Shape {
                trigger: trigger.to_string(),
                message: format!(
                    "the clock column {} is {}, not a time; cast it in the SQL, for example {cast}",
                    clock.name, clock.type_name
                ),
            });
        }
        Ok(())
    }

    async fn count(&self, rendered: &Rendered) -> Result<u64, SourceError> {
        self.pool.count(self, rendered).await
    }

    /// Rows whose clock is NULL, over the whole query, not just the window.
    pub async fn count_null_clocks(
        &self,
        query: &CheckedQuery,
        shape: Shape<'_>,
        window: Window,
    ) -> Result<u64, SourceError> {
        Sent::one(&self.sent.whole_query);
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
        let Some(rendered) = query.unreadable_clock_sql(shape, window) else {
            return Ok(UnreadableClocks::default());
        };
        Sent::one(&self.sent.whole_query);
        let Some((rows, values)) = self.pool.count_with_example(self, &rendered).await? else {
            return Ok(UnreadableClocks::default());
        };
        let example = (rows > 0 && !values.is_empty()).then(|| {
            let key: Vec<&crate::row::Value> = values[1..].iter().collect();
            UnreadableExample {
                clock: shorten(&values[0].to_string(), 80),
                key: crate::cadence::encode_values(&key),
            }
        });
        Ok(UnreadableClocks { rows, example })
    }

    /// Opens a paged read of a trigger's window, in one read-only snapshot.
    pub async fn read_window<'a>(
        &'a self,
        query: &'a CheckedQuery,
        shape: Shape<'a>,
        window: Window,
    ) -> Result<WindowReader<'a>, SourceError> {
        let session = self.pool.open(self).await?;
        Ok(WindowReader::new(self, query, shape, window, session))
    }

    /// The source's catalogue as its user sees it: tables, columns and types, primary and
    /// foreign keys, and indexed columns (see [`Catalogue`]).
    pub async fn catalogue(&self) -> Result<Catalogue, SourceError> {
        let facts = self.pool.catalogue(self).await?;
        if facts.len() > MAX_FACTS {
            return Err(SourceError::Query {
                name: self.name.clone(),
                shown: self.shown.clone(),
                message: format!(
                    "the catalogue holds more than {MAX_FACTS} columns, keys and indexes; point the DSN at a database (or schema) with fewer tables"
                ),
            });
        }
        Ok(Catalogue::from_facts(facts))
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
        self.pool.execute(self, sql).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_comes_from_the_dsn_scheme() {
        assert_eq!(dialect_of("postgres://x/y"), Some(Dialect::Postgres));
        assert_eq!(dialect_of("postgresql://x/y"), Some(Dialect::Postgres));
        assert_eq!(dialect_of("sqlite://demo/sample.db"), Some(Dialect::Sqlite));
        assert_eq!(dialect_of("mysql://x/y"), Some(Dialect::Mysql));
        assert_eq!(dialect_of("redis://x/y"), None);
    }
}
