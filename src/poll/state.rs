//! Trigger state in the control plane (the `trigger_state` table): per trigger, the watermark up
//! to which rows were evaluated, lookback, poll interval and next poll, and the lease with its
//! fencing token.

use jiff::{SignedDuration, Timestamp};

use crate::definitions::{Definitions, limits};
use crate::store::WorkspaceId;

mod look;
use crate::source::{UnreadableClocks, UnreadableExample};
use crate::store::{
    DbTime, Engine, Store, StoreError, StoreRow, StoreTx, Unscoped, execute, fetch_all,
};
pub use look::due_counts;
pub(crate) use look::next_due;

/// One trigger's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerState {
    /// The trigger.
    pub trigger: String,
    /// Its source.
    pub source: String,
    /// Rows before this instant have been evaluated.
    pub watermark: Timestamp,
    /// When it is next due.
    pub next_poll_at: Timestamp,
    /// The last poll's error, if it failed.
    pub last_error: Option<String>,
    /// When it was removed from the definitions, if it was.
    pub removed_at: Option<Timestamp>,
    /// A stored instant that cannot be read or lies outside the range the control plane keeps,
    /// with the command that repairs it; `watermark` and `next_poll_at` are then placeholders.
    pub problem: Option<String>,
    /// How often it is polled.
    pub poll_interval: SignedDuration,
    /// The worker holding its lease (a [`super::workers::WorkerId`]), while one does.
    pub lease_holder: Option<String>,
    /// When that lease lapses unless renewed.
    pub lease_expires_at: Option<Timestamp>,
    /// How long its last lease was taken for (None before the first lease).
    pub lease_for: Option<SignedDuration>,
    /// When a poll last settled it.
    pub last_polled_at: Option<Timestamp>,
}

impl TriggerState {
    /// How long it has been due at `now` (None when it is not due, or its state is unreadable).
    pub fn due_for(&self, now: Timestamp) -> Option<SignedDuration> {
        if self.problem.is_some() || self.next_poll_at > now {
            return None;
        }
        Some(self.next_poll_at.duration_until(now))
    }

    /// How long it may stay due before something is wrong: its lease (as last taken, else
    /// [`super::DEFAULT_LEASE`]) plus its poll interval.
    pub fn overdue_after(&self) -> SignedDuration {
        self.lease_for
            .unwrap_or(super::DEFAULT_LEASE)
            .saturating_add(self.poll_interval)
    }

    /// True when it has been due longer than [`TriggerState::overdue_after`] at `now`: no worker
    /// has polled it for longer than a lease and a poll interval.
    pub fn overdue(&self, now: Timestamp) -> bool {
        self.due_for(now).is_some_and(|d| d > self.overdue_after())
    }

    /// The lease's holder and expiry, while the lease is live at `now`.
    pub fn held(&self, now: Timestamp) -> Option<(&str, Timestamp)> {
        match (&self.lease_holder, self.lease_expires_at) {
            (Some(holder), Some(until)) if until > now => Some((holder.as_str(), until)),
            _ => None,
        }
    }
}

/// Checks an instant read from `trigger_state`: unreadable or outside [`DbTime::EARLIEST`,
/// `DbTime::LATEST`] becomes an error naming the column, never a crash.
fn stored(column: &str, got: Result<DbTime, sqlx::Error>) -> Result<Timestamp, String> {
    match got {
        Ok(t) if DbTime::in_range(t.0) => Ok(t.0),
        Ok(t) => Err(format!("its stored {column} {} is out of range", t.0)),
        Err(_) => Err(format!("its stored {column} cannot be read")),
    }
}

/// An optional stored instant; unreadable or out of range reads as absent (it is only shown).
fn optional_time(got: Result<Option<DbTime>, sqlx::Error>) -> Option<Timestamp> {
    got.ok()
        .flatten()
        .map(|t| t.0)
        .filter(|t| DbTime::in_range(*t))
}

