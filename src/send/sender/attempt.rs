//! One attempt at one claimed delivery: expiry, the definitions and credentials in force, the
//! lease fit, the request, the shared pace, the HTTP call and its verdict. The caller settles
//! what it returns.

use std::collections::BTreeMap;

use jiff::SignedDuration;

use super::Sender;
use crate::integrations;
use crate::outbox::DeliveryStatus;
use crate::send::lease::{self, PACING_HORIZON};
use crate::send::outcome::{AttemptResult, Verdict, judge};
use crate::send::queue::{Attempt, Claimed, Settlement};
use crate::send::request::{outbound, redact_result, secret_strings};
use crate::store::later;

impl Sender {
    /// `recheck`: how the batch's recheck ended this send, if it did (it was rechecked before
    /// the batch went, with every other scheduled send of its rule).
    pub(super) async fn attempt(
        &self,
        claimed: &Claimed,
        recheck: Option<Settlement>,
    ) -> (Settlement, Option<Attempt>) {
        let now = self.clock.now();
        let wait = |reason: String| Settlement::Release {
            at: later(now, SignedDuration::from_mins(1)),
            reason,
        };
        if let Some(expires) = claimed.expires_at
            && expires <= now
        {
            let late = expires.duration_since(claimed.due_at);
            let reason = format!(
                "expired: not sent within {late:#} of being due (the rule's expire_after, or a reminder's grace); a late send would be wrong"
            );
            return (
                Settlement::Unsent {
                    status: DeliveryStatus::Expired,
                    reason,
                },
                None,
            );
        }
        let snapshot = match Box::pin(self.snapshot(&claimed.workspace)).await {
            Ok(s) => s,
            Err(e) => return (wait(format!("definitions could not be read: {e}")), None),
        };
        let Some((integration, action)) = snapshot.defs.as_ref().and_then(|d| {
            let i = d.integration(&claimed.integration)?;
            Some((&i.spec, i.spec.actions.get(claimed.action_name())?))
        }) else {
            let reason = format!(
                "{} is no longer defined; push definitions that define it, then `rowfire deliveries retry {}`",
                claimed.action, claimed.id
            );
            return (
                Settlement::Unsent {
                    status: DeliveryStatus::Failed,
                    reason,
                },
                None,
            );
        };
        if let Some(settlement) = recheck {
            return (settlement, None);
        }
        // The Demo inbox is in-process: nothing leaves the machine, and the settle records it.
        if integration.base_url == crate::outbox::INBOX_URL {
            return (Settlement::Sent, None);
        }
        // An integration that answered 429 or 410 to this sender since this delivery was
        // claimed: it waits, as a claim made after the answer would have left it.
        if let Some((until, status)) = self.held(claimed, now) {
            let reason = format!(
                "paused: {} answered {status} to another delivery; waits until {until}",
                claimed.integration
            );
            return (Settlement::Release { at: until, reason }, None);
        }
        let empty = BTreeMap::new();
        let credentials = match snapshot.credentials.get(&claimed.integration) {
            None => &empty,
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                tracing::error!(integration = %claimed.integration, error = %e, "credentials cannot be opened; deliveries wait");
                return (wait(format!("credentials cannot be opened: {e}")), None);
            }
        };
        if let Some(missing) = integration
            .credentials()
            .into_iter()
            .find(|c| !credentials.contains_key(*c))
        {
            let reason = format!(
                "integration {} has no credential {missing}; set it with `rowfire integrations set-credential {} {missing}`",
                claimed.integration, claimed.integration
            );
            return (wait(reason), None);
        }
        // A request must finish inside the claim's lease, or another worker could take the
        // delivery over and send it while this one still is.
        // (Checked before a rate-limit slot is booked; the pacing wait is at most PACING_HORIZON.)
        let timeout = lease::timeout(integration);
        if later(self.clock.now(), lease::needed(integration)) > claimed.lease_expires_at {
            let reason = format!(
                "waiting: {}'s timeout ({}) does not fit in what is left of the delivery lease; if this persists, raise the worker's --delivery-lease",
                claimed.integration, timeout
            );
            tracing::warn!(delivery = claimed.id, "{reason}");
            let at = later(self.clock.now(), SignedDuration::from_secs(5));
            return (Settlement::Release { at, reason }, None);
        }
        // Built before a rate-limit slot is booked, so a request that cannot be built never
        // uses one up.
        let key = claimed.id.to_string();
        let request = match outbound(claimed, &key, integration, action, credentials, now) {
            Ok(r) => r,
            Err(reason) => {
                return (
                    Settlement::Unsent {
                        status: DeliveryStatus::Failed,
                        reason,
                    },
                    None,
                );
            }
        };
        if let Some(rate) = integration.rate_limit.filter(|r| *r > 0.0) {
            let interval = SignedDuration::from_secs_f64(1.0 / rate);
            let reserved = Box::pin(integrations::reserve(
                &self.store,
                &claimed.workspace,
                &claimed.integration,
                interval,
                now,
                PACING_HORIZON,
            ))
            .await;
            match reserved {
                Err(e) => return (wait(format!("the rate limit could not be read: {e}")), None),
                Ok(integrations::Slot::Full(at)) => {
                    let reason = format!(
                        "paced: {} allows {rate} requests a second",
                        claimed.integration
                    );
                    return (Settlement::Release { at, reason }, None);
                }
                Ok(integrations::Slot::Granted(slot)) => {
                    Box::pin(self.clock.sleep_until(slot)).await
                }
            }
        }
        let started_at = self.clock.now();
        let (result, latency) = self.client.send(&request).await;
        let ended = self.clock.now();
        // A destination that echoes the request must not put a credential into the record, its
        // reason or any output: redact the whole answer before anything reads it.
        let result = match snapshot.secrets.get(&claimed.integration) {
            Some(secrets) => redact_result(result, secrets),
            None => redact_result(
                result,
                &crate::send::redact::Secrets::new(secret_strings(integration, credentials)),
            ),
        };
        let verdict = judge(
            &result,
            claimed.attempts.max(1) as u32,
            ended,
            action.ok_field,
            fastrand::f64(),
        );
        let attempt = crate::send::outcome::record(&result, &verdict, started_at, latency);
        let outcome = match verdict {
            Verdict::Sent => Settlement::Sent,
            Verdict::Retry { at, reason } => {
                let pause_until = later(
                    ended,
                    crate::send::outcome::integration_pause(&result, ended),
                );
                if matches!(result, AttemptResult::Response { status: 429, .. }) {
                    self.hold(claimed, pause_until, 429);
                    if let Err(e) = Box::pin(integrations::pause(
                        &self.store,
                        &claimed.workspace,
                        &claimed.integration,
                        pause_until,
                    ))
                    .await
                    {
                        tracing::warn!(error = %e, "could not slow the integration after a 429");
                    }
                }
                Settlement::Retry { at, reason }
            }
            Verdict::Failed { reason } => Settlement::Terminal {
                status: DeliveryStatus::Failed,
                reason,
            },
            Verdict::Dead { reason } => Settlement::Terminal {
                status: DeliveryStatus::Dead,
                reason,
            },
            Verdict::DisableIntegration { reason } => {
                self.hold(claimed, later(ended, SignedDuration::from_mins(1)), 410);
                if let Err(e) = Box::pin(integrations::disable(
                    &self.store,
                    &claimed.workspace,
                    &claimed.integration,
                    &reason,
                    ended,
                ))
                .await
                {
                    tracing::error!(error = %e, "could not disable the integration after a 410");
                }
                // Disabled, it is not claimed until enabled; if disabling failed, it waits a
                // minute rather than meeting the 410 again at once.
                Settlement::Retry {
                    at: later(ended, SignedDuration::from_mins(1)),
                    reason: format!(
                        "waiting: {reason}; `rowfire integrations enable {}` sends it",
                        claimed.integration
                    ),
                }
            }
        };
        (outcome, Some(attempt))
    }

    /// Until when `claimed` waits, and the status that holds it back: when its integration
    /// answered 429 or 410 to this sender after `claimed` was claimed, and the hold lasts
    /// beyond `now`.
    fn held(&self, claimed: &Claimed, now: jiff::Timestamp) -> Option<(jiff::Timestamp, u16)> {
        let claimed_at = claimed
            .lease_expires_at
            .checked_sub(self.config.lease)
            .ok()?;
        let held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.get(&(claimed.workspace.clone(), claimed.integration.clone()))
            .filter(|h| h.at >= claimed_at && h.until > now)
            .map(|h| (h.until, h.status))
    }

    /// Holds back, in this sender, the deliveries of `claimed`'s integration claimed before now
    /// until `until`, for `status`; holds that have ended are dropped.
    fn hold(&self, claimed: &Claimed, until: jiff::Timestamp, status: u16) {
        let at = self.clock.now();
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        held.retain(|_, h| h.until > at);
        let key = (claimed.workspace.clone(), claimed.integration.clone());
        let hold = held.entry(key).or_insert(super::Hold { at, until, status });
        *hold = super::Hold {
            at,
            until: hold.until.max(until),
            status: if until >= hold.until {
                status
            } else {
                hold.status
            },
        };
    }
}
