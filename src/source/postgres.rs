//! PostgreSQL sources: connecting with a read-only, UTC session, and the one-shot statements
//! (columns, counts) and pages read through a session (`postgres/session.rs`), whose values
//! `postgres/decode.rs` decodes.

mod decode;
mod session;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use jiff_sqlx::ToSqlx;
use sqlx::postgres::{PgArguments, PgConnectOptions, PgPoolOptions};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Column as _, PgPool, Postgres, Row as _, TypeInfo};

use super::engine::{ConnectError, open_pool};
use super::window::{Chunks, ReadAhead};
use super::{Column, FetchError, Fetched, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{Bind, Rendered, Shape};
use decode::{decode_into, kind_of};
pub(super) use session::{PgFail, PgSession, execute};

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
/// Reads one rendered statement's rows (a cursor's fetch of at most `rows`), decoding each row
/// as it arrives, so decoding overlaps the server producing the rest.
pub(super) async fn fetch(
    session: &mut PgSession,
    rendered: &Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
) -> Result<Fetched, FetchError> {
    let mut decoder: Option<Decoder> = None;
    // Sized up front, but never more than 4,096 rows ahead of what arrives.
    let mut sizes = Vec::with_capacity(rows.min(4096));
    let mut rows = Vec::with_capacity(rows.min(4096));
    let mut failed: Option<FetchError> = None;
    let read = session
        .fetch_each(rendered, max_bytes, |r| {
            let step = (|| {
                if decoder.is_none() {
                    decoder = Some(Decoder::new(r, shape)?);
                }
                let d = decoder.as_ref().expect("set above");
                let (row, size) = d.row(r)?;
                rows.push(row);
                sizes.push(size);
                Ok::<_, FetchError>(size)
            })();
            step.map_err(|e| {
                failed = Some(e);
                sqlx::Error::Protocol("decoding stopped".into())
            })
        })
        .await;
    if let Some(e) = failed {
        return Err(e);
    }
    let within = read.map_err(|e| match e {
        PgFail::Sql(e) => FetchError::Sql(e),
        PgFail::Deadline => FetchError::Deadline,
    })?;
    if !within {
        return Err(FetchError::TooLarge { limit: max_bytes });
    }
    let Some(d) = decoder else {
        return Ok(Fetched::empty());
    };
    Ok(Fetched {
        rows,
        sizes,
        key: d.key,
    })
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

/// The cursor a PostgreSQL read declares for its one pass over the window.
const CURSOR: &str = "rowfire_window";

/// Starts one ordered pass over a window on PostgreSQL: a `NO SCROLL` cursor for `rendered`
/// (a window statement) declared in the read's read-only transaction and fetched `rows` at a
/// time (each fetch within `max_bytes` of values) by a task that owns the session, one page
/// ahead of the reader. Each `FETCH` runs under the read's limits, set again before it.
/// Finished, the session is rolled back and cleaned as every read is; dropped, its task is
/// aborted and the connection closed.
pub(super) fn start_pass(
    session: PgSession,
    rendered: &Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
) -> ReadAhead {
    let declare = Rendered {
        sql: format!("DECLARE {CURSOR} NO SCROLL CURSOR FOR {}", rendered.sql),
        binds: rendered.binds.clone(),
    };
    let shape = (shape.clock.to_string(), shape.key.to_vec());
    ReadAhead::spawn(move |give| async move {
        let shape = Shape {
            clock: &shape.0,
            key: &shape.1,
        };
        stream(session, declare, shape, rows, max_bytes, give).await
    })
}

/// The fetching task: declares the cursor, then fetches chunk after chunk until the window
/// ends, a fetch fails or the reader stops.
async fn stream(
    mut session: PgSession,
    declare: Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
    give: Chunks,
) {
    if let Err(e) = session.fetch_all(&declare).await {
        let e = match e {
            PgFail::Sql(e) => FetchError::Sql(e),
            PgFail::Deadline => FetchError::Deadline,
        };
        let _ = give.send(Err(e)).await;
        // Dropped, not closed: a failed read's connection is never reused.
        return;
    }
    let next = Rendered {
        sql: format!("FETCH FORWARD {rows} FROM {CURSOR}"),
        binds: Vec::new(),
    };
    loop {
        let chunk = fetch(&mut session, &next, shape, rows, max_bytes).await;
        let (failed, last) = match &chunk {
            Ok(f) => (false, f.rows.len() < rows),
            Err(_) => (true, true),
        };
        if give.send(chunk).await.is_err() || last {
            if failed {
                return;
            }
            break;
        }
    }
    session.close().await;
}

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
