//! The recheck of time-anchored sends: just before a claimed batch goes, the rows of its
//! scheduled sends are read again by anchor on the source (no control-plane transaction open),
//! one read per rule and cluster of nearby instants rather than one per send. A row that no
//! longer matches, or whose anchor moved, ends its send as skipped: recorded like a send, never
//! retried.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::SignedDuration;

use super::{Sender, Snapshot};
use crate::cadence::Cadence;
use crate::outbox::DeliveryStatus;
use crate::send::queue::{Claimed, Settlement};
use crate::source::Source;
use crate::sql_guard::CheckedQuery;
use crate::store::{WorkspaceId, later};

/// How soon a send whose recheck could not run is tried again (its grace still bounds it).
const RECHECK_RETRY: SignedDuration = SignedDuration::from_secs(10);

/// A trigger's query as prepared on its source, for the snapshot of definitions it came from.
pub(super) struct Prepared {
    snapshot_read_at: std::time::Instant,
    query: Arc<CheckedQuery>,
}

/// One rule's sends in one workspace, with the definitions snapshot they are rechecked against.
type Group<'a> = (Arc<Snapshot>, Vec<&'a Claimed>);

impl Sender {
    /// Rechecks the claimed sends whose rule asks for it (`recheck`, on by default). Returns how
    /// each send that must not go now ends (skipped) or waits (its recheck could not run), by
    /// delivery id; a send not in the map goes.
    pub(super) async fn recheck_all(&self, claimed: &[Claimed]) -> HashMap<i64, Settlement> {
        let now = self.clock.now();
        let mut groups: BTreeMap<(WorkspaceId, String), Group<'_>> = BTreeMap::new();
        for c in claimed {
            let Some(scheduled) = &c.scheduled else {
                continue;
            };
            // An expired send ends as expired whatever its row says.
            if c.expires_at.is_some_and(|e| e <= now) {
                continue;
            }
            // Definitions that cannot be read make the send wait when it is attempted.
            let Ok(snapshot) = self.snapshot(&c.workspace).await else {
                continue;
            };
            let rechecks = snapshot
                .defs
                .as_ref()
                .and_then(|d| d.rule(&scheduled.rule))
                .is_some_and(|r| matches!(&r.cadence, Cadence::Anchored(a) if a.recheck));
            if rechecks {
                groups
                    .entry((c.workspace.clone(), scheduled.rule.clone()))
                    .or_insert_with(|| (snapshot.clone(), Vec::new()))
                    .1
                    .push(c);
            }
        }
        let mut verdicts = HashMap::new();
        for ((workspace, rule), (snapshot, sends)) in groups {
            let span = tracing::info_span!(
                "recheck",
                workspace = %workspace,
                rule = %rule,
                count = sends.len(),
                duration_ms = tracing::field::Empty,
            );
            let group = self.recheck_group(&workspace, &rule, &snapshot, &sends);
            let settled = crate::telemetry::timed(span, group).await;
            verdicts.extend(settled);
        }
        verdicts
    }

