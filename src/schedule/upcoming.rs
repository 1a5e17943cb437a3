//! Reading the schedule back: the scheduled sends of time-anchored rules (deliveries with an
//! anchor), soonest first for `rowfire schedule` or in the order they were made for `rowfire
//! why`, and each anchored rule's sweep. Reads only, in a transaction scoped to the workspace.

use jiff::{SignedDuration, Timestamp};

use super::{LeadFrom, SweepState};
use crate::cadence::Cadence;
use crate::definitions::Definitions;
use crate::outbox::DeliveryStatus;
use crate::rules::Mode;
use crate::store::{DbTime, Store, StoreError, StoreTx, WorkspaceId, fetch_all, later};

/// One scheduled send: a delivery of a time-anchored rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledSend {
    /// The delivery's id.
    pub id: i64,
    /// The rule.
    pub rule: String,
    /// shadow or live.
    pub mode: Mode,
    /// The key, as stored (its encoding).
    pub key: String,
    /// The anchor instant (the fire's bucket).
    pub anchor_at: Timestamp,
    /// When it is (or was) due: the anchor minus the lead.
    pub due_at: Timestamp,
    /// Where its lead came from.
    pub lead_from: Option<LeadFrom>,
    /// Its state (pending, sent, cancelled, expired, suppressed in shadow, …).
    pub status: DeliveryStatus,
    /// Why it is in that state ("anchor moved", "no longer matches", …).
    pub reason: Option<String>,
    /// `integration.action`.
    pub action: String,
    /// When a sweep cancelled it (its anchor moved or its row stopped matching).
    pub unscheduled_at: Option<Timestamp>,
    /// When it was sent.
    pub sent_at: Option<Timestamp>,
}

/// Which scheduled sends to read.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    /// Only this rule's.
    pub rule: Option<&'a str>,
    /// Only this key's (its encoding).
    pub key: Option<&'a str>,
    /// Only sends due from here (pending ones due earlier are kept: they are about to go).
    pub due_from: Option<Timestamp>,
    /// Only sends due before this.
    pub due_until: Option<Timestamp>,
    /// Soonest due first (else in the order they were made).
    pub soonest_first: bool,
    /// At most this many.
    pub limit: Option<i64>,
}

const WHERE: &str = "d.workspace_id = $1 AND d.anchor_at IS NOT NULL AND ($2 = '' OR d.rule_name = $2)
     AND ($3 = '' OR f.dedup_key = $3) AND (d.due_at >= $4 OR d.status = 'pending') AND d.due_at < $5";

/// The scheduled sends that `q` selects.
pub async fn sends(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    q: &Query<'_>,
) -> Result<Vec<ScheduledSend>, sqlx::Error> {
    let order = if q.soonest_first {
        "d.due_at, d.id"
    } else {
        "d.id"
    };
    let sql = format!(
        "SELECT d.id AS id, d.rule_name AS rule_name, d.mode AS mode, f.dedup_key AS dedup_key, d.anchor_at AS anchor_at,
                d.due_at AS due_at, d.lead_from AS lead_from, d.status AS status, d.reason AS reason,
                d.integration AS integration, d.action AS action, d.unscheduled_at AS unscheduled_at, d.sent_at AS sent_at
         FROM delivery d JOIN fire f ON f.workspace_id = d.workspace_id AND f.id = d.fire_id
         WHERE {WHERE} ORDER BY {order} LIMIT $6"
    );
    fetch_all!(
        tx,
        sql.as_str(),
        [
            workspace,
            q.rule.unwrap_or(""),
            q.key.unwrap_or(""),
            DbTime(q.due_from.unwrap_or(DbTime::EARLIEST)),
            DbTime(q.due_until.unwrap_or(DbTime::LATEST)),
            q.limit.unwrap_or(i64::MAX)
        ],
        |r| Ok(ScheduledSend {
            id: r.try_get("id")?,
            rule: r.try_get("rule_name")?,
            mode: r.try_get("mode")?,
            key: r.try_get("dedup_key")?,
            anchor_at: r.try_get::<DbTime, _>("anchor_at")?.0,
            due_at: r.try_get::<DbTime, _>("due_at")?.0,
            lead_from: r.try_get("lead_from")?,
            status: r.try_get("status")?,
            reason: r.try_get("reason")?,
            action: format!(
                "{}.{}",
                r.try_get::<String, _>("integration")?,
                r.try_get::<String, _>("action")?
            ),
            unscheduled_at: r
                .try_get::<Option<DbTime>, _>("unscheduled_at")?
                .map(|t| t.0),
            sent_at: r.try_get::<Option<DbTime>, _>("sent_at")?.map(|t| t.0),
        })
    )
}

