//! A delivery's state, as stored in `delivery.status`.

use crate::store::stored_enum;

stored_enum! {
    /// Where a delivery stands. Every delivery ends in exactly one terminal state (all but
    /// `pending`), each with a reason a person can read.
    pub enum DeliveryStatus as "delivery status" {
        /// Waiting in the queue for a sender (or for its due time).
        Pending = "pending",
        /// Delivered.
        Sent = "sent",
        /// Not sent, on purpose (nothing to send).
        Skipped = "skipped",
        /// Recorded, not sent: shadow mode or a frequency cap.
        Suppressed = "suppressed",
        /// Failed for good: a template, a request or an answer that retrying cannot fix.
        Failed = "failed",
        /// Retried until the schedule ran out.
        Dead = "dead",
        /// Not sent before the rule's `expire_after`.
        Expired = "expired",
        /// Withdrawn before it was sent.
        Cancelled = "cancelled",
    }
}

impl DeliveryStatus {
    /// Whether the delivery is finished (every state but pending).
    pub fn is_terminal(self) -> bool {
        self != DeliveryStatus::Pending
    }

    /// Whether `rowfire deliveries retry` may queue it again.
    pub fn is_retryable(self) -> bool {
        matches!(self, DeliveryStatus::Failed | DeliveryStatus::Dead)
    }
}
