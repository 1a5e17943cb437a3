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
            IDLE_IN_TRANSACTION
                .max(self.timeout * 2)
                .as_millis()
                .to_string(),
        )
    }

    /// Ends the backend from a fresh connection (the pool may be busy) and drops this session's
    /// connection so it is closed, never reused. Terminating, not cancelling: SQL can catch a
    /// cancel (PL/pgSQL `EXCEPTION WHEN query_canceled`), and the session is done with anyway.
    /// On PostgreSQL 14 and later it waits (up to 5 s) until the backend is gone.
    async fn end_backend(&mut self) {
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

    /// Runs a rendered statement after setting the limits again, handing each row to `each` as
    /// it arrives; `each` keeps what it needs of the row and answers what that takes in memory
    /// (an error from it stops the read). False as soon as the rows kept pass `max_bytes`,
    /// before more are read (the session is then dropped, so its connection is closed, not
    /// drained).
    pub(super) async fn fetch_each(
        &mut self,
        rendered: &Rendered,
        max_bytes: usize,
        mut each: impl FnMut(&PgRow) -> Result<usize, sqlx::Error>,
    ) -> Result<bool, PgFail> {
        self.relimit().await?;
        guarded!(self, |conn| async move {
            use futures_util::TryStreamExt as _;
            let mut stream = bound(rendered).fetch(conn);
            let mut bytes = 0usize;
            while let Some(row) = stream.try_next().await? {
                bytes = bytes.saturating_add(each(&row)?);
                if bytes > max_bytes {
                    return Ok(false);
                }
            }
            Ok(true)
        })
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
