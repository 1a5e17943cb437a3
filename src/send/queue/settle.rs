//! Settling sent deliveries: each finished send's outcome written by (id, fencing token), its
//! attempt recorded in `delivery_attempt` (which this module owns), a group in one transaction.

use std::collections::HashSet;

use jiff::Timestamp;

use super::{Attempt, Claimed, ErrorClass};
use crate::outbox::DeliveryStatus;
use crate::store::WorkspaceId;
use crate::store::batch::{Rows, fetch_with_rows};
use crate::store::{Arg, DbTime, Store, StoreError, StoreTx, execute, fetch_all};

/// How a send ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// Delivered.
    Sent,
    /// Try again at this time.
    Retry {
        /// When it is due again.
        at: Timestamp,
        /// Why the attempt failed.
        reason: String,
    },
    /// Not attempted (the integration's pace or a missing credential held it back): due again at
    /// `at`, and the claim's attempt is not counted.
    Release {
        /// When it is due again.
        at: Timestamp,
        /// Why it waits.
        reason: String,
    },
    /// A terminal state other than sent (failed, dead, …) with its reason.
    Terminal {
        /// The state.
        status: DeliveryStatus,
        /// Why.
        reason: String,
    },
    /// A terminal state reached without a request (expired, or nothing to send): the claim's
    /// attempt is not counted.
    Unsent {
        /// The state.
        status: DeliveryStatus,
        /// Why.
        reason: String,
    },
}

/// One settled send: the claim, how it ended, the attempt made (if one was), and when it ended.
#[derive(Debug, Clone)]
pub struct Settled {
    /// The claim being settled.
    pub claimed: Claimed,
    /// How it ended.
    pub outcome: Settlement,
    /// The attempt to record, if a request was made.
    pub attempt: Option<Attempt>,
    /// When it ended (`sent_at` on success).
    pub at: Timestamp,
}

/// Records how a claimed delivery's send ended. Returns false, changing nothing, when the claim
/// is stale (its lease lapsed and another worker holds a newer token).
pub async fn settle(
    store: &Store,
    claimed: &Claimed,
    outcome: &Settlement,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let settled = Settled {
        claimed: claimed.clone(),
        outcome: outcome.clone(),
        attempt: None,
        at: now,
    };
    Ok(settle_many(store, std::slice::from_ref(&settled)).await?[0])
}

/// Settles a batch of sends, one transaction per workspace: each delivery's update is fenced by
/// its (id, token) and moves the token on, so a replayed settle changes nothing; its attempt is
/// recorded either way (the request was made), once per (delivery, attempt number). Returns, per
/// item, whether the settle took effect; a stale one is logged and changes nothing.
pub async fn settle_many(store: &Store, batch: &[Settled]) -> Result<Vec<bool>, StoreError> {
    let mut took = vec![false; batch.len()];
    let mut workspaces: Vec<&WorkspaceId> = batch.iter().map(|s| &s.claimed.workspace).collect();
    workspaces.sort_unstable();
    workspaces.dedup();
    for workspace in workspaces {
        let mut tx = store.begin(workspace).await?;
        let mine: Vec<usize> = (0..batch.len())
            .filter(|i| &batch[*i].claimed.workspace == workspace)
            .collect();
        let items: Vec<&Settled> = mine.iter().map(|i| &batch[*i]).collect();
        let settled = settle_group(&mut tx, workspace, &items)
            .await
            .map_err(|e| store.error(e))?;
        // A send to the Demo inbox is delivered by recording it there, with its settle.
        let inboxed: Vec<i64> = items
            .iter()
            .filter(|s| s.outcome == Settlement::Sent && settled.contains(&s.claimed.id))
            .filter(|s| {
                s.claimed
                    .url
                    .as_deref()
                    .is_some_and(crate::outbox::is_inbox_url)
            })
            .map(|s| s.claimed.id)
            .collect();
        if let Some(at) = items.iter().map(|s| s.at).max()
            && !inboxed.is_empty()
        {
            crate::outbox::to_inbox(&mut tx, workspace, &inboxed, at)
                .await
                .map_err(|e| store.error(e))?;
        }
        for i in mine {
            took[i] = settled.contains(&batch[i].claimed.id);
        }
        tx.commit().await.map_err(|e| store.error(e))?;
    }
    Ok(took)
}

/// What a settlement writes: status, reason, sent_at, the new due time, and whether the claim's
/// attempt is taken back (no request was made).
fn columns(
    item: &Settled,
) -> (
    DeliveryStatus,
    Option<&str>,
    Option<Timestamp>,
    Option<Timestamp>,
    i64,
) {
    match &item.outcome {
        Settlement::Sent => (DeliveryStatus::Sent, None, Some(item.at), None, 0),
        Settlement::Retry { at, reason } => (
            DeliveryStatus::Pending,
            Some(reason.as_str()),
            None,
            Some(*at),
            0,
        ),
        Settlement::Release { at, reason } => (
            DeliveryStatus::Pending,
            Some(reason.as_str()),
            None,
            Some(*at),
            1,
        ),
        Settlement::Terminal { status, reason } => (*status, Some(reason.as_str()), None, None, 0),
        Settlement::Unsent { status, reason } => (*status, Some(reason.as_str()), None, None, 1),
    }
}

// The attempts of a settled group, from the batch `u` (`$1`: the workspace): only for a delivery
// of this workspace (the table has no foreign key: migration 14), once per (delivery, attempt
// number), whether or not the settle itself still holds the lease (the request was made).
const RECORD_ATTEMPTS: &str = "INSERT INTO delivery_attempt (workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
     SELECT $1, u.s_id, u.a_number, u.a_started, u.a_latency, u.a_code, u.a_class, u.a_response
     FROM u JOIN delivery d ON d.id = u.s_id AND d.workspace_id = $1 WHERE u.a_started IS NOT NULL
     ON CONFLICT (workspace_id, delivery_id, attempt) DO NOTHING";

