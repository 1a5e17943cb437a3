//! Workers seen by the control plane (the `worker` table): each worker process has an id made of
//! its host, its process id and its start time, written into every trigger lease it takes, and a
//! heartbeat, so a person can see who holds what and who has gone quiet. Workers belong to no
//! workspace; these statements are unscoped.

use jiff::{SignedDuration, Timestamp};

use crate::clock::Clock;
use crate::store::{DbTime, Store, StoreError, Unscoped, execute, fetch_all};

/// The longest host name kept in a worker id.
const MAX_HOST: usize = 63;

/// How often a running worker says it is alive.
pub const HEARTBEAT_EVERY: SignedDuration = SignedDuration::from_secs(10);
/// How far back `status` looks for workers.
pub const RECENT: SignedDuration = SignedDuration::from_mins(10);

/// One worker process: `host:pid@start`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerId {
    /// The id written into leases: `host:pid@start`.
    pub id: String,
    /// The host it runs on (letters, digits, `.`, `-` and `_` only; at most 63 of them).
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// When it started, to the second.
    pub started_at: Timestamp,
}

impl WorkerId {
    /// The id of a worker on `host` (cleaned: only letters, digits, `.`, `-`, `_`, at most 63;
    /// `local` when nothing is left) with process id `pid`, started at `started_at`.
    pub fn new(host: &str, pid: u32, started_at: Timestamp) -> WorkerId {
        let host: String = host
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
            .take(MAX_HOST)
            .collect();
        let host = if host.is_empty() {
            "local".to_string()
        } else {
            host
        };
        let started_at = Timestamp::from_second(started_at.as_second()).unwrap_or(started_at);
        WorkerId {
            id: format!("{host}:{pid}@{started_at}"),
            host,
            pid,
            started_at,
        }
    }
}

/// A worker as last seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSeen {
    /// Its id (`host:pid@start`).
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its process id.
    pub pid: i64,
    /// When it started.
    pub started_at: Timestamp,
    /// Its last heartbeat.
    pub last_seen_at: Timestamp,
    /// When it stopped cleanly, if it did.
    pub stopped_at: Option<Timestamp>,
}

/// How long a worker not seen is remembered.
pub const FORGET_AFTER: SignedDuration = SignedDuration::from_hours(24 * 7);

/// Records a worker as started and seen at `now`, and forgets workers not seen for
/// [`FORGET_AFTER`], so the table stays small however often workers restart.
pub async fn register(store: &Store, worker: &WorkerId, now: Timestamp) -> Result<(), StoreError> {
    let done = async {
        let mut tx = store.begin_unscoped(Unscoped::Workers).await?;
        execute!(
            &mut tx,
            "DELETE FROM worker WHERE last_seen_at < $1",
            [DbTime(crate::store::earlier(now, FORGET_AFTER))]
        )?;
        execute!(
            &mut tx,
            "INSERT INTO worker (id, host, pid, started_at, last_seen_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET last_seen_at = excluded.last_seen_at, stopped_at = NULL",
            [
                &worker.id,
                &worker.host,
                i64::from(worker.pid),
                DbTime(worker.started_at),
                DbTime(now)
            ]
        )?;
        tx.commit().await
    };
    done.await.map_err(|e| store.error(e))
}

/// Records a heartbeat.
pub async fn beat(store: &Store, worker: &WorkerId, now: Timestamp) -> Result<(), StoreError> {
    let done = async {
        let mut tx = store.begin_unscoped(Unscoped::Workers).await?;
        execute!(
            &mut tx,
            "UPDATE worker SET last_seen_at = $2 WHERE id = $1",
            [&worker.id, DbTime(now)]
        )?;
        tx.commit().await
    };
    done.await.map_err(|e| store.error(e))
}

/// Beats every [`HEARTBEAT_EVERY`] until dropped (spawn it and abort it at the end); a failed
/// beat is logged and the next one tried.
pub async fn keep_alive(store: Store, worker: WorkerId, clock: Clock) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(
            HEARTBEAT_EVERY.as_secs().unsigned_abs(),
        ))
        .await;
        if let Err(e) = beat(&store, &worker, clock.now()).await {
            tracing::warn!(error = %e, "could not record this worker's heartbeat; trying again");
        }
    }
}

