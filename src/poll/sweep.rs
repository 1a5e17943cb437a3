//! Sweeping time-anchored rules inside a trigger's poll, under its lease: each due rule's
//! look-ahead is read page by page with no control-plane transaction open, each page scheduled
//! in one short transaction that first renews the lease by its fencing token, and only a sweep
//! that read its whole look-ahead cancels what the read no longer holds ([`crate::schedule`]).

use std::collections::HashSet;

use jiff::Timestamp;

use super::keep::{Halt, Stop, stopping};
use super::{Lease, Poller, state};
use crate::cadence::{Anchor, Cadence};
use crate::definitions::{Definitions, Rule, SourceDef, Trigger};
use crate::ledger::Claim;
use crate::rules::Mode;
use crate::schedule::{self, SweepReport};
use crate::sql_guard::{Shape, Window};
use crate::store::{StoreTx, later};

/// How soon a failed sweep is tried again (or the rule's interval, when shorter).
const RETRY_FAILED_SWEEP: jiff::SignedDuration = jiff::SignedDuration::from_mins(1);

/// One anchored rule's sweep: the poll's parts it needs.
#[derive(Clone, Copy)]
struct Job<'a> {
    lease: &'a Lease,
    defs: &'a Definitions,
    trigger: &'a Trigger,
    rule: &'a Rule,
    mode: Mode,
    anchor: &'a Anchor,
}

impl Job<'_> {
    fn claim(&self, now: Timestamp) -> Claim<'_> {
        Claim {
            workspace: &self.lease.workspace,
            rule: self.rule,
            trigger: self.trigger,
            mode: self.mode,
            run_id: None,
            now,
        }
    }
}

