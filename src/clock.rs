//! The one clock type. Production reads the system clock; tests and `--now` fix it.

use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};

/// Where "now" comes from. Cloning shares the same clock.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    fixed: Option<Arc<Mutex<Timestamp>>>,
}

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock { fixed: None }
    }

    /// A clock stopped at `at`, moved only by [`Clock::advance`] and [`Clock::set`].
    pub fn fixed(at: Timestamp) -> Clock {
        Clock {
            fixed: Some(Arc::new(Mutex::new(at))),
        }
    }

    /// A fixed clock at `at` if given, else the system clock (what `--now` means).
    pub fn from_option(at: Option<Timestamp>) -> Clock {
        at.map_or_else(Clock::system, Clock::fixed)
    }

    /// The current instant.
    pub fn now(&self) -> Timestamp {
        match &self.fixed {
            Some(t) => *t.lock().expect("clock lock"),
            None => Timestamp::now(),
        }
    }

    /// Moves a fixed clock forward; a system clock ignores it.
    pub fn advance(&self, by: SignedDuration) {
        if let Some(t) = &self.fixed {
            let mut t = t.lock().expect("clock lock");
            *t = t.checked_add(by).expect("clock in range");
        }
    }

    /// Waits until `at`. A fixed clock does not pass on its own (tests move it), so it returns
    /// at once: code that waits for a time never sleeps in a test.
    pub async fn sleep_until(&self, at: Timestamp) {
        if self.fixed.is_none()
            && let Ok(wait) = std::time::Duration::try_from(Timestamp::now().duration_until(at))
        {
            tokio::time::sleep(wait).await;
        }
    }

    /// Sets a fixed clock; a system clock ignores it.
    pub fn set(&self, at: Timestamp) {
        if let Some(t) = &self.fixed {
            *t.lock().expect("clock lock") = at;
        }
    }
}
