//! PostgreSQL sources: read-only sessions, typed decoding, UTC session time zone.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff_sqlx::ToSqlx;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow, PgTypeInfo, PgTypeKind};
use sqlx::query::Query;
use sqlx::{
    AssertSqlSafe, Column as _, Connection as _, Executor, PgPool, Postgres, Row as _, SqlSafeStr,
    Statement as _, TypeInfo, ValueRef,
};

use super::{Column, FetchError, Fetched, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{Bind, Rendered, Shape};

pub(super) enum ConnectError {
    Dsn,
    Connect { shown: String, message: String },
}

pub(super) async fn connect(
    dsn: &str,
    timeout: Duration,
) -> Result<(PgPool, String), ConnectError> {
    let opts = PgConnectOptions::from_str(dsn).map_err(|_| ConnectError::Dsn)?;
    let shown = format!(
        "{}:{}/{}",
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("")
    );
    let timeout_ms = timeout.as_millis().to_string();
    let opts = opts.application_name("rowfire").options([
        ("default_transaction_read_only", "on"),
        ("statement_timeout", timeout_ms.as_str()),
        ("TimeZone", "UTC"),
        // The guard re-renders string literals as PostgreSQL reads them with standard strings
        // (a backslash is an ordinary character); a server or role configured with
        // `standard_conforming_strings = off` would read `'a\'` as an open string and run
        // text the guard saw as a literal. Trigger SQL cannot change it (no `set_config`).
        ("standard_conforming_strings", "on"),
    ]);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(timeout.min(Duration::from_secs(10)))
        .connect_with(opts)
        .await
        .map_err(|e| ConnectError::Connect {
            shown: shown.clone(),
            message: e.to_string(),
        })?;
    Ok((pool, shown))
}

fn bound(rendered: &Rendered) -> Query<'_, Postgres, PgArguments> {
    let mut q = sqlx::query(AssertSqlSafe(rendered.sql.clone()));
    for b in &rendered.binds {
        q = match b {
            Bind::Instant(ts) | Bind::Clock(ts) => q.bind(ts.to_sqlx()),
            Bind::Value { value, .. } => q.bind(value.to_sql_text()),
        };
    }
    q
}

