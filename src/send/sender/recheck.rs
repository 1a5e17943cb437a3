//! The recheck of a time-anchored send: just before it goes, its row is read again by key and
//! anchor on the source (no control-plane transaction open). A row that no longer matches, or
//! whose anchor moved, ends the send as skipped: recorded like a send, never retried.

use jiff::SignedDuration;

use super::Sender;
use crate::cadence::Cadence;
use crate::definitions::Definitions;
use crate::outbox::DeliveryStatus;
use crate::send::queue::{Claimed, ScheduledSend, Settlement};
use crate::source::Source;
use crate::store::later;

/// How soon a send whose recheck could not run is tried again (its grace still bounds it).
const RECHECK_RETRY: SignedDuration = SignedDuration::from_secs(10);

impl Sender {
    /// `None`: send it. Otherwise how the send ends (skipped) or waits (the recheck failed).
    pub(super) async fn recheck(
        &self,
        claimed: &Claimed,
        scheduled: &ScheduledSend,
        defs: &Definitions,
    ) -> Option<Settlement> {
        let rule = defs.rule(&scheduled.rule)?;
        let Cadence::Anchored(anchor) = &rule.cadence else {
            return None;
        };
        if !anchor.recheck {
            return None;
        }
        let wait = |reason: String| Settlement::Release {
            at: later(self.clock.now(), RECHECK_RETRY),
            reason,
        };
        let Some(dsn) = &self.recheck else {
            return Some(wait(
                "waiting: this rule rechecks its row before sending, and this sender cannot reach sources".into(),
            ));
        };
        let trigger = defs.trigger(&rule.trigger)?;
        let def = defs.source(&trigger.source)?;
        let key = {
            let found = async {
                let mut tx = self.store.begin(&claimed.workspace).await?;
                let key = crate::ledger::key_of(&mut tx, &claimed.workspace, scheduled.fire_id)
                    .await
                    .map_err(|e| self.store.error(e));
                let _ = tx.rollback().await;
                key
            };
            match found.await {
                Ok(Some(key)) => key,
                Ok(None) => return None,
                Err(e) => return Some(wait(format!("the recheck could not read its fire: {e}"))),
            }
        };
        let source = match self.source_for(claimed, def, dsn).await {
            Ok(s) => s,
            Err(e) => return Some(wait(format!("the recheck could not reach its source: {e}"))),
        };
        match crate::schedule::still_there(&source, defs, trigger, anchor, &key, scheduled.anchor_at)
            .await
        {
            Ok(true) => None,
            Ok(false) => Some(Settlement::Unsent {
                status: DeliveryStatus::Skipped,
                reason: "nothing worth saying: rechecked just before sending, its row no longer matches or its anchor moved".into(),
            }),
            Err(e) => Some(wait(format!("the recheck could not read its source: {e}"))),
        }
    }

    async fn source_for(
        &self,
        claimed: &Claimed,
        def: &crate::definitions::SourceDef,
        dsn: &crate::source::DsnResolver,
    ) -> Result<Source, String> {
        let mut cache = self.sources.lock().await;
        let key = (claimed.workspace.clone(), def.name.clone());
        if let Some(s) = cache.get(&key) {
            return Ok(s.clone());
        }
        let url = dsn(def).ok_or_else(|| def.missing_dsn())?;
        let source = Source::connect(def, &url)
            .await
            .map_err(|e| e.to_string())?;
        cache.insert(key, source.clone());
        Ok(source)
    }
}
