//! The poller: lease a due trigger, read its window from the source with no control-plane
//! transaction open, claim each page's fires in one short transaction per page, and settle the
//! lease with its fencing token. The watermark advances only past rows that were evaluated, and
//! only when the whole window was.
//!
//! A trigger lease is short ([`DEFAULT_LEASE`]) and renewed while the poll works: in each page's
//! claim transaction and by a heartbeat while the source is read. A poll that finds its lease
//! lost stops at once without settling; a worker told to stop finishes the page it holds and
//! gives the trigger back, due at once.

mod keep;
mod page;
mod report;
pub mod run;
pub mod state;
mod sweep;
pub mod workers;

use keep::{Halt, Stop, stopping};

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};

use crate::clock::Clock;
use crate::definitions::{SourceDef, versions};
use crate::rules::{self, Mode};
use crate::sql_guard::Window;
use crate::store::{Store, StoreError, WorkspaceId, workspace};
use crate::telemetry;

pub use report::{PollReport, PollStatus, RulePoll};
pub(crate) use state::reconcile;
pub use state::{
    ClockCounts, Lease, Settle, TriggerState, due_now, lease_due, list, release_all, renew, rewind,
    settle,
};

/// Default trigger lease, renewed while the poll works.
pub const DEFAULT_LEASE: SignedDuration = SignedDuration::from_secs(30);
/// The shortest trigger lease a poller takes.
pub const MIN_LEASE: SignedDuration = SignedDuration::from_secs(1);
/// The longest trigger lease a poller takes.
pub const MAX_LEASE: SignedDuration = SignedDuration::from_hours(1);
/// A poll logs its progress every this many pages.
pub const PROGRESS_EVERY_PAGES: u64 = 10;
/// How often a poll counts, over the trigger's whole query, the rows no window holds (NULL
/// clocks, and unreadable ones on SQLite): at most once per this interval per trigger, since
/// the count reads the whole table. In between, polls report the last count and when it was
/// taken ([`PollReport::clocks_counted_at`]).
pub const DEFAULT_CLOCK_COUNT_EVERY: SignedDuration = SignedDuration::from_hours(1);
/// How soon a failed poll is retried.
pub const RETRY_AFTER_FAILURE: SignedDuration = SignedDuration::from_secs(30);

pub use crate::source::DsnResolver;
use crate::source::{AddressCheck, Dsn};

use crate::definitions::may_hold_dsn;

/// A source's DSN from the environment variable the definitions name, when the source belongs to
/// one of `operators`, the workspaces the operator runs (the process's own, and those
/// `ROWFIRE_OPERATOR_WORKSPACES` lists). The environment is the operator's: any other workspace
/// (a tenant's) stores its DSNs, and never reads this process's variables.
pub fn env_dsn_of(
    operators: &[WorkspaceId],
    workspace: &WorkspaceId,
    def: &SourceDef,
) -> Option<String> {
    // An undeclared source names no variable: only a stored DSN resolves it.
    if !operators.contains(workspace) || def.dsn_env.is_empty() || !may_hold_dsn(&def.dsn_env) {
        return None;
    }
    #[expect(
        clippy::disallowed_methods,
        reason = "a definitions file's dsn_env is data: the variable it names holds a source's DSN"
    )]
    std::env::var(&def.dsn_env).ok().filter(|v| !v.is_empty())
}

/// Reads the DSNs of `operators`' sources from the environment variables the definitions name
/// (see [`env_dsn_of`]); other workspaces' sources resolve to nothing.
pub fn env_dsn(operators: &[WorkspaceId]) -> DsnResolver {
    let operators = operators.to_vec();
    Arc::new(move |ws: &WorkspaceId, def: &SourceDef| {
        env_dsn_of(&operators, ws, def).map(Dsn::from)
    })
}