/// A clean stop: gives back every trigger lease the worker still holds (their triggers are
/// polled by another worker at once) and records it as stopped. Returns how many leases it gave
/// back.
pub async fn stopped(store: &Store, worker: &WorkerId, now: Timestamp) -> Result<u64, StoreError> {
    let released = super::state::release_all(store, &worker.id, now).await?;
    let done = async {
        let mut tx = store.begin_unscoped(Unscoped::Workers).await?;
        execute!(
            &mut tx,
            "UPDATE worker SET last_seen_at = $2, stopped_at = $2 WHERE id = $1",
            [&worker.id, DbTime(now)]
        )?;
        tx.commit().await
    };
    done.await.map_err(|e| store.error(e))?;
    Ok(released)
}

/// Workers seen since `since`, most recently seen first (at most 1000).
pub async fn recent(store: &Store, since: Timestamp) -> Result<Vec<WorkerSeen>, StoreError> {
    let found = async {
        let mut tx = store.begin_unscoped(Unscoped::Look).await?;
        let rows = fetch_all!(
            &mut tx,
            "SELECT id, host, pid, started_at, last_seen_at, stopped_at FROM worker
             WHERE last_seen_at >= $1 ORDER BY last_seen_at DESC, id LIMIT 1000",
            [DbTime(since)],
            |r| Ok(WorkerSeen {
                id: r.try_get("id")?,
                host: r.try_get("host")?,
                pid: r.try_get("pid")?,
                started_at: r.try_get::<DbTime, _>("started_at")?.0,
                last_seen_at: r.try_get::<DbTime, _>("last_seen_at")?.0,
                stopped_at: r.try_get::<Option<DbTime>, _>("stopped_at")?.map(|t| t.0),
            })
        )?;
        tx.rollback().await?;
        Ok::<_, sqlx::Error>(rows)
    };
    found.await.map_err(|e| store.error(e))
}

/// A duration to the second, for people (`4m 59s`).
fn shown(d: SignedDuration) -> String {
    format!("{:#}", SignedDuration::from_secs(d.as_secs()))
}

/// The lines `rowfire status` prints under a trigger: who holds its lease and until when (or
/// that none does), how long it has been due, and a WARNING when it has been due longer than its
/// lease plus its poll interval.
pub fn lease_lines(t: &super::TriggerState, now: Timestamp) -> Vec<String> {
    let mut lines = Vec::new();
    match t.held(now) {
        Some((holder, until)) => lines.push(format!(
            "lease held by {holder} until {until} (in {})",
            shown(now.duration_until(until))
        )),
        None => lines.push("lease free".to_string()),
    }
    if let Some(due) = t.due_for(now) {
        lines.push(format!("due for {}", shown(due)));
        if t.overdue(now) {
            lines.push(format!(
                "WARNING: due for {}, longer than its lease ({}) plus its poll interval ({}): no worker has polled it; check that workers run (`rowfire status` lists them) and their logs",
                shown(due),
                shown(t.lease_for.unwrap_or(super::DEFAULT_LEASE)),
                shown(t.poll_interval)
            ));
        }
    }
    lines
}

/// The line `rowfire status` prints for a worker: its id, last heartbeat and whether it stopped.
pub fn worker_line(w: &WorkerSeen, now: Timestamp) -> String {
    let ago = shown(w.last_seen_at.duration_until(now).max(SignedDuration::ZERO));
    match w.stopped_at {
        Some(at) => format!("{}  stopped at {at}", w.id),
        None => format!("{}  last heartbeat {} ({ago} ago)", w.id, w.last_seen_at),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_host_name_is_cleaned_and_bounded() {
        let at: Timestamp = "2026-11-29T12:00:00.123Z".parse().unwrap();
        let id = WorkerId::new(&format!("a b;\n{}", "x".repeat(500)), 7, at);
        assert_eq!(id.host.len(), MAX_HOST);
        assert!(id.host.starts_with("abx"));
        assert!(id.id.ends_with(":7@2026-11-29T12:00:00Z"), "{}", id.id);
        assert_eq!(WorkerId::new("\u{1F600}", 1, at).host, "local");
    }
}
