//! The materialised queue of time-anchored sends (the `sweep` table, and the scheduled columns of
//! `delivery`). A sweep reads a rule's look-ahead (rows whose anchor falls in
//! `[now, now + look_ahead)`) and, page by page in the caller's transaction, claims one fire per
//! (rule, mode, key, anchor instant) through the ledger with its deliveries due at anchor minus
//! lead. While a send is pending, a changed lead moves its due time; an instant that comes back
//! reinstates the send a sweep had cancelled. Only after the whole look-ahead was read does
//! [`cancel_unseen`] cancel what the read no longer holds: a failed sweep cancels nothing.

pub mod upcoming;

use std::collections::{BTreeMap, HashSet};

use jiff::{SignedDuration, Timestamp};

use crate::cadence::{self, Anchor, Placement};
use crate::definitions::limits::MAX_LEAD_MINUTES;
use crate::ledger::{self, Claim};
pub use crate::outbox::LeadFrom;
use crate::outbox::{self, Scheduled};
use crate::row::{Row, Value};
use crate::store::batch::{Rows, fetch_with_rows};
use crate::store::{Arg, DbTime, StoreTx, WorkspaceId, execute, fetch_all, later};

/// What one sweep of one rule did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SweepReport {
    /// Rows read in the look-ahead.
    pub rows: u64,
    /// New sends queued.
    pub queued: u64,
    /// Sends already queued for their instant (unchanged).
    pub already: u64,
    /// Pending sends whose lead changed, so their due time moved.
    pub moved: u64,
    /// Sends a sweep had cancelled whose instant came back: pending again.
    pub reinstated: u64,
    /// Pending sends cancelled because their key's anchor moved.
    pub cancelled_moved: u64,
    /// Pending sends cancelled because their row no longer matches.
    pub cancelled_gone: u64,
    /// Sends first found after their due time plus grace: recorded as expired, never sent.
    pub too_late: u64,
    /// Rows that cannot be scheduled (NULL key or anchor).
    pub skipped: u64,
    /// Sends this sweep finished (expired when first found too late, cancelled), by
    /// integration and state (for `/metrics`; not stored with the sweep).
    #[serde(skip)]
    pub enqueued: crate::outbox::Tally,
}

impl std::fmt::Display for SweepReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "rows={} queued={} already={} moved={} reinstated={} cancelled(anchor moved)={} cancelled(no longer matches)={} too_late={} skipped={}",
            self.rows,
            self.queued,
            self.already,
            self.moved,
            self.reinstated,
            self.cancelled_moved,
            self.cancelled_gone,
            self.too_late,
            self.skipped
        )
    }
}

/// The lead of one row: its `lead_column` in whole minutes when it holds one (0 to 90 days),
/// else the rule's.
pub fn lead_of(anchor: &Anchor, row: &Row) -> (SignedDuration, LeadFrom) {
    let minutes = anchor
        .lead_column
        .as_deref()
        .and_then(|c| row.get(c))
        .and_then(|v| match v {
            Value::Int(n) => Some(*n),
            Value::Decimal(s) | Value::Text(s) => s.trim().parse::<i64>().ok(),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e12 => Some(*f as i64),
            _ => None,
        })
        .filter(|m| (0..=MAX_LEAD_MINUTES).contains(m));
    match minutes {
        Some(m) => (SignedDuration::from_mins(m), LeadFrom::Row),
        None => (anchor.lead, LeadFrom::Default),
    }
}

/// One row placed on the schedule.
struct Placed {
    index: usize,
    key: String,
    bucket: String,
    when: Scheduled,
}