/// Reads a source's DSN from those each workspace stored with `rowfire sources add` (by
/// workspace and source name) and otherwise, for `operators` only, from the environment variable
/// the definitions name. Another workspace's (a tenant's) DSN connects only where `tenants`
/// admits each address its host resolves to (see [`crate::source::pin`]).
pub fn stored_or_env_dsn(
    stored: StoredDsns,
    operators: &[WorkspaceId],
    tenants: AddressCheck,
) -> DsnResolver {
    shared_or_env_dsn(Arc::new(std::sync::RwLock::new(stored)), operators, tenants)
}

/// Stored DSNs by workspace and source name.
pub type StoredDsns = std::collections::BTreeMap<(WorkspaceId, String), String>;

/// [`stored_or_env_dsn`] over stored DSNs that may be read again while it is in use (a running
/// worker replaces them every minute, so a DSN stored since it started resolves).
pub fn shared_or_env_dsn(
    stored: Arc<std::sync::RwLock<StoredDsns>>,
    operators: &[WorkspaceId],
    tenants: AddressCheck,
) -> DsnResolver {
    let operators = operators.to_vec();
    Arc::new(move |ws: &WorkspaceId, def: &SourceDef| {
        let operator = operators.contains(ws);
        let url = stored
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(ws.clone(), def.name.clone()))
            .cloned();
        match url {
            Some(url) => Some(Dsn {
                url,
                tenant: (!operator).then(|| tenants.clone()),
            }),
            None => env_dsn_of(&operators, ws, def).map(Dsn::from),
        }
    })
}

/// The span one poll of one leased trigger runs in (its settle and report included).
fn poll_span(lease: &Lease) -> tracing::Span {
    tracing::info_span!(
        "poll",
        workspace = %lease.workspace,
        trigger = %lease.trigger,
        token = lease.token,
        duration_ms = tracing::field::Empty,
    )
}

/// How fires are claimed: one statement per batch, or (for comparison) one transaction per row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStyle {
    /// One `INSERT … ON CONFLICT DO NOTHING RETURNING` per page and rule.
    Batched,
    /// One transaction per row: what the batch replaces, kept for benchmarks.
    PerRow,
}

/// What went wrong outside a poll (the control plane itself).
#[derive(Debug, thiserror::Error)]
pub enum PollError {
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one poll works on: its lease, the definitions in force, the trigger and its rules with
/// their modes, and the run it records.
#[derive(Clone, Copy)]
struct Plan<'a> {
    lease: &'a Lease,
    defs: &'a crate::definitions::Definitions,
    trigger: &'a crate::definitions::Trigger,
    rules: &'a [(&'a crate::definitions::Rule, Mode)],
    run_id: i64,
    stop: Stop<'a>,
}

/// A poller: one worker's identity, its clock, and its connections.
pub struct Poller {
    store: Store,
    worker: String,
    clock: Clock,
    lease_for: SignedDuration,
    style: ClaimStyle,
    count_clocks_every: SignedDuration,
    dsn: DsnResolver,
    sources: crate::source::Connections,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Poller {
    /// A poller named `worker` on `store`.
    pub fn new(store: Store, worker: impl Into<String>, clock: Clock, dsn: DsnResolver) -> Poller {
        Poller {
            store,
            worker: worker.into(),
            clock,
            lease_for: DEFAULT_LEASE,
            style: ClaimStyle::Batched,
            count_clocks_every: DEFAULT_CLOCK_COUNT_EVERY,
            dsn,
            sources: Default::default(),
            metrics: None,
        }
    }

    /// Counts every poll this poller makes (duration, rows, fires, failures) in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Poller {
        self.metrics = Some(metrics);
        self
    }

    /// Claims one row at a time instead of in batches (benchmarks only).
    pub fn with_claim_style(mut self, style: ClaimStyle) -> Poller {
        self.style = style;
        self
    }

    /// Takes trigger leases of `lease` (bounded to [`MIN_LEASE`]..=[`MAX_LEASE`]) instead of
    /// [`DEFAULT_LEASE`]. A worker that dies is taken over within one lease.
    pub fn with_lease(mut self, lease: SignedDuration) -> Poller {
        self.lease_for = lease.clamp(MIN_LEASE, MAX_LEASE);
        self
    }

