//! PostgreSQL sources: connecting with a read-only, UTC session, and the one-shot statements
//! (columns, counts) and pages read through a session (`postgres/session.rs`), whose values
//! `postgres/decode.rs` decodes.

mod decode;
mod session;
mod stream;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff_sqlx::ToSqlx;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Column as _, PgPool, Postgres, Row as _, TypeInfo};

use super::engine::{ConnectError, open_pool};
use super::{Column, FetchError, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{Bind, Rendered, Shape};
use decode::{decode_into, kind_of};
pub(super) use session::{PgFail, PgSession, execute};

pub(super) async fn connect(
    dsn: &str,
    timeout: Duration,
    pinned: Option<&super::Pinned>,
) -> Result<(PgPool, String), ConnectError> {
    let mut opts = PgConnectOptions::from_str(dsn).map_err(|_| ConnectError::Dsn)?;
    // A tenant's source: to the address checked, with the DSN's own password (empty when it
    // gives none), never one the driver found in this process's environment or ~/.pgpass.
    if let Some(pinned) = pinned {
        opts = opts.hostaddr(pinned.addr).password(&pinned.password);
    }
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
    let options = PgPoolOptions::new().acquire_timeout(timeout.min(Duration::from_secs(10)));
    open_pool(options, opts, shown).await
}

fn bound(rendered: &Rendered) -> Query<'_, Postgres, PgArguments> {
    let mut q = sqlx::query(AssertSqlSafe(rendered.sql.clone()));
    for b in &rendered.binds {
        q = match b {
            Bind::Instant(ts) | Bind::Clock(ts) => q.bind(ts.to_sqlx()),
        };
    }
    q
}
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
/// Per key column, whether a window's one pass is ordered by it: only columns whose type a
/// page can be cut on (see `decode::cuts`). The query's output columns are described in the
/// read (parsed and planned, not run); a key column not found is ordered by, as before.
pub(super) async fn sorted_keys(
    session: &mut PgSession,
    columns: &Rendered,
    shape: Shape<'_>,
) -> Result<Vec<bool>, FetchError> {
    let described = session.describe(&columns.sql).await.map_err(|e| match e {
        PgFail::Sql(e) => FetchError::Sql(e),
        PgFail::Deadline => FetchError::Deadline,
    })?;
    Ok(shape
        .key
        .iter()
        .map(|k| {
            described
                .iter()
                .find(|c| &c.name == k)
                .is_none_or(|c| decode::cuts(&c.type_name))
        })
        .collect())
}

/// How a statement's rows decode: column names shared by every row, each column's kind, and
/// where the clock and key are.
struct Decoder {
    columns: Arc<[String]>,
    kinds: Vec<decode::Kind>,
    clock: usize,
    key: Vec<usize>,
}

impl Decoder {
    fn new(first: &sqlx::postgres::PgRow, shape: Shape<'_>) -> Result<Decoder, FetchError> {
        let cols = first.columns();
        let columns: Arc<[String]> = cols.iter().map(|c| c.name().to_string()).collect();
        let kinds = cols
            .iter()
            .map(|c| {
                kind_of(c.type_info()).ok_or_else(|| FetchError::Unsupported {
                    column: c.name().to_string(),
                    type_name: c.type_info().name().to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (clock, key) = positions(&columns, shape);
        Ok(Decoder {
            columns,
            kinds,
            clock,
            key,
        })
    }

    /// Decodes one row, with what its values take (by `window::value_bytes`).
    fn row(&self, r: &sqlx::postgres::PgRow) -> Result<(Row, usize), FetchError> {
        let mut values = Vec::with_capacity(self.kinds.len());
        let mut size = 0usize;
        for (i, k) in self.kinds.iter().enumerate() {
            size += decode_into(r, i, *k, &mut values)?;
        }
        let clock = values.get(self.clock).and_then(Value::as_timestamp);
        let row = Row {
            columns: self.columns.clone(),
            values,
            clock,
        };
        Ok((row, size))
    }
}

pub(super) use stream::start as start_pass;

/// The catalogue of the session's current schema, as its user sees it: columns from
/// `information_schema` (only those the user may read), keys and indexes from `pg_catalog`
/// (which every user may read), one fact per row.
const CATALOGUE_SQL: &str = "SELECT kind, tbl, col, extra FROM (\
     SELECT 'column' AS kind, c.table_name::text AS tbl, c.column_name::text AS col, \
            c.data_type::text AS extra, c.ordinal_position::int AS pos \
       FROM information_schema.columns c WHERE c.table_schema = pg_catalog.current_schema() \
     UNION ALL \
     SELECT CASE c.contype WHEN 'p' THEN 'primary' ELSE 'foreign' END, t.relname::text, \
            a.attname::text, coalesce(r.relname::text, ''), k.ord::int \
       FROM pg_catalog.pg_constraint c \
       JOIN pg_catalog.pg_class t ON t.oid = c.conrelid \
       JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
       CROSS JOIN LATERAL pg_catalog.unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord) \
       JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
       LEFT JOIN pg_catalog.pg_class r ON r.oid = c.confrelid \
      WHERE n.nspname = pg_catalog.current_schema() AND c.contype IN ('p', 'f') \
     UNION ALL \
     SELECT 'indexed', t.relname::text, a.attname::text, '', 0 \
       FROM pg_catalog.pg_index i \
       JOIN pg_catalog.pg_class t ON t.oid = i.indrelid \
       JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace \
       JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid AND a.attnum = i.indkey[0] \
      WHERE n.nspname = pg_catalog.current_schema()\
   ) AS f ORDER BY tbl, kind, pos LIMIT 200001";

/// Reads the catalogue's facts in a read.
pub(super) async fn catalogue(
    pool: &PgPool,
    timeout: Duration,
) -> Result<Vec<[String; 4]>, PgFail> {
    let mut session = PgSession::open(pool, timeout).await?;
    let rows = session
        .fetch_all(&Rendered {
            sql: CATALOGUE_SQL.to_string(),
            binds: Vec::new(),
        })
        .await?;
    session.close().await;
    rows.iter()
        .map(|r| {
            Ok([
                r.try_get("kind")?,
                r.try_get("tbl")?,
                r.try_get("col")?,
                r.try_get("extra")?,
            ])
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(PgFail::Sql)
}