/// Schedules one page of look-ahead rows (their clock is the anchor) for one anchored rule,
/// inside the caller's transaction; adds what it did to `report` and returns how many sends wait
/// in the queue. `seen` collects every (key, anchor) read, for [`cancel_unseen`].
pub async fn materialise(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    defs: &crate::definitions::Definitions,
    anchor: &Anchor,
    page: &[Row],
    seen: &mut HashSet<(String, Timestamp)>,
    report: &mut SweepReport,
) -> Result<usize, sqlx::Error> {
    let now = claim.now;
    let mut placed: BTreeMap<(String, String), Placed> = BTreeMap::new();
    for (index, row) in page.iter().enumerate() {
        report.rows += 1;
        let Some(at) = row.clock else {
            report.skipped += 1;
            continue;
        };
        let Ok(key) = cadence::dedup_key(row, &claim.trigger.key) else {
            report.skipped += 1;
            continue;
        };
        let Ok(Placement::Bucket(bucket)) = claim.rule.cadence.place(at, row) else {
            report.skipped += 1;
            continue;
        };
        seen.insert((key.clone(), at));
        let (lead, lead_from) = lead_of(anchor, row);
        let due = crate::store::earlier(at, lead);
        let expires = later(due, anchor.grace);
        let when = Scheduled {
            due,
            expires,
            anchor: at,
            lead_from,
            too_late: expires <= now,
        };
        placed
            .entry((key.clone(), bucket.clone()))
            .or_insert(Placed {
                index,
                key,
                bucket,
                when,
            });
    }
    let claimed = ledger::claim(tx, claim, page).await?;
    let by_row: BTreeMap<usize, &Placed> = placed.values().map(|p| (p.index, p)).collect();
    let mut queued = 0;
    for (fire_id, i) in &claimed.fires {
        let Some(p) = by_row.get(i) else { continue };
        if p.when.too_late {
            report.too_late += 1;
        } else {
            report.queued += 1;
        }
        queued += outbox::enqueue(
            tx,
            claim.workspace,
            defs,
            claim.rule,
            claim.trigger,
            claim.mode,
            *fire_id,
            &page[*i],
            Some(&p.when),
            now,
            &mut report.enqueued,
        )
        .await?;
    }
    let new: HashSet<usize> = claimed.fires.iter().map(|(_, i)| *i).collect();
    let known: Vec<&Placed> = placed
        .values()
        .filter(|p| !new.contains(&p.index) && !p.when.too_late)
        .collect();
    let (moved, reinstated) = adjust(tx, claim, &known).await?;
    report.moved += moved;
    report.reinstated += reinstated;
    report.already += (known.len() as u64).saturating_sub(moved + reinstated);
    queued += reinstated as usize;
    Ok(queued)
}

/// For instants already on the schedule: moves pending sends whose lead changed, and reinstates
/// sends a sweep had cancelled. A send under a live lease is being sent and is left alone.
async fn adjust(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    known: &[&Placed],
) -> Result<(u64, u64), sqlx::Error> {
    if known.is_empty() {
        return Ok((0, 0));
    }
    let rows = || {
        Rows::new()
            .text("k", known.iter().map(|p| p.key.as_str()))
            .text("b", known.iter().map(|p| p.bucket.as_str()))
            .time("d", known.iter().map(|p| p.when.due))
            .time("e", known.iter().map(|p| p.when.expires))
            .text("l", known.iter().map(|p| p.when.lead_from.as_str()))
    };
    let shared = vec![
        Arg::Text(claim.workspace.to_string()),
        Arg::Text(claim.rule.name.clone()),
        Arg::Text(claim.mode.to_string()),
        Arg::Time(DbTime(claim.now)),
    ];
    let moved = fetch_with_rows(
        tx,
        &rows(),
        &shared,
        "UPDATE delivery SET due_at = u.d, expires_at = u.e, lead_from = u.l, fencing_token = delivery.fencing_token + 1
         FROM u, fire f
         WHERE f.workspace_id = $1 AND f.rule_name = $2 AND f.mode = $3 AND f.dedup_key = u.k AND f.dedup_bucket = u.b
           AND delivery.workspace_id = $1 AND delivery.fire_id = f.id AND delivery.anchor_at IS NOT NULL
           AND delivery.status = 'pending' AND delivery.due_at <> u.d
           AND (delivery.lease_expires_at IS NULL OR delivery.lease_expires_at <= $4)
         RETURNING delivery.id",
        |r| r.try_get::<i64, _>("id"),
    )
    .await?;
    let reinstated = fetch_with_rows(
        tx,
        &rows(),
        &shared,
        "UPDATE delivery SET status = 'pending', reason = NULL, unscheduled_at = NULL, due_at = u.d, expires_at = u.e,
                lead_from = u.l, lease_expires_at = NULL, fencing_token = delivery.fencing_token + 1
         FROM u, fire f
         WHERE f.workspace_id = $1 AND f.rule_name = $2 AND f.mode = $3 AND f.dedup_key = u.k AND f.dedup_bucket = u.b
           AND delivery.workspace_id = $1 AND delivery.fire_id = f.id AND delivery.anchor_at IS NOT NULL
           AND delivery.status = 'cancelled' AND delivery.unscheduled_at IS NOT NULL
         RETURNING delivery.id",
        |r| r.try_get::<i64, _>("id"),
    )
    .await?;
    Ok((moved.len() as u64, reinstated.len() as u64))
}

