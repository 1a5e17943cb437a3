//! The poller's state in the control plane (the `trigger_state` table): per trigger, the
//! watermark up to which rows were evaluated, lookback, poll interval and next poll, and (with
//! the poller itself) the lease and its fencing token.

use jiff::Timestamp;
use sqlx::Row as _;

use crate::definitions::Definitions;
use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all};

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
}

type Names = Vec<String>;

/// Brings trigger state in line with `defs`: a new trigger starts with its watermark at `now`
/// (history never fires) and is due at once; a changed one keeps its watermark; a removed one is
/// marked removed. Returns (new, removed) trigger names.
pub(crate) async fn reconcile(
    tx: &mut StoreTx,
    workspace: &str,
    defs: &Definitions,
    now: Timestamp,
) -> Result<(Names, Names), sqlx::Error> {
    let existing = fetch_all!(
        &mut *tx,
        "SELECT trigger_name, removed_at FROM trigger_state WHERE workspace_id = $1",
        [workspace],
        |r| Ok((
            r.try_get::<String, _>(0)?,
            r.try_get::<Option<DbTime>, _>(1)?
        ))
    )?;
    let (mut new, mut removed) = (Vec::new(), Vec::new());
    for t in &defs.triggers {
        let lookback = t.lookback.as_millis() as i64;
        let interval = t.poll_interval.as_millis() as i64;
        if existing.iter().any(|(name, _)| *name == t.name) {
            execute!(
                &mut *tx,
                "UPDATE trigger_state SET source_name = $3, checksum = $4, lookback_ms = $5, poll_interval_ms = $6, removed_at = NULL WHERE workspace_id = $1 AND trigger_name = $2",
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
                "INSERT INTO trigger_state (workspace_id, trigger_name, source_name, checksum, watermark, lookback_ms, poll_interval_ms, next_poll_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $5)",
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

/// Every trigger's state, removed ones included, by name.
pub async fn list(store: &Store, workspace: &str) -> Result<Vec<TriggerState>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT trigger_name, source_name, watermark, next_poll_at, last_error, removed_at FROM trigger_state WHERE workspace_id = $1 ORDER BY trigger_name",
        [workspace],
        |r| Ok(TriggerState {
            trigger: r.try_get(0)?,
            source: r.try_get(1)?,
            watermark: r.try_get::<DbTime, _>(2)?.0,
            next_poll_at: r.try_get::<DbTime, _>(3)?.0,
            last_error: r.try_get(4)?,
            removed_at: r.try_get::<Option<DbTime>, _>(5)?.map(|t| t.0),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}
