//! The delivery queue: due deliveries are claimed in batches by one statement that stamps a lease
//! and a new fencing token, sent with no transaction open, and settled by (id, token). A worker
//! whose lease lapsed settles nothing; the delivery is claimed again.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};

use crate::outbox::DeliveryStatus;
use crate::store::WorkspaceId;
use crate::store::batch::{Rows, fetch_with_rows};
use crate::store::{
    Arg, DbTime, Engine, Store, StoreError, StoreTx, Unscoped, execute, fetch_all, stored_enum,
};

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
    pub workspace: WorkspaceId,
    /// The fencing token this claim holds.
    pub token: i64,
    /// The integration's name.
    pub integration: String,
    /// `integration.action`.
    pub action: String,
    /// HTTP method.
    pub method: Option<String>,
    /// Full URL.
    pub url: Option<String>,
    /// Rendered headers (a JSON object), never credentials.
    pub headers: Option<String>,
    /// Rendered body.
    pub body: Option<String>,
    /// Attempts so far, this one included.
    pub attempts: i64,
    /// When it was due.
    pub due_at: Timestamp,
    /// After this it must not be sent.
    pub expires_at: Option<Timestamp>,
    /// When this claim's lease lapses (another worker may then take the delivery).
    pub lease_expires_at: Timestamp,
    /// For a time-anchored send: its rule, fire and anchor instant (for the recheck).
    pub scheduled: Option<ScheduledSend>,
}

/// What a claimed time-anchored send knows of where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledSend {
    /// The rule.
    pub rule: String,
    /// The fire (its dedup key names the row's key).
    pub fire_id: i64,
    /// The anchor instant it was scheduled for.
    pub anchor_at: Timestamp,
}

impl Claimed {
    /// The action's name within its integration.
    pub fn action_name(&self) -> &str {
        self.action
            .split_once('.')
            .map_or(self.action.as_str(), |(_, a)| a)
    }
}

/// One try at sending, as recorded in `delivery_attempt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// When the request started.
    pub started_at: Timestamp,
    /// How long it took, in milliseconds.
    pub latency_ms: i64,
    /// The HTTP status, if an answer came.
    pub status_code: Option<u16>,
    /// `None` on success; else why the attempt failed.
    pub error_class: Option<ErrorClass>,
    /// The start of the answer's body.
    pub response: Option<String>,
}

stored_enum! {
    /// Why an attempt failed, as recorded in `delivery_attempt.error_class`.
    pub enum ErrorClass as "attempt error class" {
        /// An answer whose status is not a success.
        HttpStatus = "http_status",
        /// A 2xx answer whose body says it failed (`"ok": false`).
        Rejected = "rejected",
        /// No answer within the integration's timeout.
        Timeout = "timeout",
        /// The connection failed.
        Network = "network",
        /// The egress policy refused the address.
        Refused = "refused",
        /// The request could not be built.
        Invalid = "invalid",
    }
}

// Claimable: pending, due, not leased (or the lease lapsed), and its integration neither disabled
// nor paused (a shared rate limit or a 429 pauses it). The partial index over pending rows keeps
// this fast however many deliveries were sent.
const CLAIMABLE: &str = "SELECT id FROM delivery
        WHERE status = 'pending' AND due_at <= $1 AND (lease_expires_at IS NULL OR lease_expires_at <= $1)
          AND NOT EXISTS (SELECT 1 FROM integration_state s
                          WHERE s.workspace_id = delivery.workspace_id AND s.name = delivery.integration
                            AND (s.disabled_at IS NOT NULL OR s.paused_until > $1))
        ORDER BY due_at, id LIMIT $2";

const CLAIMED_COLUMNS: &str = "id, workspace_id, fencing_token, integration, action, method, url, headers, body, attempts, due_at, expires_at, lease_expires_at, rule_name, fire_id, anchor_at";

