//! One ordered pass over a window on MySQL and MariaDB: the window statement runs once inside
//! the read's read-only, consistent-snapshot transaction, and its rows are decoded as the
//! server sends them and handed on a page at a time.
//!
//! Limits, all set by Rowfire before the statement:
//! - The server's statement timeout (`max_execution_time` / `max_statement_time`) is lifted
//!   for this one statement: the server measures it over the whole statement, including the
//!   time it waits to hand rows to a reader that is claiming between pages, so it would end a
//!   long read however fast each page came.
//! - Instead each chunk must arrive within the source's statement timeout, measured while the
//!   task waits on the server (not while it waits on the reader); past it, Rowfire kills the
//!   connection's thread and the read fails with the timeout. So the first chunk (where the
//!   server sorts the window) is bounded as any one statement is.
//! - While the reader claims between pages the server waits to send at most
//!   `net_write_timeout` (300 s, or twice the statement timeout if longer: the idle time a
//!   PostgreSQL read has inside its transaction), then drops the connection.

use futures_util::stream::BoxStream;
use sqlx::mysql::MySqlRow;

use super::{Decoder, MyFail, MySession, bound};
use crate::source::window::{CHUNKS_AHEAD, Chunks, ReadAhead, read_chunk, row_bytes};
use crate::source::{FetchError, Fetched};
use crate::sql_guard::{Rendered, Shape};

/// Starts a window's streamed statement `rendered`, read `rows` at a time (each chunk within
/// `max_bytes` of values) by a task that owns the session, up to a page ahead of the reader.
/// Finished after the window's end, the session is rolled back and cleaned as every read is;
/// finished early or dropped, its connection is closed, never drained or reused.
pub(in crate::source) fn start(
    session: MySession,
    rendered: &Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
) -> ReadAhead {
    let rendered = rendered.clone();
    let shape = (shape.clock.to_string(), shape.key.to_vec());
    ReadAhead::spawn(CHUNKS_AHEAD, max_bytes, move |give| async move {
        let shape = Shape {
            clock: &shape.0,
            key: &shape.1,
        };
        stream(session, rendered, shape, rows.max(1), max_bytes, give).await
    })
}

/// How the statement's pass ended.
enum End {
    /// Every row was handed on.
    Exhausted,
    /// The reader stopped asking before the end.
    Stopped,
    /// The statement failed; `kill` when it ran past the deadline.
    Failed { error: FetchError, kill: bool },
}

/// The reading task: lifts the server's statement limit, runs the statement, and hands on chunk
/// after chunk until the window ends, a chunk fails or the reader stops.
async fn stream(
    mut session: MySession,
    rendered: Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
    give: Chunks,
) {
    let timeout = session.timeout();
    let end = match session.lift_statement_limit().await {
        Err(e) => End::Failed {
            error: fetch_error(e),
            kill: false,
        },
        Ok(()) => match session.connection() {
            None => End::Failed {
                error: FetchError::Deadline,
                kill: false,
            },
            Some(conn) => {
                let mut pass = bound(&rendered).fetch(conn);
                let mut decoder = None;
                loop {
                    let next = chunk(&mut pass, &mut decoder, shape, rows, max_bytes);
                    let fetched = match tokio::time::timeout(timeout, next).await {
                        Ok(Ok(fetched)) => fetched,
                        Ok(Err(error)) => break End::Failed { error, kill: false },
                        Err(_) => {
                            break End::Failed {
                                error: FetchError::Deadline,
                                kill: true,
                            };
                        }
                    };
                    let last = fetched.rows.len() < rows;
                    if give.send(Ok(fetched)).await.is_err() {
                        break End::Stopped;
                    }
                    if last {
                        break End::Exhausted;
                    }
                }
            }
        },
    };
    match end {
        End::Exhausted => session.close().await,
        // Dropped, not closed: the rest of the rows are not drained, the connection is closed.
        End::Stopped => drop(session),
        End::Failed { error, kill } => {
            if kill {
                session.kill().await;
            }
            drop(session);
            let _ = give.send(Err(error)).await;
        }
    }
}

/// Reads up to `rows` rows of the pass, decoding each as it arrives.
async fn chunk(
    pass: &mut BoxStream<'_, Result<MySqlRow, sqlx::Error>>,
    decoder: &mut Option<Decoder>,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
) -> Result<Fetched, FetchError> {
    let (out, sizes) = read_chunk(pass, rows, max_bytes, |row| {
        let d = match decoder {
            Some(d) => d,
            None => decoder.insert(Decoder::new(row, shape)?),
        };
        let row = d.row(row)?;
        let size = row_bytes(&row);
        Ok((row, size))
    })
    .await?;
    Ok(match decoder {
        Some(d) => d.fetched(out, sizes),
        None => Fetched::empty(),
    })
}

fn fetch_error(e: MyFail) -> FetchError {
    match e {
        MyFail::Sql(e) => FetchError::Sql(e),
        MyFail::Deadline => FetchError::Deadline,
    }
}