    /// Rechecks one rule's sends in one workspace: their keys in one control-plane read, their
    /// rows in one source read per cluster of instants.
    async fn recheck_group(
        &self,
        workspace: &WorkspaceId,
        rule: &str,
        snapshot: &Snapshot,
        sends: &[&Claimed],
    ) -> Vec<(i64, Settlement)> {
        let all_wait = |reason: String| -> Vec<(i64, Settlement)> {
            let at = later(self.clock.now(), RECHECK_RETRY);
            sends
                .iter()
                .map(|c| {
                    let reason = reason.clone();
                    (c.id, Settlement::Release { at, reason })
                })
                .collect()
        };
        let Some(dsn) = &self.recheck else {
            return all_wait(
                "waiting: this rule rechecks its row before sending, and this sender cannot reach sources".into(),
            );
        };
        let Some(defs) = snapshot.defs.as_ref() else {
            return Vec::new();
        };
        let Some(rule) = defs.rule(rule) else {
            return Vec::new();
        };
        let Cadence::Anchored(anchor) = &rule.cadence else {
            return Vec::new();
        };
        let Some(trigger) = defs.trigger(&rule.trigger) else {
            return Vec::new();
        };
        let Some(def) = defs.source(&trigger.source) else {
            return Vec::new();
        };
        let fires: Vec<i64> = sends
            .iter()
            .filter_map(|c| c.scheduled.as_ref().map(|s| s.fire_id))
            .collect();
        let keys = {
            let found = async {
                let mut tx = self.store.begin(workspace).await?;
                let keys = crate::ledger::keys_of(&mut tx, workspace, &fires)
                    .await
                    .map_err(|e| self.store.error(e));
                let _ = tx.rollback().await;
                keys
            };
            match found.await {
                Ok(keys) => keys,
                Err(e) => return all_wait(format!("the recheck could not read its fires: {e}")),
            }
        };
        let source = match self.source_for(workspace, def, dsn).await {
            Ok(s) => s,
            Err(e) => return all_wait(format!("the recheck could not reach its source: {e}")),
        };
        let query = match self.prepared(workspace, snapshot, &source, trigger).await {
            Ok(q) => q,
            Err(e) => return all_wait(format!("the recheck could not read its source: {e}")),
        };
        // A send whose fire is gone has nothing to compare against and goes, as it would have
        // without the recheck.
        let wanted: Vec<(i64, (String, jiff::Timestamp))> = sends
            .iter()
            .filter_map(|c| {
                let s = c.scheduled.as_ref()?;
                Some((c.id, (keys.get(&s.fire_id)?.clone(), s.anchor_at)))
            })
            .collect();
        let pairs: Vec<(String, jiff::Timestamp)> = wanted.iter().map(|(_, p)| p.clone()).collect();
        match crate::schedule::still_there(&source, &query, trigger, anchor, &pairs).await {
            Ok(found) => wanted
                .into_iter()
                .filter(|(_, pair)| !found.contains(pair))
                .map(|(id, _)| {
                    (id, Settlement::Unsent {
                        status: DeliveryStatus::Skipped,
                        reason: "nothing worth saying: rechecked just before sending, its row no longer matches or its anchor moved".into(),
                    })
                })
                .collect(),
            Err(e) => all_wait(format!("the recheck could not read its source: {e}")),
        }
    }

    /// The trigger's query prepared on `source` (the guard, then its columns checked), reused
    /// while the definitions snapshot it came from is.
    async fn prepared(
        &self,
        workspace: &WorkspaceId,
        snapshot: &Snapshot,
        source: &Source,
        trigger: &crate::definitions::Trigger,
    ) -> Result<Arc<CheckedQuery>, String> {
        let key = (workspace.clone(), trigger.name.clone());
        if let Some(p) = self.prepared.lock().await.get(&key)
            && p.snapshot_read_at == snapshot.read_at
        {
            return Ok(p.query.clone());
        }
        let defs = snapshot
            .defs
            .as_ref()
            .ok_or("no definitions are in force")?;
        let now = self.clock.now();
        let window = crate::sql_guard::Window {
            since: now,
            until: later(now, SignedDuration::from_micros(1)),
        };
        let query = Arc::new(
            source
                .prepare(defs, trigger, window)
                .await
                .map_err(|e| e.to_string())?,
        );
        self.prepared.lock().await.insert(
            key,
            Prepared {
                snapshot_read_at: snapshot.read_at,
                query: query.clone(),
            },
        );
        Ok(query)
    }

    async fn source_for(
        &self,
        workspace: &WorkspaceId,
        def: &crate::definitions::SourceDef,
        dsn: &crate::source::DsnResolver,
    ) -> Result<Source, String> {
        self.sources.get(workspace, def, dsn).await
    }
}
