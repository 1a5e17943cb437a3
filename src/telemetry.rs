//! Telemetry: the units of work (a poll, a claim, a send, a settle) run in `tracing` spans that
//! carry what they work on (workspace, trigger, rule, delivery ids), and [`timed`] records each
//! one's wall-clock duration in its `duration_ms` field when the work ends and writes one `done`
//! event inside the span, while its parents are still entered, so that line carries the span's
//! fields, its duration and the spans it ran in. (A span's own close is not used: a connection
//! opened inside a span may keep it alive past its work.) Where the lines go and in which format is the
//! binary's choice (`ROWFIRE_LOG`, `ROWFIRE_LOG_FORMAT`).

use std::future::Future;
use std::time::Instant;

use tracing::{Instrument as _, Span};

/// The field every unit of work's span declares (as `tracing::field::Empty`) and [`timed`]
/// fills in: milliseconds from the start of the work to its end, fractional.
pub const DURATION_FIELD: &str = "duration_ms";

/// Runs `work` inside `span` and records its duration in the span's [`DURATION_FIELD`]. A
/// unit of work dropped before it ends (a poll whose lease was lost) records none.
pub async fn timed<F: Future>(span: Span, work: F) -> F::Output {
    let started = Instant::now();
    let output = work.instrument(span.clone()).await;
    span.record(DURATION_FIELD, started.elapsed().as_secs_f64() * 1000.0);
    span.in_scope(|| tracing::info!("done"));
    output
}