/// The advice for a trigger whose stored state is out of range.
fn repair_advice(trigger: &str, what: &str) -> String {
    format!(
        "trigger {trigger}: {what} (Rowfire keeps times from {} to {}); run `rowfire rewind {trigger} --days 1` or push the definitions again to reset it",
        DbTime::EARLIEST,
        DbTime::LATEST
    )
}

/// Stored intervals bounded as the definitions bound them, so a value stored before the bounds
/// existed cannot overflow a due time.
fn stored_interval(ms: i64, max: SignedDuration) -> SignedDuration {
    SignedDuration::from_millis(ms).clamp(SignedDuration::ZERO, max)
}

type Names = Vec<String>;

/// Brings trigger state in line with `defs`: a new trigger starts with its watermark at `now`
/// (history never fires) and is due at once; a changed one keeps its watermark; a removed one is
/// marked removed. Returns (new, removed) trigger names.
pub(crate) async fn reconcile(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    defs: &Definitions,
    now: Timestamp,
) -> Result<(Names, Names), sqlx::Error> {
    let existing = fetch_all!(
        &mut *tx,
        "SELECT trigger_name, removed_at FROM trigger_state WHERE workspace_id = $1",
        [workspace],
        |r| Ok((
            r.try_get::<String, _>("trigger_name")?,
            r.try_get::<Option<DbTime>, _>("removed_at")?
        ))
    )?;
    let (mut new, mut removed) = (Vec::new(), Vec::new());
    for t in &defs.triggers {
        let lookback = t.lookback.as_millis() as i64;
        let interval = defs.poll_every(t).as_millis() as i64;
        if existing.iter().any(|(name, _)| *name == t.name) {
            execute!(
                &mut *tx,
                "UPDATE trigger_state SET source_name = $3, checksum = $4, lookback_ms = $5, poll_interval_ms = $6, removed_at = NULL,
                     clocks_counted_at = CASE WHEN checksum = $4 THEN clocks_counted_at ELSE NULL END
                 WHERE workspace_id = $1 AND trigger_name = $2",
                [
                    workspace,
                    &t.name,
                    &t.source,
                    t.checksum(),
                    lookback,
                    interval
                ]
            )?;
        } else {
            execute!(
                &mut *tx,
                "INSERT INTO trigger_state (workspace_id, trigger_name, source_name, checksum, watermark, origin, lookback_ms, poll_interval_ms, next_poll_at) VALUES ($1, $2, $3, $4, $5, $5, $6, $7, $5)",
                [
                    workspace,
                    &t.name,
                    &t.source,
                    t.checksum(),
                    DbTime(now),
                    lookback,
                    interval
                ]
            )?;
            new.push(t.name.clone());
        }
    }
    for (name, gone) in &existing {
        if gone.is_none() && defs.trigger(name).is_none() {
            execute!(
                &mut *tx,
                "UPDATE trigger_state SET removed_at = $3 WHERE workspace_id = $1 AND trigger_name = $2",
                [workspace, name, DbTime(now)]
            )?;
            removed.push(name.clone());
        }
    }
    Ok((new, removed))
}

/// Resets every instant of `workspace`'s triggers that is stored out of range (a watermark
/// rewound millennia, planted by hand, or unreadable) to `now`; part of every `push`. Returns
/// how many triggers it repaired.
pub(crate) async fn repair(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    now: Timestamp,
) -> Result<u64, sqlx::Error> {
    let (lo, hi) = (DbTime(DbTime::EARLIEST), DbTime(DbTime::LATEST));
    execute!(
        &mut *tx,
        "UPDATE trigger_state SET
             watermark = CASE WHEN watermark < $3 OR watermark > $4 THEN $2 ELSE watermark END,
             origin = CASE WHEN origin < $3 OR origin > $4 THEN $2 ELSE origin END,
             next_poll_at = CASE WHEN next_poll_at < $3 OR next_poll_at > $4 THEN $2 ELSE next_poll_at END,
             lease_expires_at = CASE WHEN lease_expires_at < $3 OR lease_expires_at > $4 THEN NULL ELSE lease_expires_at END
         WHERE workspace_id = $1 AND (watermark < $3 OR watermark > $4 OR origin < $3 OR origin > $4
             OR next_poll_at < $3 OR next_poll_at > $4 OR lease_expires_at < $3 OR lease_expires_at > $4)",
        [workspace, DbTime(now), lo, hi]
    )
}

