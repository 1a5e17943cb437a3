//! Reading a window: page after page in one read-only snapshot, each page ending where SQL says.
//!
//! Every engine reads a window in one ordered pass: one statement
//! ([`CheckedQuery::window_sql`]) whose rows stream as the server sends them on PostgreSQL,
//! MySQL and MariaDB (each chunk within the statement timeout, the server's own limit for the
//! whole statement lifted or raised: `postgres/stream.rs`, `mysql/stream.rs`), or one SQLite
//! statement stepping across
//! pages. A page ends at the first row past the page size that can
//! be told apart from the row before it for certain (another instant, or a key differing in a
//! type whose equality is identity: see `inseparable`), so rows SQL finds equal are never split
//! and no row is read twice; the rows after the cut wait for the next page.

use crate::row::{Row, Value};
use crate::sql_guard::{CheckedQuery, Placeholders, Shape, Window};

use super::engine::Session;
use super::{Source, SourceError};

/// The most one page of rows may hold in memory, values counted by their size: 256 MiB.
pub(super) const MAX_PAGE_BYTES: usize = 256 << 20;

/// Reads a window page by page, in (clock, key) order, each row exactly once.
pub struct WindowReader<'a> {
    source: &'a Source,
    query: &'a CheckedQuery,
    shape: Shape<'a>,
    window: Window,
    session: Session,
    done: bool,
    pages: u32,
    /// Whether the statement was started.
    started: bool,
    /// The statement has no more rows.
    exhausted: bool,
    /// Rows read and not yet handed out, each with whether a page may not end just before it.
    held: Vec<Row>,
    held_ties: Vec<bool>,
    /// What each held row's values take, by [`row_bytes`].
    held_sizes: Vec<usize>,
    /// One pass: what the held rows' values take in all.
    held_bytes: usize,
    /// One pass: per key column, whether the pass is ordered by it (and so may cut on it).
    sorted: Vec<bool>,
    /// One pass: rows read with a NULL key column, dropped from the pages.
    null_keys: u64,
}

/// A chunk of the pass's rows as decoded, each with what its values take in memory (by
/// [`row_bytes`], taken once as it is decoded), and where their key columns are (to tell where
/// a page may end).
pub(crate) struct Fetched {
    pub rows: Vec<Row>,
    /// Per row, what its values take.
    pub sizes: Vec<usize>,
    /// The key columns' indices.
    pub key: Vec<usize>,
}

impl Fetched {
    pub(super) fn empty() -> Fetched {
        Fetched {
            rows: Vec::new(),
            sizes: Vec::new(),
            key: Vec::new(),
        }
    }
}

/// How many rows a window's pass hands the reader at a time, for pages of `page_size`: an
/// eighth of a page (at least one, at most 4,096), so a page's cut falls near the end of what
/// is held and only the few rows after it are moved to the next page.
pub(super) fn chunk_rows(page_size: usize) -> usize {
    (page_size / 8).clamp(1, 4096)
}

/// How many chunks a window's pass reads ahead of the reader at most: about a page's worth
/// ([`chunk_rows`] is an eighth of one), so the next page is read while this one is used.
pub(super) const CHUNKS_AHEAD: usize = 8;

/// Finds the clock column and the key columns of a page by name: their indices.
pub(super) fn positions(columns: &[String], shape: Shape<'_>) -> (usize, Vec<usize>) {
    let at = |name: &str| columns.iter().position(|c| c == name).unwrap_or(0);
    (at(shape.clock), shape.key.iter().map(|k| at(k)).collect())
}

impl<'a> WindowReader<'a> {
    pub(super) fn new(
        source: &'a Source,
        query: &'a CheckedQuery,
        shape: Shape<'a>,
        window: Window,
        session: Session,
    ) -> Self {
        WindowReader {
            source,
            query,
            shape,
            window,
            session,
            done: false,
            pages: 0,
            started: false,
            exhausted: false,
            held: Vec::new(),
            held_ties: Vec::new(),
            held_sizes: Vec::new(),
            held_bytes: 0,
            sorted: Vec::new(),
            null_keys: 0,
        }
    }

    /// Pages read so far.
    pub fn pages(&self) -> u32 {
        self.pages
    }

