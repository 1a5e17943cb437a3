//! The fork between source engines: each engine's pool and read session, and every `match`
//! over them, so the rest of `source` never names an engine. A new engine is a new file beside
//! `postgres.rs`, `sqlite.rs` and `mysql.rs` plus one arm per match here (and its [`Dialect`] in
//! the guard).
//! Also what connecting shares: the connect error and the pool every engine opens.

use std::time::Duration;

use sqlx::pool::PoolOptions;
use sqlx::{MySqlPool, PgPool, SqlitePool};

use super::window::{FetchError, Fetched, ReadAhead};
use super::{Column, Source, SourceError, mysql, postgres, sqlite};
use crate::row::Value;
use crate::sql_guard::{CheckedQuery, Dialect, Rendered, Shape, Window};

/// Why an engine could not connect.
pub(super) enum ConnectError {
    /// The DSN does not parse as the engine's URL.
    Dsn,
    /// The database could not be reached or opened.
    Connect { shown: String, message: String },
}

/// Opens a pool of at most two connections with `options` (the engine's own settings), naming
/// the source `shown` if it cannot connect.
pub(super) async fn open_pool<DB: sqlx::Database>(
    options: PoolOptions<DB>,
    connect: <DB::Connection as sqlx::Connection>::Options,
    shown: String,
) -> Result<(sqlx::Pool<DB>, String), ConnectError> {
    let pool = options
        .max_connections(2)
        .connect_with(connect)
        .await
        .map_err(|e| ConnectError::Connect {
            shown: shown.clone(),
            message: e.to_string(),
        })?;
    Ok((pool, shown))
}

/// Whether the database ended a statement for running past its timeout.
pub(super) fn timed_out(dialect: Dialect, e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => match dialect {
            Dialect::Postgres => db.code().as_deref() == Some("57014"),
            // SQLITE_INTERRUPT (9), the code the timeout's interrupt leaves, by number rather
            // than by the words of its message.
            Dialect::Sqlite => db
                .code()
                .and_then(|c| c.parse::<i64>().ok())
                .is_some_and(|c| c & 0xff == 9),
            Dialect::Mysql => mysql::timed_out(e),
        },
        _ => false,
    }
}

/// Advice for a database error that has a usual fix, by engine and error (MySQL's numbers):
/// appended to the database's own message.
pub(super) fn advice(dialect: Dialect, e: &sqlx::Error) -> Option<&'static str> {
    if dialect != Dialect::Mysql {
        return None;
    }
    Some(match mysql::error_number(e)? {
        // Access denied to a table, a column or the database.
        1142 | 1143 | 1044 => {
            "grant the source's user SELECT on the tables the trigger reads (GRANT SELECT ON app.* TO 'rowfire'@'%'), and nothing more"
        }
        1054 => "check the column names in the trigger's SQL (MySQL quotes names with backticks)",
        1146 => "check the table's name and that the DSN names the database that holds it",
        1792 => "sources are only read; a trigger is one SELECT",
        _ => return None,
    })
}

/// A source's connections, per engine.
#[derive(Debug, Clone)]
pub(super) enum Pool {
    Postgres(PgPool),
    Sqlite(SqlitePool),
    Mysql(MySqlPool),
}

/// One read of a window, per engine: a read-only snapshot held across its pages, read in one
/// ordered pass ([`Session::start`], then [`Session::next_rows`]).
pub(super) enum Session {
    Postgres(postgres::PgSession),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    /// A SQLite read once its one statement steps (it owns the transaction).
    SqliteStream(sqlite::SqliteStream),
    /// A PostgreSQL read once its statement streams (its task owns the session).
    PostgresStream(ReadAhead),
    Mysql(mysql::MySession),
    /// A MySQL or MariaDB read once its statement streams (its task owns the session).
    MysqlStream(ReadAhead),
    /// Only while a read hands its session to its pass.
    Moved,
}

