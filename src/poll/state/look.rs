//! Looks across workspaces at `trigger_state`, read only under the lease's bypass: when the
//! next trigger falls due (an idle poller's rest) and how many are due now (`status`).

use jiff::Timestamp;

use crate::store::{DbTime, Store, StoreError, Unscoped, WorkspaceId, fetch_all};

/// When the next trigger of any workspace can be leased: the earliest of each trigger's next
/// poll, or its lease's end when that is later. Unscoped and read-only: an idle poller's "when
/// should I look again".
pub(crate) async fn next_due(store: &Store) -> Result<Option<Timestamp>, StoreError> {
    let found = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let rows = fetch_all!(
            &mut tx,
            "SELECT min(CASE WHEN lease_expires_at > next_poll_at THEN lease_expires_at ELSE next_poll_at END) AS next_due
             FROM trigger_state WHERE removed_at IS NULL",
            [],
            |r| r.try_get::<Option<DbTime>, _>("next_due")
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(rows.into_iter().next().flatten().map(|t| t.0))
    };
    found.await.map_err(|e| store.error(e))
}

/// How many triggers each workspace has due now as the lease sees them (due and not leased),
/// across workspaces, read under the bypass the lease itself uses: if a poller's claim saw
/// nothing while this sees work, the queue is stuck, not quiet.
pub async fn due_counts(
    store: &Store,
    now: Timestamp,
) -> Result<Vec<(WorkspaceId, i64)>, StoreError> {
    let counted = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let rows = fetch_all!(
            &mut tx,
            "SELECT workspace_id, count(*) AS n FROM trigger_state
             WHERE removed_at IS NULL AND next_poll_at <= $1 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
             GROUP BY workspace_id ORDER BY workspace_id",
            [DbTime(now)],
            |r| Ok((r.try_get("workspace_id")?, r.try_get("n")?))
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    counted.await.map_err(|e| store.error(e))
}