    fn failed(&self, e: FetchError) -> SourceError {
        let source = self.source;
        match e {
            FetchError::Sql(e) => source.query_error(e),
            FetchError::Deadline => source.timeout_error(),
            FetchError::ReadCap { cap } => SourceError::Query {
                name: source.name.clone(),
                shown: source.shown.clone(),
                message: format!(
                    "the server cancelled the window's statement: a whole read may take at most {}s (an hour, or a hundred times the statement timeout), or an operator cancelled it; read a shorter window",
                    cap.as_secs()
                ),
            },
            FetchError::Idle { after } => SourceError::Query {
                name: source.name.clone(),
                shown: source.shown.clone(),
                message: format!(
                    "the read was ended after waiting {}s for the next page to be taken (its snapshot is not held longer); read again, and if a step between pages is this slow, look at what it waits on",
                    after.as_secs()
                ),
            },
            FetchError::TooLarge { limit } => SourceError::Query {
                name: source.name.clone(),
                shown: source.shown.clone(),
                message: format!(
                    "one page of rows holds more than {} MiB; select fewer or smaller columns, or lower max_rows",
                    (limit >> 20).max(1)
                ),
            },
            FetchError::Unsupported { column, type_name } => SourceError::UnsupportedType {
                name: source.name.clone(),
                column,
                type_name,
            },
        }
    }

    /// The next page, or `None` when the window is exhausted. A page holds at least `page size`
    /// rows (fewer only at the window's end) and ends where a run of rows SQL finds equal on
    /// (clock, key) ends, so no row is split across pages, skipped or read twice, whatever the
    /// column's collation or type.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Row>>, SourceError> {
        if self.done {
            return Ok(None);
        }
        self.next_of_one_pass().await
    }

    /// The next page of the one ordered pass: rows are fetched a chunk at a time until a row
    /// past the page size starts a new run of equal rows (or the window ends); the page ends
    /// before it, and the rows after it wait for the next page.
    async fn next_of_one_pass(&mut self) -> Result<Option<Vec<Row>>, SourceError> {
        let source = self.source;
        let size = source.page_size.max(1);
        let chunk = chunk_rows(size);
        if !self.started {
            let sorted = self
                .session
                .sorted_keys(self.query, self.shape, self.window)
                .await;
            self.sorted = sorted.map_err(|e| self.failed(e))?;
            let rendered = self.query.window_sql(
                self.shape,
                self.window,
                Placeholders::Numbered,
                &self.sorted,
            );
            super::Sent::one(&source.sent.windowed);
            let started = self.session.start(source, &rendered, self.shape).await;
            started.map_err(|e| self.failed(e))?;
            self.started = true;
        }
        let cut = loop {
            if let Some(cut) = (size..self.held_ties.len()).find(|&i| !self.held_ties[i]) {
                break Some(cut);
            }
            if self.exhausted {
                break None;
            }
            let held = self.held_bytes;
            let room = source.page_bytes.saturating_sub(held);
            let fetched = self.session.next_rows(chunk, room).await;
            let fetched = fetched.map_err(|e| self.failed(e))?;
            if fetched.rows.len() < chunk {
                self.exhausted = true;
            }
            // Only rows kept count against the page's memory: a run of NULL keys is dropped as
            // it is read, however long.
            let mut kept = 0usize;
            self.held.reserve(fetched.rows.len());
            self.held_ties.reserve(fetched.rows.len());
            self.held_sizes.reserve(fetched.rows.len());
            for (row, size) in fetched.rows.into_iter().zip(fetched.sizes) {
                if fetched
                    .key
                    .iter()
                    .any(|&k| row.values.get(k).is_none_or(Value::is_null))
                {
                    self.null_keys += 1;
                    continue;
                }
                kept = kept.saturating_add(size);
                self.held_sizes.push(size);
                let tied = self
                    .held
                    .last()
                    .is_some_and(|before| inseparable(before, &row, &fetched.key, &self.sorted));
                self.held_ties.push(tied);
                self.held.push(row);
            }
            self.held_bytes = held.saturating_add(kept);
            if self.held_bytes > source.page_bytes {
                let limit = source.page_bytes;
                return Err(self.failed(FetchError::TooLarge { limit }));
            }
        };
        let page = match cut {
            Some(cut) => {
                let rest = self.held.split_off(cut);
                self.held_ties = self.held_ties.split_off(cut);
                self.held_sizes = self.held_sizes.split_off(cut);
                self.held_bytes = self.held_sizes.iter().sum();
                std::mem::replace(&mut self.held, rest)
            }
            None => {
                self.held_ties.clear();
                self.held_sizes.clear();
                self.held_bytes = 0;
                self.done = true;
                std::mem::take(&mut self.held)
            }
        };
        if page.is_empty() {
            return Ok(None);
        }
        self.pages += 1;
        Ok(Some(page))
    }

    /// Rows of the window whose key has a NULL column: they are never in a page; the pass
    /// counted them as it read them (so no second statement counts them). Asked once the
    /// window is read.
    pub fn null_keys(&self) -> u64 {
        self.null_keys
    }

    /// Ends the read-only snapshot.
    pub async fn finish(self) {
        self.session.finish().await
    }
}

