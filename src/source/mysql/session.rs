//! A MySQL or MariaDB read session: a connection whose session is read-only, in UTC, with
//! `NO_BACKSLASH_ESCAPES` (string literals read as the guard rendered them) and a statement
//! timeout (`max_execution_time` in milliseconds on MySQL, `max_statement_time` in seconds on
//! MariaDB, whichever the server has); each read one `START TRANSACTION READ ONLY, WITH
//! CONSISTENT SNAPSHOT`; a client-side deadline that kills the connection's thread; and a clean
//! hand-back (rolled back, the session's settings applied again) or its closing. A window's
//! streamed statement (`mysql/stream.rs`) runs with the server's statement limit lifted and
//! each chunk under the client deadline instead; `net_write_timeout` bounds how long the server
//! waits on a reader that is claiming between chunks.

use std::time::Duration;

use sqlx::mysql::{MySql, MySqlConnection, MySqlDatabaseError, MySqlPool, MySqlRow};
use sqlx::pool::PoolConnection;
use sqlx::{AssertSqlSafe, Connection as _, Executor, SqlSafeStr, Statement as _};

use super::bound;
use crate::source::Column;
use crate::sql_guard::Rendered;

/// Why a statement on a source session failed.
pub(in crate::source) enum MyFail {
    /// The database refused or failed it.
    Sql(sqlx::Error),
    /// Rowfire's own deadline passed first: the server-side timeout was defeated or the server
    /// stopped answering. The connection's thread was killed and the connection closed.
    Deadline,
}

impl From<sqlx::Error> for MyFail {
    fn from(e: sqlx::Error) -> Self {
        MyFail::Sql(e)
    }
}

/// The SQL modes every source session runs with, replacing the server's: backslashes are
/// ordinary characters in strings (the guard re-renders literals that way), `"…"` is a string
/// (no `ANSI_QUOTES`; names are quoted with backticks), `||` concatenates as the guard's parser
/// reads it, and nothing else changes what a query means.
const SQL_MODE: &str = "NO_BACKSLASH_ESCAPES,PIPES_AS_CONCAT";

/// MySQL's error numbers for a statement ended by its timeout: `ER_QUERY_TIMEOUT` (MySQL's
/// `max_execution_time`), `ER_STATEMENT_TIMEOUT` (MariaDB's `max_statement_time`).
const TIMEOUT_ERRORS: &[u16] = &[3024, 1969];

/// Whether the server ended a statement for running past its timeout.
pub(in crate::source) fn timed_out(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|my| TIMEOUT_ERRORS.contains(&my.number())),
        _ => false,
    }
}

/// The server's error number, when the database refused a statement.
pub(in crate::source) fn error_number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// How long the server waits to hand rows to a streamed read's reader before it drops the
/// connection (`net_write_timeout`), at least: the reader may be claiming the page before.
/// PostgreSQL's reads allow the same idle time inside their transaction.
const WRITE_WAIT: Duration = Duration::from_secs(300);

/// The session's `net_write_timeout`, in whole seconds: [`WRITE_WAIT`] or twice the statement
/// timeout, whichever is longer.
fn write_wait_secs(timeout: Duration) -> u64 {
    WRITE_WAIT
        .max(timeout.saturating_mul(2))
        .as_secs()
        .clamp(1, 31_536_000)
}

/// The variable that holds the server's statement timeout: `max_statement_time` (seconds) on
/// MariaDB, `max_execution_time` (milliseconds) on MySQL.
fn limit_variable(version: &str) -> &'static str {
    if version.to_ascii_lowercase().contains("mariadb") {
        "max_statement_time"
    } else {
        "max_execution_time"
    }
}

