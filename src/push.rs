//! `push`: validates a definitions document, stores it as the next version (the
//! `definition_version` table, read back through [`crate::definitions::versions`]) and reconciles
//! trigger state ([`crate::poll`]) and rule state ([`crate::rules`]), all in one transaction.

use jiff::Timestamp;
use jiff::tz::TimeZone;

use crate::definitions::{Definitions, Problems, document_checksum, parse, parse_in_zone};
use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all};
use crate::{poll, rules};

/// What a push did (the API answers it as is).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, utoipa::ToSchema)]
pub struct PushSummary {
    /// The version now in force.
    pub version: i64,
    /// True when the document equals the version in force (no new version was stored).
    pub unchanged: bool,
    /// Triggers seen for the first time; their watermark starts now, so history never fires.
    pub new_triggers: Vec<String>,
    /// Triggers no longer defined.
    pub removed_triggers: Vec<String>,
    /// Rules seen for the first time (in shadow).
    pub new_rules: Vec<String>,
    /// Rules whose meaning changed, back in shadow.
    pub changed_rules: Vec<String>,
    /// Rules no longer defined; their ledger is kept.
    pub tombstoned_rules: Vec<String>,
}

/// What a push could not do.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The document is invalid; nothing was stored.
    #[error(transparent)]
    Definitions(#[from] Problems),
    /// The control plane failed; nothing was stored.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Validates `text`, stores it as the next version for `workspace` and reconciles trigger and
/// rule state, all in one transaction. Rules that name no time zone take the workspace's, and the
/// version records it: pushing the same document after the workspace's zone changed stores a new
/// version, and the rules it moves go back to shadow.
pub async fn push(
    store: &Store,
    workspace: &WorkspaceId,
    text: &str,
    now: Timestamp,
) -> Result<PushSummary, PushError> {
    // Problems a document has in any zone are reported before the control plane is touched.
    parse(text)?;
    let mut tx = store.begin(workspace).await?;
    let Some(zone) = crate::store::workspace::zone_in(&mut tx, workspace)
        .await
        .map_err(|e| store.error(e))?
    else {
        return Err(crate::store::workspace::missing(store, workspace).into());
    };
    let tz = TimeZone::get(&zone).map_err(|_| {
        Problems::one(
            "(workspace)".into(),
            format!("the workspace's time zone \"{zone}\" is unknown to this Rowfire; set another with `rowfire workspaces rename {workspace} NAME --timezone ZONE`"),
        )
    })?;
    let defs = parse_in_zone(text, &tz)?;
    let summary = push_in(&mut tx, workspace, text, &zone, &defs, now)
        .await
        .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(summary)
}

/// Why a workspace's time zone could not be changed.
#[derive(Debug, thiserror::Error)]
pub enum SetZoneError {
    /// The zone, or the workspace, is refused.
    #[error(transparent)]
    Workspace(#[from] crate::store::workspace::WorkspaceError),
    /// The definitions in force do not parse in the new zone; nothing was changed.
    #[error(transparent)]
    Definitions(#[from] Problems),
}

/// Sets `workspace`'s default time zone and, in the same transaction, stores the definitions in
/// force again read in it, so rules that name no zone of their own count their periods in the new
/// one from now on (those whose meaning moved go back to shadow, as after any push). `None`:
/// nothing was pushed yet, only the zone changed.
pub async fn set_zone(
    store: &Store,
    workspace: &WorkspaceId,
    zone: &str,
    now: Timestamp,
) -> Result<Option<PushSummary>, SetZoneError> {
    use crate::store::workspace::{WorkspaceError, known_zone, set_zone_in};
    let tz = known_zone(zone)?;
    let failed = |e| WorkspaceError::Store(store.error(e));
    let mut tx = store
        .begin(workspace)
        .await
        .map_err(WorkspaceError::Store)?;
    if !set_zone_in(&mut tx, workspace, zone)
        .await
        .map_err(failed)?
    {
        return Err(WorkspaceError::Unknown(workspace.clone()).into());
    }
    let document = fetch_all!(
        &mut tx,
        "SELECT document FROM definition_version WHERE workspace_id = $1 ORDER BY version DESC LIMIT 1",
        [workspace],
        |r| r.try_get::<String, _>("document")
    )
    .map_err(failed)?;
    let summary = match document.first() {
        None => None,
        Some(text) => {
            let defs = parse_in_zone(text, &tz)?;
            Some(
                push_in(&mut tx, workspace, text, zone, &defs, now)
                    .await
                    .map_err(failed)?,
            )
        }
    };
    tx.commit().await.map_err(failed)?;
    Ok(summary)
}

async fn push_in(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    text: &str,
    zone: &str,
    defs: &Definitions,
    now: Timestamp,
) -> Result<PushSummary, sqlx::Error> {
    let checksum = document_checksum(text);
    let current = fetch_all!(
        &mut *tx,
        "SELECT version, checksum, timezone FROM definition_version WHERE workspace_id = $1 ORDER BY version DESC LIMIT 1",
        [workspace],
        |r| Ok((
            r.try_get::<i64, _>("version")?,
            r.try_get::<String, _>("checksum")?,
            r.try_get::<Option<String>, _>("timezone")?
                .unwrap_or_else(|| "UTC".into())
        ))
    )?;
    let mut summary = PushSummary::default();
    // Even an unchanged document repairs trigger state stored out of range.
    poll::state::repair(tx, workspace, now).await?;
    match current.first() {
        Some((version, sum, was)) if *sum == checksum && was == zone => {
            summary.version = *version;
            summary.unchanged = true;
            return Ok(summary);
        }
        last => {
            summary.version = last.map_or(1, |(v, _, _)| v + 1);
            execute!(
                &mut *tx,
                "INSERT INTO definition_version (workspace_id, version, document, checksum, pushed_at, timezone) VALUES ($1, $2, $3, $4, $5, $6)",
                [
                    workspace,
                    summary.version,
                    text,
                    &checksum,
                    DbTime(now),
                    zone
                ]
            )?;
        }
    }
    (summary.new_triggers, summary.removed_triggers) =
        poll::reconcile(tx, workspace, defs, now).await?;
    (
        summary.new_rules,
        summary.changed_rules,
        summary.tombstoned_rules,
    ) = rules::reconcile(tx, workspace, defs, now).await?;
    Ok(summary)
}