/// Every trigger's state, removed ones included, by name.
pub async fn list(store: &Store, workspace: &WorkspaceId) -> Result<Vec<TriggerState>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT trigger_name, source_name, watermark, next_poll_at, last_error, removed_at,
             poll_interval_ms, lease_owner, lease_expires_at, lease_ms, last_polled_at
         FROM trigger_state WHERE workspace_id = $1 ORDER BY trigger_name",
        [workspace],
        |r| {
            let trigger: String = r.try_get("trigger_name")?;
            let watermark = stored("watermark", r.try_get::<DbTime, _>("watermark"));
            let next_poll_at = stored("next poll", r.try_get::<DbTime, _>("next_poll_at"));
            let problem = [&watermark, &next_poll_at]
                .into_iter()
                .find_map(|t| t.as_ref().err())
                .map(|what| repair_advice(&trigger, what));
            Ok(TriggerState {
                source: r.try_get("source_name")?,
                watermark: watermark.unwrap_or(DbTime::EARLIEST),
                next_poll_at: next_poll_at.unwrap_or(DbTime::EARLIEST),
                last_error: r.try_get("last_error")?,
                removed_at: r
                    .try_get::<Option<DbTime>, _>("removed_at")
                    .ok()
                    .flatten()
                    .map(|t| t.0),
                poll_interval: stored_interval(
                    r.try_get("poll_interval_ms")?,
                    limits::MAX_POLL_INTERVAL,
                ),
                lease_holder: r.try_get("lease_owner")?,
                lease_expires_at: optional_time(r.try_get::<Option<DbTime>, _>("lease_expires_at")),
                lease_for: r
                    .try_get::<Option<i64>, _>("lease_ms")?
                    .map(|ms| stored_interval(ms, super::MAX_LEASE)),
                last_polled_at: optional_time(r.try_get::<Option<DbTime>, _>("last_polled_at")),
                trigger,
                problem,
            })
        }
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// A time-limited claim on one trigger. Its settle only applies while the token is current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The workspace.
    pub workspace: WorkspaceId,
    /// The trigger.
    pub trigger: String,
    /// Who holds it.
    pub worker: String,
    /// The fencing token; a later lease of the same trigger has a larger one.
    pub token: i64,
    /// Rows before this were evaluated.
    pub watermark: Timestamp,
    /// No poll reads before this (the trigger's start, or an explicit rewind).
    pub origin: Timestamp,
    /// How far behind the watermark to re-read.
    pub lookback: SignedDuration,
    /// How often to poll.
    pub poll_interval: SignedDuration,
    /// When the lease lapses.
    pub expires_at: Timestamp,
    /// Why the trigger cannot be polled as stored (an out-of-range watermark or origin), with
    /// the command that repairs it; the poll fails with it and nothing is read.
    pub problem: Option<String>,
    /// The last count of its rows no window holds (NULL or unreadable clocks), if there is one
    /// since the trigger last changed.
    pub clock_counts: Option<ClockCounts>,
}

/// A count of a trigger's rows that no window can hold, over its whole query: rows whose clock
/// is NULL, and (SQLite) rows whose clock is not a time. A poll refreshes it at most once per
/// interval ([`super::DEFAULT_CLOCK_COUNT_EVERY`]) and otherwise reports the last one, with its
/// age; a backtest always counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClockCounts {
    /// When it was counted.
    pub counted_at: Timestamp,
    /// Rows with a NULL clock.
    pub null_clocks: u64,
    /// Rows whose clock is not a time, with one of them.
    pub unreadable: UnreadableClocks,
}

