//! The control plane's database: SQLite (embedded, one node) or PostgreSQL (many workers), the
//! same tables on both. Opening, migrating, and the one place control-plane transactions begin,
//! scoped to a workspace.

mod clock_sync;
mod time;
pub mod workspace;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use sqlx::{AssertSqlSafe, PgPool, Postgres, Row as _, Sqlite, SqlitePool};

pub use time::{DbTime, earlier, later};

use crate::sql_guard::{Dialect, dialect_of};

/// The environment variable naming the control plane.
pub const DATABASE_URL_ENV: &str = "ROWFIRE_DATABASE_URL";
/// The control plane used when [`DATABASE_URL_ENV`] is not set.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://rowfire.db";
/// The workspace every row belongs to until tenancy arrives.
pub const DEFAULT_WORKSPACE: &str = "default";

/// Migrations per engine, applied in order; each runs once, in its own transaction.
const MIGRATIONS: &[(i64, &str, &str, &str)] = &[
    (
        1,
        "control_plane",
        include_str!("../../migrations/postgres/0001_control_plane.sql"),
        include_str!("../../migrations/sqlite/0001_control_plane.sql"),
    ),
    (
        2,
        "ledger",
        include_str!("../../migrations/postgres/0002_ledger.sql"),
        include_str!("../../migrations/sqlite/0002_ledger.sql"),
    ),
    (
        3,
        "delivery",
        include_str!("../../migrations/postgres/0003_delivery.sql"),
        include_str!("../../migrations/sqlite/0003_delivery.sql"),
    ),
    (
        4,
        "sending",
        include_str!("../../migrations/postgres/0004_sending.sql"),
        include_str!("../../migrations/sqlite/0004_sending.sql"),
    ),
    (
        5,
        "unreadable_clocks",
        include_str!("../../migrations/postgres/0005_unreadable_clocks.sql"),
        include_str!("../../migrations/sqlite/0005_unreadable_clocks.sql"),
    ),
    (
        6,
        "worker_leases",
        include_str!("../../migrations/postgres/0006_worker_leases.sql"),
        include_str!("../../migrations/sqlite/0006_worker_leases.sql"),
    ),
];

/// A value bound to a statement whose number of binds is known only at run time.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
    Time(DbTime),
}