impl Pool {
    /// Connects to `dsn` in `dialect`, returning the pool and where it is, without secrets.
    pub(super) async fn connect(
        dialect: Dialect,
        dsn: &str,
        timeout: Duration,
        pinned: Option<&super::Pinned>,
    ) -> Result<(Pool, String), ConnectError> {
        Ok(match dialect {
            Dialect::Postgres => {
                let (pool, shown) = postgres::connect(dsn, timeout, pinned).await?;
                (Pool::Postgres(pool), shown)
            }
            Dialect::Sqlite => {
                let (pool, shown) = sqlite::connect(dsn).await?;
                (Pool::Sqlite(pool), shown)
            }
            Dialect::Mysql => {
                let (pool, shown) = mysql::connect(dsn, timeout, pinned).await?;
                (Pool::Mysql(pool), shown)
            }
        })
    }

    /// The output columns of a rendered `LIMIT 0` statement, run in a read.
    pub(super) async fn columns(
        &self,
        source: &Source,
        rendered: &Rendered,
    ) -> Result<Vec<Column>, SourceError> {
        match self {
            Pool::Postgres(pool) => postgres::columns(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::columns(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.query_error(e)),
            Pool::Mysql(pool) => mysql::columns(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.my_error(e)),
        }
    }

    /// Runs a rendered `SELECT count(*)` statement.
    pub(super) async fn count(
        &self,
        source: &Source,
        rendered: &Rendered,
    ) -> Result<u64, SourceError> {
        match self {
            Pool::Postgres(pool) => postgres::count(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::count(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.query_error(e)),
            Pool::Mysql(pool) => mysql::count(pool, rendered, source.timeout)
                .await
                .map_err(|e| source.my_error(e)),
        }
    }

    /// Runs a `SELECT count(*), columns…` statement: the count and one counted row's columns.
    /// `None` on an engine whose clocks are typed times, so none is unreadable (PostgreSQL,
    /// MySQL).
    pub(super) async fn count_with_example(
        &self,
        source: &Source,
        rendered: &Rendered,
    ) -> Result<Option<(u64, Vec<Value>)>, SourceError> {
        match self {
            Pool::Postgres(_) | Pool::Mysql(_) => Ok(None),
            Pool::Sqlite(pool) => sqlite::count_with_example(pool, rendered, source.timeout)
                .await
                .map(Some)
                .map_err(|e| source.query_error(e)),
        }
    }

    /// Opens a read in one read-only snapshot.
    pub(super) async fn open(&self, source: &Source) -> Result<Session, SourceError> {
        Ok(match self {
            Pool::Postgres(pool) => Session::Postgres(
                postgres::PgSession::open(pool, source.timeout)
                    .await
                    .map_err(|e| source.pg_error(e))?,
            ),
            Pool::Sqlite(pool) => Session::Sqlite(
                sqlite::begin(pool)
                    .await
                    .map_err(|e| source.query_error(e))?,
            ),
            Pool::Mysql(pool) => Session::Mysql(
                mysql::MySession::open(pool, source.timeout)
                    .await
                    .map_err(|e| source.my_error(e))?,
            ),
        })
    }

    /// The catalogue's facts, read by Rowfire's own statement in a read.
    pub(super) async fn catalogue(&self, source: &Source) -> Result<Vec<[String; 4]>, SourceError> {
        match self {
            Pool::Postgres(pool) => postgres::catalogue(pool, source.timeout)
                .await
                .map_err(|e| source.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::catalogue(pool, source.timeout)
                .await
                .map_err(|e| source.query_error(e)),
            Pool::Mysql(pool) => mysql::catalogue(pool, source.timeout)
                .await
                .map_err(|e| source.my_error(e)),
        }
    }

    /// Runs statements without the guard, the way reads run (tests only).
    pub(super) async fn execute(&self, source: &Source, sql: &str) -> Result<(), SourceError> {
        match self {
            Pool::Postgres(pool) => postgres::execute(pool, sql, source.timeout)
                .await
                .map_err(|e| source.pg_error(e)),
            Pool::Sqlite(pool) => sqlite::execute(pool, sql)
                .await
                .map_err(|e| source.query_error(e)),
            Pool::Mysql(pool) => mysql::execute(pool, sql, source.timeout)
                .await
                .map_err(|e| source.my_error(e)),
        }
    }
}

impl Session {
    /// Per key column, whether the one pass is ordered by it (after the clock): on PostgreSQL
    /// only the columns whose type a page may be cut on, learned by describing the query in
    /// the read (so the server does not sort by text under its collation for nothing); on the
    /// other engines every key column.
    pub(super) async fn sorted_keys(
        &mut self,
        query: &CheckedQuery,
        shape: Shape<'_>,
        window: Window,
    ) -> Result<Vec<bool>, FetchError> {
        match self {
            Session::Postgres(session) => {
                postgres::sorted_keys(session, &query.columns_sql(window), shape).await
            }
            _ => Ok(vec![true; shape.key.len()]),
        }
    }

    /// Starts the one ordered pass of `rendered` (a window statement): on PostgreSQL, MySQL and
    /// MariaDB the statement streamed by a task that owns the session (its limits:
    /// `postgres/stream.rs`, `mysql/stream.rs`), on SQLite the statement stepping in a task
    /// that owns the transaction.
    pub(super) async fn start(
        &mut self,
        source: &Source,
        rendered: &Rendered,
        shape: Shape<'_>,
    ) -> Result<(), FetchError> {
        let rows = super::window::chunk_rows(source.page_size.max(1));
        match std::mem::replace(self, Session::Moved) {
            Session::Postgres(session) => {
                *self = Session::PostgresStream(postgres::start_pass(
                    session,
                    rendered,
                    shape,
                    rows,
                    source.page_bytes,
                ));
                Ok(())
            }
            Session::Sqlite(tx) => {
                *self = Session::SqliteStream(sqlite::SqliteStream::start(
                    tx,
                    rendered,
                    shape,
                    source.timeout,
                ));
                Ok(())
            }
            Session::Mysql(session) => {
                *self = Session::MysqlStream(mysql::start_pass(
                    session,
                    rendered,
                    shape,
                    rows,
                    source.page_bytes,
                ));
                Ok(())
            }
            started @ (Session::SqliteStream(_)
            | Session::PostgresStream(_)
            | Session::MysqlStream(_)
            | Session::Moved) => {
                *self = started;
                Err(not_started())
            }
        }
    }

    /// The next `rows` rows of the one pass (fewer at the window's end), their values within
    /// `max_bytes`.
    pub(super) async fn next_rows(
        &mut self,
        rows: usize,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        match self {
            Session::SqliteStream(stream) => stream.next(rows, max_bytes).await,
            Session::PostgresStream(stream) | Session::MysqlStream(stream) => stream.next().await,
            Session::Postgres(_) | Session::Sqlite(_) | Session::Mysql(_) | Session::Moved => {
                Err(not_started())
            }
        }
    }

    /// Ends the read-only snapshot.
    pub(super) async fn finish(self) {
        match self {
            Session::Postgres(session) => session.close().await,
            Session::Sqlite(tx) => {
                let _ = tx.rollback().await;
            }
            Session::SqliteStream(stream) => stream.finish().await,
            Session::PostgresStream(stream) => stream.finish().await,
            Session::Mysql(session) => session.close().await,
            Session::MysqlStream(stream) => stream.finish().await,
            Session::Moved => {}
        }
    }
}

/// A pass asked of a session in the wrong state (a bug, reported rather than a panic).
fn not_started() -> FetchError {
    FetchError::Sql(sqlx::Error::Protocol(
        "a window read was asked of a session that does not read it that way".into(),
    ))
}