/// After a sweep read its whole look-ahead `[since, until)`: cancels the rule's pending sends
/// anchored in it that the read did not hold: "anchor moved" when their key was read at another
/// instant, "no longer matches" when it was not read at all. A send under a live lease is being
/// sent and is left alone.
pub async fn cancel_unseen(
    tx: &mut StoreTx,
    claim: Claim<'_>,
    since: Timestamp,
    until: Timestamp,
    seen: &HashSet<(String, Timestamp)>,
    report: &mut SweepReport,
) -> Result<(), sqlx::Error> {
    let pending = fetch_all!(
        &mut *tx,
        "SELECT d.id AS id, f.dedup_key AS dedup_key, d.anchor_at AS anchor_at FROM delivery d JOIN fire f ON f.id = d.fire_id AND f.workspace_id = d.workspace_id
         WHERE d.workspace_id = $1 AND d.rule_name = $2 AND d.mode = $3 AND d.anchor_at IS NOT NULL
           AND d.anchor_at >= $4 AND d.anchor_at < $5 AND d.status = 'pending'
           AND (d.lease_expires_at IS NULL OR d.lease_expires_at <= $6)",
        [
            claim.workspace,
            &claim.rule.name,
            claim.mode.to_string(),
            DbTime(since),
            DbTime(until),
            DbTime(claim.now)
        ],
        |r| Ok((
            r.try_get::<i64, _>("id")?,
            r.try_get::<String, _>("dedup_key")?,
            r.try_get::<DbTime, _>("anchor_at")?.0
        ))
    )?;
    let keys: HashSet<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    let mut gone = Vec::new();
    for (id, key, at) in pending {
        if seen.contains(&(key.clone(), at)) {
            continue;
        }
        let moved = keys.contains(key.as_str());
        gone.push((id, moved));
    }
    if gone.is_empty() {
        return Ok(());
    }
    let rows = Rows::new().int("i", gone.iter().map(|(id, _)| *id)).text(
        "r",
        gone.iter().map(|(_, moved)| {
            if *moved {
                "anchor moved"
            } else {
                "no longer matches"
            }
        }),
    );
    let cancelled: Vec<(i64, String)> = fetch_with_rows(
        tx,
        &rows,
        &[
            Arg::Text(claim.workspace.to_string()),
            Arg::Time(DbTime(claim.now)),
        ],
        "UPDATE delivery SET status = 'cancelled', reason = u.r, unscheduled_at = $2, fencing_token = delivery.fencing_token + 1
         FROM u WHERE delivery.workspace_id = $1 AND delivery.id = u.i AND delivery.status = 'pending'
           AND (delivery.lease_expires_at IS NULL OR delivery.lease_expires_at <= $2)
         RETURNING delivery.id, delivery.integration",
        |r| Ok((r.try_get::<i64, _>("id")?, r.try_get::<String, _>("integration")?)),
    )
    .await?;
    for (_, integration) in &cancelled {
        *report
            .enqueued
            .entry((
                integration.clone(),
                crate::outbox::DeliveryStatus::Cancelled.as_str(),
            ))
            .or_default() += 1;
    }
    let cancelled: HashSet<i64> = cancelled.into_iter().map(|(id, _)| id).collect();
    for (id, moved) in gone {
        match (cancelled.contains(&id), moved) {
            (false, _) => {}
            (true, true) => report.cancelled_moved += 1,
            (true, false) => report.cancelled_gone += 1,
        }
    }
    Ok(())
}

