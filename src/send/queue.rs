//! The delivery queue: due deliveries are claimed in batches by one statement that stamps a lease
//! and a new fencing token, sent with no transaction open, and settled by (id, token). A worker
//! whose lease lapsed settles nothing; the delivery is claimed again.

use jiff::{SignedDuration, Timestamp};

use crate::store::WorkspaceId;
use crate::store::{DbTime, Engine, Store, StoreError, Unscoped, fetch_all, stored_enum};

mod settle;
pub use settle::{Settled, Settlement, attempts, prune, settle, settle_many};

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

/// Lanes of the queue on PostgreSQL: migration 15 stores each delivery's lane, `id % LANES`,
/// and indexes pending deliveries by it.
pub const LANES: u8 = 16;

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

/// The claim of [`claim_spread`] on PostgreSQL: up to `$2` from lane `$4` (oldest due first, read
/// from `delivery_lane`), then what the lane lacked from the other lanes (oldest due first). The
/// ids are handed to the update as an array, so it finds them by primary key (the planner cannot
/// tell how many rows two limited selections return, and would otherwise scan the table).
fn claim_spread_pg_sql() -> String {
    let in_lane = CLAIMABLE.replace(
        "WHERE status = 'pending' AND",
        "WHERE status = 'pending' AND lane = $4 AND",
    );
    let elsewhere = CLAIMABLE
        .replace(
            "WHERE status = 'pending' AND",
            "WHERE status = 'pending' AND lane <> $4 AND",
        )
        .replace("LIMIT $2", "LIMIT $2 - (SELECT count(*) FROM from_lane)");
    format!(
        "WITH from_lane AS MATERIALIZED ({in_lane} FOR UPDATE SKIP LOCKED),
              elsewhere AS MATERIALIZED ({elsewhere} FOR UPDATE SKIP LOCKED)
         UPDATE delivery SET claimed_at = $1, lease_expires_at = $3, fencing_token = fencing_token + 1, attempts = attempts + 1
         WHERE id = ANY (ARRAY(SELECT id FROM from_lane UNION ALL SELECT id FROM elsewhere))
         RETURNING {CLAIMED_COLUMNS}"
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

/// The plan the engine chooses for the delivery claim senders run ([`claim_spread`]), one line
/// per plan line (nothing is claimed): a check that the claim reads the partial indexes over
/// pending deliveries (on PostgreSQL, a lane's and then the whole queue's).
pub async fn explain_claim(store: &Store, now: Timestamp) -> Result<Vec<String>, StoreError> {
    let lease_until = DbTime(crate::store::later(now, DEFAULT_LEASE));
    let plan = async {
        let mut tx = store.begin_unscoped(Unscoped::DeliveryClaim).await?;
        let lines = match store.engine() {
            Engine::Postgres => fetch_all!(
                &mut tx,
                &format!("EXPLAIN {}", spread_sql()),
                [DbTime(now), DEFAULT_BATCH, lease_until, 0_i16],
                |r| r.try_get::<String, _>("QUERY PLAN")
            )?,
            Engine::Sqlite => fetch_all!(
                &mut tx,
                &format!("EXPLAIN QUERY PLAN {}", claim_sql(Engine::Sqlite)),
                [DbTime(now), DEFAULT_BATCH, lease_until],
                |r| r.try_get::<String, _>("detail")
            )?,
        };
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

/// The lane-first claim statement on PostgreSQL, built once.
fn spread_sql() -> &'static str {
    static SPREAD: std::sync::LazyLock<String> = std::sync::LazyLock::new(claim_spread_pg_sql);
    &SPREAD
}

/// Claims up to `limit` due deliveries, oldest due first, across workspaces (one of the few
/// statements that finds work before knowing whose it is).
pub async fn claim_due(
    store: &Store,
    now: Timestamp,
    limit: i64,
    lease: SignedDuration,
) -> Result<Vec<Claimed>, StoreError> {
    claim(store, now, limit, lease, None).await
}

/// Claims like [`claim_due`], but on PostgreSQL starts at the head of lane `lane % LANES`: up to
/// `limit` of that lane's due deliveries, oldest due first, then what it lacked from the rest of
/// the queue, oldest due first. Concurrent senders that start in different lanes read few of each
/// other's leases; a lone sender, or a queue shorter than a batch, claims what [`claim_due`]
/// would. On SQLite (one writer at a time) it is [`claim_due`].
pub async fn claim_spread(
    store: &Store,
    now: Timestamp,
    limit: i64,
    lease: SignedDuration,
    lane: u8,
) -> Result<Vec<Claimed>, StoreError> {
    let lane = match store.engine() {
        Engine::Postgres => Some(i16::from(lane % LANES)),
        Engine::Sqlite => None,
    };
    claim(store, now, limit, lease, lane).await
}

async fn claim(
    store: &Store,
    now: Timestamp,
    limit: i64,
    lease: SignedDuration,
    lane: Option<i16>,
) -> Result<Vec<Claimed>, StoreError> {
    let lease_until = DbTime(crate::store::later(now, lease));
    let claimed = async {
        let mut tx = store.begin_unscoped(Unscoped::DeliveryClaim).await?;
        let rows = match lane {
            None => fetch_all!(
                &mut tx,
                claim_sql(store.engine()),
                [DbTime(now), limit, lease_until],
                |r| claimed_row(r)
            )?,
            Some(lane) => fetch_all!(
                &mut tx,
                spread_sql(),
                [DbTime(now), limit, lease_until, lane],
                |r| claimed_row(r)
            )?,
        };
        tx.commit().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    claimed.await.map_err(|e| store.error(e))
}

/// A claimed delivery as the claim returns it.
fn claimed_row(r: &crate::store::StoreRow<'_>) -> Result<Claimed, sqlx::Error> {
    Ok(Claimed {
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