impl ClockCounts {
    /// Reads the stored count from a `trigger_state` row (`None` when none was taken, or the
    /// instant cannot be read).
    fn stored(r: &StoreRow<'_>) -> Result<Option<ClockCounts>, sqlx::Error> {
        let Some(counted_at) = optional_time(r.try_get::<Option<DbTime>, _>("clocks_counted_at"))
        else {
            return Ok(None);
        };
        let value: Option<String> = r.try_get("unreadable_clock_value")?;
        let key: Option<String> = r.try_get("unreadable_clock_key")?;
        Ok(Some(ClockCounts {
            counted_at,
            null_clocks: r.try_get::<i64, _>("null_clocks")?.max(0) as u64,
            unreadable: UnreadableClocks {
                rows: r.try_get::<i64, _>("unreadable_clocks")?.max(0) as u64,
                example: value
                    .zip(key)
                    .map(|(clock, key)| UnreadableExample { clock, key }),
            },
        }))
    }
}

const LEASE_PG: &str = "WITH due AS MATERIALIZED (
        SELECT workspace_id, trigger_name FROM trigger_state
        WHERE removed_at IS NULL AND next_poll_at <= $2 AND (lease_expires_at IS NULL OR lease_expires_at <= $2)
        ORDER BY next_poll_at LIMIT 1 FOR UPDATE SKIP LOCKED)
    UPDATE trigger_state AS t SET lease_owner = $1, lease_expires_at = $3, lease_ms = $4, fencing_token = t.fencing_token + 1
    FROM due WHERE t.workspace_id = due.workspace_id AND t.trigger_name = due.trigger_name
    RETURNING t.workspace_id, t.trigger_name, t.fencing_token, t.watermark, t.origin, t.lookback_ms, t.poll_interval_ms,
        t.clocks_counted_at, t.null_clocks, t.unreadable_clocks, t.unreadable_clock_value, t.unreadable_clock_key";

// SQLite runs one writer at a time (BEGIN IMMEDIATE), so the selection needs no row locks.
const LEASE_SQLITE: &str = "WITH due AS MATERIALIZED (
        SELECT workspace_id, trigger_name FROM trigger_state
        WHERE removed_at IS NULL AND next_poll_at <= $2 AND (lease_expires_at IS NULL OR lease_expires_at <= $2)
        ORDER BY next_poll_at LIMIT 1)
    UPDATE trigger_state SET lease_owner = $1, lease_expires_at = $3, lease_ms = $4, fencing_token = fencing_token + 1
    WHERE (workspace_id, trigger_name) IN (SELECT workspace_id, trigger_name FROM due)
    RETURNING workspace_id, trigger_name, fencing_token, watermark, origin, lookback_ms, poll_interval_ms,
        clocks_counted_at, null_clocks, unreadable_clocks, unreadable_clock_value, unreadable_clock_key";

/// Leases the most overdue trigger of any workspace, in a short transaction of its own. This is
/// one of the few statements that finds work before knowing whose it is.
pub async fn lease_due(
    store: &Store,
    worker: &str,
    now: Timestamp,
    lease_for: SignedDuration,
) -> Result<Option<Lease>, StoreError> {
    let expires_at = crate::store::later(now, lease_for);
    let sql = match store.engine() {
        Engine::Postgres => LEASE_PG,
        Engine::Sqlite => LEASE_SQLITE,
    };
    let leased = async {
        let mut tx = store.begin_unscoped(Unscoped::TriggerLease).await?;
        let rows = fetch_all!(
            &mut tx,
            sql,
            [
                worker,
                DbTime(now),
                DbTime(expires_at),
                lease_for.as_millis() as i64
            ],
            |r| lease_row(r, worker, now, expires_at)
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows.into_iter().next())
    };
    leased.await.map_err(|e| store.error(e))
}