/// A rule's sweep state: when it is next due and what its last sweep did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepState {
    /// The rule.
    pub rule: String,
    /// When it is next swept.
    pub next_sweep_at: Timestamp,
    /// When its last sweep started and finished.
    pub started_at: Timestamp,
    /// When its last sweep finished.
    pub finished_at: Timestamp,
    /// The end of the look-ahead it read.
    pub look_until: Timestamp,
    /// Its error, when it failed (it then cancelled nothing).
    pub error: Option<String>,
    /// What it did.
    pub report: SweepReport,
}

/// When each of the workspace's anchored rules is next swept, by rule (rules never swept are
/// absent: they are due).
pub async fn next_sweeps(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
) -> Result<BTreeMap<String, Timestamp>, sqlx::Error> {
    Ok(fetch_all!(
        tx,
        "SELECT rule_name, next_sweep_at FROM sweep WHERE workspace_id = $1",
        [workspace],
        |r| Ok((
            r.try_get::<String, _>("rule_name")?,
            r.try_get::<DbTime, _>("next_sweep_at")?.0
        ))
    )?
    .into_iter()
    .collect())
}

/// The workspace's sweep states, by rule.
pub async fn sweeps(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
) -> Result<Vec<SweepState>, sqlx::Error> {
    fetch_all!(
        tx,
        "SELECT rule_name, next_sweep_at, started_at, finished_at, look_until, error, report FROM sweep WHERE workspace_id = $1 ORDER BY rule_name",
        [workspace],
        |r| Ok(SweepState {
            rule: r.try_get("rule_name")?,
            next_sweep_at: r.try_get::<DbTime, _>("next_sweep_at")?.0,
            started_at: r.try_get::<DbTime, _>("started_at")?.0,
            finished_at: r.try_get::<DbTime, _>("finished_at")?.0,
            look_until: r.try_get::<DbTime, _>("look_until")?.0,
            error: r.try_get("error")?,
            report: serde_json::from_str(&r.try_get::<String, _>("report")?).unwrap_or_default(),
        })
    )
}

/// Records a sweep of `rule` that started at `started` and read up to `look_until` (failed
/// when `error` is given), and when the rule is next due.
#[allow(
    clippy::too_many_arguments,
    reason = "one sweep's record, each part from the sweep"
)]
pub async fn record(
    tx: &mut StoreTx,
    workspace: &WorkspaceId,
    rule: &str,
    started: Timestamp,
    look_until: Timestamp,
    next: Timestamp,
    error: Option<&str>,
    report: &SweepReport,
    now: Timestamp,
) -> Result<(), sqlx::Error> {
    let status = if error.is_some() { "failed" } else { "ok" };
    let report = serde_json::to_string(report).unwrap_or_else(|_| "{}".into());
    execute!(
        tx,
        "INSERT INTO sweep (workspace_id, rule_name, next_sweep_at, started_at, finished_at, look_until, status, error, report)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (workspace_id, rule_name) DO UPDATE SET next_sweep_at = excluded.next_sweep_at, started_at = excluded.started_at,
             finished_at = excluded.finished_at, look_until = excluded.look_until, status = excluded.status, error = excluded.error,
             report = excluded.report",
        [
            workspace,
            rule,
            DbTime(next),
            DbTime(started),
            DbTime(now),
            DbTime(look_until),
            status,
            error,
            report
        ]
    )?;
    Ok(())
}

