//! Workers on a shared PostgreSQL control plane agree on time by reading the database's clock:
//! a worker's [`Clock`] carries the offset from its own time to the database's, so leases are
//! stamped and compared on one clock whatever each host's clock says. An embedded SQLite control
//! plane has one host, whose clock is the control plane's: the offset stays zero.

use jiff::{SignedDuration, Timestamp};

use super::{Pool, Store, StoreError};
use crate::clock::Clock;

impl Store {
    /// Measures the control plane's clock against `clock` and sets the clock's offset so that
    /// `clock.now()` reads the control plane's time (within half a round trip). On SQLite the
    /// offset is set to zero. Returns the offset. Call it when a worker starts, and again now and
    /// then: host clocks drift.
    ///
    /// A fixed clock is measured like any other: the test that fixes it then reads the database's
    /// time through it, so tests that assert fixed instants do not sync.
    pub async fn sync_clock(&self, clock: &Clock) -> Result<SignedDuration, StoreError> {
        let offset = match &self.pool {
            Pool::Sqlite(_) => SignedDuration::ZERO,
            Pool::Postgres(pool) => {
                let before = clock.local_now();
                let db: jiff_sqlx::Timestamp = sqlx::query_scalar("SELECT clock_timestamp()")
                    .fetch_one(pool)
                    .await
                    .map_err(|e| self.error(e))?;
                let after = clock.local_now();
                let local = midpoint(before, after);
                local.duration_until(db.to_jiff())
            }
        };
        clock.set_offset(offset);
        Ok(offset)
    }
}

/// The instant halfway between `a` and `b` (`a` when `b` is earlier: clocks can step back).
fn midpoint(a: Timestamp, b: Timestamp) -> Timestamp {
    let half = a.duration_until(b).max(SignedDuration::ZERO) / 2;
    a.checked_add(half).unwrap_or(a)
}
