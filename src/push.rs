//! `push`: validates a definitions document, stores it as the next version (the
//! `definition_version` table, read back through [`crate::definitions::versions`]) and reconciles
//! trigger state ([`crate::poll`]) and rule state ([`crate::rules`]), all in one transaction.

use jiff::Timestamp;

use crate::definitions::{Definitions, Problems, document_checksum, parse};
use crate::store::WorkspaceId;
use crate::store::{DbTime, Store, StoreError, StoreTx, execute, fetch_all};
use crate::{poll, rules};

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
/// rule state, all in one transaction.
pub async fn push(
    store: &Store,
    workspace: &WorkspaceId,
    text: &str,
    now: Timestamp,
) -> Result<PushSummary, PushError> {
    let defs = parse(text)?;
    let mut tx = store.begin(workspace).await?;
    let summary = push_in(&mut tx, workspace, text, &defs, now)
        .await
        .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(summary)
}

async fn push_in(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    text: &str,
    defs: &Definitions,
    now: Timestamp,
) -> Result<PushSummary, sqlx::Error> {
    let checksum = document_checksum(text);
    let current = fetch_all!(
        &mut *tx,
        "SELECT version, checksum FROM definition_version WHERE workspace_id = $1 ORDER BY version DESC LIMIT 1",
        [workspace],
        |r| Ok((
            r.try_get::<i64, _>("version")?,
            r.try_get::<String, _>("checksum")?
        ))
    )?;
    let mut summary = PushSummary::default();
    // Even an unchanged document repairs trigger state stored out of range.
    poll::state::repair(tx, workspace, now).await?;
    match current.first() {
        Some((version, sum)) if *sum == checksum => {
            summary.version = *version;
            summary.unchanged = true;
            return Ok(summary);
        }
        last => {
            summary.version = last.map_or(1, |(v, _)| v + 1);
            execute!(
                &mut *tx,
                "INSERT INTO definition_version (workspace_id, version, document, checksum, pushed_at) VALUES ($1, $2, $3, $4, $5)",
                [workspace, summary.version, text, &checksum, DbTime(now)]
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
