//! SQLite sources: opened read-only with `query_only`, a wall-clock statement timeout (an
//! interrupt from a timer and a progress handler), a bound on the size of any one value, and
//! clocks compared as integer microseconds through Rowfire's own `rowfire_clock_us` function.

use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use compact_str::CompactString;
use sqlx::query::Query;
use sqlx::sqlite::{SqliteArguments, SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{
    AssertSqlSafe, Column as _, Executor, Row as _, SqlSafeStr, Sqlite, SqliteConnection,
    SqlitePool, Statement as _, TypeInfo, ValueRef,
};

use super::engine::{ConnectError, open_pool};
use super::window::value_bytes;
use super::{Column, FetchError, Fetched, positions};
use crate::row::{Row, Value};
use crate::sql_guard::{
    Bind, Rendered, SQLITE_CLOCK_COLUMN, Shape, sqlite_clock_micros, sqlite_clock_text,
};

mod ffi_parts;

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
    let options = SqlitePoolOptions::new().after_connect(|conn, _| {
        Box::pin(async move {
            let mut handle = conn.lock_handle().await?;
            ffi_parts::prepare_connection(handle.as_raw_handle())
                .map_err(|e| sqlx::Error::Configuration(e.into()))
        })
    });
    open_pool(options, opts, shown).await
}

fn bound(rendered: &Rendered) -> Query<'_, Sqlite, SqliteArguments> {
    let mut q = sqlx::query(AssertSqlSafe(rendered.sql.clone()));
    for b in &rendered.binds {
        q = match b {
            Bind::Instant(ts) => q.bind(sqlite_clock_text(*ts)),
            Bind::Clock(ts) => q.bind(sqlite_clock_micros(*ts)),
        };
    }
    q
}

/// Interrupts any statement on `conn` that runs past `timeout` from now, by wall-clock time:
/// a progress handler stops the statement between VM steps, and a timer interrupts it even
/// inside one long step (a heavy function on one row). The returned guard stops the timer.
async fn arm_timeout(
    conn: &mut SqliteConnection,
    timeout: Duration,
) -> Result<ffi_parts::Alarm, sqlx::Error> {
    let deadline = Instant::now() + timeout;
    let mut handle = conn.lock_handle().await?;
    handle.set_progress_handler(1_000, move || Instant::now() < deadline);
    Ok(ffi_parts::Alarm::set(handle.as_raw_handle(), timeout))
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
    let alarm = arm_timeout(&mut conn, timeout).await?;
    bound(rendered).fetch_all(&mut *conn).await?;
    drop(alarm);
    Ok(Column::list(described.columns()))
}

pub(super) async fn count(
    pool: &SqlitePool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<u64, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let alarm = arm_timeout(&mut conn, timeout).await?;
    let row = bound(rendered).fetch_one(&mut *conn).await?;
    drop(alarm);
    Ok(row.try_get::<i64, _>(0)?.max(0) as u64)
}

/// Runs a `SELECT count(*), columns…` statement: the count and the columns of one counted row.
pub(super) async fn count_with_example(
    pool: &SqlitePool,
    rendered: &Rendered,
    timeout: Duration,
) -> Result<(u64, Vec<Value>), sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let alarm = arm_timeout(&mut conn, timeout).await?;
    let row = bound(rendered).fetch_one(&mut *conn).await?;
    drop(alarm);
    let count = row.try_get::<i64, _>(0)?.max(0) as u64;
    let example = (1..row.len())
        .map(|i| decode(&row, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((count, example))
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
        _ => Value::Text(CompactString::new(row.try_get_unchecked::<&str, _>(i)?)),
    })
}

