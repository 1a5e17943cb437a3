//! Poll runs (the `run` table): one row per poll with its window, counts, status and error.

use jiff::Timestamp;

use super::state::Lease;
use crate::sql_guard::Window;
use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, execute, fetch_all};

/// Counts recorded with a finished run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunCounts {
    /// Rows read in the window.
    pub matched: u64,
    /// Rows that made at least one new fire (any rule).
    pub fired: u64,
    /// Rows that fired for no rule.
    pub already: u64,
    /// Rows with a NULL clock (whole query).
    pub null_clocks: u64,
    /// Rows in the window with a NULL key.
    pub null_keys: u64,
    /// Rows whose clock is not a time (whole query).
    pub unreadable_clocks: u64,
    /// One of them: `'yesterday' (key ["a"])`.
    pub unreadable_clock_example: Option<String>,
}

/// Records the start of a poll; returns the run's id.
pub async fn start(
    store: &Store,
    lease: &Lease,
    window: Window,
    now: Timestamp,
) -> Result<i64, StoreError> {
    let mut tx = store.begin(&lease.workspace).await?;
    let id = fetch_all!(
        &mut tx,
        "INSERT INTO run (workspace_id, trigger_name, worker, fencing_token, window_since, window_until, status, started_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'running', $7) RETURNING id",
        [&lease.workspace, &lease.trigger, &lease.worker, lease.token, DbTime(window.since), DbTime(window.until), DbTime(now)],
        |r| r.try_get::<i64, _>("id")
    )
    .map_err(|e| store.error(e))?[0];
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(id)
}

/// Records how a poll ended.
pub async fn finish(
    store: &Store,
    workspace: &WorkspaceId,
    id: i64,
    status: &str,
    counts: &RunCounts,
    error: Option<&str>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "UPDATE run SET status = $3, matched = $4, fired = $5, already = $6, null_clocks = $7, null_keys = $8, error = $9, finished_at = $10,
             unreadable_clocks = $11, unreadable_clock_example = $12
         WHERE workspace_id = $1 AND id = $2",
        [
            workspace,
            id,
            status,
            counts.matched as i64,
            counts.fired as i64,
            counts.already as i64,
            counts.null_clocks as i64,
            counts.null_keys as i64,
            error,
            DbTime(now),
            counts.unreadable_clocks as i64,
            counts.unreadable_clock_example.as_deref()
        ]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}

/// One recorded poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// Its id.
    pub id: i64,
    /// The trigger polled.
    pub trigger: String,
    /// `running`, `ok`, `failed`, `skipped` or `stale`.
    pub status: String,
    /// Rows read.
    pub matched: i64,
    /// Rows that made at least one new fire.
    pub fired: i64,
    /// Rows that fired for no rule.
    pub already: i64,
    /// Rows with a NULL clock.
    pub null_clocks: i64,
    /// Rows with a NULL key.
    pub null_keys: i64,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The window read: from.
    pub window_since: Timestamp,
    /// The window read: until.
    pub window_until: Timestamp,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Option<Timestamp>,
}

/// A workspace's polls, newest first, or oldest first after `after`.
pub async fn recent(
    store: &Store,
    workspace: &WorkspaceId,
    after: Option<i64>,
    limit: i64,
) -> Result<Vec<Run>, StoreError> {
    let order = if after.is_some() { "ASC" } else { "DESC" };
    let mut tx = store.begin(workspace).await?;
    let runs = fetch_all!(
        &mut tx,
        &format!("SELECT id, trigger_name, status, matched, fired, already, null_clocks, null_keys, error, window_since, window_until, started_at, finished_at
         FROM run WHERE workspace_id = $1 AND id > $2 ORDER BY id {order} LIMIT $3"),
        [workspace, after.unwrap_or(0), limit],
        |r| Ok(Run {
            id: r.try_get("id")?,
            trigger: r.try_get("trigger_name")?,
            status: r.try_get("status")?,
            matched: r.try_get("matched")?,
            fired: r.try_get("fired")?,
            already: r.try_get("already")?,
            null_clocks: r.try_get("null_clocks")?,
            null_keys: r.try_get("null_keys")?,
            error: r.try_get("error")?,
            window_since: r.try_get::<DbTime, _>("window_since")?.0,
            window_until: r.try_get::<DbTime, _>("window_until")?.0,
            started_at: r.try_get::<DbTime, _>("started_at")?.0,
            finished_at: r.try_get::<Option<DbTime>, _>("finished_at")?.map(|t| t.0),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(runs)
}
