//! One ordered pass over a window on PostgreSQL: the window statement runs once inside the
//! read's read-only, repeatable-read transaction, and its rows are decoded as the server sends
//! them and handed on a page at a time. A `DECLARE … CURSOR` fetched page by page is not used:
//! PostgreSQL runs each `FETCH` into a tuplestore before sending its first row (a utility
//! statement that returns rows, `PORTAL_UTIL_SELECT`), so the reader would wait on the server
//! at every page while the server waited on the reader in between (BENCHMARKS.md, read_window).
//!
//! Limits, all set by Rowfire before the statement:
//! - The server's `statement_timeout` is raised for this one statement to the read's cap (an
//!   hour, or a hundred times the statement timeout): the server measures it over the whole
//!   statement, including the time it waits to hand rows to a reader that is claiming between
//!   pages, so the statement timeout would end a long read however fast each page came. The cap
//!   is the server's own backstop should Rowfire freeze or be cut off mid-read. Lock and idle
//!   timeouts stay as every read has them.
//! - Instead each chunk must arrive within the source's statement timeout, measured while the
//!   task waits on the server (not while it waits on the reader); past it, Rowfire ends the
//!   backend from another connection and the read fails with the timeout. So the first chunk
//!   (where the server sorts the window) is bounded as any one statement is.
//! - A chunk the reader does not take within the read's idle bound (300 s, or twice the
//!   statement timeout if longer: the idle time a read has inside its transaction) ends the
//!   read: its connection is closed, so the server stops at its next send, and the reader's
//!   next page is an error that says so, never a window cut short.
//! - On PostgreSQL 14 and later the server also checks every second, while the statement runs,
//!   that Rowfire is still connected (`client_connection_check_interval`), so a statement left
//!   behind by a process that died stops even before it sends a row.

use std::time::Duration;

use futures_util::stream::BoxStream;
use sqlx::postgres::PgRow;

use super::session::{PgFail, PgSession};
use super::{Decoder, bound};
use crate::source::window::{CHUNKS_AHEAD, Chunks, ReadAhead, read_chunk};
use crate::source::{FetchError, Fetched};
use crate::sql_guard::{Rendered, Shape};

/// Starts a window's streamed statement `rendered`, read `rows` at a time (each chunk within
/// `max_bytes` of values) by a task that owns the session, up to a page ahead of the reader.
/// Finished after the window's end, the session is rolled back and cleaned as every read is;
/// finished early or dropped, its connection is closed, never drained or reused.
pub(in crate::source) fn start(
    session: PgSession,
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
    /// Every row was read; the last chunk is still to be handed on.
    Exhausted(Fetched),
    /// The reader stopped asking before the end.
    Stopped,
    /// The reader did not take a chunk within the idle bound.
    Idle,
    /// The statement failed; `end_backend` when it ran past the deadline.
    Failed {
        error: FetchError,
        end_backend: bool,
    },
}

/// The reading task: lifts the server's statement limit, runs the statement, and hands on chunk
/// after chunk until the window ends, a chunk fails or the reader stops.
async fn stream(
    mut session: PgSession,
    rendered: Rendered,
    shape: Shape<'_>,
    rows: usize,
    max_bytes: usize,
    give: Chunks,
) {
    let timeout = session.timeout();
    let idle = session.idle();
    let cap = session.read_cap();
    let end = match session.lift_statement_limit().await {
        Err(e) => End::Failed {
            error: fetch_error(e),
            end_backend: false,
        },
        Ok(()) => match session.connection() {
            None => End::Failed {
                error: FetchError::Deadline,
                end_backend: false,
            },
            Some(conn) => {
                let mut pass = bound(&rendered).fetch(conn);
                let mut decoder = None;
                loop {
                    let next = chunk(&mut pass, &mut decoder, shape, rows, max_bytes);
                    let fetched = match tokio::time::timeout(timeout, next).await {
                        Ok(Ok(fetched)) => fetched,
                        // The server ended the statement at the read's cap.
                        Ok(Err(FetchError::Sql(e))) if cancelled(&e) => {
                            break End::Failed {
                                error: FetchError::ReadCap { cap },
                                end_backend: false,
                            };
                        }
                        Ok(Err(error)) => {
                            break End::Failed {
                                error,
                                end_backend: false,
                            };
                        }
                        Err(_) => {
                            break End::Failed {
                                error: FetchError::Deadline,
                                end_backend: true,
                            };
                        }
                    };
                    // The last chunk is handed on only after the snapshot is let go.
                    if fetched.rows.len() < rows {
                        break End::Exhausted(fetched);
                    }
                    match tokio::time::timeout(idle, give.send(Ok(fetched))).await {
                        Ok(Ok(())) => {}
                        Ok(Err(_)) => break End::Stopped,
                        Err(_) => break End::Idle,
                    }
                }
            }
        },
    };
    match end {
        End::Exhausted(last) => {
            session.close().await;
            let _ = give.send(Ok(last)).await;
        }
        // Dropped, not closed: the rest of the rows are not drained, the connection is closed.
        End::Stopped => drop(session),
        // The connection is closed at once (the server stops at its next send); the reader
        // learns why when it asks for the next page, after the one it was handed.
        End::Idle => {
            tracing::warn!(
                idle_s = idle.as_secs(),
                "a window read's next page was not taken within its idle bound; the read is ended"
            );
            drop(session);
            let _ = give.send(Err(FetchError::Idle { after: idle })).await;
        }
        End::Failed { error, end_backend } => {
            if end_backend {
                session.end_backend().await;
            }
            drop(session);
            let _ = give.send(Err(error)).await;
        }
    }
}

/// Reads up to `rows` rows of the pass, decoding each as it arrives.
async fn chunk(
    pass: &mut BoxStream<'_, Result<PgRow, sqlx::Error>>,
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
        d.row(row)
    })
    .await?;
    Ok(match decoder {
        Some(d) => Fetched {
            rows: out,
            sizes,
            key: d.key.clone(),
        },
        None => Fetched::empty(),
    })
}

/// Whether the server cancelled the statement (SQLSTATE 57014: its statement timeout, here the
/// read's cap, or an operator's cancel).
fn cancelled(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("57014"))
}

fn fetch_error(e: PgFail) -> FetchError {
    match e {
        PgFail::Sql(e) => FetchError::Sql(e),
        PgFail::Deadline => FetchError::Deadline,
    }
}

/// How often a server on PostgreSQL 14 or later checks that Rowfire is still connected while
/// the window statement runs.
pub(super) const CONNECTION_CHECK: Duration = Duration::from_secs(1);
