//! The delivery lease's arithmetic, in one place for the sender (which releases a delivery whose
//! request would not finish inside what is left of its claim's lease) and the readiness checks
//! (which warn when an integration's requests can never fit in the worker's lease).

use jiff::SignedDuration;

use crate::definitions::catalog::Integration;

/// The longest a sender waits for its rate-limit slot; a later slot releases the delivery.
pub const PACING_HORIZON: SignedDuration = SignedDuration::from_secs(1);

/// The shortest delivery lease a worker accepts.
pub const MIN_LEASE: SignedDuration = SignedDuration::from_secs(5);

/// Time kept in hand between a request's timeout and its claim's lease.
const LEASE_MARGIN: SignedDuration = SignedDuration::from_secs(2);

/// How long one request to `integration` may take: its timeout.
pub fn timeout(integration: &Integration) -> SignedDuration {
    SignedDuration::from_millis(integration.timeout_ms.max(1) as i64)
}

/// How much of a lease one request to `integration` needs: the pacing wait (if it has a rate
/// limit), its timeout and the margin.
pub fn needed(integration: &Integration) -> SignedDuration {
    let pacing = if integration.rate_limit.is_some() {
        PACING_HORIZON
    } else {
        SignedDuration::ZERO
    };
    pacing + timeout(integration) + LEASE_MARGIN
}

/// Whether requests to `integration` fit in a claim's `lease` (with the pacing wait and margin);
/// a delivery whose request would not is released rather than sent.
pub fn fits_in_lease(integration: &Integration, lease: SignedDuration) -> bool {
    needed(integration) <= lease
}
