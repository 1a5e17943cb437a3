//! The one clock type. Production reads the system clock; tests and `--now` fix it.
//!
//! A clock may carry an offset to the control plane's clock (see
//! [`crate::store::Store::sync_clock`]): on a PostgreSQL control plane shared by many hosts, every
//! worker then stamps and compares leases on the database's time, so a host whose own clock runs
//! ahead does not take over live leases. The offset is added to whatever the clock reads, fixed
//! or not; it is zero until a sync measures it.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// Where "now" comes from. Cloning shares the same clock (and its offset).
#[derive(Debug, Clone, Default)]
pub struct Clock {
    fixed: Option<Arc<Mutex<Timestamp>>>,
    offset: Arc<Mutex<SignedDuration>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock {
            fixed: None,
            offset: Arc::default(),
        }
    }

    /// A clock stopped at `at`, moved only by [`Clock::advance`] and [`Clock::set`].
    pub fn fixed(at: Timestamp) -> Clock {
        Clock {
            fixed: Some(Arc::new(Mutex::new(at))),
            offset: Arc::default(),
        }
    }

    /// A fixed clock at `at` if given, else the system clock (what `--now` means).
    pub fn from_option(at: Option<Timestamp>) -> Clock {
        at.map_or_else(Clock::system, Clock::fixed)
    }

    /// The current instant: this host's (or the fixed) time plus the offset to the control
    /// plane's clock.
    pub fn now(&self) -> Timestamp {
        let local = self.local_now();
        local.checked_add(self.offset()).unwrap_or(local)
    }

    /// The current instant by this host's clock (or the fixed time), without the offset.
    pub fn local_now(&self) -> Timestamp {
        match &self.fixed {
            Some(t) => *t.lock().unwrap_or_else(|e| e.into_inner()),
            #[expect(
                clippy::disallowed_methods,
                reason = "the clock module is the one place that reads the host's time"
            )]
            None => Timestamp::now(),
        }
    }

    /// What [`Clock::now`] adds to [`Clock::local_now`]: the control plane's clock minus this
    /// one's, as last measured (zero until then).
    pub fn offset(&self) -> SignedDuration {
        *self.offset.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets the offset to the control plane's clock (every clone sees it).
    pub fn set_offset(&self, offset: SignedDuration) {
        *self.offset.lock().unwrap_or_else(|e| e.into_inner()) = offset;
    }

    /// Moves a fixed clock forward; a system clock ignores it.
    pub fn advance(&self, by: SignedDuration) {
        if let Some(t) = &self.fixed {
            let mut t = t.lock().unwrap_or_else(|e| e.into_inner());
            *t = t.checked_add(by).expect("clock in range");
        }
    }

    /// Waits until `at` (on this clock, offset included). A fixed clock does not pass on its own
    /// (tests move it), so it returns at once: code that waits for a time never sleeps in a test.
    pub async fn sleep_until(&self, at: Timestamp) {
        if self.fixed.is_none()
            && let Ok(wait) = std::time::Duration::try_from(self.now().duration_until(at))
        {
            tokio::time::sleep(wait).await;
        }
    }

    /// Sets a fixed clock's local time (the offset still applies); a system clock ignores it.
    pub fn set(&self, at: Timestamp) {
        if let Some(t) = &self.fixed {
            *t.lock().unwrap_or_else(|e| e.into_inner()) = at;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_added_to_a_fixed_clock_and_shared_by_clones() {
        let at: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let clock = Clock::fixed(at);
        let clone = clock.clone();
        clock.set_offset(SignedDuration::from_secs(-60));
        assert_eq!(clone.now(), at - SignedDuration::from_secs(60));
        assert_eq!(clone.local_now(), at);
        clone.advance(SignedDuration::from_secs(90));
        assert_eq!(clock.now(), at + SignedDuration::from_secs(30));
    }
}
