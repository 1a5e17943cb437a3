//! A PostgreSQL read session: a read-only, repeatable-read transaction whose limits (statement,
//! lock and idle timeouts) are set again before every statement, a client-side deadline that ends
//! the backend, and a clean hand-back of the connection (`DISCARD ALL`) or its closing.

use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::postgres::PgRow;
use sqlx::{
    AssertSqlSafe, Connection as _, Executor, PgPool, Postgres, SqlSafeStr, Statement as _,
};

use super::bound;
use crate::source::Column;
use crate::sql_guard::Rendered;

/// Why a statement on a source session failed.
pub(in crate::source) enum PgFail {
    /// The database refused or failed it (a server-side statement timeout is SQLSTATE 57014).
    Sql(sqlx::Error),
    /// Rowfire's own deadline passed first: the server-side timeout was defeated or the server
    /// stopped answering. The backend was terminated and the connection closed.
    Deadline,
}

impl From<sqlx::Error> for PgFail {
    fn from(e: sqlx::Error) -> Self {
        PgFail::Sql(e)
    }
}

/// How long a session may sit idle inside its transaction (between pages, while Rowfire claims
/// a page on the control plane) before the server ends it.
const IDLE_IN_TRANSACTION: Duration = Duration::from_secs(300);

/// Rowfire's own deadline for one statement: the statement timeout plus a margin for the
/// server's own timeout to fire first and its error to arrive.
fn deadline(timeout: Duration) -> Duration {
    timeout + Duration::from_millis(500) + timeout / 4
}

/// Runs one statement (`$run`, an expression over the connection `$conn`) on a session under
/// the client-side deadline; past it, ends the backend and closes the connection.
macro_rules! guarded {
    ($session:expr, |$conn:ident| $run:expr) => {{
        let session: &mut PgSession = $session;
        match session.conn.as_mut() {
            None => Err(PgFail::Deadline),
            Some(conn) => {
                let $conn: &mut sqlx::PgConnection = &mut **conn;
                match tokio::time::timeout(deadline(session.timeout), $run).await {
                    Ok(result) => result.map_err(PgFail::Sql),
                    Err(_) => {
                        session.end_backend().await;
                        Err(PgFail::Deadline)
                    }
                }
            }
        }
    }};
}

/// One read on a PostgreSQL source: a pooled connection inside a read-only, repeatable-read
/// transaction whose limits are set transaction-locally and set again before every statement,
/// so SQL run inside the read cannot unbound a later statement. Every statement also runs under
/// a client-side deadline; past it the backend is terminated from another connection and the
/// connection is closed. [`PgSession::close`] returns the connection to the pool only after
/// `DISCARD ALL` (no advisory lock, setting, prepared statement or temporary state survives);
/// a session that fails, or is dropped without `close`, closes its connection instead.
pub(in crate::source) struct PgSession {
    conn: Option<PoolConnection<Postgres>>,
    pool: PgPool,
    pid: i32,
    timeout: Duration,
    /// The limits were set by the statement before, which was Rowfire's own.
    limited: bool,
}

impl PgSession {
    /// Opens a read: `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY`, then one statement that
    /// takes the snapshot (so no later statement can switch the transaction to read-write),
    /// sets the limits and reads the backend's pid.
    pub(in crate::source) async fn open(
        pool: &PgPool,
        timeout: Duration,
    ) -> Result<PgSession, PgFail> {
        let conn = pool.acquire().await?;
        let mut session = PgSession {
            conn: Some(conn),
            pool: pool.clone(),
            pid: 0,
            timeout,
            limited: false,
        };
        guarded!(&mut session, |conn| sqlx::raw_sql(
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        )
        .execute(conn))?;
        let (statement, idle) = session.limits();
        // The first column: the pid.
        session.pid = guarded!(&mut session, |conn| sqlx::query_scalar::<_, i32>(
            LIMITS_AND_PID
        )
        .bind(statement)
        .bind(idle)
        .fetch_one(conn))?;
        session.limited = true;
        Ok(session)
    }