/// A lease as `RETURNING` gives it back: the trigger's state, with a stored instant out of range
/// read as now and named in `problem`.
fn lease_row(
    r: &StoreRow<'_>,
    worker: &str,
    now: Timestamp,
    expires_at: Timestamp,
) -> Result<Lease, sqlx::Error> {
    let trigger: String = r.try_get("trigger_name")?;
    let watermark = stored("watermark", r.try_get::<DbTime, _>("watermark"));
    let origin = stored("origin", r.try_get::<DbTime, _>("origin"));
    let problem = [&watermark, &origin]
        .into_iter()
        .find_map(|t| t.as_ref().err())
        .map(|what| repair_advice(&trigger, what));
    Ok(Lease {
        workspace: r.try_get("workspace_id")?,
        worker: worker.to_string(),
        token: r.try_get("fencing_token")?,
        watermark: watermark.unwrap_or(now),
        origin: origin.unwrap_or(now),
        lookback: stored_interval(r.try_get("lookback_ms")?, limits::MAX_LOOKBACK),
        poll_interval: stored_interval(r.try_get("poll_interval_ms")?, limits::MAX_POLL_INTERVAL),
        expires_at,
        clock_counts: ClockCounts::stored(r)?,
        trigger,
        problem,
    })
}

/// Leases one named trigger of `workspace` now, whether or not it is due (`run now` from the API),
/// scoped to that workspace: `None` when it is not in force or another worker's lease on it is
/// live.
pub async fn lease_named(
    store: &Store,
    workspace: &WorkspaceId,
    trigger: &str,
    worker: &str,
    now: Timestamp,
    lease_for: SignedDuration,
) -> Result<Option<Lease>, StoreError> {
    let expires_at = crate::store::later(now, lease_for);
    let mut tx = store.begin(workspace).await?;
    let leased = async {
        let rows = fetch_all!(
            &mut tx,
            "UPDATE trigger_state SET lease_owner = $3, lease_expires_at = $5, lease_ms = $6, fencing_token = fencing_token + 1
             WHERE workspace_id = $1 AND trigger_name = $2 AND removed_at IS NULL
               AND (lease_expires_at IS NULL OR lease_expires_at <= $4)
             RETURNING workspace_id, trigger_name, fencing_token, watermark, origin, lookback_ms, poll_interval_ms,
                 clocks_counted_at, null_clocks, unreadable_clocks, unreadable_clock_value, unreadable_clock_key",
            [
                workspace,
                trigger,
                worker,
                DbTime(now),
                DbTime(expires_at),
                lease_for.as_millis() as i64
            ],
            |r| lease_row(r, worker, now, expires_at)
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows.into_iter().next())
    };
    leased.await.map_err(|e| store.error(e))
}

/// Renews a lease inside `tx` until `until`, matched by its fencing token and holder. False,
/// changing nothing, when the lease was taken over or given back: the poll must stop.
pub(crate) async fn renew_in(
    tx: &mut StoreTx,
    lease: &Lease,
    until: Timestamp,
) -> Result<bool, sqlx::Error> {
    let changed = execute!(
        tx,
        "UPDATE trigger_state SET lease_expires_at = $4
         WHERE workspace_id = $1 AND trigger_name = $2 AND fencing_token = $3 AND lease_owner = $5",
        [
            &lease.workspace,
            &lease.trigger,
            lease.token,
            DbTime(until),
            &lease.worker
        ]
    )?;
    Ok(changed == 1)
}

/// Renews a lease until `now + lease_for` in a transaction of its own (the heartbeat of a poll
/// whose source read is slow). False when the lease was lost.
pub async fn renew(
    store: &Store,
    lease: &Lease,
    now: Timestamp,
    lease_for: SignedDuration,
) -> Result<bool, StoreError> {
    let until = crate::store::later(now, lease_for);
    let mut tx = store.begin(&lease.workspace).await?;
    let renewed = renew_in(&mut tx, lease, until)
        .await
        .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(renewed)
}

