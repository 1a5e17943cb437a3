//! Integrations at run time (the `integration_state` table): whether one is enabled (a 410
//! disables it, and its deliveries wait, unlost, until it is enabled again) and its shared pace
//! (the next slot of a rate limit, or the pause a 429 asked for), which every worker honours
//! through the delivery claim.

use jiff::{SignedDuration, Timestamp};

use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all};

/// One integration's run-time state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The integration's name.
    pub name: String,
    /// When it was disabled, if it is.
    pub disabled_at: Option<Timestamp>,
    /// Why it was disabled.
    pub disabled_reason: Option<String>,
    /// No request goes before this.
    pub paused_until: Option<Timestamp>,
}

/// Disables an integration: its deliveries stay pending and are not claimed until it is enabled.
pub async fn disable(
    store: &Store,
    workspace: &WorkspaceId,
    name: &str,
    reason: &str,
    now: Timestamp,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO integration_state (workspace_id, name, disabled_at, disabled_reason) VALUES ($1, $2, $3, $4)
         ON CONFLICT (workspace_id, name) DO UPDATE SET disabled_at = excluded.disabled_at, disabled_reason = excluded.disabled_reason",
        [workspace, name, DbTime(now), reason]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}

/// Enables an integration again; its waiting deliveries become claimable at once. Returns whether
/// it was disabled.
pub async fn enable(
    store: &Store,
    workspace: &WorkspaceId,
    name: &str,
) -> Result<bool, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE integration_state SET disabled_at = NULL, disabled_reason = NULL
         WHERE workspace_id = $1 AND name = $2 AND disabled_at IS NOT NULL",
        [workspace, name]
    )
    .map_err(|e| store.error(e))?;
    if changed > 0 {
        // Workers in other processes hear of the waiting deliveries at once.
        crate::outbox::announce(&mut tx)
            .await
            .map_err(|e| store.error(e))?;
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    if changed > 0 {
        store.wake();
    }
    Ok(changed > 0)
}

/// Holds every request to an integration until `until` (never shortening a longer pause): what
/// a 429 does, so one destination's "slow down" slows every worker.
pub async fn pause(
    store: &Store,
    workspace: &WorkspaceId,
    name: &str,
    until: Timestamp,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "INSERT INTO integration_state (workspace_id, name, paused_until) VALUES ($1, $2, $3)
         ON CONFLICT (workspace_id, name) DO UPDATE SET paused_until = CASE
             WHEN integration_state.paused_until IS NULL OR integration_state.paused_until < excluded.paused_until
             THEN excluded.paused_until ELSE integration_state.paused_until END",
        [workspace, name, DbTime(until)]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}

/// A rate-limit reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// This request may go at this time (within the horizon asked for).
    Granted(Timestamp),
    /// Nothing free before this time; nothing was reserved.
    Full(Timestamp),
}

/// Reserves the next request slot of an integration limited to one request per `interval`,
/// shared by every worker, if it falls within `horizon` of now. A request that would have to
/// wait longer reserves nothing, so a backlog never books the integration's future.
pub async fn reserve(
    store: &Store,
    workspace: &WorkspaceId,
    name: &str,
    interval: SignedDuration,
    now: Timestamp,
    horizon: SignedDuration,
) -> Result<Slot, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let slot = async {
        let lock = match &tx {
            StoreTx::Postgres(_) => " FOR UPDATE",
            StoreTx::Sqlite(_) => "",
        };
        execute!(
            &mut tx,
            "INSERT INTO integration_state (workspace_id, name) VALUES ($1, $2) ON CONFLICT (workspace_id, name) DO NOTHING",
            [workspace, name]
        )?;
        let next = fetch_all!(
            &mut tx,
            &format!(
                "SELECT paused_until FROM integration_state WHERE workspace_id = $1 AND name = $2{lock}"
            ),
            [workspace, name],
            |r| r.try_get::<Option<DbTime>, _>("paused_until")
        )?;
        let slot = next
            .into_iter()
            .flatten()
            .map(|t| t.0)
            .max()
            .map_or(now, |t| t.max(now));
        if slot > crate::store::later(now, horizon) {
            tx.rollback().await?;
            return Ok(Slot::Full(slot));
        }
        execute!(
            &mut tx,
            "UPDATE integration_state SET paused_until = $3 WHERE workspace_id = $1 AND name = $2",
            [workspace, name, DbTime(crate::store::later(slot, interval))]
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(Slot::Granted(slot))
    };
    slot.await.map_err(|e| store.error(e))
}

/// Every integration with a recorded state, by name.
pub async fn states(store: &Store, workspace: &WorkspaceId) -> Result<Vec<State>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT name, disabled_at, disabled_reason, paused_until FROM integration_state WHERE workspace_id = $1 ORDER BY name",
        [workspace],
        |r| Ok(State {
            name: r.try_get("name")?,
            disabled_at: r.try_get::<Option<DbTime>, _>("disabled_at")?.map(|t| t.0),
            disabled_reason: r.try_get("disabled_reason")?,
            paused_until: r.try_get::<Option<DbTime>, _>("paused_until")?.map(|t| t.0),
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}