/// Whether a page may not end between `before` and `row`, adjacent in the pass's order (the
/// clock, then the key columns `sorted` marks): when their clocks are the same instant and no
/// sorted key column tells them apart exactly. Clocks are times, equal in SQL exactly when they
/// are the same instant; keys are told apart only by values whose equality is their identity
/// (integers, booleans, times, dates, bytes), since text (under its collation), decimals (`1.1`
/// and `1.10`), floats and JSON may be equal in SQL though they differ here; and only in
/// columns the pass is ordered by, since only there is a run of equal values contiguous. So
/// rows SQL finds equal on (clock, key) are never split.
fn inseparable(before: &Row, row: &Row, key: &[usize], sorted: &[bool]) -> bool {
    if before.clock != row.clock {
        return false;
    }
    !key.iter()
        .enumerate()
        .filter(|(i, _)| sorted.get(*i).copied().unwrap_or(true))
        .any(|(_, &k)| match (before.values.get(k), row.values.get(k)) {
            (Some(Value::Int(a)), Some(Value::Int(b))) => a != b,
            (Some(Value::Bool(a)), Some(Value::Bool(b))) => a != b,
            (Some(Value::Timestamp(a)), Some(Value::Timestamp(b))) => a != b,
            (Some(Value::Date(a)), Some(Value::Date(b))) => a != b,
            (Some(Value::Bytes(a)), Some(Value::Bytes(b))) => a != b,
            _ => false,
        })
}

/// What a row's values hold in memory, roughly (text and bytes by their length, others 8).
pub(super) fn row_bytes(row: &Row) -> usize {
    row.values.iter().map(value_bytes).sum()
}

/// What one decoded value holds in memory, roughly: text and bytes by their length, at least 8.
pub(super) fn value_bytes(v: &Value) -> usize {
    match v {
        Value::Text(s) | Value::Decimal(s) => s.len().max(8),
        Value::Bytes(b) => b.len().max(8),
        _ => 8,
    }
}

pub(crate) enum FetchError {
    Sql(sqlx::Error),
    /// Rowfire's own deadline passed (the server's timeout was defeated).
    Deadline,
    /// The server cancelled a window's streamed statement at the read's cap (or an operator
    /// cancelled it).
    ReadCap {
        cap: std::time::Duration,
    },
    /// The reader did not take a page within the read's idle bound, so the read was ended.
    Idle {
        after: std::time::Duration,
    },
    /// A page held more than `limit` bytes of values.
    TooLarge {
        limit: usize,
    },
    Unsupported {
        column: String,
        type_name: String,
    },
}

impl From<sqlx::Error> for FetchError {
    fn from(e: sqlx::Error) -> Self {
        FetchError::Sql(e)
    }
}