// The selection runs exactly once (a MATERIALIZED CTE), so the claim never returns more than the
// limit, and SKIP LOCKED keeps concurrent claimers off each other's rows.
fn claim_pg_sql() -> String {
    format!(
        "WITH due AS MATERIALIZED ({CLAIMABLE} FOR UPDATE SKIP LOCKED)
         UPDATE delivery SET claimed_at = $1, lease_expires_at = $3, fencing_token = delivery.fencing_token + 1, attempts = delivery.attempts + 1
         FROM due WHERE delivery.id = due.id
         RETURNING {}",
        CLAIMED_COLUMNS
            .split(", ")
            .map(|c| format!("delivery.{c}"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

// SQLite has one writer at a time (BEGIN IMMEDIATE), so the selection needs no row locks.
fn claim_sqlite_sql() -> String {
    format!(
        "UPDATE delivery SET claimed_at = $1, lease_expires_at = $3, fencing_token = fencing_token + 1, attempts = attempts + 1
         WHERE id IN ({CLAIMABLE})
         RETURNING {CLAIMED_COLUMNS}"
    )
}

/// The plan the engine chooses for the delivery claim, one line per plan line (nothing is
/// claimed): a check that the claim reads the partial index over pending deliveries.
pub async fn explain_claim(store: &Store, now: Timestamp) -> Result<Vec<String>, StoreError> {
    let sql = match store.engine() {
        Engine::Postgres => format!("EXPLAIN {}", claim_sql(Engine::Postgres)),
        Engine::Sqlite => format!("EXPLAIN QUERY PLAN {}", claim_sql(Engine::Sqlite)),
    };
    let plan = async {
        let mut tx = store.begin_unscoped(Unscoped::DeliveryClaim).await?;
        let lines = fetch_all!(
            &mut tx,
            &sql,
            [
                DbTime(now),
                DEFAULT_BATCH,
                DbTime(crate::store::later(now, DEFAULT_LEASE))
            ],
            |r| match r.try_get::<String, _>("QUERY PLAN") {
                Ok(line) => Ok(line),
                Err(_) => r.try_get::<String, _>("detail"),
            }
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(lines)
    };
    plan.await.map_err(|e| store.error(e))
}

/// The claim statement for an engine, built once.
fn claim_sql(engine: Engine) -> &'static str {
    static PG: std::sync::LazyLock<String> = std::sync::LazyLock::new(claim_pg_sql);
    static SQLITE: std::sync::LazyLock<String> = std::sync::LazyLock::new(claim_sqlite_sql);
    match engine {
        Engine::Postgres => &PG,
        Engine::Sqlite => &SQLITE,
    }
}

/// Claims up to `limit` due deliveries, oldest due first, across workspaces (one of the few
/// statements that finds work before knowing whose it is).
pub async fn claim_due(
    store: &Store,
    now: Timestamp,
    limit: i64,
    lease: SignedDuration,
) -> Result<Vec<Claimed>, StoreError> {
    let sql = claim_sql(store.engine());
    let claimed = async {
        let mut tx = store.begin_unscoped(Unscoped::DeliveryClaim).await?;
        let rows = fetch_all!(
            &mut tx,
            sql,
            [DbTime(now), limit, DbTime(crate::store::later(now, lease))],
            |r| Ok(Claimed {
                id: r.try_get("id")?,
                workspace: r.try_get("workspace_id")?,
                token: r.try_get("fencing_token")?,
                integration: r.try_get("integration")?,
                action: format!(
                    "{}.{}",
                    r.try_get::<String, _>("integration")?,
                    r.try_get::<String, _>("action")?
                ),
                method: r.try_get("method")?,
                url: r.try_get("url")?,
                headers: r.try_get("headers")?,
                body: r.try_get("body")?,
                attempts: r.try_get("attempts")?,
                due_at: r.try_get::<DbTime, _>("due_at")?.0,
                expires_at: r.try_get::<Option<DbTime>, _>("expires_at")?.map(|t| t.0),
                lease_expires_at: r.try_get::<DbTime, _>("lease_expires_at")?.0,
                scheduled: match r.try_get::<Option<DbTime>, _>("anchor_at")? {
                    None => None,
                    Some(at) => Some(ScheduledSend {
                        rule: r.try_get("rule_name")?,
                        fire_id: r.try_get("fire_id")?,
                        anchor_at: at.0,
                    }),
                },
            })
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    claimed.await.map_err(|e| store.error(e))
}

/// How many deliveries each workspace has claimable now, as the claim sees them (the claim's own
/// condition, under its bypass), across workspaces: a stuck queue shows here.
pub async fn due_counts(
    store: &Store,
    now: Timestamp,
) -> Result<Vec<(WorkspaceId, i64)>, StoreError> {
    let sql = format!(
        "SELECT workspace_id, count(*) AS n FROM delivery WHERE id IN ({}) GROUP BY workspace_id ORDER BY workspace_id",
        CLAIMABLE.replace("LIMIT $2", "")
    );
    let counted = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let rows = fetch_all!(&mut tx, &sql, [DbTime(now)], |r| Ok((
            r.try_get("workspace_id")?,
            r.try_get("n")?
        )))?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    counted.await.map_err(|e| store.error(e))
}

/// When the next pending delivery becomes claimable, across workspaces: how long an idle sender
/// may sleep. Among the earliest 500 pending deliveries whose integration is not disabled, the
/// earliest moment one is due, its lease has lapsed and its integration's pause has ended.
///
/// No delivery becomes claimable before its due time, so only the first such delivery in due
/// order and those due before the moment it becomes claimable (leased or paused ones) can hold
/// the answer: an idle queue reads one row of the partial index over pending deliveries and an
/// empty range after it, however many sends are stored for later.
pub async fn next_due(store: &Store) -> Result<Option<Timestamp>, StoreError> {
    static PG: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| next_due_sql(Engine::Postgres));
    static SQLITE: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| next_due_sql(Engine::Sqlite));
    let sql: &str = match store.engine() {
        Engine::Postgres => &PG,
        Engine::Sqlite => &SQLITE,
    };
    let next = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let next = fetch_all!(&mut tx, sql, [], |r| r.try_get::<Option<DbTime>, _>("next"))?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(next.into_iter().flatten().next().map(|t| t.0))
    };
    next.await.map_err(|e| store.error(e))
}

fn next_due_sql(engine: Engine) -> String {
    let (greatest, least) = match engine {
        Engine::Postgres => ("GREATEST", "LEAST"),
        Engine::Sqlite => ("MAX", "MIN"),
    };
    let claimable = format!(
        "{greatest}(d.due_at, COALESCE(d.lease_expires_at, d.due_at), COALESCE(s.paused_until, d.due_at))"
    );
    // `pending` is the earliest pending deliveries (at most 500), in due order, from `bound`.
    let pending = |bound: &str| {
        format!(
            "(SELECT id, workspace_id, integration, due_at, lease_expires_at FROM delivery
              WHERE status = 'pending'{bound} ORDER BY due_at, id LIMIT 500) d
             LEFT JOIN integration_state s ON s.workspace_id = d.workspace_id AND s.name = d.integration
             WHERE s.disabled_at IS NULL"
        )
    };
    // `head`: when the first delivery (in due order) of an integration not disabled becomes
    // claimable. Only deliveries due before that can become claimable sooner.
    format!(
        "WITH head AS (SELECT {claimable} AS at FROM {} ORDER BY d.due_at, d.id LIMIT 1)
         SELECT COALESCE({least}((SELECT at FROM head), (SELECT MIN({claimable}) FROM {})), (SELECT at FROM head)) AS next",
        pending(""),
        pending(" AND due_at < (SELECT at FROM head)")
    )
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

/// Deletes the recorded attempts of the deliveries `deliveries` selects (an SQL query of
/// delivery ids whose `$1` is the workspace and `$2` a time), before they are deleted: attempts
/// name their delivery without a foreign key (migration 14), so nothing cascades.
pub(crate) async fn forget_attempts(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    deliveries: &str,
    at: Timestamp,
) -> Result<u64, sqlx::Error> {
    execute!(
        tx,
        &format!(
            "DELETE FROM delivery_attempt WHERE workspace_id = $1 AND delivery_id IN ({deliveries})"
        ),
        [workspace, DbTime(at)]
    )
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

/// The queue's depth by state, across workspaces, for `/metrics`: pending deliveries due now
/// and waiting for a sender, pending ones due later, and ones held under a live lease. Reads only
/// pending rows (the partial index over them), never the finished history.
pub async fn depth(
    store: &Store,
    now: Timestamp,
) -> Result<crate::metrics::QueueDepth, StoreError> {
    let read = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let rows = fetch_all!(
            &mut tx,
            "SELECT
                 COALESCE(SUM(CASE WHEN lease_expires_at > $1 THEN 1 ELSE 0 END), 0) AS leased,
                 COALESCE(SUM(CASE WHEN (lease_expires_at IS NULL OR lease_expires_at <= $1) AND due_at <= $1 THEN 1 ELSE 0 END), 0) AS due,
                 COALESCE(SUM(CASE WHEN (lease_expires_at IS NULL OR lease_expires_at <= $1) AND due_at > $1 THEN 1 ELSE 0 END), 0) AS scheduled
             FROM delivery WHERE status = 'pending'",
            [DbTime(now)],
            |r| {
                let n = |c: &'static str| r.try_get::<i64, _>(c).map(|v| u64::try_from(v).unwrap_or(0));
                Ok(crate::metrics::QueueDepth {
                    due: n("due")?,
                    scheduled: n("scheduled")?,
                    leased: n("leased")?,
                })
            }
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(rows.into_iter().next().unwrap_or_default())
    };
    read.await.map_err(|e| store.error(e))
}