/// How many scheduled sends `q` selects, whatever its limit.
pub async fn count(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    q: &Query<'_>,
) -> Result<i64, sqlx::Error> {
    let sql = format!(
        "SELECT COUNT(*) AS n FROM delivery d JOIN fire f ON f.workspace_id = d.workspace_id AND f.id = d.fire_id WHERE {WHERE}"
    );
    let n = fetch_all!(
        tx,
        sql.as_str(),
        [
            workspace,
            q.rule.unwrap_or(""),
            q.key.unwrap_or(""),
            DbTime(q.due_from.unwrap_or(DbTime::EARLIEST)),
            DbTime(q.due_until.unwrap_or(DbTime::LATEST))
        ],
        |r| r.try_get::<i64, _>("n")
    )?;
    Ok(n.first().copied().unwrap_or(0))
}

/// One anchored rule and its sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSweep {
    /// The rule.
    pub rule: String,
    /// Its last sweep, if it has been swept.
    pub last: Option<SweepState>,
    /// When it is next swept (`None`: never swept, so due at the trigger's next poll).
    pub next_at: Option<Timestamp>,
}

/// What `rowfire schedule` shows: the sends due within a window from now, and every anchored
/// rule's sweep.
#[derive(Debug, Clone)]
pub struct Upcoming {
    /// The start of the window.
    pub now: Timestamp,
    /// The end of the window.
    pub until: Timestamp,
    /// The sends due in it (and pending ones overdue), soonest first, at most the limit.
    pub sends: Vec<ScheduledSend>,
    /// How many sends the window holds in all.
    pub total: i64,
    /// Each anchored rule in force (or the one asked about) and its sweep.
    pub sweeps: Vec<RuleSweep>,
}

/// Why the schedule could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UpcomingError {
    /// The rule asked about is not defined, or not time-anchored.
    #[error("{0}")]
    Rule(String),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The workspace's scheduled sends due in `[now, now + within)` (pending ones already due
/// included), soonest first and at most `limit`, with the sweep of each anchored rule in force;
/// `rule` narrows both to one anchored rule.
pub async fn upcoming(
    store: &Store,
    workspace: &WorkspaceId,
    defs: &Definitions,
    rule: Option<&str>,
    now: Timestamp,
    within: SignedDuration,
    limit: i64,
) -> Result<Upcoming, UpcomingError> {
    let anchored: Vec<&str> = defs
        .rules
        .iter()
        .filter(|r| matches!(r.cadence, Cadence::Anchored(_)))
        .map(|r| r.name.as_str())
        .collect();
    if let Some(name) = rule {
        let (r, _) = defs
            .rule_and_trigger(name)
            .map_err(|e| UpcomingError::Rule(e.to_string()))?;
        if !matches!(r.cadence, Cadence::Anchored(_)) {
            return Err(UpcomingError::Rule(format!(
                "rule {name} is not time-anchored (it has no `anchor:`), so it schedules nothing; `rowfire deliveries --rule {name}` lists its deliveries"
            )));
        }
    }
    let until = later(now, within);
    let q = Query {
        rule,
        key: None,
        due_from: Some(now),
        due_until: Some(until),
        soonest_first: true,
        limit: Some(limit),
    };
    let mut tx = store.begin(workspace).await?;
    let read = async {
        let sends = sends(&mut tx, workspace, &q).await?;
        let total = count(&mut tx, workspace, &q).await?;
        let states = super::sweeps(&mut tx, workspace).await?;
        Ok::<_, sqlx::Error>((sends, total, states))
    };
    let (sends, total, states) = read.await.map_err(|e| store.error(e))?;
    let _ = tx.rollback().await;
    let sweeps = anchored
        .into_iter()
        .filter(|name| rule.is_none_or(|r| r == *name))
        .map(|name| {
            let last = states.iter().find(|s| s.rule == name).cloned();
            RuleSweep {
                rule: name.to_string(),
                next_at: last.as_ref().map(|s| s.next_sweep_at),
                last,
            }
        })
        .collect();
    Ok(Upcoming {
        now,
        until,
        sends,
        total,
        sweeps,
    })
}
