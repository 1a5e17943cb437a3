//! What a sender's pass did: counts by outcome, and the line `worker --once` prints.

/// What one pass of a sender did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SendReport {
    /// Deliveries claimed.
    pub claimed: u64,
    /// Delivered.
    pub sent: u64,
    /// Due again later (a retryable failure, a pace or a missing credential).
    pub waiting: u64,
    /// Failed, dead or expired.
    pub finished_unsent: u64,
    /// Settles that found the lease taken over.
    pub stale: u64,
}

impl SendReport {
    /// Adds another pass's counts to these.
    pub(crate) fn add(&mut self, other: SendReport) {
        self.claimed += other.claimed;
        self.sent += other.sent;
        self.waiting += other.waiting;
        self.finished_unsent += other.finished_unsent;
        self.stale += other.stale;
    }
}

impl std::fmt::Display for SendReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "deliveries: claimed={} sent={} waiting={} unsent={} stale={}",
            self.claimed, self.sent, self.waiting, self.finished_unsent, self.stale
        )
    }
}
