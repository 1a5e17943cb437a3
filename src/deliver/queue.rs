//! The delivery queue: due deliveries are claimed in batches by one statement that stamps a lease
//! and a new fencing token, sent with no transaction open, and settled by (id, token). A worker
//! whose lease lapsed settles nothing; the delivery is claimed again.

use jiff::{SignedDuration, Timestamp};
use sqlx::Row as _;

use crate::sql_guard::Dialect;
use crate::store::{DbTime, Store, StoreError, execute, fetch_all};

/// Deliveries claimed per statement by default.
pub const DEFAULT_BATCH: i64 = 200;
/// How long a claimed delivery is held before another worker may take it.
pub const DEFAULT_LEASE: SignedDuration = SignedDuration::from_secs(60);

/// A claimed delivery, ready to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed {
    /// The delivery's id: its idempotency key on every attempt.
    pub id: i64,
    /// Its workspace.
    pub workspace: String,
    /// The fencing token this claim holds.
    pub token: i64,
    /// `integration.action`.
    pub action: String,
    /// HTTP method.
    pub method: Option<String>,
    /// Full URL.
    pub url: Option<String>,
    /// Rendered body.
    pub body: Option<String>,
    /// Attempts so far, this one included.
    pub attempts: i64,
}

// The selection runs exactly once (a MATERIALIZED CTE), so the claim never returns more than the
// limit, and SKIP LOCKED keeps concurrent claimers off each other's rows.
const CLAIM_PG: &str = "WITH due AS MATERIALIZED (
        SELECT id FROM delivery
        WHERE status = 'pending' AND due_at <= $1 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
        ORDER BY due_at, id LIMIT $2 FOR UPDATE SKIP LOCKED)
    UPDATE delivery AS d SET claimed_at = $1, lease_expires_at = $3, fencing_token = d.fencing_token + 1, attempts = d.attempts + 1
    FROM due WHERE d.id = due.id
    RETURNING d.id, d.workspace_id, d.fencing_token, d.integration, d.action, d.method, d.url, d.body, d.attempts";

// SQLite has one writer at a time (BEGIN IMMEDIATE), so the selection needs no row locks.
const CLAIM_SQLITE: &str = "UPDATE delivery SET claimed_at = $1, lease_expires_at = $3, fencing_token = fencing_token + 1, attempts = attempts + 1
    WHERE id IN (
        SELECT id FROM delivery
        WHERE status = 'pending' AND due_at <= $1 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
        ORDER BY due_at, id LIMIT $2)
    RETURNING id, workspace_id, fencing_token, integration, action, method, url, body, attempts";

/// Claims up to `limit` due deliveries, oldest due first, across workspaces (one of the few
/// statements that finds work before knowing whose it is).
pub async fn claim_due(
    store: &Store,
    now: Timestamp,
    limit: i64,
    lease: SignedDuration,
) -> Result<Vec<Claimed>, StoreError> {
    let sql = match store.dialect() {
        Dialect::Postgres => CLAIM_PG,
        Dialect::Sqlite => CLAIM_SQLITE,
    };
    let claimed = async {
        let mut tx = store.begin_unscoped().await?;
        let rows = fetch_all!(
            &mut tx,
            sql,
            [DbTime(now), limit, DbTime(now + lease)],
            |r| Ok(Claimed {
                id: r.try_get(0)?,
                workspace: r.try_get(1)?,
                token: r.try_get(2)?,
                action: format!(
                    "{}.{}",
                    r.try_get::<String, _>(3)?,
                    r.try_get::<String, _>(4)?
                ),
                method: r.try_get(5)?,
                url: r.try_get(6)?,
                body: r.try_get(7)?,
                attempts: r.try_get(8)?,
            })
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    claimed.await.map_err(|e| store.error(e))
}

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
    /// A terminal state other than sent (failed, dead, expired, …) with its reason.
    Terminal {
        /// The state.
        status: &'static str,
        /// Why.
        reason: String,
    },
}

/// Records how a claimed delivery's send ended. Returns false, changing nothing, when the claim
/// is stale (its lease lapsed and another worker holds a newer token).
pub async fn settle(
    store: &Store,
    claimed: &Claimed,
    outcome: &Settlement,
    now: Timestamp,
) -> Result<bool, StoreError> {
    let (status, reason, sent_at, due_at) = match outcome {
        Settlement::Sent => ("sent", None, Some(DbTime(now)), None),
        Settlement::Retry { at, reason } => {
            ("pending", Some(reason.as_str()), None, Some(DbTime(*at)))
        }
        Settlement::Terminal { status, reason } => (*status, Some(reason.as_str()), None, None),
    };
    let mut tx = store.begin(&claimed.workspace).await?;
    let changed = execute!(
        &mut tx,
        "UPDATE delivery SET status = $3, reason = $4, sent_at = $5, due_at = COALESCE($6, due_at), lease_expires_at = NULL
         WHERE id = $1 AND fencing_token = $2",
        [claimed.id, claimed.token, status, reason, sent_at, due_at]
    )
    .map_err(|e| store.error(e))?;
    tx.commit().await.map_err(|e| store.error(e))?;
    if changed == 0 {
        tracing::warn!(
            delivery = claimed.id,
            token = claimed.token,
            "stale delivery settle ignored: the lease was taken over"
        );
    }
    Ok(changed == 1)
}