/// Two rechecked instants further apart than this are read as separate windows.
const RECHECK_GAP: SignedDuration = SignedDuration::from_secs(1);
/// No recheck window spans more than this.
const RECHECK_SPAN: SignedDuration = SignedDuration::from_secs(10);

/// Which of `wanted` (a key and the anchor instant its send was scheduled for) `source` still
/// holds: the recheck just before time-anchored sends go. One read covers every instant of a
/// cluster (instants at most a second apart, a cluster at most ten seconds long), so a batch
/// of sends due together costs one indexed read where the anchor column is indexed, not one
/// per send. `query` is the trigger's, prepared on this source.
pub async fn still_there(
    source: &crate::source::Source,
    query: &crate::sql_guard::CheckedQuery,
    trigger: &crate::definitions::Trigger,
    anchor: &Anchor,
    wanted: &[(String, Timestamp)],
) -> Result<HashSet<(String, Timestamp)>, crate::source::SourceError> {
    let wanted_set: HashSet<(&str, Timestamp)> =
        wanted.iter().map(|(k, at)| (k.as_str(), *at)).collect();
    let mut instants: Vec<Timestamp> = wanted.iter().map(|(_, at)| *at).collect();
    instants.sort_unstable();
    instants.dedup();
    let shape = crate::sql_guard::Shape {
        clock: &anchor.column,
        key: &trigger.key,
    };
    let mut found = HashSet::new();
    for window in recheck_windows(&instants) {
        let mut reader = source.read_window(query, shape, window).await?;
        while let Some(page) = reader.next_page().await? {
            for r in &page {
                let Some(at) = r.clock else { continue };
                if let Ok(k) = cadence::dedup_key(r, &trigger.key)
                    && wanted_set.contains(&(k.as_str(), at))
                {
                    found.insert((k, at));
                }
            }
        }
        reader.finish().await;
    }
    Ok(found)
}

/// The windows that read sorted, distinct `instants`: each covers a run of instants at most
/// [`RECHECK_GAP`] apart and at most [`RECHECK_SPAN`] long, up to a microsecond past its last.
fn recheck_windows(instants: &[Timestamp]) -> Vec<crate::sql_guard::Window> {
    let mut windows: Vec<crate::sql_guard::Window> = Vec::new();
    let mut last: Option<Timestamp> = None;
    for &at in instants {
        let until = later(at, SignedDuration::from_micros(1));
        match windows.last_mut() {
            Some(w)
                if last.is_some_and(|l| l.duration_until(at) <= RECHECK_GAP)
                    && w.since.duration_until(at) <= RECHECK_SPAN =>
            {
                w.until = until;
            }
            _ => windows.push(crate::sql_guard::Window { since: at, until }),
        }
        last = Some(at);
    }
    windows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn instants_close_together_are_rechecked_in_one_window_and_distant_ones_apart() {
        let w = recheck_windows(&[at(0), at(1), at(2), at(5), at(100)]);
        let spans: Vec<(Timestamp, Timestamp)> = w.iter().map(|w| (w.since, w.until)).collect();
        let us = SignedDuration::from_micros(1);
        assert_eq!(
            spans,
            vec![
                (at(0), later(at(2), us)),
                (at(5), later(at(5), us)),
                (at(100), later(at(100), us)),
            ]
        );
    }

    #[test]
    fn a_long_run_of_close_instants_is_cut_into_windows_of_at_most_ten_seconds() {
        let instants: Vec<Timestamp> = (0..=25).map(at).collect();
        let w = recheck_windows(&instants);
        assert_eq!(w.len(), 3);
        for w in &w {
            assert!(
                w.since.duration_until(w.until) <= RECHECK_SPAN + SignedDuration::from_micros(1)
            );
        }
        assert_eq!(w[0].since, at(0));
        assert_eq!(w[1].since, at(11));
        assert_eq!(w[2].since, at(22));
    }
}
