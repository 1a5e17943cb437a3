//! The only place a control-plane transaction opens without a workspace. Every other unit of work
//! begins in [`Store::begin`], scoped to its workspace. The few statements here must find work
//! before they can know whose it is, or belong to no workspace; each names its reason, so a
//! search for `Unscoped::` finds every one, and row-level security has one place to grant its
//! bypass.

use super::{Store, StoreTx};

/// Why a transaction runs without a workspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unscoped {
    /// Migrations and the schema check: the schema belongs to no workspace.
    Migrate,
    /// Leasing the most overdue trigger, across workspaces (`poll::state::lease`).
    TriggerLease,
    /// A stopping worker giving back every trigger lease it holds (`poll::state::release_all`).
    ReleaseLeases,
    /// Claiming due deliveries across workspaces, and showing that claim's plan
    /// (`send::queue::claim_due`, `send::queue::explain_claim`).
    DeliveryClaim,
    /// The `worker` table: workers belong to no workspace (`poll::workers`).
    Workers,
    /// Reads only: when the next trigger or delivery falls due, across workspaces, and the list
    /// of recent workers (`poll::state::next_due`, `send::queue::next_due`,
    /// `poll::workers::recent`).
    Look,
}

impl Store {
    /// Begins a transaction with no workspace, for one of the [`Unscoped`] reasons. A look
    /// (reads only) takes no write lock on SQLite.
    pub(crate) async fn begin_unscoped(&self, why: Unscoped) -> Result<StoreTx, sqlx::Error> {
        tracing::trace!(?why, "unscoped control-plane transaction");
        self.begin_tx(why == Unscoped::Look).await
    }
}