/// Why a statement on a source session failed.
pub(super) enum PgFail {
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
pub(super) struct PgSession {
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
    pub(super) async fn open(pool: &PgPool, timeout: Duration) -> Result<PgSession, PgFail> {
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
    pub(super) async fn fetch_all(&mut self, rendered: &Rendered) -> Result<Vec<PgRow>, PgFail> {
        self.relimit().await?;
        guarded!(self, |conn| bound(rendered).fetch_all(conn))
    }

    /// Runs a rendered page statement after setting the limits again, reading its rows one by
    /// one as they arrive: `Ok(None)` as soon as their values pass `max_bytes`, before more are
    /// read (the session is then dropped, so its connection is closed, not drained).
    pub(super) async fn fetch_bounded(
        &mut self,
        rendered: &Rendered,
        max_bytes: usize,
    ) -> Result<Option<Vec<PgRow>>, PgFail> {
        self.relimit().await?;
        guarded!(self, |conn| async move {
            use futures_util::TryStreamExt as _;
            let mut stream = bound(rendered).fetch(conn);
            let mut rows = Vec::new();
            let mut bytes = 0usize;
            while let Some(row) = stream.try_next().await? {
                bytes = bytes.saturating_add(row_bytes(&row));
                if bytes > max_bytes {
                    return Ok(None);
                }
                rows.push(row);
            }
            Ok(Some(rows))
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
    pub(super) async fn close(mut self) {
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

/// The query's output columns (from a prepared statement's description), after running it
/// with `LIMIT 0` in a read.
pub(super) async fn columns(
    pool: &PgPool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<Vec<Column>, PgFail> {
    let mut session = PgSession::open(pool, timeout).await?;
    let described = session.describe(&rendered.sql).await?;
    session.fetch_all(rendered).await?;
    session.close().await;
    Ok(described)
}

pub(super) async fn count(
    pool: &PgPool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<u64, PgFail> {
    let mut session = PgSession::open(pool, timeout).await?;
    let rows = session.fetch_all(rendered).await?;
    session.close().await;
    let row = rows.first().ok_or(PgFail::Sql(sqlx::Error::RowNotFound))?;
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

/// Runs statements the way reads run: inside a read-only transaction whose snapshot is taken.
pub(super) async fn execute(pool: &PgPool, sql: &str, timeout: Duration) -> Result<(), PgFail> {
    let mut session = PgSession::open(pool, timeout).await?;
    session.relimit().await?;
    guarded!(&mut session, |conn| sqlx::raw_sql(AssertSqlSafe(
        sql.to_string()
    ))
    .execute(conn))?;
    session.close().await;
    Ok(())
}

/// What a row's values take in memory, roughly: their wire size, at least 8 bytes each.
fn row_bytes(row: &PgRow) -> usize {
    (0..row.len())
        .map(|i| {
            row.try_get_raw(i)
                .ok()
                .and_then(|v| v.as_bytes().ok().map(<[u8]>::len))
                .unwrap_or(0)
                .max(8)
        })
        .sum()
}

#[derive(Clone, Copy)]
enum Kind {
    Bool,
    I2,
    I4,
    I8,
    F4,
    F8,
    Numeric,
    Text,
    TimestampTz,
    Timestamp,
    Date,
    Json,
    Uuid,
    Bytes,
}

fn kind_of(ty: &PgTypeInfo) -> Option<Kind> {
    Some(match ty.name() {
        "BOOL" => Kind::Bool,
        "INT2" => Kind::I2,
        "INT4" => Kind::I4,
        "INT8" => Kind::I8,
        "FLOAT4" => Kind::F4,
        "FLOAT8" => Kind::F8,
        "NUMERIC" => Kind::Numeric,
        "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" | "CITEXT" | "citext" => Kind::Text,
        "TIMESTAMPTZ" => Kind::TimestampTz,
        "TIMESTAMP" => Kind::Timestamp,
        "DATE" => Kind::Date,
        "JSON" | "JSONB" => Kind::Json,
        "UUID" => Kind::Uuid,
        "BYTEA" => Kind::Bytes,
        _ if matches!(ty.kind(), PgTypeKind::Enum(_)) => Kind::Text,
        _ => return None,
    })
}

fn decode(row: &PgRow, i: usize, kind: Kind) -> Result<Value, sqlx::Error> {
    if row.try_get_raw(i)?.is_null() {
        return Ok(Value::Null);
    }
    Ok(match kind {
        Kind::Bool => Value::Bool(row.try_get_unchecked(i)?),
        Kind::I2 => Value::Int(row.try_get_unchecked::<i16, _>(i)?.into()),
        Kind::I4 => Value::Int(row.try_get_unchecked::<i32, _>(i)?.into()),
        Kind::I8 => Value::Int(row.try_get_unchecked(i)?),
        Kind::F4 => Value::Float(row.try_get_unchecked::<f32, _>(i)?.into()),
        Kind::F8 => Value::Float(row.try_get_unchecked(i)?),
        Kind::Numeric => {
            let raw = row.try_get_raw(i)?;
            let bytes = raw.as_bytes().map_err(sqlx::Error::Decode)?;
            let text = numeric_text(bytes)
                .ok_or_else(|| sqlx::Error::Decode("malformed NUMERIC value".into()))?;
            Value::Decimal(text)
        }
        Kind::Text => Value::Text(row.try_get_unchecked(i)?),
        Kind::TimestampTz => Value::Timestamp(
            row.try_get_unchecked::<jiff_sqlx::Timestamp, _>(i)?
                .to_jiff(),
        ),
        Kind::Timestamp => {
            let civil = row
                .try_get_unchecked::<jiff_sqlx::DateTime, _>(i)?
                .to_jiff();
            match civil.to_zoned(jiff::tz::TimeZone::UTC) {
                Ok(z) => Value::Timestamp(z.timestamp()),
                Err(_) => Value::Null,
            }
        }
        Kind::Date => Value::Date(row.try_get_unchecked::<jiff_sqlx::Date, _>(i)?.to_jiff()),
        Kind::Json => Value::Json(row.try_get_unchecked(i)?),
        Kind::Uuid => Value::Text(
            row.try_get_unchecked::<sqlx::types::Uuid, _>(i)?
                .to_string(),
        ),
        Kind::Bytes => Value::Bytes(row.try_get_unchecked(i)?),
    })
}

/// Reads PostgreSQL's binary NUMERIC (base-10000 digit groups with a weight, a sign and a
/// display scale) as plain decimal text with exactly the display scale: `1.10` stays `1.10`.
/// Written here because the decimal crates' decoders drop the display scale.
fn numeric_text(bytes: &[u8]) -> Option<String> {
    let word = |i: usize| {
        bytes
            .get(i..i + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i32::from(word(2)? as i16);
    let sign = word(4)?;
    let dscale = usize::from(word(6)?);
    match sign {
        0xC000 => return Some("NaN".into()),
        0xD000 => return Some("Infinity".into()),
        0xF000 => return Some("-Infinity".into()),
        0x0000 | 0x4000 => {}
        _ => return None,
    }
    let digits: Vec<u16> = (0..ndigits)
        .map(|k| word(8 + 2 * k))
        .collect::<Option<_>>()?;
    let group = |index: i32| {
        usize::try_from(index)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    let mut text = if sign == 0x4000 {
        String::from("-")
    } else {
        String::new()
    };
    if weight < 0 {
        text.push('0');
    } else {
        text.push_str(&group(0).to_string());
        for w in 1..=weight {
            text.push_str(&format!("{:04}", group(w)));
        }
    }
    if dscale > 0 {
        let mut fraction = String::new();
        let mut index = weight + 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", group(index)));
            index += 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Some(text)
}

pub(super) async fn fetch(
    session: &mut PgSession,
    rendered: &Rendered,
    shape: Shape<'_>,
    max_bytes: usize,
) -> Result<Fetched, FetchError> {
    let pg_rows = session
        .fetch_bounded(rendered, max_bytes)
        .await
        .map_err(|e| match e {
            PgFail::Sql(e) => FetchError::Sql(e),
            PgFail::Deadline => FetchError::Deadline,
        })?
        .ok_or(FetchError::TooLarge { limit: max_bytes })?;
    let Some(first) = pg_rows.first() else {
        return Ok(Fetched::empty());
    };
    let cols = first.columns();
    let columns: Arc<[String]> = cols.iter().map(|c| c.name().to_string()).collect();
    let types: Vec<Option<String>> = cols
        .iter()
        .map(|c| Some(c.type_info().name().to_string()))
        .collect();
    let kinds = cols
        .iter()
        .map(|c| {
            kind_of(c.type_info()).ok_or_else(|| FetchError::Unsupported {
                column: c.name().to_string(),
                type_name: c.type_info().name().to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (clock, key) = positions(&columns, shape, &types);
    let mut rows = Vec::with_capacity(pg_rows.len());
    for r in &pg_rows {
        let values = kinds
            .iter()
            .enumerate()
            .map(|(i, k)| decode(r, i, *k))
            .collect::<Result<Vec<_>, _>>()?;
        let clock_at = values[clock.0].as_timestamp();
        rows.push(Row {
            columns: columns.clone(),
            values,
            clock: clock_at,
        });
    }
    Ok(Fetched {
        rows,
        sort_clocks: None,
        clock,
        key,
    })
}

#[cfg(test)]
mod tests {
    use super::numeric_text;

    fn numeric(weight: i16, sign: u16, dscale: u16, digits: &[u16]) -> Vec<u8> {
        let mut out = Vec::new();
        for word in [digits.len() as u16, weight as u16, sign, dscale]
            .into_iter()
            .chain(digits.iter().copied())
        {
            out.extend_from_slice(&word.to_be_bytes());
        }
        out
    }

    #[test]
    fn numerics_keep_their_display_scale() {
        assert_eq!(numeric_text(&numeric(0, 0, 2, &[1, 1000])).unwrap(), "1.10");
        assert_eq!(numeric_text(&numeric(0, 0, 1, &[1, 1000])).unwrap(), "1.1");
        assert_eq!(
            numeric_text(&numeric(-2, 0, 7, &[10])).unwrap(),
            "0.0000001"
        );
        assert_eq!(
            numeric_text(&numeric(1, 0x4000, 1, &[1, 2345, 6000])).unwrap(),
            "-12345.6"
        );
        assert_eq!(numeric_text(&numeric(2, 0, 0, &[1])).unwrap(), "100000000");
        assert_eq!(numeric_text(&numeric(0, 0, 3, &[])).unwrap(), "0.000");
        assert_eq!(numeric_text(&numeric(0, 0xC000, 0, &[])).unwrap(), "NaN");
        assert_eq!(numeric_text(&[0, 1]), None);
    }
}
