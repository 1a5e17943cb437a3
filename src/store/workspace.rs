//! Workspaces (the `workspace` table): the tenant every row belongs to, and its halt switch.

use jiff::Timestamp;

use super::{DbTime, Store, StoreError, execute, fetch_all};
use crate::store::WorkspaceId;

/// A workspace's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its default IANA time zone.
    pub timezone: String,
    /// Why it is halted, if it is.
    pub halted: Option<(String, Timestamp)>,
}

/// Reads a workspace.
pub async fn get(store: &Store, workspace: &WorkspaceId) -> Result<Workspace, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT id, name, timezone, halted_reason, halted_at FROM workspace WHERE id = $1",
        [workspace],
        |r| {
            let reason: Option<String> = r.try_get("halted_reason")?;
            let at: Option<DbTime> = r.try_get("halted_at")?;
            Ok(Workspace {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                timezone: r.try_get("timezone")?,
                halted: reason.zip(at.map(|t| t.0)),
            })
        }
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    rows.into_iter().next().ok_or_else(|| StoreError::Invalid {
        shown: store.shown().to_string(),
        message: format!("workspace \"{workspace}\" does not exist; run `rowfire migrate`"),
    })
}

/// Halts a workspace: polls stop advancing watermarks and nothing is sent until `resume`.
pub async fn halt(
    store: &Store,
    workspace: &WorkspaceId,
    reason: &str,
    now: Timestamp,
) -> Result<(), StoreError> {
    set_halt(store, workspace, Some(reason), Some(DbTime(now))).await
}

/// Resumes a halted workspace; rows that arrived meanwhile are evaluated on the next polls.
pub async fn resume(store: &Store, workspace: &WorkspaceId) -> Result<(), StoreError> {
    set_halt(store, workspace, None, None).await
}

async fn set_halt(
    store: &Store,
    workspace: &WorkspaceId,
    reason: Option<&str>,
    at: Option<DbTime>,
) -> Result<(), StoreError> {
    let mut tx = store.begin(workspace).await?;
    execute!(
        &mut tx,
        "UPDATE workspace SET halted_reason = $2, halted_at = $3 WHERE id = $1",
        [workspace, reason, at]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))
}