    /// The statement timeout and the idle-in-transaction timeout, in milliseconds, as text.
    fn limits(&self) -> (String, String) {
        (
            self.timeout.as_millis().max(1).to_string(),
            self.idle().as_millis().to_string(),
        )
    }

    /// Ends the backend from a fresh connection (the pool may be busy) and drops this session's
    /// connection so it is closed, never reused. Terminating, not cancelling: SQL can catch a
    /// cancel (PL/pgSQL `EXCEPTION WHEN query_canceled`), and the session is done with anyway.
    /// On PostgreSQL 14 and later it waits (up to 5 s) until the backend is gone.
    pub(super) async fn end_backend(&mut self) {
        self.discard();
        if self.pid == 0 {
            return;
        }
        let opts = self.pool.connect_options();
        let pid = self.pid;
        let end = async {
            let mut other = sqlx::PgConnection::connect_with(&opts).await?;
            let waited = sqlx::query("SELECT pg_catalog.pg_terminate_backend($1, 5000)")
                .bind(pid)
                .execute(&mut other)
                .await;
            if waited.is_err() {
                sqlx::query("SELECT pg_catalog.pg_terminate_backend($1)")
                    .bind(pid)
                    .execute(&mut other)
                    .await?;
            }
            other.close().await
        };
        if let Err(e) = tokio::time::timeout(Duration::from_secs(10), end)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
        {
            tracing::warn!(error = %e, "could not end a source query that ran past its deadline; its connection is closed");
        }
    }

    /// Runs a rendered statement and returns its rows, after setting the limits again.
    pub(in crate::source) async fn fetch_all(
        &mut self,
        rendered: &Rendered,
    ) -> Result<Vec<PgRow>, PgFail> {
        self.relimit().await?;
        guarded!(self, |conn| bound(rendered).fetch_all(conn))
    }

    /// The source's statement timeout.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// How long the read may sit idle inside its transaction.
    pub(super) fn idle(&self) -> Duration {
        IDLE_IN_TRANSACTION.max(self.timeout * 2)
    }

    /// The session's connection, for a statement the caller runs under its own deadline
    /// ([`PgSession::end_backend`] past it). `None` once the connection was discarded.
    pub(super) fn connection(&mut self) -> Option<&mut sqlx::PgConnection> {
        self.conn.as_deref_mut()
    }

    /// The server-side cap on a window's one streamed statement as a whole: an hour, or a
    /// hundred times the statement timeout if that is longer. Rowfire bounds each page by the
    /// statement timeout itself; this cap is what still ends the statement on the server if
    /// Rowfire cannot (a process frozen or cut off mid-read).
    pub(super) fn read_cap(&self) -> Duration {
        Duration::from_secs(3600).max(self.timeout.saturating_mul(100))
    }

    /// Sets the limits for a window's one streamed statement: the server's statement timeout
    /// raised to [`PgSession::read_cap`] (the caller bounds each chunk by the statement timeout
    /// instead), the lock and idle timeouts as every read has them, and on PostgreSQL 14 and
    /// later a check every second that Rowfire is still connected. That check is set inside a
    /// savepoint, so a server whose platform cannot check is left as it is (logged) and the
    /// read goes on.
    pub(super) async fn lift_statement_limit(&mut self) -> Result<(), PgFail> {
        let checks = self
            .conn
            .as_deref()
            .and_then(|c| c.server_version_num())
            .is_some_and(|v| v >= 140000);
        if checks {
            let interval = super::stream::CONNECTION_CHECK.as_millis().to_string();
            guarded!(self, |conn| sqlx::raw_sql("SAVEPOINT rowfire_check")
                .execute(conn))?;
            let set = guarded!(self, |conn| sqlx::query(
                "SELECT pg_catalog.set_config('client_connection_check_interval', $1, true)"
            )
            .bind(&interval)
            .execute(conn));
            let back = match set {
                Ok(_) => "RELEASE SAVEPOINT rowfire_check",
                Err(PgFail::Deadline) => return Err(PgFail::Deadline),
                Err(PgFail::Sql(e)) => {
                    tracing::warn!(error = %e, "this PostgreSQL server cannot check that Rowfire is still connected while a window is read; the read goes on without the check");
                    "ROLLBACK TO SAVEPOINT rowfire_check; RELEASE SAVEPOINT rowfire_check"
                }
            };
            guarded!(self, |conn| sqlx::raw_sql(back).execute(conn))?;
        }
        let (_, idle) = self.limits();
        let lock = self.timeout.as_millis().max(1).to_string();
        let cap = self.read_cap().as_millis().to_string();
        self.limited = false;
        guarded!(self, |conn| sqlx::query(LIFTED)
            .bind(cap)
            .bind(lock)
            .bind(idle)
            .execute(conn))
        .map(|_| ())
    }

