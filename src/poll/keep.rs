//! Keeping a trigger lease while a poll works: the heartbeat that renews it during slow source
//! reads, the stop signal a poll checks after each page, and how long an idle poller rests
//! before it looks for due triggers (or lapsed leases) again.

use jiff::SignedDuration;

use super::{Lease, Poller, renew, state};

/// Why a poll ended before its window was done.
pub(super) enum Halt {
    /// It failed, with this message.
    Failed(String),
    /// Its lease is no longer its own.
    LeaseLost,
    /// The worker is stopping.
    Stopping,
}

impl From<String> for Halt {
    fn from(message: String) -> Halt {
        Halt::Failed(message)
    }
}

/// The stop signal a poll checks after each page, if it has one.
pub(super) type Stop<'a> = Option<&'a tokio::sync::watch::Receiver<bool>>;

/// True once the worker has been told to stop.
pub(super) fn stopping(stop: Stop<'_>) -> bool {
    stop.is_some_and(|s| *s.borrow())
}

impl Poller {
    /// How long an idle poller rests before looking for due triggers again: a second, or a
    /// quarter lease when that is shorter, so a lapsed lease is taken over promptly.
    pub(super) fn rest(&self) -> std::time::Duration {
        let quarter = self.lease_for / 4;
        std::time::Duration::try_from(quarter.min(SignedDuration::from_secs(1)))
            .unwrap_or(std::time::Duration::from_secs(1))
    }

    /// How long to rest when nothing is due: until the next trigger falls due or the next lease
    /// lapses (so a dead worker's trigger is taken over the moment its lease ends), at least
    /// 10 ms and at most [`Poller::rest`].
    pub(super) async fn rest_until_due(&self) -> std::time::Duration {
        let most = self.rest();
        let next = match state::next_due(&self.store).await {
            Ok(Some(at)) => at,
            _ => return most,
        };
        let wait = self.clock.now().duration_until(next);
        std::time::Duration::try_from(wait)
            .unwrap_or_default()
            .clamp(std::time::Duration::from_millis(10), most)
    }

    /// Renews `lease` every third of a lease until it is lost, then returns. A renewal that fails
    /// (the control plane is down) is retried; once a whole lease has passed without one, the
    /// lease is treated as lost, so a poll never holds a lease it is not renewing.
    pub(super) async fn heartbeat(&self, lease: &Lease) -> Halt {
        let every = std::time::Duration::try_from(self.lease_for / 3)
            .unwrap_or(std::time::Duration::from_secs(1));
        let mut renewed_at = std::time::Instant::now();
        let lease_for = std::time::Duration::try_from(self.lease_for).unwrap_or(every * 3);
        loop {
            tokio::time::sleep(every).await;
            match renew(&self.store, lease, self.clock.now(), self.lease_for).await {
                Ok(true) => renewed_at = std::time::Instant::now(),
                Ok(false) => {
                    tracing::warn!(trigger = %lease.trigger, token = lease.token, "the lease was taken over; stopping this poll");
                    return Halt::LeaseLost;
                }
                Err(e) if renewed_at.elapsed() >= lease_for => {
                    tracing::warn!(trigger = %lease.trigger, error = %e, "the lease could not be renewed for a whole lease; stopping this poll");
                    return Halt::LeaseLost;
                }
                Err(e) => {
                    tracing::warn!(trigger = %lease.trigger, error = %e, "the lease could not be renewed; trying again");
                }
            }
        }
    }
}