    /// Counts NULL and unreadable clocks over a trigger's whole query at most once per `every`
    /// (instead of [`DEFAULT_CLOCK_COUNT_EVERY`]); zero counts on every poll.
    pub fn with_clock_count_every(mut self, every: SignedDuration) -> Poller {
        self.count_clocks_every = every.max(SignedDuration::ZERO);
        self
    }

    /// What the sources this poller has read were sent, by kind, summed over its sources
    /// (tests count statements with it).
    #[doc(hidden)]
    pub async fn source_statements(&self) -> crate::source::Statements {
        self.sources.statements().await
    }

    /// The trigger lease this poller takes.
    pub fn lease_length(&self) -> SignedDuration {
        self.lease_for
    }

    /// Leases the most overdue trigger, if any is due.
    pub async fn lease(&self) -> Result<Option<Lease>, PollError> {
        Ok(lease_due(&self.store, &self.worker, self.clock.now(), self.lease_for).await?)
    }

    /// Polls one trigger of `workspace` now, due or not (`run now`): leases it, polls, settles.
    /// `None` when it is not in force or another worker holds its lease.
    pub async fn poll_now(
        &self,
        workspace: &WorkspaceId,
        trigger: &str,
    ) -> Result<Option<PollReport>, PollError> {
        let lease = state::lease_named(
            &self.store,
            workspace,
            trigger,
            &self.worker,
            self.clock.now(),
            self.lease_for,
        )
        .await?;
        let Some(lease) = lease else {
            return Ok(None);
        };
        let polled = telemetry::timed(poll_span(&lease), self.poll_and_settle(&lease, None));
        Ok(Some(polled.await?))
    }

    /// Polls every due trigger once: lease, poll, settle, until none is due.
    pub async fn poll_due(&self) -> Result<Vec<PollReport>, PollError> {
        self.poll_due_until(None).await
    }

    /// [`Poller::poll_due`], stopping after the page in hand once `stop` turns true: that
    /// trigger is given back, due at once, and no further one is leased.
    async fn poll_due_until(&self, stop: Stop<'_>) -> Result<Vec<PollReport>, PollError> {
        let mut reports = Vec::new();
        while !stopping(stop) {
            let Some(lease) = self.lease().await? else {
                break;
            };
            let polled = telemetry::timed(poll_span(&lease), self.poll_and_settle(&lease, stop));
            reports.push(polled.await?);
        }
        Ok(reports)
    }

    /// Polls one leased trigger, settles it (unless the lease was lost) and logs the report.
    async fn poll_and_settle(
        &self,
        lease: &Lease,
        stop: Stop<'_>,
    ) -> Result<PollReport, PollError> {
        let started = std::time::Instant::now();
        let (mut report, outcome) = self.poll_until(lease, stop).await;
        if report.status == PollStatus::LeaseLost {
            // Not settled: the window is someone else's now.
            report.settled = false;
            tracing::warn!(trigger = %lease.trigger, token = lease.token, "lease lost mid-poll; stopped without settling");
        } else {
            report.settled = settle(&self.store, lease, &outcome).await?;
            if !report.settled {
                tracing::warn!(trigger = %lease.trigger, token = lease.token, "stale settle ignored: the lease was taken over");
            }
        }
        report.log();
        if let Some(m) = &self.metrics {
            let failed = matches!(report.status, PollStatus::Failed(_));
            let lost = report.status == PollStatus::LeaseLost || !report.settled;
            m.poll(
                &report.trigger,
                started.elapsed(),
                report.matched,
                failed,
                lost,
            );
            for r in &report.rules {
                m.fires(&r.rule, r.mode.as_str(), r.fired, r.already);
            }
            let swept = report.sweeps.iter().filter_map(|(_, s)| s.as_ref().ok());
            for tally in std::iter::once(&report.enqueued).chain(swept.map(|s| &s.enqueued)) {
                for ((integration, state), n) in tally {
                    m.deliveries_written(integration, state, *n);
                }
            }
        }
        Ok(report)
    }