impl Poller {
    /// Sweeps each of the trigger's anchored rules whose interval has passed. A failed sweep is
    /// recorded and reported (it cancelled nothing) and the poll goes on; a lost lease or a
    /// stopping worker ends the poll.
    #[allow(
        clippy::too_many_arguments,
        reason = "the poll's parts, each borrowed from it"
    )]
    pub(super) async fn sweep_due(
        &self,
        lease: &Lease,
        defs: &Definitions,
        trigger: &Trigger,
        def: &SourceDef,
        anchored: &[(&Rule, Mode)],
        report: &mut super::PollReport,
        stop: Stop<'_>,
    ) -> Result<(), Halt> {
        let now = self.clock.now();
        let next = {
            let mut tx = self.begin(lease).await?;
            let next = schedule::next_sweeps(&mut tx, &lease.workspace)
                .await
                .map_err(|e| self.failed(e))?;
            let _ = tx.rollback().await;
            next
        };
        for (rule, mode) in anchored {
            let Cadence::Anchored(anchor) = &rule.cadence else {
                continue;
            };
            if next.get(&rule.name).is_some_and(|at| *at > now) {
                continue;
            }
            if stopping(stop) {
                return Err(Halt::Stopping);
            }
            let job = Job {
                lease,
                defs,
                trigger,
                rule,
                mode: *mode,
                anchor,
            };
            let started = self.clock.now();
            let swept = tokio::select! {
                r = self.sweep(job, def, started) => r,
                lost = self.heartbeat(lease) => Err(lost),
            };
            match swept {
                Ok(r) => {
                    if let Some(m) = &self.metrics {
                        m.fires(&rule.name, mode.as_str(), r.queued + r.too_late, r.already);
                    }
                    report.sweeps.push((rule.name.clone(), Ok(r)));
                }
                Err(Halt::Failed(e)) => {
                    self.record_failed(job, started, &e).await?;
                    report.sweeps.push((rule.name.clone(), Err(e)));
                }
                Err(halt) => return Err(halt),
            }
        }
        Ok(())
    }

    /// Reads one rule's look-ahead and schedules it; then, the whole look-ahead read, cancels
    /// what it no longer holds and records the sweep, in one transaction.
    async fn sweep(
        &self,
        job: Job<'_>,
        def: &SourceDef,
        started: Timestamp,
    ) -> Result<SweepReport, Halt> {
        let window = Window {
            since: started,
            until: later(started, job.anchor.look_ahead),
        };
        let source = self.source(&job.lease.workspace, def).await?;
        let query = source
            .prepare(job.defs, job.trigger, window)
            .await
            .map_err(|e| e.to_string())?;
        // The anchor is the clock of a sweep: its window and its pages are the anchor's.
        let shape = Shape {
            clock: &job.anchor.column,
            key: &job.trigger.key,
        };
        let mut reader = source
            .read_window(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        let mut seen = HashSet::new();
        let mut report = SweepReport::default();
        let mut queued = 0;
        while let Some(page) = reader.next_page().await.map_err(|e| e.to_string())? {
            let scheduled = async {
                let mut tx = self.begin(job.lease).await?;
                let now = self.clock.now();
                let n = schedule::materialise(
                    &mut tx,
                    job.claim(now),
                    job.defs,
                    job.anchor,
                    &page,
                    &mut seen,
                    &mut report,
                )
                .await
                .map_err(|e| self.failed(e))?;
                if n > 0 {
                    crate::outbox::announce(&mut tx)
                        .await
                        .map_err(|e| self.failed(e))?;
                }
                tx.commit().await.map_err(|e| self.failed(e))?;
                Ok::<_, Halt>(n)
            };
            match scheduled.await {
                Ok(n) => queued += n,
                Err(e) => {
                    reader.finish().await;
                    return Err(e);
                }
            }
        }
        reader.finish().await;
        let mut tx = self.begin(job.lease).await?;
        let now = self.clock.now();
        schedule::cancel_unseen(
            &mut tx,
            job.claim(now),
            window.since,
            window.until,
            &seen,
            &mut report,
        )
        .await
        .map_err(|e| self.failed(e))?;
        let next = later(started, job.anchor.sweep_every());
        schedule::record(
            &mut tx,
            &job.lease.workspace,
            &job.rule.name,
            started,
            window.until,
            next,
            None,
            &report,
            now,
        )
        .await
        .map_err(|e| self.failed(e))?;
        tx.commit().await.map_err(|e| self.failed(e))?;
        if queued > 0 {
            self.store.wake();
        }
        Ok(report)
    }

    /// Records a failed sweep, due again soon.
    async fn record_failed(
        &self,
        job: Job<'_>,
        started: Timestamp,
        error: &str,
    ) -> Result<(), Halt> {
        let mut tx = self.begin(job.lease).await?;
        let now = self.clock.now();
        let next = later(now, job.anchor.sweep_every().min(RETRY_FAILED_SWEEP));
        schedule::record(
            &mut tx,
            &job.lease.workspace,
            &job.rule.name,
            started,
            later(started, job.anchor.look_ahead),
            next,
            Some(error),
            &SweepReport::default(),
            now,
        )
        .await
        .map_err(|e| self.failed(e))?;
        tx.commit().await.map_err(|e| self.failed(e))
    }

    /// A transaction in the lease's workspace that has renewed the lease by its fencing token;
    /// a lost lease stops the poll.
    async fn begin(&self, lease: &Lease) -> Result<StoreTx, Halt> {
        let mut tx = self
            .store
            .begin(&lease.workspace)
            .await
            .map_err(|e| Halt::Failed(e.to_string()))?;
        let until = later(self.clock.now(), self.lease_for);
        if !state::renew_in(&mut tx, lease, until)
            .await
            .map_err(|e| self.failed(e))?
        {
            let _ = tx.rollback().await;
            tracing::warn!(trigger = %lease.trigger, token = lease.token, "the lease was taken over; stopping this sweep");
            return Err(Halt::LeaseLost);
        }
        Ok(tx)
    }

    fn failed(&self, e: sqlx::Error) -> Halt {
        Halt::Failed(self.store.error(e).to_string())
    }
}
