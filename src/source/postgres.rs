//! PostgreSQL sources: read-only sessions, typed decoding, UTC session time zone.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff_sqlx::ToSqlx;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions, PgRow, PgTypeInfo, PgTypeKind};
use sqlx::query::Query;
use sqlx::{
    AssertSqlSafe, Column as _, Executor, PgPool, Postgres, Row as _, SqlSafeStr, Statement as _,
    TypeInfo, ValueRef,
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
    ]);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(10))
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
            Bind::Instant(ts) => q.bind(ts.to_sqlx()),
            Bind::Value { value, .. } => q.bind(value.to_sql_text()),
        };
    }
    q
}

pub(super) async fn begin(
    pool: &PgPool,
) -> Result<sqlx::Transaction<'static, Postgres>, sqlx::Error> {
    pool.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        .await
}

pub(super) async fn columns(
    pool: &PgPool,
    rendered: &Rendered,
) -> Result<Vec<Column>, sqlx::Error> {
    let described = pool
        .prepare(AssertSqlSafe(rendered.sql.clone()).into_sql_str())
        .await?;
    let mut tx = begin(pool).await?;
    bound(rendered).fetch_all(&mut *tx).await?;
    tx.rollback().await?;
    Ok(described
        .columns()
        .iter()
        .map(|c| Column {
            name: c.name().to_string(),
            type_name: c.type_info().name().to_string(),
        })
        .collect())
}

pub(super) async fn count(pool: &PgPool, rendered: &Rendered) -> Result<u64, sqlx::Error> {
    let mut tx = begin(pool).await?;
    let row = bound(rendered).fetch_one(&mut *tx).await?;
    tx.rollback().await?;
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

pub(super) async fn execute(pool: &PgPool, sql: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
        .execute(pool)
        .await
        .map(|_| ())
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
        Kind::Numeric => Value::Decimal(
            row.try_get_unchecked::<sqlx::types::BigDecimal, _>(i)?
                .to_plain_string(),
        ),
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

pub(super) async fn fetch(
    tx: &mut sqlx::Transaction<'static, Postgres>,
    rendered: &Rendered,
    shape: Shape<'_>,
    _source: &str,
) -> Result<Fetched, FetchError> {
    let pg_rows = bound(rendered).fetch_all(&mut **tx).await?;
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