// The fenced updates of a settled group, from the batch `u`: only where (id, token) still match
// in this workspace; returns the ids that did.
const SETTLE: &str = "UPDATE delivery SET status = u.s_status, reason = u.s_reason, sent_at = u.s_sent_at,
            due_at = COALESCE(u.s_due_at, delivery.due_at), lease_expires_at = NULL,
            attempts = delivery.attempts - u.s_uncount, fencing_token = delivery.fencing_token + 1
     FROM u WHERE delivery.id = u.s_id AND delivery.fencing_token = u.s_token AND delivery.workspace_id = $1
     RETURNING id";

/// A group's attempts and its fenced updates over the whole group: one statement on PostgreSQL,
/// two on SQLite. Returns the ids whose (id, token) still matched.
async fn settle_group(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    items: &[&Settled],
) -> Result<HashSet<i64>, sqlx::Error> {
    let cols: Vec<_> = items.iter().map(|s| columns(s)).collect();
    let tried: Vec<Option<&Attempt>> = items.iter().map(|s| s.attempt.as_ref()).collect();
    // One row per settle, with its attempt's columns (NULL when no request was made).
    let rows = Rows::new()
        .int("s_id", items.iter().map(|s| s.claimed.id))
        .int("s_token", items.iter().map(|s| s.claimed.token))
        .text("s_status", cols.iter().map(|c| c.0.as_str()))
        .opt_text("s_reason", cols.iter().map(|c| c.1))
        .opt_time("s_sent_at", cols.iter().map(|c| c.2))
        .opt_time("s_due_at", cols.iter().map(|c| c.3))
        .int("s_uncount", cols.iter().map(|c| c.4))
        .int("a_number", items.iter().map(|s| s.claimed.attempts))
        .opt_time("a_started", tried.iter().map(|a| a.map(|a| a.started_at)))
        .opt_int("a_latency", tried.iter().map(|a| a.map(|a| a.latency_ms)))
        .opt_int(
            "a_code",
            tried
                .iter()
                .map(|a| a.and_then(|a| a.status_code).map(i64::from)),
        )
        .opt_text(
            "a_class",
            tried
                .iter()
                .map(|a| a.and_then(|a| a.error_class).map(ErrorClass::as_str)),
        )
        .opt_text(
            "a_response",
            tried.iter().map(|a| a.and_then(|a| a.response.as_deref())),
        );
    let fixed = [Arg::Text(workspace.to_string())];
    let took: HashSet<i64> = match tx {
        // One statement: the attempts are written by a common table expression beside the
        // update (both read the snapshot the statement started with).
        StoreTx::Postgres(_) => {
            fetch_with_rows(
                tx,
                &rows,
                &fixed,
                &format!(", recorded AS ({RECORD_ATTEMPTS}) {SETTLE}"),
                |r| r.try_get("id"),
            )
            .await?
        }
        // SQLite writes no rows from a common table expression: two statements.
        StoreTx::Sqlite(_) => {
            fetch_with_rows(tx, &rows, &fixed, RECORD_ATTEMPTS, |_| Ok(())).await?;
            fetch_with_rows(tx, &rows, &fixed, SETTLE, |r| r.try_get("id")).await?
        }
    }
    .into_iter()
    .collect();
    for item in items.iter().filter(|s| !took.contains(&s.claimed.id)) {
        tracing::warn!(
            delivery = item.claimed.id,
            token = item.claimed.token,
            "stale delivery settle ignored: the lease was taken over"
        );
    }
    Ok(took)
}

/// Deletes finished deliveries created before `before`, with their inbox messages and their
/// recorded attempts (which name their delivery without a foreign key, migration 14, so nothing
/// cascades), in one transaction. Pending deliveries are kept, and the ledger is never pruned.
/// Returns how many deliveries were deleted.
pub async fn prune(
    store: &Store,
    workspace: &WorkspaceId,
    before: Timestamp,
) -> Result<u64, StoreError> {
    let finished: Vec<String> = DeliveryStatus::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .map(|s| format!("'{s}'"))
        .collect();
    let old = format!(
        "workspace_id = $1 AND created_at < $2 AND status IN ({})",
        finished.join(", ")
    );
    let pruned = format!("SELECT id FROM delivery WHERE {old}");
    let mut tx = store.begin(workspace).await?;
    let deleted = async {
        for table in ["inbox_message", "delivery_attempt"] {
            execute!(
                &mut tx,
                &format!(
                    "DELETE FROM {table} WHERE workspace_id = $1 AND delivery_id IN ({pruned})"
                ),
                [workspace, DbTime(before)]
            )?;
        }
        execute!(
            &mut tx,
            &format!("DELETE FROM delivery WHERE {old}"),
            [workspace, DbTime(before)]
        )
    };
    let deleted = deleted.await.map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    Ok(deleted)
}

/// The recorded attempts of one delivery, oldest first.
pub async fn attempts(
    store: &Store,
    workspace: &WorkspaceId,
    delivery: i64,
) -> Result<Vec<Attempt>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT started_at, latency_ms, status_code, error_class, response FROM delivery_attempt
         WHERE workspace_id = $1 AND delivery_id = $2 ORDER BY attempt, id",
        [workspace, delivery],
        |r| Ok(Attempt {
            started_at: r.try_get::<DbTime, _>("started_at")?.0,
            latency_ms: r.try_get("latency_ms")?,
            status_code: r
                .try_get::<Option<i32>, _>("status_code")?
                .and_then(|c| u16::try_from(c).ok()),
            error_class: r.try_get("error_class")?,
            response: r.try_get("response")?,
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}
