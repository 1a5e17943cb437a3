//! Reading a window page by page and claiming each page: the source read holds no control-plane
//! transaction, and each page's claims for every rule commit in one short transaction that first
//! renews the lease by its fencing token.

use std::collections::HashSet;

use super::keep::{Halt, stopping};
use super::{ClaimStyle, PROGRESS_EVERY_PAGES, Plan, PollReport, Poller, state};
use crate::definitions::SourceDef;
use crate::ledger::{self, Claim};
use crate::source::Source;
use crate::sql_guard::Window;
use crate::store::WorkspaceId;
use crate::telemetry;

impl Poller {
    /// Reads the window page by page, claiming each page before the next is read, then counts
    /// the rows that cannot fire (NULL keys, NULL or unreadable clocks).
    pub(super) async fn read_and_claim(
        &self,
        plan: &Plan<'_>,
        def: &SourceDef,
        window: Window,
        report: &mut PollReport,
    ) -> Result<(), Halt> {
        let (lease, trigger) = (plan.lease, plan.trigger);
        if stopping(plan.stop) {
            return Err(Halt::Stopping);
        }
        let source = self.source(&lease.workspace, def).await?;
        // The guard, then the columns: a missing key column fails the poll loudly instead of
        // skipping every row.
        let query = source
            .prepare(plan.defs, trigger, window)
            .await
            .map_err(|e| e.to_string())?;
        let shape = trigger.shape();
        let mut reader = source
            .read_window(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        let mut pages = 0u64;
        while let Some(page) = reader.next_page().await.map_err(|e| e.to_string())? {
            // The source read is done for this page; only now open a control-plane transaction.
            let claimed = self.claim_page(plan, &page, report).await;
            let fired_rows = match claimed {
                Ok(n) => n,
                Err(e) => {
                    reader.finish().await;
                    return Err(e);
                }
            };
            report.matched += page.len() as u64;
            report.fired += fired_rows as u64;
            report.already += (page.len() - fired_rows) as u64;
            pages += 1;
            if pages.is_multiple_of(PROGRESS_EVERY_PAGES) {
                tracing::info!(trigger = %lease.trigger, pages, rows = report.matched, "poll in progress; lease renewed");
            }
            if stopping(plan.stop) {
                // The page in hand is claimed; the rest of the window is read again by the
                // worker that takes the trigger next.
                reader.finish().await;
                tracing::info!(trigger = %lease.trigger, pages, "stopping: giving the trigger back");
                return Err(Halt::Stopping);
            }
        }
        report.null_keys = reader.null_keys();
        reader.finish().await;
        // NULL and unreadable clocks lie in no window: counting them reads the whole query, so
        // it is done at most once per interval per trigger, and the last count reported between.
        let now = self.clock.now();
        let last = lease.clock_counts.as_ref().filter(|c| {
            c.counted_at <= now && c.counted_at.duration_until(now) < self.count_clocks_every
        });
        if let Some(last) = last {
            report.null_clocks = last.null_clocks;
            report.unreadable_clocks = last.unreadable.clone();
            report.clocks_counted_at = Some(last.counted_at);
            return Ok(());
        }
        report.null_clocks = source
            .count_null_clocks(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        report.unreadable_clocks = source
            .count_unreadable_clocks(&query, shape, window)
            .await
            .map_err(|e| e.to_string())?;
        report.clocks_counted_at = Some(now);
        report.clocks_recounted = true;
        Ok(())
    }

    /// Claims one page for every rule; returns how many rows fired for at least one rule. Each
    /// transaction first renews the lease (by fencing token); if the lease is lost, it changes
    /// nothing and the poll stops.
    async fn claim_page(
        &self,
        plan: &Plan<'_>,
        page: &[crate::row::Row],
        report: &mut PollReport,
    ) -> Result<usize, Halt> {
        let Plan {
            lease,
            defs,
            trigger,
            rules,
            run_id,
            stop: _,
        } = *plan;
        let failed = |e: sqlx::Error| Halt::Failed(self.store.error(e).to_string());
        let now = self.clock.now();
        let slices: Vec<std::ops::Range<usize>> = match self.style {
            ClaimStyle::Batched => std::iter::once(0..page.len()).collect(),
            ClaimStyle::PerRow => (0..page.len()).map(|i| i..i + 1).collect(),
        };
        let mut fired_rows = HashSet::new();
        let mut queued = 0;
        for range in slices {
            let mut tx = self
                .store
                .begin(&lease.workspace)
                .await
                .map_err(|e| Halt::Failed(e.to_string()))?;
            let until = crate::store::later(self.clock.now(), self.lease_for);
            if !state::renew_in(&mut tx, lease, until)
                .await
                .map_err(failed)?
            {
                let _ = tx.rollback().await;
                tracing::warn!(trigger = %lease.trigger, token = lease.token, "the lease was taken over; stopping this poll before its next claim");
                return Err(Halt::LeaseLost);
            }
            let queued_before = queued;
            for (slot, (rule, mode)) in rules.iter().enumerate() {
                let claim = Claim {
                    workspace: &lease.workspace,
                    rule,
                    trigger,
                    mode: *mode,
                    run_id: Some(run_id),
                    now,
                };
                let span = tracing::info_span!(
                    "claim",
                    workspace = %lease.workspace,
                    trigger = %trigger.name,
                    rule = %rule.name,
                    mode = %mode,
                    rows = range.len(),
                    fired = tracing::field::Empty,
                    already = tracing::field::Empty,
                    duration_ms = tracing::field::Empty,
                );
                let claiming = async {
                    let claimed = ledger::claim(&mut tx, claim, &page[range.clone()])
                        .await
                        .map_err(failed)?;
                    let span = tracing::Span::current();
                    span.record("fired", claimed.fires.len());
                    span.record("already", claimed.already);
                    for (fire_id, i) in &claimed.fires {
                        let row = &page[range.start + i];

                        queued += crate::outbox::enqueue(
                            &mut tx,
                            &lease.workspace,
                            defs,
                            rule,
                            trigger,
                            *mode,
                            *fire_id,
                            row,
                            None,
                            now,
                            &mut report.enqueued,
                        )
                        .await
                        .map_err(failed)?;
                    }
                    Ok::<_, Halt>(claimed)
                };
                let claimed = telemetry::timed(span, claiming).await?;
                report.rules[slot].fired += claimed.fires.len() as u64;
                report.rules[slot].already += claimed.already;
                fired_rows.extend(claimed.fires.iter().map(|(_, i)| range.start + i));
            }
            if queued > queued_before {
                crate::outbox::announce(&mut tx).await.map_err(failed)?;
            }
            tx.commit().await.map_err(failed)?;
        }
        if queued > 0 {
            self.store.wake();
        }
        Ok(fired_rows.len())
    }

    pub(super) async fn source(
        &self,
        workspace: &WorkspaceId,
        def: &SourceDef,
    ) -> Result<Source, String> {
        self.sources.get(workspace, def, &self.dsn).await
    }
}
