//! SQLite sources: opened read-only with `query_only`, a progress-handler statement timeout,
//! and clocks compared as `strftime('%Y-%m-%d %H:%M:%f')` text.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{
    AssertSqlSafe, Column as _, Executor, Row as _, SqlSafeStr, Sqlite, SqliteConnection,
    SqlitePool, Statement as _, TypeInfo, ValueRef,
};

use super::{Column, FetchError, Fetched, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{Bind, Rendered, SQLITE_CLOCK_COLUMN, Shape, sqlite_clock_text};

pub(super) enum ConnectError {
    Dsn,
    Connect { shown: String, message: String },
}

pub(super) async fn connect(dsn: &str) -> Result<(SqlitePool, String), ConnectError> {
    let opts = SqliteConnectOptions::from_str(dsn).map_err(|_| ConnectError::Dsn)?;
    let file = opts.get_filename().to_path_buf();
    let shown = format!(
        "sqlite:{}",
        file.file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    if !file.exists() {
        let message = format!(
            "no database file at {}; check the path in the DSN",
            file.display()
        );
        return Err(ConnectError::Connect { shown, message });
    }
    let opts = opts
        .read_only(true)
        .create_if_missing(false)
        .pragma("query_only", "ON");
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(opts)
        .await
        .map_err(|e| ConnectError::Connect {
            shown: shown.clone(),
            message: e.to_string(),
        })?;
    Ok((pool, shown))
}

fn bound(rendered: &Rendered) -> Query<'_, Sqlite, SqliteArguments> {
    let mut q = sqlx::query(AssertSqlSafe(rendered.sql.clone()));
    for b in &rendered.binds {
        q = match b {
            Bind::Instant(ts) => q.bind(sqlite_clock_text(*ts)),
            Bind::Value { value, .. } => match value {
                Value::Null => q.bind(None::<String>),
                Value::Bool(b) => q.bind(*b),
                Value::Int(i) => q.bind(*i),
                Value::Float(f) => q.bind(*f),
                Value::Bytes(b) => q.bind(b.clone()),
                other => q.bind(other.to_sql_text()),
            },
        };
    }
    q
}

/// Interrupts any statement on `conn` that runs past `timeout` from now.
async fn arm_timeout(conn: &mut SqliteConnection, timeout: Duration) -> Result<(), sqlx::Error> {
    let deadline = Instant::now() + timeout;
    conn.lock_handle()
        .await?
        .set_progress_handler(10_000, move || Instant::now() < deadline);
    Ok(())
}

pub(super) async fn begin(
    pool: &SqlitePool,
) -> Result<sqlx::Transaction<'static, Sqlite>, sqlx::Error> {
    pool.begin().await
}

pub(super) async fn columns(
    pool: &SqlitePool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<Vec<Column>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let described = (&mut *conn)
        .prepare(AssertSqlSafe(rendered.sql.clone()).into_sql_str())
        .await?;
    arm_timeout(&mut conn, timeout).await?;
    bound(rendered).fetch_all(&mut *conn).await?;
    Ok(described
        .columns()
        .iter()
        .map(|c| Column {
            name: c.name().to_string(),
            type_name: c.type_info().name().to_string(),
        })
        .collect())
}

pub(super) async fn count(
    pool: &SqlitePool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<u64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    arm_timeout(&mut conn, timeout).await?;
    let row = bound(rendered).fetch_one(&mut *conn).await?;
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

/// Runs statements on a source connection as it is opened for reads.
pub(super) async fn execute(pool: &SqlitePool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .map(|_| ())
}

fn decode(row: &sqlx::sqlite::SqliteRow, i: usize) -> Result<Value, sqlx::Error> {
    let raw = row.try_get_raw(i)?;
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let storage = raw.type_info().name().to_string();
    Ok(match storage.as_str() {
        "INTEGER" | "BOOLEAN" => Value::Int(row.try_get_unchecked(i)?),
        "REAL" => Value::Float(row.try_get_unchecked(i)?),
        "BLOB" => Value::Bytes(row.try_get_unchecked(i)?),
        _ => Value::Text(row.try_get_unchecked(i)?),
    })
}

pub(super) async fn fetch(
    tx: &mut sqlx::Transaction<'static, Sqlite>,
    rendered: &Rendered,
    shape: Shape<'_>,
    timeout: Duration,
) -> Result<Fetched, FetchError> {
    arm_timeout(tx, timeout).await?;
    let lite_rows = bound(rendered).fetch_all(&mut **tx).await?;
    let Some(first) = lite_rows.first() else {
        return Ok(Fetched::empty());
    };
    let cols = first.columns();
    // The last column is Rowfire's normalised clock; callers see only the author's columns.
    let width = cols.len() - 1;
    debug_assert_eq!(cols[width].name(), SQLITE_CLOCK_COLUMN);
    let columns: Arc<[String]> = cols[..width].iter().map(|c| c.name().to_string()).collect();
    let (clock, key) = positions(&columns, shape, &vec![None; width]);
    let mut rows = Vec::with_capacity(lite_rows.len());
    let mut sort_clocks = Vec::with_capacity(lite_rows.len());
    for r in &lite_rows {
        let values = (0..width)
            .map(|i| decode(r, i))
            .collect::<Result<Vec<_>, _>>()?;
        let sort_clock = decode(r, width)?;
        let at = sort_clock.as_timestamp();
        sort_clocks.push(sort_clock);
        rows.push(Row {
            columns: columns.clone(),
            values,
            clock: at,
        });
    }
    Ok(Fetched {
        rows,
        sort_clocks: Some(sort_clocks),
        clock,
        key,
    })
}