/// `($1, $2), ($3, $4), …`: `rows` groups of `width` placeholders.
pub(crate) fn values_list(rows: usize, width: usize) -> String {
    (0..rows)
        .map(|r| {
            format!(
                "({})",
                (1..=width)
                    .map(|c| format!("${}", r * width + c))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

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
    /// The database failed.
    #[error("control plane ({shown}): {message}")]
    Database {
        /// Where, without secrets.
        shown: String,
        /// The database's message.
        message: String,
    },
}

/// A control plane connection pool.
#[derive(Debug, Clone)]
pub struct Store {
    shown: String,
    pool: Pool,
    work: Arc<tokio::sync::Notify>,
}

/// The PostgreSQL channel on which enqueued work is announced to idle workers.
pub const WORK_CHANNEL: &str = "rowfire_work";

#[derive(Debug, Clone)]
enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

/// An open control-plane transaction, already scoped to one workspace.
pub enum StoreTx {
    /// On PostgreSQL.
    Postgres(sqlx::Transaction<'static, Postgres>),
    /// On SQLite.
    Sqlite(sqlx::Transaction<'static, Sqlite>),
}

/// Rewrites `$1`-style placeholders as SQLite's numbered `?1`.
pub(crate) fn sqlite_sql(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('?');
        } else {
            out.push(c);
        }
    }
    out
}

/// Runs one statement on a [`StoreTx`] with the same SQL and binds on either engine.
/// `fetch_all!(tx, "SQL with $1", [binds…], |row| map)` → `Result<Vec<T>, sqlx::Error>`.
macro_rules! fetch_all {
    ($tx:expr, $sql:expr, [$($arg:expr),* $(,)?], |$row:ident| $map:expr) => {{
        match $tx {
            $crate::store::StoreTx::Postgres(tx) => {
                sqlx::query(sqlx::AssertSqlSafe(String::from($sql)))$(.bind($arg))*.fetch_all(&mut **tx).await
                    .and_then(|rows| rows.iter().map(|$row| $map).collect::<Result<Vec<_>, sqlx::Error>>())
            }
            $crate::store::StoreTx::Sqlite(tx) => {
                sqlx::query(sqlx::AssertSqlSafe($crate::store::sqlite_sql($sql)))$(.bind($arg))*.fetch_all(&mut **tx).await
                    .and_then(|rows| rows.iter().map(|$row| $map).collect::<Result<Vec<_>, sqlx::Error>>())
            }
        }
    }};
}

/// Executes one statement on a [`StoreTx`]; returns the rows affected.
macro_rules! execute {
    ($tx:expr, $sql:expr, [$($arg:expr),* $(,)?]) => {{
        match $tx {
            $crate::store::StoreTx::Postgres(tx) => sqlx::query(sqlx::AssertSqlSafe(String::from($sql)))$(.bind($arg))*
                .execute(&mut **tx).await.map(|r| r.rows_affected()),
            $crate::store::StoreTx::Sqlite(tx) => sqlx::query(sqlx::AssertSqlSafe($crate::store::sqlite_sql($sql)))$(.bind($arg))*
                .execute(&mut **tx).await.map(|r| r.rows_affected()),
        }
    }};
}

pub(crate) use {execute, fetch_all};

impl Store {
    /// Opens a control plane; a SQLite file is created if missing.
    pub async fn open(url: &str) -> Result<Store, StoreError> {
        match dialect_of(url).ok_or(StoreError::BadUrl)? {
            Dialect::Postgres => {
                let opts = PgConnectOptions::from_str(url)
                    .map_err(|_| StoreError::BadUrl)?
                    .application_name("rowfire");
                let shown = format!(
                    "{}:{}/{}",
                    opts.get_host(),
                    opts.get_port(),
                    opts.get_database().unwrap_or("")
                );
                let pool = PgPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(10))
                    .connect_with(opts)
                    .await
                    .map_err(|e| db_error(&shown, e))?;
                Ok(Store {
                    shown,
                    pool: Pool::Postgres(pool),
                    work: Arc::default(),
                })
            }
            Dialect::Sqlite => {
                let opts = SqliteConnectOptions::from_str(url)
                    .map_err(|_| StoreError::BadUrl)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true);
                let shown = format!("sqlite:{}", opts.get_filename().display());
                let pool = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(opts)
                    .await
                    .map_err(|e| db_error(&shown, e))?;
                Ok(Store {
                    shown,
                    pool: Pool::Sqlite(pool),
                    work: Arc::default(),
                })
            }
        }
    }

    /// Wakes this process's idle senders: work was just committed.
    pub fn wake(&self) {
        self.work.notify_waiters();
    }

    /// The signal [`Store::wake`] (and, on PostgreSQL, other processes' NOTIFY) raises.
    pub fn work_signal(&self) -> &tokio::sync::Notify {
        &self.work
    }

    /// On PostgreSQL, listens for work announced by other processes (`NOTIFY rowfire_work`) and
    /// wakes this process's senders. Returns once the first LISTEN is in place (or has failed,
    /// which is logged); a background task keeps listening and reconnects after a failure.
    /// Polling stays the fallback, so a lost notification only delays work. Does nothing on
    /// SQLite (one process, woken in-process). Not for transaction-mode poolers: run those
    /// workers poll-only.
    pub async fn listen_for_work(&self) {
        let Pool::Postgres(pool) = &self.pool else {
            return;
        };
        async fn connect(pool: &PgPool) -> Option<sqlx::postgres::PgListener> {
            let listened = async {
                let mut listener = sqlx::postgres::PgListener::connect_with(pool).await?;
                listener.listen(WORK_CHANNEL).await?;
                Ok::<_, sqlx::Error>(listener)
            };
            match listened.await {
                Ok(l) => Some(l),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for work; polling until it can");
                    None
                }
            }
        }
        let mut listener = connect(pool).await;
        let (pool, work) = (pool.clone(), self.work.clone());
        tokio::spawn(async move {
            loop {
                let Some(l) = listener.as_mut() else {
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    listener = connect(&pool).await;
                    continue;
                };
                match l.recv().await {
                    Ok(_) => work.notify_waiters(),
                    Err(e) => {
                        tracing::warn!(error = %e, "work notifications lost; polling until they return");
                        listener = None;
                    }
                }
            }
        });
    }

    /// Where the control plane is, without secrets.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The engine.
    pub fn dialect(&self) -> Dialect {
        match self.pool {
            Pool::Postgres(_) => Dialect::Postgres,
            Pool::Sqlite(_) => Dialect::Sqlite,
        }
    }

    pub(crate) fn error(&self, e: sqlx::Error) -> StoreError {
        db_error(&self.shown, e)
    }

    /// Applies the migrations this Rowfire has that the database lacks; returns how many ran.
    pub async fn migrate(&self) -> Result<usize, StoreError> {
        self.migrate_inner().await.map_err(|e| self.error(e))
    }

    async fn migrate_inner(&self) -> Result<usize, sqlx::Error> {
        let mut applied = 0;
        for (version, name, pg_sql, lite_sql) in MIGRATIONS {
            let mut tx = self.begin_unscoped().await?;
            if let StoreTx::Postgres(t) = &mut tx {
                // Many workers may start at once: one migrates, the others wait and find it done.
                sqlx::query("SELECT pg_advisory_xact_lock(7270601)")
                    .execute(&mut **t)
                    .await?;
            }
            execute!(
                &mut tx,
                "CREATE TABLE IF NOT EXISTS rowfire_migration (version BIGINT PRIMARY KEY, name TEXT NOT NULL)",
                []
            )?;
            let done = fetch_all!(
                &mut tx,
                "SELECT version FROM rowfire_migration WHERE version = $1",
                [*version],
                |r| r.try_get::<i64, _>(0)
            )?;
            if done.is_empty() {
                let sql = match &tx {
                    StoreTx::Postgres(_) => *pg_sql,
                    StoreTx::Sqlite(_) => *lite_sql,
                };
                match &mut tx {
                    StoreTx::Postgres(t) => sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut **t)
                        .await
                        .map(|_| ())?,
                    StoreTx::Sqlite(t) => sqlx::raw_sql(AssertSqlSafe(sql))
                        .execute(&mut **t)
                        .await
                        .map(|_| ())?,
                }
                execute!(
                    &mut tx,
                    "INSERT INTO rowfire_migration (version, name) VALUES ($1, $2)",
                    [*version, *name]
                )?;
                applied += 1;
            }
            tx.commit().await?;
        }
        Ok(applied)
    }

    /// Fails with advice when the schema is older than this Rowfire.
    pub async fn check_migrated(&self) -> Result<(), StoreError> {
        let want = MIGRATIONS.last().map_or(0, |m| m.0);
        let have = async {
            let mut tx = self.begin_unscoped().await?;
            let exists = match &mut tx {
                StoreTx::Postgres(t) => {
                    sqlx::query("SELECT to_regclass('rowfire_migration') IS NOT NULL")
                        .fetch_one(&mut **t)
                        .await?
                        .try_get::<bool, _>(0)?
                }
                StoreTx::Sqlite(t) => {
                    sqlx::query(
                        "SELECT count(*) FROM sqlite_master WHERE name = 'rowfire_migration'",
                    )
                    .fetch_one(&mut **t)
                    .await?
                    .try_get::<i64, _>(0)?
                        > 0
                }
            };
            let have = if exists {
                fetch_all!(
                    &mut tx,
                    "SELECT coalesce(max(version), 0) FROM rowfire_migration",
                    [],
                    |r| r.try_get::<i64, _>(0)
                )?[0]
            } else {
                0
            };
            tx.rollback().await?;
            Ok::<i64, sqlx::Error>(have)
        }
        .await
        .map_err(|e| self.error(e))?;
        if have < want {
            return Err(StoreError::NotMigrated {
                shown: self.shown.clone(),
                have,
                want,
            });
        }
        Ok(())
    }

    /// Begins a transaction with no workspace. Only migrations and the few statements that must
    /// find work before knowing whose it is use this.
    pub(crate) async fn begin_unscoped(&self) -> Result<StoreTx, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Postgres(p) => StoreTx::Postgres(p.begin().await?),
            Pool::Sqlite(p) => StoreTx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
        })
    }

    /// Begins a read-only look with no workspace (on SQLite a deferred transaction, so it takes
    /// no write lock): for the idle sender's "when is the next delivery due".
    pub(crate) async fn begin_unscoped_read(&self) -> Result<StoreTx, sqlx::Error> {
        Ok(match &self.pool {
            Pool::Postgres(p) => StoreTx::Postgres(p.begin().await?),
            Pool::Sqlite(p) => StoreTx::Sqlite(p.begin().await?),
        })
    }

    /// Begins a control-plane transaction for one workspace: every unit of work goes through
    /// here. On PostgreSQL it sets `app.workspace_id` for the transaction (row-level security
    /// keys on it once tenancy lands).
    pub async fn begin(&self, workspace: &str) -> Result<StoreTx, StoreError> {
        let mut tx = self.begin_unscoped().await.map_err(|e| self.error(e))?;
        if let StoreTx::Postgres(t) = &mut tx {
            sqlx::query("SELECT set_config('app.workspace_id', $1, true)")
                .bind(workspace)
                .execute(&mut **t)
                .await
                .map_err(|e| self.error(e))?;
        }
        Ok(tx)
    }
}

impl StoreTx {
    /// Commits.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            StoreTx::Postgres(t) => t.commit().await,
            StoreTx::Sqlite(t) => t.commit().await,
        }
    }

    /// Rolls back.
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            StoreTx::Postgres(t) => t.rollback().await,
            StoreTx::Sqlite(t) => t.rollback().await,
        }
    }
}

fn db_error(shown: &str, e: sqlx::Error) -> StoreError {
    let message = match &e {
        sqlx::Error::Database(db) => db.message().to_string(),
        other => other.to_string(),
    };
    StoreError::Database {
        shown: shown.to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_become_sqlite_numbered_ones() {
        assert_eq!(
            super::sqlite_sql("a = $1 AND b = $12 AND c = '$'"),
            "a = ?1 AND b = ?12 AND c = '$'"
        );
    }
}
