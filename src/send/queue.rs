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
    /// `None` on success; else `http_status`, `rejected` (a 2xx saying `"ok": false`),
    /// `timeout`, `network` or `refused`.
    pub error_class: Option<&'static str>,
    /// The start of the answer's body.
    pub response: Option<String>,
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

const CLAIMED_COLUMNS: &str = "id, workspace_id, fencing_token, integration, action, method, url, headers, body, attempts, due_at, expires_at, lease_expires_at";

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
    let sql = match store.dialect() {
        Dialect::Postgres => format!("EXPLAIN {}", claim_sql(Dialect::Postgres)),
        Dialect::Sqlite => format!("EXPLAIN QUERY PLAN {}", claim_sql(Dialect::Sqlite)),
    };
    let plan = async {
        let mut tx = store.begin_unscoped().await?;
        let lines = fetch_all!(
            &mut tx,
            &sql,
            [
                DbTime(now),
                DEFAULT_BATCH,
                DbTime(crate::store::later(now, DEFAULT_LEASE))
            ],
            |r| match r.try_get::<String, _>(0) {
                Ok(line) => Ok(line),
                Err(_) => r.try_get::<String, _>(3),
            }
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(lines)
    };
    plan.await.map_err(|e| store.error(e))
}

/// The claim statement for an engine, built once.
fn claim_sql(dialect: Dialect) -> &'static str {
    static PG: std::sync::LazyLock<String> = std::sync::LazyLock::new(claim_pg_sql);
    static SQLITE: std::sync::LazyLock<String> = std::sync::LazyLock::new(claim_sqlite_sql);
    match dialect {
        Dialect::Postgres => &PG,
        Dialect::Sqlite => &SQLITE,
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
    let sql = claim_sql(store.dialect());
    let claimed = async {
        let mut tx = store.begin_unscoped().await?;
        let rows = fetch_all!(
            &mut tx,
            sql,
            [DbTime(now), limit, DbTime(crate::store::later(now, lease))],
            |r| Ok(Claimed {
                id: r.try_get(0)?,
                workspace: r.try_get(1)?,
                token: r.try_get(2)?,
                integration: r.try_get(3)?,
                action: format!(
                    "{}.{}",
                    r.try_get::<String, _>(3)?,
                    r.try_get::<String, _>(4)?
                ),
                method: r.try_get(5)?,
                url: r.try_get(6)?,
                headers: r.try_get(7)?,
                body: r.try_get(8)?,
                attempts: r.try_get(9)?,
                due_at: r.try_get::<DbTime, _>(10)?.0,
                expires_at: r.try_get::<Option<DbTime>, _>(11)?.map(|t| t.0),
                lease_expires_at: r.try_get::<DbTime, _>(12)?.0,
            })
        )?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    claimed.await.map_err(|e| store.error(e))
}

/// When the next pending delivery becomes claimable, across workspaces (reads the partial index
/// over pending rows): how long an idle sender may sleep.
pub async fn next_due(store: &Store) -> Result<Option<Timestamp>, StoreError> {
    let next = async {
        let greatest = match store.dialect() {
            Dialect::Postgres => "GREATEST",
            Dialect::Sqlite => "MAX",
        };
        // A delivery is next claimable when it is due, its lease has lapsed and its
        // integration's pause has ended; a disabled integration's deliveries are not counted.
        // Only the earliest 500 pending are looked at, so a large backlog costs nothing here.
        let sql = format!(
            "SELECT MIN({greatest}(d.due_at, COALESCE(d.lease_expires_at, d.due_at), COALESCE(s.paused_until, d.due_at)))
             FROM (SELECT workspace_id, integration, due_at, lease_expires_at FROM delivery
                   WHERE status = 'pending' ORDER BY due_at LIMIT 500) d
             LEFT JOIN integration_state s ON s.workspace_id = d.workspace_id AND s.name = d.integration
             WHERE s.disabled_at IS NULL"
        );
        let mut tx = store.begin_unscoped_read().await?;
        let next = fetch_all!(&mut tx, &sql, [], |r| r.try_get::<Option<DbTime>, _>(0))?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(next.into_iter().flatten().next().map(|t| t.0))
    };
    next.await.map_err(|e| store.error(e))
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
        status: &'static str,
        /// Why.
        reason: String,
    },
    /// A terminal state reached without a request (expired, or nothing to send): the claim's
    /// attempt is not counted.
    Unsent {
        /// The state.
        status: &'static str,
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
    let mut workspaces: Vec<&str> = batch.iter().map(|s| s.claimed.workspace.as_str()).collect();
    workspaces.sort_unstable();
    workspaces.dedup();
    for workspace in workspaces {
        let mut tx = store.begin(workspace).await?;
        let mine: Vec<usize> = (0..batch.len())
            .filter(|i| batch[*i].claimed.workspace == workspace)
            .collect();
        if let crate::store::StoreTx::Postgres(t) = &mut tx {
            let items: Vec<&Settled> = mine.iter().map(|i| &batch[*i]).collect();
            let settled = settle_pg(t, workspace, &items)
                .await
                .map_err(|e| store.error(e))?;
            for i in mine {
                took[i] = settled.contains(&batch[i].claimed.id);
            }
        } else {
            for i in mine {
                took[i] = settle_one(&mut tx, &batch[i])
                    .await
                    .map_err(|e| store.error(e))?;
            }
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
    &str,
    Option<&str>,
    Option<Timestamp>,
    Option<Timestamp>,
    i64,
) {
    match &item.outcome {
        Settlement::Sent => ("sent", None, Some(item.at), None, 0),
        Settlement::Retry { at, reason } => ("pending", Some(reason.as_str()), None, Some(*at), 0),
        Settlement::Release { at, reason } => {
            ("pending", Some(reason.as_str()), None, Some(*at), 1)
        }
        Settlement::Terminal { status, reason } => (*status, Some(reason.as_str()), None, None, 0),
        Settlement::Unsent { status, reason } => (*status, Some(reason.as_str()), None, None, 1),
    }
}

/// PostgreSQL: a group's attempts in one INSERT and its fenced updates in one UPDATE, from
/// arrays. Returns the ids whose (id, token) still matched.
async fn settle_pg(
    t: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    workspace: &str,
    items: &[&Settled],
) -> Result<std::collections::HashSet<i64>, sqlx::Error> {
    let tried: Vec<(&Settled, &Attempt)> = items
        .iter()
        .filter_map(|s| s.attempt.as_ref().map(|a| (*s, a)))
        .collect();
    if !tried.is_empty() {
        let ids: Vec<i64> = tried.iter().map(|(s, _)| s.claimed.id).collect();
        let numbers: Vec<i64> = tried.iter().map(|(s, _)| s.claimed.attempts).collect();
        let started: Vec<jiff_sqlx::Timestamp> =
            tried.iter().map(|(_, a)| a.started_at.into()).collect();
        let latency: Vec<i64> = tried.iter().map(|(_, a)| a.latency_ms).collect();
        let codes: Vec<Option<i32>> = tried
            .iter()
            .map(|(_, a)| a.status_code.map(i32::from))
            .collect();
        let classes: Vec<Option<&str>> = tried.iter().map(|(_, a)| a.error_class).collect();
        let responses: Vec<Option<&str>> =
            tried.iter().map(|(_, a)| a.response.as_deref()).collect();
        sqlx::query(
            "INSERT INTO delivery_attempt (workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
             SELECT $1, u.* FROM unnest($2::bigint[], $3::bigint[], $4::timestamptz[], $5::bigint[], $6::int[], $7::text[], $8::text[])
                 AS u(delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
             ON CONFLICT (delivery_id, attempt) DO NOTHING",
        )
        .bind(workspace)
        .bind(&ids)
        .bind(&numbers)
        .bind(&started)
        .bind(&latency)
        .bind(&codes)
        .bind(&classes)
        .bind(&responses)
        .execute(&mut **t)
        .await?;
    }
    let cols: Vec<_> = items.iter().map(|s| columns(s)).collect();
    let ids: Vec<i64> = items.iter().map(|s| s.claimed.id).collect();
    let tokens: Vec<i64> = items.iter().map(|s| s.claimed.token).collect();
    let statuses: Vec<&str> = cols.iter().map(|c| c.0).collect();
    let reasons: Vec<Option<&str>> = cols.iter().map(|c| c.1).collect();
    let sent: Vec<Option<jiff_sqlx::Timestamp>> =
        cols.iter().map(|c| c.2.map(Into::into)).collect();
    let due: Vec<Option<jiff_sqlx::Timestamp>> = cols.iter().map(|c| c.3.map(Into::into)).collect();
    let uncount: Vec<i64> = cols.iter().map(|c| c.4).collect();
    let rows = sqlx::query(
        "UPDATE delivery AS d SET status = u.status, reason = u.reason, sent_at = u.sent_at,
                due_at = COALESCE(u.due_at, d.due_at), lease_expires_at = NULL, attempts = d.attempts - u.uncount,
                fencing_token = d.fencing_token + 1
         FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::bigint[])
             AS u(id, token, status, reason, sent_at, due_at, uncount)
         WHERE d.id = u.id AND d.fencing_token = u.token
         RETURNING d.id",
    )
    .bind(&ids)
    .bind(&tokens)
    .bind(&statuses)
    .bind(&reasons)
    .bind(&sent)
    .bind(&due)
    .bind(&uncount)
    .fetch_all(&mut **t)
    .await?;
    let took: std::collections::HashSet<i64> = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    for item in items.iter().filter(|s| !took.contains(&s.claimed.id)) {
        tracing::warn!(
            delivery = item.claimed.id,
            token = item.claimed.token,
            "stale delivery settle ignored: the lease was taken over"
        );
    }
    Ok(took)
}

async fn settle_one(tx: &mut crate::store::StoreTx, item: &Settled) -> Result<bool, sqlx::Error> {
    let claimed = &item.claimed;
    if let Some(a) = &item.attempt {
        execute!(
            &mut *tx,
            "INSERT INTO delivery_attempt (workspace_id, delivery_id, attempt, started_at, latency_ms, status_code, error_class, response)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (delivery_id, attempt) DO NOTHING",
            [
                &claimed.workspace,
                claimed.id,
                claimed.attempts,
                DbTime(a.started_at),
                a.latency_ms,
                a.status_code.map(i32::from),
                a.error_class,
                a.response.as_deref()
            ]
        )?;
    }
    let (status, reason, sent_at, due_at, uncount) = columns(item);
    let (sent_at, due_at) = (sent_at.map(DbTime), due_at.map(DbTime));
    let changed = execute!(
        &mut *tx,
        "UPDATE delivery SET status = $3, reason = $4, sent_at = $5, due_at = COALESCE($6, due_at), lease_expires_at = NULL, attempts = attempts - $7,
             fencing_token = fencing_token + 1
         WHERE id = $1 AND fencing_token = $2",
        [claimed.id, claimed.token, status, reason, sent_at, due_at, uncount]
    )?;
    if changed == 0 {
        tracing::warn!(
            delivery = claimed.id,
            token = claimed.token,
            "stale delivery settle ignored: the lease was taken over"
        );
    }
    Ok(changed == 1)
}

/// The recorded attempts of one delivery, oldest first.
pub async fn attempts(
    store: &Store,
    workspace: &str,
    delivery: i64,
) -> Result<Vec<Attempt>, StoreError> {
    let mut tx = store.begin(workspace).await?;
    let rows = fetch_all!(
        &mut tx,
        "SELECT started_at, latency_ms, status_code, error_class, response FROM delivery_attempt
         WHERE workspace_id = $1 AND delivery_id = $2 ORDER BY attempt, id",
        [workspace, delivery],
        |r| Ok(Attempt {
            started_at: r.try_get::<DbTime, _>(0)?.0,
            latency_ms: r.try_get(1)?,
            status_code: r.try_get::<Option<i32>, _>(2)?.map(|c| c as u16),
            error_class: r.try_get::<Option<String>, _>(3)?.map(|c| error_class(&c)),
            response: r.try_get(4)?,
        })
    )
    .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(rows)
}

/// The error classes an attempt can record.
pub const ERROR_CLASSES: [&str; 6] = [
    "http_status",
    "rejected",
    "timeout",
    "network",
    "refused",
    "invalid",
];

fn error_class(stored: &str) -> &'static str {
    ERROR_CLASSES
        .into_iter()
        .find(|c| *c == stored)
        .unwrap_or("network")
}