    /// Describes a statement's output columns.
    pub(super) async fn describe(&mut self, sql: &str) -> Result<Vec<Column>, PgFail> {
        let described = guarded!(self, |conn| conn
            .prepare(AssertSqlSafe(sql.to_string()).into_sql_str()))?;
        Ok(Column::list(described.columns()))
    }

    /// Sets the transaction's limits again: the statement before may have changed them with
    /// `set_config(…, true)`.
    async fn relimit(&mut self) -> Result<(), PgFail> {
        if std::mem::replace(&mut self.limited, false) {
            return Ok(());
        }
        let (statement, idle) = self.limits();
        guarded!(self, |conn| sqlx::query(LIMITS)
            .bind(statement)
            .bind(idle)
            .execute(conn))
        .map(|_| ())
    }

    /// Ends the read: rolls back, forgets sqlx's prepared statements and `DISCARD ALL`s, then
    /// returns the connection to the pool. If any step fails the connection is closed instead.
    pub(in crate::source) async fn close(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let clean = async {
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            conn.clear_cached_statements().await?;
            sqlx::raw_sql("DISCARD ALL").execute(&mut *conn).await?;
            Ok::<_, sqlx::Error>(())
        };
        if !matches!(
            tokio::time::timeout(deadline(self.timeout), clean).await,
            Ok(Ok(()))
        ) {
            conn.close_on_drop();
        }
        // Dropped here: back to the pool when clean, closed otherwise.
    }

    /// Drops the connection so that it is closed, never returned to the pool.
    fn discard(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
    }
}

impl Drop for PgSession {
    /// A session that was not closed cleanly (an error, a timeout, a reader dropped halfway)
    /// may be inside its transaction or hold state: its connection is closed, not reused.
    fn drop(&mut self) {
        self.discard();
    }
}

/// Sets the read's limits transaction-locally (schema-qualified: the read may have changed
/// `search_path`).
const LIMITS: &str = "SELECT pg_catalog.set_config('statement_timeout', $1, true), \
     pg_catalog.set_config('lock_timeout', $1, true), \
     pg_catalog.set_config('idle_in_transaction_session_timeout', $2, true)";

/// The limits of a window's one streamed statement: the statement timeout raised to the read's
/// cap (each chunk is bounded by Rowfire instead), the lock and idle timeouts as [`LIMITS`] sets
/// them.
const LIFTED: &str = "SELECT pg_catalog.set_config('statement_timeout', $1, true), \
     pg_catalog.set_config('lock_timeout', $2, true), \
     pg_catalog.set_config('idle_in_transaction_session_timeout', $3, true)";

/// [`LIMITS`] and the backend's pid, as the transaction's first statement (which takes its
/// snapshot).
const LIMITS_AND_PID: &str = "SELECT pg_catalog.pg_backend_pid(), \
     pg_catalog.set_config('statement_timeout', $1, true), \
     pg_catalog.set_config('lock_timeout', $1, true), \
     pg_catalog.set_config('idle_in_transaction_session_timeout', $2, true)";

/// Runs statements the way reads run: inside a read-only transaction whose snapshot is taken.
pub(in crate::source) async fn execute(
    pool: &PgPool,
    sql: &str,
    timeout: Duration,
) -> Result<(), PgFail> {
    let mut session = PgSession::open(pool, timeout).await?;
    session.relimit().await?;
    guarded!(&mut session, |conn| sqlx::raw_sql(AssertSqlSafe(
        sql.to_string()
    ))
    .execute(conn))?;
    session.close().await;
    Ok(())
}