/// Gives back every trigger lease `worker` still holds, in any workspace: each lapses at `now`
/// and its trigger stays due, so another worker polls it at once. Watermarks stay. Returns how
/// many were given back. Part of a worker's clean stop; unscoped, like the lease itself.
pub async fn release_all(store: &Store, worker: &str, now: Timestamp) -> Result<u64, StoreError> {
    let released = async {
        let mut tx = store.begin_unscoped(Unscoped::ReleaseLeases).await?;
        let n = execute!(
            &mut tx,
            "UPDATE trigger_state SET lease_owner = NULL, lease_expires_at = $2
             WHERE lease_owner = $1 AND lease_expires_at > $2",
            [worker, DbTime(now)]
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(n)
    };
    released.await.map_err(|e| store.error(e))
}

/// How a poll ends for its trigger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    /// The new watermark, or `None` to keep it (a failed or skipped poll).
    pub watermark: Option<Timestamp>,
    /// When the trigger is next due.
    pub next_poll_at: Timestamp,
    /// The error to show, if the poll failed.
    pub error: Option<String>,
    /// When the poll ended.
    pub now: Timestamp,
    /// A fresh count of the rows no window holds, to keep until the next one (`None` keeps the
    /// stored count).
    pub clock_counts: Option<ClockCounts>,
}

/// Releases a lease with its outcome. Returns false, changing nothing, when the lease was taken
/// over (its fencing token is no longer current): a stale worker's settle is a no-op.
pub async fn settle(store: &Store, lease: &Lease, outcome: &Settle) -> Result<bool, StoreError> {
    let counts = outcome.clock_counts.as_ref();
    let example = counts.and_then(|c| c.unreadable.example.as_ref());
    let mut tx = store.begin(&lease.workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE trigger_state SET watermark = COALESCE($4, watermark), next_poll_at = $5, last_error = $6, last_polled_at = $7,
             lease_owner = NULL, lease_expires_at = NULL,
             clocks_counted_at = COALESCE($8, clocks_counted_at),
             null_clocks = COALESCE($9, null_clocks),
             unreadable_clocks = COALESCE($10, unreadable_clocks),
             unreadable_clock_value = CASE WHEN $9 IS NULL THEN unreadable_clock_value ELSE $11 END,
             unreadable_clock_key = CASE WHEN $9 IS NULL THEN unreadable_clock_key ELSE $12 END
         WHERE workspace_id = $1 AND trigger_name = $2 AND fencing_token = $3",
        [
            &lease.workspace,
            &lease.trigger,
            lease.token,
            outcome.watermark.map(DbTime),
            DbTime(outcome.next_poll_at),
            outcome.error.as_deref(),
            DbTime(outcome.now),
            counts.map(|c| DbTime(c.counted_at)),
            counts.map(|c| c.null_clocks as i64),
            counts.map(|c| c.unreadable.rows as i64),
            example.map(|e| e.clock.as_str()),
            example.map(|e| e.key.as_str())
        ]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(changed == 1)
}

/// Moves a trigger's watermark back to `now - by` (never forward) and makes it due now. Rows in
/// the re-read window that already fired are stopped by the ledger. A watermark or origin
/// stored out of range (or unreadable) is replaced by `now - by`, which repairs it.
pub async fn rewind(
    store: &Store,
    workspace: &WorkspaceId,
    trigger: &str,
    by: SignedDuration,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let to = DbTime(crate::store::earlier(now, by));
    let (lo, hi) = (DbTime(DbTime::EARLIEST), DbTime(DbTime::LATEST));
    let mut tx = store.begin(workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE trigger_state SET
             watermark = CASE WHEN watermark > $3 OR watermark < $5 THEN $3 ELSE watermark END,
             origin = CASE WHEN origin > $3 OR origin < $5 THEN $3 ELSE origin END, next_poll_at = $4,
             lease_expires_at = CASE WHEN lease_expires_at < $5 OR lease_expires_at > $6 THEN NULL ELSE lease_expires_at END
         WHERE workspace_id = $1 AND trigger_name = $2 AND removed_at IS NULL",
        [workspace, trigger, to, DbTime(now), lo, hi]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(changed == 1)
}

/// Makes every trigger of `workspace` due at `now` (`rowfire worker --once --due-now`): the
/// next poll reads each window as it would have at its time. Returns how many were moved.
pub async fn due_now(
    store: &Store,
    workspace: &WorkspaceId,
    now: Timestamp,
) -> Result<u64, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE trigger_state SET next_poll_at = $2
         WHERE workspace_id = $1 AND removed_at IS NULL AND next_poll_at > $2",
        [workspace, DbTime(now)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(changed)
}