/// One ordered pass over a window on SQLite: one statement stepping across pages, driven by a
/// task that owns the read's transaction and hands out a chunk of rows per request. Each chunk
/// is read under the statement timeout (an interrupt armed for it, and a progress handler whose
/// deadline moves with it), so the time a poll spends claiming between pages does not count.
/// Dropping it ends the statement and rolls the read back.
pub(super) struct SqliteStream {
    asks: tokio::sync::mpsc::Sender<(usize, usize)>,
    chunks: tokio::sync::mpsc::Receiver<Result<Fetched, FetchError>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for SqliteStream {
    /// A reader dropped halfway ends its statement at once: the task is aborted, and with it
    /// the statement and the read's transaction.
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The clock and key columns, owned, for the stepping task.
#[derive(Clone)]
struct OwnedShape {
    clock: String,
    key: Vec<String>,
}

impl SqliteStream {
    /// Starts stepping `rendered` (a [`crate::sql_guard::CheckedQuery::window_sql`] statement)
    /// inside `tx`.
    pub(super) fn start(
        tx: sqlx::Transaction<'static, Sqlite>,
        rendered: &Rendered,
        shape: Shape<'_>,
        timeout: Duration,
    ) -> SqliteStream {
        let (asks, asked) = tokio::sync::mpsc::channel(1);
        let (give, chunks) = tokio::sync::mpsc::channel(1);
        let shape = OwnedShape {
            clock: shape.clock.to_string(),
            key: shape.key.to_vec(),
        };
        let task = tokio::spawn(step(tx, rendered.clone(), shape, timeout, asked, give));
        SqliteStream {
            asks,
            chunks,
            task: Some(task),
        }
    }

    /// The next `rows` rows (fewer at the window's end), within `max_bytes` of values.
    pub(super) async fn next(
        &mut self,
        rows: usize,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        let gone = || FetchError::Sql(sqlx::Error::WorkerCrashed);
        self.asks
            .send((rows, max_bytes))
            .await
            .map_err(|_| gone())?;
        self.chunks.recv().await.unwrap_or_else(|| Err(gone()))
    }

    /// Ends the statement and the read, and waits until the transaction is rolled back.
    pub(super) async fn finish(mut self) {
        self.chunks.close();
        let (closed, _) = tokio::sync::mpsc::channel(1);
        drop(std::mem::replace(&mut self.asks, closed));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// The stepping task: answers each request with the next chunk, until the window ends, a chunk
/// fails or the reader goes away; then ends the statement and rolls the read back.
async fn step(
    mut tx: sqlx::Transaction<'static, Sqlite>,
    rendered: Rendered,
    shape: OwnedShape,
    timeout: Duration,
    mut asked: tokio::sync::mpsc::Receiver<(usize, usize)>,
    give: tokio::sync::mpsc::Sender<Result<Fetched, FetchError>>,
) {
    use futures_util::TryStreamExt as _;

    let far = || Instant::now() + Duration::from_secs(86_400);
    let deadline = Arc::new(std::sync::Mutex::new(far()));
    let interrupter = {
        let mut handle = match tx.lock_handle().await {
            Ok(h) => h,
            Err(e) => {
                let _ = give.send(Err(FetchError::Sql(e))).await;
                return;
            }
        };
        let until = deadline.clone();
        handle.set_progress_handler(1_000, move || {
            Instant::now() < *until.lock().unwrap_or_else(|e| e.into_inner())
        });
        ffi_parts::Interrupter::new(handle.as_raw_handle())
    };
    let set_deadline = |at: Instant| *deadline.lock().unwrap_or_else(|e| e.into_inner()) = at;
    {
        let mut stream = bound(&rendered).fetch(&mut *tx);
        let mut columns: Option<(Arc<[String]>, usize)> = None;
        while let Some((want, max_bytes)) = asked.recv().await {
            set_deadline(Instant::now() + timeout);
            let alarm = interrupter.arm(timeout);
            let mut chunk = Chunk::default();
            let read = async {
                while chunk.rows.len() < want {
                    let Some(r) = stream.try_next().await? else {
                        chunk.last = true;
                        break;
                    };
                    let (names, width) = columns.get_or_insert_with(|| {
                        let cols = r.columns();
                        // The last column is Rowfire's normalised clock.
                        let width = cols.len().saturating_sub(1);
                        debug_assert_eq!(cols[width].name(), SQLITE_CLOCK_COLUMN);
                        (
                            cols[..width].iter().map(|c| c.name().to_string()).collect(),
                            width,
                        )
                    });
                    chunk.push(&r, names, *width, max_bytes)?;
                }
                Ok::<_, FetchError>(())
            }
            .await;
            drop(alarm);
            set_deadline(far());
            let done = read.is_err() || chunk.last;
            let fetched = read.map(|()| chunk.into_fetched(columns.as_ref(), &shape));
            if give.send(fetched).await.is_err() || done {
                break;
            }
        }
    }
    if let Ok(mut handle) = tx.lock_handle().await {
        handle.remove_progress_handler();
    }
    let _ = tx.rollback().await;
}

/// Rows read for one request.
#[derive(Default)]
struct Chunk {
    rows: Vec<Row>,
    sizes: Vec<usize>,
    bytes: usize,
    last: bool,
}

impl Chunk {
    /// Decodes one row (its author's columns, then the normalised clock), refusing it
    /// with [`FetchError::TooLarge`] once the chunk's values pass `max_bytes`.
    fn push(
        &mut self,
        r: &sqlx::sqlite::SqliteRow,
        names: &Arc<[String]>,
        width: usize,
        max_bytes: usize,
    ) -> Result<(), FetchError> {
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            values.push(decode(r, i)?);
        }
        let size = values.iter().map(value_bytes).sum::<usize>();
        self.bytes += size;
        if self.bytes > max_bytes {
            return Err(FetchError::TooLarge { limit: max_bytes });
        }
        let sort_clock = decode(r, width)?;
        let at = match sort_clock {
            Value::Int(us) => jiff::Timestamp::from_microsecond(us).ok(),
            _ => None,
        };
        self.rows.push(Row {
            columns: names.clone(),
            values,
            clock: at,
        });
        self.sizes.push(size);
        Ok(())
    }

    fn into_fetched(self, columns: Option<&(Arc<[String]>, usize)>, shape: &OwnedShape) -> Fetched {
        let Some((names, _)) = columns else {
            return Fetched::empty();
        };
        let shape = Shape {
            clock: &shape.clock,
            key: &shape.key,
        };
        let (_, key) = positions(names, shape);
        Fetched {
            rows: self.rows,
            sizes: self.sizes,
            key,
        }
    }
}

/// The catalogue of the database file: tables and views, their columns and declared types,
/// keys and indexes, from SQLite's table-valued pragmas, one fact per row.
const CATALOGUE_SQL: &str = "SELECT kind, tbl, col, extra FROM (\
     SELECT 'column' AS kind, m.name AS tbl, p.name AS col, p.type AS extra, p.cid AS pos \
       FROM sqlite_schema m, pragma_table_info(m.name) p \
      WHERE m.type IN ('table', 'view') AND m.name NOT LIKE 'sqlite_%' \
     UNION ALL \
     SELECT 'primary', m.name, p.name, '', p.pk \
       FROM sqlite_schema m, pragma_table_info(m.name) p \
      WHERE m.type = 'table' AND p.pk > 0 AND m.name NOT LIKE 'sqlite_%' \
     UNION ALL \
     SELECT 'foreign', m.name, f.\"from\", f.\"table\", f.seq \
       FROM sqlite_schema m, pragma_foreign_key_list(m.name) f WHERE m.type = 'table' \
     UNION ALL \
     SELECT 'indexed', m.name, ii.name, '', 0 \
       FROM sqlite_schema m, pragma_index_list(m.name) il, pragma_index_info(il.name) ii \
      WHERE m.type = 'table' AND ii.seqno = 0 AND ii.name IS NOT NULL\
   ) ORDER BY tbl, kind, pos LIMIT 200001";

/// Reads the catalogue's facts.
pub(super) async fn catalogue(
    pool: &SqlitePool,
    timeout: Duration,
) -> Result<Vec<[String; 4]>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    let alarm = arm_timeout(&mut conn, timeout).await?;
    let rows = sqlx::query(CATALOGUE_SQL).fetch_all(&mut *conn).await?;
    drop(alarm);
    rows.iter()
        .map(|r| {
            Ok([
                r.try_get("kind")?,
                r.try_get("tbl")?,
                r.try_get("col")?,
                r.try_get::<Option<String>, _>("extra")?.unwrap_or_default(),
            ])
        })
        .collect()
}