/// Reads up to `rows` rows of a streamed pass (a PostgreSQL or MySQL statement), decoding each as
/// it arrives with `decode` (the row and what its values take), and refuses the chunk once its
/// values pass `max_bytes`, before more are read.
pub(super) async fn read_chunk<R>(
    pass: &mut futures_util::stream::BoxStream<'_, Result<R, sqlx::Error>>,
    rows: usize,
    max_bytes: usize,
    mut decode: impl FnMut(&R) -> Result<(Row, usize), FetchError>,
) -> Result<(Vec<Row>, Vec<usize>), FetchError> {
    use futures_util::TryStreamExt as _;
    // Sized up front, but never more than 4,096 rows ahead of what arrives.
    let mut out = Vec::with_capacity(rows.min(4096));
    let mut sizes = Vec::with_capacity(rows.min(4096));
    let mut bytes = 0usize;
    while out.len() < rows {
        let Some(row) = pass.try_next().await? else {
            break;
        };
        let (row, size) = decode(&row)?;
        bytes = bytes.saturating_add(size);
        if bytes > max_bytes {
            return Err(FetchError::TooLarge { limit: max_bytes });
        }
        out.push(row);
        sizes.push(size);
    }
    Ok((out, sizes))
}

/// A window's pass read ahead by a task that owns its session: the server streams and the task
/// decodes the next page while the caller works on this one (a backtest's cadence, a poll's
/// claim). What the task has handed on and the caller has not yet taken is bounded by the page's
/// memory bound (a budget of bytes, a chunk larger than the whole budget waits for all of it),
/// and by the chunks of about a page; so memory stays bounded by the page size. The PostgreSQL
/// and MySQL streams both read this way. Dropped, the task is aborted (its session closes its
/// connection, never reused).
pub(super) struct ReadAhead {
    chunks: tokio::sync::mpsc::Receiver<(
        Result<Fetched, FetchError>,
        Option<tokio::sync::OwnedSemaphorePermit>,
    )>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The task's byte budget, closed when the reader stops so a task waiting for room stops.
    budget: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Where a read-ahead task hands its chunks: each waits for its bytes in the budget first.
pub(super) struct Chunks {
    give: tokio::sync::mpsc::Sender<(
        Result<Fetched, FetchError>,
        Option<tokio::sync::OwnedSemaphorePermit>,
    )>,
    budget: std::sync::Arc<tokio::sync::Semaphore>,
    /// The budget's size, in its units (at most `u32::MAX`).
    total: u32,
}

/// The caller stopped taking chunks.
#[derive(Debug)]
pub(super) struct Stopped;

impl Chunks {
    /// Hands `chunk` on once its bytes fit in what the caller has not taken yet (an error
    /// weighs nothing); `Err` when the caller stopped taking chunks.
    pub(super) async fn send(&self, chunk: Result<Fetched, FetchError>) -> Result<(), Stopped> {
        let bytes = chunk.as_ref().map_or(0, |f| {
            f.sizes.iter().fold(0usize, |a, &b| a.saturating_add(b))
        });
        // An error, or the empty chunk that ends a window, waits for no room.
        let weight = u32::try_from(bytes).unwrap_or(u32::MAX).min(self.total);
        let permit = self
            .budget
            .clone()
            .acquire_many_owned(weight)
            .await
            .map_err(|_| Stopped)?;
        self.give
            .send((chunk, Some(permit)))
            .await
            .map_err(|_| Stopped)
    }
}

impl ReadAhead {
    /// Spawns `read`, which sends chunk after chunk to the channel it is given until the window
    /// ends, a chunk fails or the reader stops listening: at most `chunks` chunks and
    /// `max_bytes` of rows ahead of the reader.
    pub(super) fn spawn<F>(
        chunks: usize,
        max_bytes: usize,
        read: impl FnOnce(Chunks) -> F,
    ) -> ReadAhead
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let (give, taken) = tokio::sync::mpsc::channel(chunks.max(1));
        let total = u32::try_from(max_bytes).unwrap_or(u32::MAX).max(1);
        let budget = std::sync::Arc::new(tokio::sync::Semaphore::new(total as usize));
        ReadAhead {
            chunks: taken,
            task: Some(tokio::spawn(read(Chunks {
                give,
                budget: budget.clone(),
                total,
            }))),
            budget,
        }
    }