    /// Polls due triggers until `stop` turns true, resting up to a second (at most a quarter
    /// lease) when nothing is due or the control plane fails. When `stop` turns true, a poll in
    /// progress finishes the page it holds and gives its trigger back, due at once.
    pub async fn run_until(
        &self,
        mut stop: tokio::sync::watch::Receiver<bool>,
        on_report: impl Fn(&PollReport),
    ) {
        while !*stop.borrow() {
            // A control plane that is down or restarting delays work; the worker waits it out
            // instead of exiting, and leases it held lapse and are taken over.
            let reports = match self.poll_due_until(Some(&stop)).await {
                Ok(reports) => reports,
                Err(e) => {
                    tracing::error!(error = %e, "polling failed; retrying in a second");
                    Vec::new()
                }
            };
            for r in &reports {
                on_report(r);
            }
            if reports.is_empty() {
                tokio::select! {
                    _ = tokio::time::sleep(self.rest_until_due().await) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    /// Polls one leased trigger and says how to settle it. Never settles by itself, so a test
    /// can play a worker that dies before settling.
    pub async fn poll(&self, lease: &Lease) -> (PollReport, Settle) {
        telemetry::timed(poll_span(lease), self.poll_until(lease, None)).await
    }

    async fn poll_until(&self, lease: &Lease, stop: Stop<'_>) -> (PollReport, Settle) {
        let mut report = PollReport {
            trigger: lease.trigger.clone(),
            window: None,
            matched: 0,
            fired: 0,
            already: 0,
            null_keys: 0,
            null_clocks: 0,
            unreadable_clocks: Default::default(),
            clocks_counted_at: None,
            clocks_recounted: false,
            rules: Vec::new(),
            sweeps: Vec::new(),
            status: PollStatus::Ok,
            settled: true,
            enqueued: Default::default(),
        };
        let result = self.evaluate(lease, &mut report, stop).await;
        let now = self.clock.now();
        let outcome = match result {
            Ok(Some(until)) => Settle {
                watermark: Some(until),
                next_poll_at: crate::store::later(now, lease.poll_interval),
                error: None,
                now,
                clock_counts: report
                    .clocks_counted_at
                    .filter(|_| report.clocks_recounted)
                    .map(|counted_at| ClockCounts {
                        counted_at,
                        null_clocks: report.null_clocks,
                        unreadable: report.unreadable_clocks.clone(),
                    }),
            },
            Ok(None) => Settle {
                watermark: None,
                next_poll_at: crate::store::later(now, lease.poll_interval),
                error: None,
                now,
                clock_counts: None,
            },
            Err(Halt::LeaseLost) => {
                report.status = PollStatus::LeaseLost;
                report.settled = false;
                // Never applied by the poller; a caller that settles with it changes nothing.
                Settle {
                    watermark: None,
                    next_poll_at: now,
                    error: None,
                    now,
                    clock_counts: None,
                }
            }
            Err(Halt::Stopping) => {
                report.status = PollStatus::Stopped;
                Settle {
                    watermark: None,
                    next_poll_at: now,
                    error: None,
                    now,
                    clock_counts: None,
                }
            }
            Err(Halt::Failed(message)) => {
                report.status = PollStatus::Failed(message.clone());
                let retry = lease.poll_interval.min(RETRY_AFTER_FAILURE);
                Settle {
                    watermark: None,
                    next_poll_at: crate::store::later(now, retry),
                    error: Some(message),
                    now,
                    clock_counts: None,
                }
            }
        };
        (report, outcome)
    }

    /// Reads and claims the window; returns the new watermark, or `None` for a skipped poll.
    async fn evaluate(
        &self,
        lease: &Lease,
        report: &mut PollReport,
        stop: Stop<'_>,
    ) -> Result<Option<Timestamp>, Halt> {
        if let Some(problem) = &lease.problem {
            return Err(Halt::Failed(problem.clone()));
        }
        let ws = &lease.workspace;
        let store = &self.store;
        let workspace = workspace::get(store, ws).await.map_err(|e| e.to_string())?;
        if let Some((reason, _)) = &workspace.halted {
            report.status = PollStatus::Skipped(format!("workspace halted: {reason}"));
            return Ok(None);
        }
        let Some((_, defs)) = versions::in_force(store, ws)
            .await
            .map_err(|e| e.to_string())?
        else {
            report.status = PollStatus::Skipped("no definitions in force".into());
            return Ok(None);
        };
        let Some(trigger) = defs.trigger(&lease.trigger) else {
            report.status = PollStatus::Skipped("trigger no longer defined".into());
            return Ok(None);
        };
        if !trigger.has_clock() {
            // Accepted as the original Rowfire accepts it, and never read: said on every poll
            // (and by `validate`, `push` and a worker's start), without an error each time.
            report.status = PollStatus::Skipped(
                "the trigger names no event_time (the column that places each row in time); add `event_time: COLUMN`".into(),
            );
            return Ok(None);
        }
        let modes = rules::list(store, ws).await.map_err(|e| e.to_string())?;
        let rules: Vec<(&crate::definitions::Rule, Mode)> = defs
            .rules
            .iter()
            .filter(|r| r.trigger == trigger.name)
            .filter_map(|r| {
                modes
                    .iter()
                    .find(|m| m.rule == r.name && m.tombstoned_at.is_none())
                    .map(|m| (r, m.mode))
            })
            .collect();
        if rules.is_empty() {
            report.status = PollStatus::Skipped("no enabled rules on this trigger".into());
            return Ok(None);
        }
        let def = defs
            .source(&trigger.source)
            .expect("validated: every trigger's source exists");
        // Time-anchored rules are not claimed from the clock's window: their sweep reads the
        // look-ahead, on its own interval.
        let (anchored, rules): (Vec<_>, Vec<_>) = rules
            .into_iter()
            .partition(|(r, _)| matches!(r.cadence, crate::cadence::Cadence::Anchored(_)));
        if !anchored.is_empty() {
            self.sweep_due(lease, &defs, trigger, def, &anchored, report, stop)
                .await?;
        }
        if rules.is_empty() {
            return Ok(None);
        }
        report.rules = rules
            .iter()
            .map(|(r, mode)| RulePoll {
                rule: r.name.clone(),
                mode: *mode,
                fired: 0,
                already: 0,
            })
            .collect();

        let now = self.clock.now();
        let since = crate::store::earlier(lease.watermark, lease.lookback).max(lease.origin);
        let window = Window {
            since: since.min(now),
            until: now,
        };
        report.window = Some(window);
        let run_id = run::start(store, lease, window, now)
            .await
            .map_err(|e| e.to_string())?;
        let plan = Plan {
            lease,
            defs: &defs,
            trigger,
            rules: &rules,
            run_id,
            stop,
        };
        // The heartbeat renews the lease while the source is read; if it finds the lease lost,
        // the read is dropped at once (a claim in progress rolls back).
        let result = tokio::select! {
            r = self.read_and_claim(&plan, def, window, report) => r,
            lost = self.heartbeat(lease) => Err(lost),
        };
        let counts = run::RunCounts {
            matched: report.matched,
            fired: report.fired,
            already: report.already,
            null_clocks: report.null_clocks,
            null_keys: report.null_keys,
            unreadable_clocks: report.unreadable_clocks.rows,
            unreadable_clock_example: report
                .unreadable_clocks
                .example
                .as_ref()
                .map(|e| format!("{:?} (key {})", e.clock, e.key)),
        };
        let (status, error) = match &result {
            Ok(()) => ("ok", None),
            Err(Halt::Failed(e)) => ("failed", Some(e.as_str())),
            Err(Halt::LeaseLost) => (
                "stale",
                Some("the lease was lost to another worker; this poll stopped without settling"),
            ),
            Err(Halt::Stopping) => (
                "failed",
                Some("the worker stopped; the trigger was given back"),
            ),
        };
        run::finish(store, ws, run_id, status, &counts, error, self.clock.now())
            .await
            .map_err(|e| e.to_string())?;
        result.map(|()| Some(window.until))
    }
}
