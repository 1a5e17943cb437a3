//! The control plane's database: SQLite (embedded, one node) or PostgreSQL (many workers), the
//! same tables on both. Opening, migrating (`migrate`), the one place control-plane transactions
//! begin, scoped to a workspace (the few unscoped ones open in `unscoped`), statements written
//! once for both engines (`fetch_all!`, `execute!`, and `batch` for many rows at once), rows read
//! by column name ([`StoreRow`]) and errors with a kind ([`ErrorKind`]). It knows nothing of
//! sources: the control plane's [`Engine`] is its own type.

pub mod batch;
mod clock_sync;
mod error;
mod id;
mod migrate;
pub mod tenancy;
mod text;
mod time;
pub mod unscoped;
pub mod workspace;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{AssertSqlSafe, Decode, PgPool, Postgres, Row as _, Sqlite, SqlitePool, Type};

pub use error::{ErrorKind, StoreError};
pub use id::{BadWorkspaceId, MAX_WORKSPACE_ID, WorkspaceId};
pub use text::UnknownValue;
pub(crate) use text::{stored_enum, text_column};
pub use time::{DbTime, earlier, later};
pub(crate) use unscoped::Unscoped;

/// The environment variable naming the control plane.
pub const DATABASE_URL_ENV: &str = "ROWFIRE_DATABASE_URL";
/// The control plane used when [`DATABASE_URL_ENV`] is not set.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://rowfire.db";
/// The workspace every row belongs to until tenancy arrives.
pub const DEFAULT_WORKSPACE: &WorkspaceId = &WorkspaceId::DEFAULT;

/// A value bound to a statement whose number of binds is known only at run time.
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(String),
    Int(i64),
    Time(DbTime),
}

type PgQuery<'q> = sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>;
type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

impl Arg {
    fn bind_pg<'q>(&self, q: PgQuery<'q>) -> PgQuery<'q> {
        match self {
            Arg::Text(s) => q.bind(s.clone()),
            Arg::Int(i) => q.bind(*i),
            Arg::Time(t) => q.bind(*t),
        }
    }

    fn bind_sqlite<'q>(&self, q: SqliteQuery<'q>) -> SqliteQuery<'q> {
        match self {
            Arg::Text(s) => q.bind(s.clone()),
            Arg::Int(i) => q.bind(*i),
            Arg::Time(t) => q.bind(*t),
        }
    }
}

/// The control plane's engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// PostgreSQL: many workers, many tenants.
    Postgres,
    /// SQLite: embedded, one node.
    Sqlite,
}

/// The role a PostgreSQL URL connects as (`None` for another engine or a URL that does not parse).
pub fn postgres_role(url: &str) -> Option<String> {
    if Engine::of_url(url) != Some(Engine::Postgres) {
        return None;
    }
    PgConnectOptions::from_str(url)
        .ok()
        .map(|o| o.get_username().to_string())
}

impl Engine {
    /// The engine a control-plane URL names, from its scheme.
    pub fn of_url(url: &str) -> Option<Engine> {
        let scheme = url.split(':').next()?.to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Some(Engine::Postgres),
            "sqlite" => Some(Engine::Sqlite),
            _ => None,
        }
    }
}

/// A row a control-plane statement returned, on either engine. Columns are read by name only:
/// a statement's column order is not part of any contract.
pub enum StoreRow<'r> {
    /// On PostgreSQL.
    Postgres(&'r PgRow),
    /// On SQLite.
    Sqlite(&'r SqliteRow),
}

/// A column's name (the only way [`StoreRow`] reads a column).
pub trait ColumnName {
    /// The name.
    fn name(&self) -> &str;
}

impl ColumnName for &str {
    fn name(&self) -> &str {
        self
    }
}

impl StoreRow<'_> {
    /// Reads the column named `column`, decoded as `T`.
    pub fn try_get<T, N: ColumnName>(&self, column: N) -> Result<T, sqlx::Error>
    where
        T: for<'a> Decode<'a, Postgres>
            + Type<Postgres>
            + for<'a> Decode<'a, Sqlite>
            + Type<Sqlite>,
    {
        match self {
            StoreRow::Postgres(r) => r.try_get(column.name()),
            StoreRow::Sqlite(r) => r.try_get(column.name()),
        }
    }
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
                    .and_then(|rows| rows.iter().map(|row| {
                        let $row = &$crate::store::StoreRow::Postgres(row);
                        $map
                    }).collect::<Result<Vec<_>, sqlx::Error>>())
            }
            $crate::store::StoreTx::Sqlite(tx) => {
                sqlx::query(sqlx::AssertSqlSafe($crate::store::sqlite_sql($sql)))$(.bind($arg))*.fetch_all(&mut **tx).await
                    .and_then(|rows| rows.iter().map(|row| {
                        let $row = &$crate::store::StoreRow::Sqlite(row);
                        $map
                    }).collect::<Result<Vec<_>, sqlx::Error>>())
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
        match Engine::of_url(url).ok_or(StoreError::BadUrl)? {
            Engine::Postgres => {
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
                    .map_err(|e| StoreError::database(&shown, e))?;
                Ok(Store {
                    shown,
                    pool: Pool::Postgres(pool),
                    work: Arc::default(),
                })
            }
            Engine::Sqlite => {
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
                    .map_err(|e| StoreError::database(&shown, e))?;
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
    pub fn engine(&self) -> Engine {
        match self.pool {
            Pool::Postgres(_) => Engine::Postgres,
            Pool::Sqlite(_) => Engine::Sqlite,
        }
    }

    pub(crate) fn error(&self, e: sqlx::Error) -> StoreError {
        StoreError::database(&self.shown, e)
    }

    /// Begins a control-plane transaction for one workspace: every unit of work goes through
    /// here. On PostgreSQL it sets `app.workspace_id` for the transaction, which the tenant
    /// tables' forced row-level security keys on (migration 8).
    pub async fn begin(&self, workspace: &WorkspaceId) -> Result<StoreTx, StoreError> {
        // The bypass is set off explicitly too, so no session setting can widen a scoped
        // transaction. The id is written into the statement, which is safe only because a
        // `WorkspaceId` is letters, digits, `-` and `_` (every way of making one checks it).
        let settings = format!(
            "set_config('app.workspace_id', '{}', true), set_config('app.bypass_rls', 'off', true)",
            workspace.as_str()
        );
        self.begin_tx(false, Some(&settings))
            .await
            .map_err(|e| self.error(e))
    }

    /// Begins a transaction (`read`: reads only, no write lock on SQLite). On PostgreSQL,
    /// `settings` (a list of `set_config(…, true)` calls) are set in the same simple query as
    /// `BEGIN`: one round trip.
    async fn begin_tx(&self, read: bool, settings: Option<&str>) -> Result<StoreTx, sqlx::Error> {
        Ok(match (&self.pool, settings) {
            (Pool::Postgres(p), None) => StoreTx::Postgres(p.begin().await?),
            (Pool::Postgres(p), Some(settings)) => StoreTx::Postgres(
                p.begin_with(AssertSqlSafe(format!("BEGIN; SELECT {settings}")))
                    .await?,
            ),
            (Pool::Sqlite(p), _) if read => StoreTx::Sqlite(p.begin().await?),
            (Pool::Sqlite(p), _) => StoreTx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
        })
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
