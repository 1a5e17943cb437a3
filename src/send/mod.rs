//! Sending: the machinery that takes pending deliveries out of the outbox and delivers them to
//! outside systems. `queue` claims batches under a lease and a fencing token and settles by (id,
//! token); `lease` holds the lease arithmetic shared with `readiness`; `request` builds the
//! outgoing request (the only place credentials are applied) and redacts them from answers
//! (`redact`); `webhook` signs; `client` is the one outbound HTTP client, resolving through
//! `egress`; `outcome` judges an attempt; `sender` is the claim–send–settle loop.

pub mod client;
pub mod egress;
pub mod lease;
pub mod outcome;
pub mod queue;
pub mod readiness;
pub mod redact;
pub mod report;
pub mod request;
pub mod sender;
pub mod webhook;
