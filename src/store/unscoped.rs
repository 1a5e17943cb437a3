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
    /// Reads only, and without the bypass: the isolation check's probe that a transaction with
    /// no workspace sees no tenant row (`store::tenancy::check`).
    Probe,
    /// Finding the API token a request carries, by its hash, before its workspace is known, and
    /// marking it used (`token::resolve`).
    TokenLookup,
    /// Reads only: the list of workspaces (`store::workspace::list`, `rowfire workspaces list`).
    Workspaces,
    /// Reads only: when the next trigger or delivery falls due, across workspaces, the list
    /// of recent workers, and the queue's depth for `/metrics` (`poll::state::next_due`,
    /// `send::queue::next_due`, `poll::workers::recent`, `send::queue::depth`).
    Look,
}

impl Unscoped {
    /// Whether the transaction sets the row-level-security bypass (`app.bypass_rls`) on
    /// PostgreSQL: every reason that reads or writes tenant tables. The `worker` table has no
    /// workspace and no policy, so the worker registry runs without it, and the isolation probe
    /// must not have it.
    fn bypasses(self) -> bool {
        !matches!(self, Unscoped::Workers | Unscoped::Probe)
    }
}

impl Store {
    /// Begins a transaction with no workspace, for one of the [`Unscoped`] reasons. A look
    /// (reads only) takes no write lock on SQLite. On PostgreSQL the bypass is set
    /// transaction-locally (`set_config(…, true)`), so it ends with the transaction and is safe
    /// behind a pooler in transaction mode; the rows such a statement returns carry their
    /// workspace, and the work that follows re-enters that workspace through [`Store::begin`].
    pub(crate) async fn begin_unscoped(&self, why: Unscoped) -> Result<StoreTx, sqlx::Error> {
        tracing::trace!(?why, "unscoped control-plane transaction");
        // The delivery claim has one good plan: ordered index scans that stop at the batch. A
        // lane's size is not known to the planner (its column keeps no statistics), and with a
        // small guess it would collect the lane's rows through a bitmap and sort them all; both
        // are turned off for that transaction only.
        let settings = match why {
            Unscoped::DeliveryClaim => Some(
                "set_config('app.bypass_rls', 'on', true), set_config('enable_sort', 'off', true), set_config('enable_bitmapscan', 'off', true)",
            ),
            _ => why
                .bypasses()
                .then_some("set_config('app.bypass_rls', 'on', true)"),
        };
        self.begin_tx(
            matches!(why, Unscoped::Look | Unscoped::Workspaces),
            settings,
        )
        .await
    }
}