/// Sets the session up for reading: read-only, UTC, Rowfire's SQL modes, the statement timeout
/// in the variable this server has, and how long the server waits on a slow reader. Run on
/// every new connection and again whenever a connection goes back to the pool.
pub(in crate::source) async fn apply(
    conn: &mut MySqlConnection,
    timeout: Duration,
) -> Result<(), sqlx::Error> {
    let version: String = sqlx::query_scalar("SELECT VERSION()")
        .fetch_one(&mut *conn)
        .await?;
    let millis = timeout.as_millis().clamp(1, u128::from(u32::MAX));
    let variable = limit_variable(&version);
    let limit = if variable == "max_statement_time" {
        // Seconds, a fraction allowed.
        format!("{variable} = {:.3}", millis as f64 / 1000.0)
    } else {
        format!("{variable} = {millis}")
    };
    let write_wait = write_wait_secs(timeout);
    sqlx::raw_sql("SET SESSION TRANSACTION READ ONLY")
        .execute(&mut *conn)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET SESSION time_zone = '+00:00', SESSION sql_mode = '{SQL_MODE}', SESSION {limit}, \
         SESSION net_write_timeout = {write_wait}"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Rowfire's own deadline for one statement: the statement timeout plus a margin for the
/// server's own timeout to fire first and its error to arrive.
fn deadline(timeout: Duration) -> Duration {
    timeout + Duration::from_millis(500) + timeout / 4
}

/// Runs one statement (`$run`, an expression over the connection `$conn`) on a session under
/// the client-side deadline; past it, kills the connection's thread and closes the connection.
macro_rules! guarded {
    ($session:expr, |$conn:ident| $run:expr) => {{
        let session: &mut MySession = $session;
        match session.conn.as_mut() {
            None => Err(MyFail::Deadline),
            Some(conn) => {
                let $conn: &mut MySqlConnection = &mut **conn;
                match tokio::time::timeout(deadline(session.timeout), $run).await {
                    Ok(result) => result.map_err(MyFail::Sql),
                    Err(_) => {
                        session.kill().await;
                        Err(MyFail::Deadline)
                    }
                }
            }
        }
    }};
}

/// One read on a MySQL or MariaDB source: a pooled connection inside one read-only,
/// consistent-snapshot transaction. [`MySession::close`] rolls back and applies the session's
/// settings again before the connection goes back to the pool; a session that fails, or is
/// dropped without `close`, closes its connection instead.
pub(in crate::source) struct MySession {
    conn: Option<PoolConnection<MySql>>,
    pool: MySqlPool,
    thread: u64,
    /// The variable holding the server's statement timeout ([`limit_variable`]).
    limit: &'static str,
    timeout: Duration,
}

impl MySession {
    /// Opens a read: the connection's thread id (for the deadline) and the server's version
    /// (for its limit's variable), then `START TRANSACTION READ ONLY, WITH CONSISTENT
    /// SNAPSHOT`.
    pub(in crate::source) async fn open(
        pool: &MySqlPool,
        timeout: Duration,
    ) -> Result<MySession, MyFail> {
        let conn = pool.acquire().await?;
        let mut session = MySession {
            conn: Some(conn),
            pool: pool.clone(),
            thread: 0,
            limit: "max_execution_time",
            timeout,
        };
        let (thread, version) = guarded!(&mut session, |conn| sqlx::query_as::<_, (u64, String)>(
            "SELECT CONNECTION_ID(), VERSION()"
        )
        .fetch_one(conn))?;
        session.thread = thread;
        session.limit = limit_variable(&version);
        guarded!(&mut session, |conn| sqlx::raw_sql(
            "START TRANSACTION READ ONLY, WITH CONSISTENT SNAPSHOT"
        )
        .execute(conn))?;
        Ok(session)
    }

    /// Kills the connection's thread from a fresh connection (the pool may be busy) and drops
    /// this session's connection so it is closed, never reused.
    pub(super) async fn kill(&mut self) {
        self.discard();
        if self.thread == 0 {
            return;
        }
        let opts = self.pool.connect_options();
        let thread = self.thread;
        let end = async {
            let mut other = MySqlConnection::connect_with(&opts).await?;
            sqlx::raw_sql(AssertSqlSafe(format!("KILL {thread}")))
                .execute(&mut other)
                .await?;
            other.close().await
        };
        if let Err(e) = tokio::time::timeout(Duration::from_secs(10), end)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
        {
            tracing::warn!(error = %e, "could not end a source query that ran past its deadline; its connection is closed");
        }
    }

    /// Runs a rendered statement and returns its rows.
    pub(super) async fn fetch_all(&mut self, rendered: &Rendered) -> Result<Vec<MySqlRow>, MyFail> {
        guarded!(self, |conn| bound(rendered).fetch_all(conn))
    }

    /// Lifts the server's statement timeout for the rest of this read (its one streamed
    /// statement), set by Rowfire just before it. MySQL and MariaDB measure that timeout over the
    /// whole statement, including the time it waits to hand rows to a reader that is claiming
    /// between pages, so it would end a long window read however quickly each page came; the
    /// stream bounds each chunk by the client deadline instead. [`MySession::close`] applies the
    /// limit again before the connection goes back to the pool.
    pub(super) async fn lift_statement_limit(&mut self) -> Result<(), MyFail> {
        let set = format!("SET SESSION {} = 0", self.limit);
        guarded!(self, |conn| sqlx::raw_sql(AssertSqlSafe(set)).execute(conn))?;
        Ok(())
    }

    /// The session's connection, for a statement the caller runs under its own deadline
    /// ([`MySession::kill`] past it). `None` once the connection was discarded.
    pub(super) fn connection(&mut self) -> Option<&mut MySqlConnection> {
        self.conn.as_deref_mut()
    }

    /// The source's statement timeout.
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Describes a statement's output columns.
    pub(super) async fn describe(&mut self, sql: &str) -> Result<Vec<Column>, MyFail> {
        let described = guarded!(self, |conn| conn
            .prepare(AssertSqlSafe(sql.to_string()).into_sql_str()))?;
        Ok(Column::list(described.columns()))
    }

    /// Ends the read: rolls back and applies the session's settings again, then returns the
    /// connection to the pool. If any step fails the connection is closed instead.
    pub(in crate::source) async fn close(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let timeout = self.timeout;
        let clean = async {
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            apply(&mut conn, timeout).await
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

impl Drop for MySession {
    /// A session that was not closed cleanly (an error, a timeout, a reader dropped halfway)
    /// may be inside its transaction: its connection is closed, not reused.
    fn drop(&mut self) {
        self.discard();
    }
}

/// Runs statements the way reads run: inside a read-only, consistent-snapshot transaction.
pub(in crate::source) async fn execute(
    pool: &MySqlPool,
    sql: &str,
    timeout: Duration,
) -> Result<(), MyFail> {
    let mut session = MySession::open(pool, timeout).await?;
    guarded!(&mut session, |conn| sqlx::raw_sql(AssertSqlSafe(
        sql.to_string()
    ))
    .execute(conn))?;
    session.close().await;
    Ok(())
}