    /// The next chunk of rows (fewer than asked at the window's end). Its bytes leave the
    /// read-ahead budget as it is taken: the caller's page bound holds them from here.
    pub(super) async fn next(&mut self) -> Result<Fetched, FetchError> {
        // The reader stops asking after a short chunk (the window's end), so a stream that
        // ends without one lost its task: an error, never a window cut short.
        match self.chunks.recv().await {
            Some((chunk, _permit)) => chunk,
            None => Err(FetchError::Sql(sqlx::Error::WorkerCrashed)),
        }
    }

    /// Stops reading and waits for the task: after the window's end it rolls the session back
    /// and hands it back clean; before it, the session is closed.
    pub(super) async fn finish(mut self) {
        self.chunks.close();
        // Chunks not taken keep their bytes: a task waiting for room learns here that no more
        // will be taken.
        self.budget.close();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chunk of `rows` empty rows said to take `bytes` each.
    fn chunk(rows: usize, bytes: usize) -> Result<Fetched, FetchError> {
        Ok(Fetched {
            rows: (0..rows)
                .map(|_| Row {
                    columns: std::sync::Arc::from(Vec::<String>::new()),
                    values: Vec::new(),
                    clock: None,
                })
                .collect(),
            sizes: vec![bytes; rows],
            key: Vec::new(),
        })
    }

    /// Starts a read-ahead of `chunks` chunks and `budget` bytes whose task hands on `sent`
    /// chunks of ten rows of `bytes` each, counting what it has handed on.
    fn counted(
        chunks: usize,
        budget: usize,
        sent: usize,
        bytes: usize,
    ) -> (ReadAhead, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let handed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = handed.clone();
        let ahead = ReadAhead::spawn(chunks, budget, move |give| async move {
            for _ in 0..sent {
                if give.send(chunk(10, bytes)).await.is_err() {
                    return;
                }
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        (ahead, handed)
    }

    /// Takes the next chunk: how many rows it holds.
    async fn taken(ahead: &mut ReadAhead) -> usize {
        match ahead.next().await {
            Ok(fetched) => fetched.rows.len(),
            Err(_) => panic!("the chunk was an error"),
        }
    }

    /// Lets the read-ahead task run until it waits.
    async fn settle() {
        for _ in 0..50 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_read_ahead_holds_no_more_untaken_bytes_than_its_budget_and_goes_on_as_chunks_are_taken()
     {
        // Chunks of 10 rows of 100 bytes (1,000 bytes) against a budget of 2,500 bytes: two
        // fit, the third waits, though eight chunks would fit in the channel.
        let (mut ahead, handed) = counted(8, 2_500, 6, 100);
        settle().await;
        assert_eq!(handed.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(taken(&mut ahead).await, 10);
        settle().await;
        assert_eq!(handed.load(std::sync::atomic::Ordering::SeqCst), 3);
        for _ in 0..5 {
            assert_eq!(taken(&mut ahead).await, 10);
        }
        ahead.finish().await;
    }

    #[tokio::test]
    async fn a_read_ahead_finished_while_its_task_waits_for_room_stops_the_task() {
        // One chunk fills the budget; the task waits for room for the second when the reader
        // stops taking chunks.
        let (ahead, handed) = counted(8, 1_000, 5, 100);
        settle().await;
        assert_eq!(handed.load(std::sync::atomic::Ordering::SeqCst), 1);
        tokio::time::timeout(std::time::Duration::from_secs(5), ahead.finish())
            .await
            .expect("finish returns");
    }

    #[tokio::test]
    async fn a_read_ahead_holds_no_more_chunks_than_asked_and_a_chunk_larger_than_its_budget_still_passes()
     {
        // Small chunks: the channel's four is the bound.
        let (mut ahead, handed) = counted(4, 1_000_000, 10, 1);
        settle().await;
        assert_eq!(handed.load(std::sync::atomic::Ordering::SeqCst), 4);
        taken(&mut ahead).await;
        ahead.finish().await;
        // A chunk of 10,000 bytes against a budget of 10: it waits for the whole budget, never
        // for ever.
        let (mut ahead, handed) = counted(4, 10, 2, 1_000);
        settle().await;
        assert_eq!(handed.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(taken(&mut ahead).await, 10);
        assert_eq!(taken(&mut ahead).await, 10);
        ahead.finish().await;
    }
}
