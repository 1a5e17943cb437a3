//! Workspaces (the `workspace` table): the tenant every row belongs to, its default time zone,
//! its halt switch; creating, listing, renaming and deleting one with everything in it.

use jiff::Timestamp;

use super::{DbTime, Store, StoreError, StoreTx, Unscoped, execute, fetch_all};
use crate::store::WorkspaceId;

/// The tables holding a workspace's rows, in the order a deletion empties them (each before the
/// tables it references).
const TENANT_TABLES: [&str; 14] = [
    "api_token",
    "sweep",
    "inbox_message",
    "delivery_attempt",
    "delivery",
    "occurrence_count",
    "occurrence",
    "fire",
    "run",
    "integration_state",
    "secret",
    "rule_state",
    "trigger_state",
    "definition_version",
];

/// A workspace's stored state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Its id.
    pub id: WorkspaceId,
    /// Its name.
    pub name: String,
    /// Its default IANA time zone.
    pub timezone: String,
    /// Why it is halted, if it is.
    pub halted: Option<(String, Timestamp)>,
}

/// The workspace's default time zone (an IANA name), read in the caller's transaction; `None`
/// when the workspace does not exist.
pub async fn zone_in(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
) -> Result<Option<String>, sqlx::Error> {
    Ok(fetch_all!(
        tx,
        "SELECT timezone FROM workspace WHERE id = $1",
        [workspace],
        |r| r.try_get::<String, _>("timezone")
    )?
    .into_iter()
    .next())
}

/// A time zone a workspace may take: a known IANA name.
pub fn known_zone(zone: &str) -> Result<jiff::tz::TimeZone, WorkspaceError> {
    jiff::tz::TimeZone::get(zone)
        .map_err(|_| WorkspaceError::TimeZone(zone.chars().take(80).collect()))
}

/// Sets the workspace's default time zone (checked with [`known_zone`]) in the caller's
/// transaction; false when the workspace does not exist.
pub async fn set_zone_in(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    zone: &str,
) -> Result<bool, sqlx::Error> {
    let changed = execute!(
        tx,
        "UPDATE workspace SET timezone = $2 WHERE id = $1",
        [workspace, zone]
    )?;
    Ok(changed > 0)
}

/// Reads a workspace.
pub async fn get(store: &Store, workspace: &WorkspaceId) -> Result<Workspace, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT id, name, timezone, halted_reason, halted_at FROM workspace WHERE id = $1",
        [workspace],
        |r| workspace_row(r)
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    rows.into_iter()
        .next()
        .ok_or_else(|| missing(store, workspace))
}

/// The error for a workspace that does not exist, naming how to make it.
pub fn missing(store: &Store, workspace: &WorkspaceId) -> StoreError {
    let fix = if workspace == &WorkspaceId::DEFAULT {
        "run `rowfire migrate`".to_string()
    } else {
        format!("create it with `rowfire workspaces create {workspace}`")
    };
    StoreError::Invalid {
        shown: store.shown().to_string(),
        message: format!("workspace \"{workspace}\" does not exist; {fix}"),
    }
}

/// The longest halt reason, in characters.
pub const MAX_HALT_REASON_CHARS: usize = 500;

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

/// Why a workspace could not be created, renamed or deleted.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// It exists already.
    #[error("workspace \"{0}\" exists already; `rowfire workspaces list` shows them")]
    Exists(WorkspaceId),
    /// There is no such workspace.
    #[error("there is no workspace \"{0}\"; `rowfire workspaces list` shows them")]
    Unknown(WorkspaceId),
    /// The default workspace stays.
    #[error(
        "the default workspace cannot be deleted; it is where commands work when no --workspace is given"
    )]
    Default,
    /// Not an IANA time zone.
    #[error(
        "unknown time zone \"{0}\"; use an IANA name such as America/New_York or Europe/Berlin"
    )]
    TimeZone(String),
    /// A name that is empty or too long.
    #[error("a workspace's name is 1 to 200 characters")]
    Name,
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn checked(name: &str, timezone: Option<&str>) -> Result<(), WorkspaceError> {
    if name.trim().is_empty() || name.chars().count() > 200 {
        return Err(WorkspaceError::Name);
    }
    if let Some(tz) = timezone {
        known_zone(tz)?;
    }
    Ok(())
}

/// Creates a workspace (its transaction is scoped to the new workspace, so row-level security
/// admits the row).
pub async fn create(
    store: &Store,
    id: &WorkspaceId,
    name: &str,
    timezone: &str,
) -> Result<(), WorkspaceError> {
    checked(name, Some(timezone))?;
    let mut tx = store.begin(id).await?;
    let inserted = execute!(
        &mut tx,
        "INSERT INTO workspace (id, name, timezone) VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
        [id, name, timezone]
    )
    .map_err(|e| store.error(e))?;
    if inserted == 0 {
        return Err(WorkspaceError::Exists(id.clone()));
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(())
}

/// Every workspace, by id (an operator's listing: one of the few reads across workspaces).
pub async fn list(store: &Store) -> Result<Vec<Workspace>, StoreError> {
    let mut tx = store
        .begin_unscoped(Unscoped::Workspaces)
        .await
        .map_err(|e| store.error(e))?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT id, name, timezone, halted_reason, halted_at FROM workspace ORDER BY id",
        [],
        |r| workspace_row(r)
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// Renames a workspace. Its time zone is changed with [`crate::push::set_zone`], which also
/// re-reads its definitions in the new zone.
pub async fn rename(store: &Store, id: &WorkspaceId, name: &str) -> Result<(), WorkspaceError> {
    checked(name, None)?;
    let mut tx = store.begin(id).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE workspace SET name = $2 WHERE id = $1",
        [id, name]
    )
    .map_err(|e| store.error(e))?;
    if changed == 0 {
        return Err(WorkspaceError::Unknown(id.clone()));
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(())
}

/// Deletes a workspace and everything in it (definitions, state, ledger, deliveries, secrets),
/// in one transaction scoped to it. Returns how many rows went, the workspace's own included.
pub async fn delete(store: &Store, id: &WorkspaceId) -> Result<u64, WorkspaceError> {
    if id == &WorkspaceId::DEFAULT {
        return Err(WorkspaceError::Default);
    }
    let mut tx = store.begin(id).await?;
    let mut deleted = 0;
    for table in TENANT_TABLES {
        deleted += execute!(
            &mut tx,
            &format!("DELETE FROM {table} WHERE workspace_id = $1"),
            [id]
        )
        .map_err(|e| store.error(e))?;
    }
    let gone = execute!(&mut tx, "DELETE FROM workspace WHERE id = $1", [id])
        .map_err(|e| store.error(e))?;
    if gone == 0 {
        return Err(WorkspaceError::Unknown(id.clone()));
    }
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(deleted + gone)
}

fn workspace_row(r: &super::StoreRow<'_>) -> Result<Workspace, sqlx::Error> {
    let reason: Option<String> = r.try_get("halted_reason")?;
    let at: Option<DbTime> = r.try_get("halted_at")?;
    Ok(Workspace {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        timezone: r.try_get("timezone")?,
        halted: reason.zip(at.map(|t| t.0)),
    })
}
