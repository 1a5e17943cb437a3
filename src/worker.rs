//! The worker: pollers and a sender assembled from a [`WorkerConfig`] and run together until a
//! shutdown future resolves, with LISTEN for work announced by other processes and the clock
//! kept in step with the control plane's. The command line (`rowfire worker`) and, later, a
//! server and the tests use this one type.

use std::future::Future;
use std::sync::Arc;

use jiff::SignedDuration;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::config::Config;
use crate::definitions::versions::{self, InForceError};
use crate::metrics::Metrics;
use crate::poll::workers::{self, WorkerId};
use crate::poll::{self, DsnResolver, PollError, PollReport, Poller};
use crate::secret::{self, MasterKey, SecretError, StoredSecretError};
use crate::send::client::Client;
use crate::send::egress::Policy;
use crate::send::lease::MIN_LEASE;
use crate::send::sender::{self, SendReport, Sender};
use crate::store::WorkspaceId;
use crate::store::{DEFAULT_WORKSPACE, Store, StoreError};

/// How a worker is assembled.
pub struct WorkerConfig {
    /// The workspace whose definitions are checked at start and made due by `poll_once`.
    pub workspace: WorkspaceId,
    /// The workspaces the operator runs (this one, and those `ROWFIRE_OPERATOR_WORKSPACES`
    /// lists): only their sources read this process's environment variables.
    pub operators: Vec<WorkspaceId>,
    /// The host part of this process's worker id (`host:pid@start`), written into its leases.
    pub name: String,
    /// Pollers, and the sender's requests in flight in units of 64 (at least one).
    pub concurrency: usize,
    /// LISTEN for work announced by other processes (off behind connection poolers: idle
    /// the sender then looks every second).
    pub listen: bool,
    /// How long a claimed delivery is held before another worker may take it over.
    pub delivery_lease: SignedDuration,
    /// How long a trigger lease lasts; polls renew it as they work, and a worker that dies is
    /// taken over within it.
    pub trigger_lease: SignedDuration,
    /// How often a poll counts a trigger's NULL and unreadable clocks over its whole query
    /// (at most once per this interval per trigger; see [`poll::DEFAULT_CLOCK_COUNT_EVERY`]).
    pub count_clocks_every: SignedDuration,
    /// Which addresses outbound requests may reach.
    pub egress: Policy,
    /// Opens credentials and stored source DSNs, or why it cannot.
    pub master_key: Result<MasterKey, SecretError>,
    /// Where source DSNs come from; `None`: stored DSNs first, then the environment variables
    /// the definitions name.
    pub dsn: Option<DsnResolver>,
    /// Measure the control plane's clock at start and every minute (leases are stamped on it).
    /// Off for a fixed clock.
    pub sync_clock: bool,
    /// Where the pollers and the sender count what they do (`/metrics`); `None`: nowhere.
    pub metrics: Option<Arc<Metrics>>,
}

impl WorkerConfig {
    /// The settings `rowfire worker` starts from: the environment's egress policy and master
    /// key, one poller and sender, a 60 s delivery lease, LISTEN on, the clock synced.
    pub fn from_config(config: &Config) -> Result<WorkerConfig, WorkerError> {
        Ok(WorkerConfig {
            workspace: DEFAULT_WORKSPACE.clone(),
            operators: config
                .operator_workspaces(DEFAULT_WORKSPACE)
                .map_err(WorkerError::OperatorWorkspaces)?,
            name: config.host.clone(),
            concurrency: 1,
            listen: true,
            delivery_lease: sender::Config::default().lease,
            trigger_lease: poll::DEFAULT_LEASE,
            count_clocks_every: poll::DEFAULT_CLOCK_COUNT_EVERY,
            egress: config.egress.clone().map_err(WorkerError::Egress)?,
            master_key: config.master_key.clone(),
            dsn: None,
            sync_clock: true,
            metrics: None,
        })
    }
}

/// Why a worker could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// `ROWFIRE_OPERATOR_WORKSPACES` lists something that is not a workspace id.
    #[error("ROWFIRE_OPERATOR_WORKSPACES: {0}")]
    OperatorWorkspaces(crate::store::BadWorkspaceId),
    /// The delivery lease is shorter than the shortest a worker accepts.
    #[error(
        "--delivery-lease {lease:#} is too short; give at least {min:#} (and more than your integrations' timeouts)"
    )]
    LeaseTooShort {
        /// The lease asked for.
        lease: SignedDuration,
        /// The shortest accepted.
        min: SignedDuration,
    },
    /// The egress policy could not be read.
    #[error("{0}")]
    Egress(String),
    /// The database does not keep workspaces apart for this worker's role, or the bypass its
    /// claims need shows nothing: it would run unisolated, or as an empty queue.
    #[error("refusing to start: {0}")]
    NotIsolated(String),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The definitions in force could not be read.
    #[error(transparent)]
    InForce(#[from] InForceError),
    /// A stored source DSN could not be read or opened.
    #[error(transparent)]
    Secret(#[from] StoredSecretError),
    /// Polling failed outside a poll (the control plane).
    #[error(transparent)]
    Poll(#[from] PollError),
}

/// A worker: its pollers and its sender, on one clock.
pub struct Worker {
    store: Store,
    clock: Clock,
    config: WorkerConfig,
    dsn: DsnResolver,
    /// The stored DSNs behind `dsn`, read again every minute while the worker runs (`None`
    /// when the caller gave its own resolver).
    stored: Option<Arc<std::sync::RwLock<poll::StoredDsns>>>,
    /// This process's id (host, pid, start time), written into every lease it takes.
    me: WorkerId,
    pollers: Vec<Poller>,
    sender: Sender,
}

impl Worker {
    /// Assembles a worker on `store`: checks the lease, reads the source DSNs, measures the
    /// control plane's clock (when `sync_clock`) and builds the pollers and the sender.
    pub async fn new(
        store: Store,
        clock: Clock,
        config: WorkerConfig,
    ) -> Result<Worker, WorkerError> {
        if config.delivery_lease < MIN_LEASE {
            return Err(WorkerError::LeaseTooShort {
                lease: config.delivery_lease,
                min: MIN_LEASE,
            });
        }
        // A worker polls every workspace's triggers: each reads its own stored DSNs, read again
        // every minute while the worker runs.
        let (dsn, stored) = match &config.dsn {
            Some(dsn) => (dsn.clone(), None),
            None => {
                let key = config.master_key.as_ref();
                let shared = Arc::new(std::sync::RwLock::new(all_stored_dsns(&store, key).await?));
                let tenants = crate::operator::sources::tenant_check(&Ok(config.egress.clone()));
                let dsn = poll::shared_or_env_dsn(shared.clone(), &config.operators, tenants);
                (dsn, Some(shared))
            }
        };
        // Leases are stamped on the control plane's clock, not this host's: one clock for the
        // whole process, measured against the control plane now and every minute while it runs.
        if config.sync_clock {
            store.sync_clock(&clock).await?;
        }
        // A silent zero is an error: a role row-level security does not bind, a table it does
        // not force, or a bypass that shows nothing would all look like a quiet queue.
        if let Some(problem) = crate::store::tenancy::check(&store).await?.problem() {
            return Err(WorkerError::NotIsolated(problem));
        }
        let concurrency = config.concurrency.max(1);
        let me = WorkerId::new(&config.name, std::process::id(), clock.now());
        let pollers = (0..concurrency)
            .map(|_| {
                let poller = Poller::new(store.clone(), me.id.clone(), clock.clone(), dsn.clone())
                    .with_lease(config.trigger_lease)
                    .with_clock_count_every(config.count_clocks_every);
                match &config.metrics {
                    Some(m) => poller.with_metrics(m.clone()),
                    None => poller,
                }
            })
            .collect();
        // One sender for the process, with `concurrency` times the requests in flight: it sends
        // what that many senders would, with one claim and one settle running at a time, so a
        // higher concurrency never costs more per delivery (BENCHMARKS.md, deliver_queue).
        let sender_config = sender::Config {
            lease: config.delivery_lease,
            ..sender::Config::with_concurrency(concurrency)
        };
        let key = config.master_key.clone().map_err(|e| e.to_string());
        let sender = Sender::new(
            store.clone(),
            Client::new(config.egress.clone()),
            clock.clone(),
            key,
            sender_config,
        )
        .with_recheck(dsn.clone());
        let sender = match &config.metrics {
            Some(m) => sender.with_metrics(m.clone()),
            None => sender,
        };
        Ok(Worker {
            store,
            clock,
            config,
            dsn,
            stored,
            me,
            pollers,
            sender,
        })
    }

    /// What would hold work back, as sentences for an operator: integrations whose deliveries
    /// will wait (requests that do not fit in the lease, credentials missing or sealed), and
    /// triggers whose source resolves nowhere.
    pub async fn warnings(&self) -> Result<Vec<String>, WorkerError> {
        let ws = &self.config.workspace;
        let Some((_, defs)) = versions::in_force(&self.store, ws).await? else {
            return Ok(Vec::new());
        };
        let key = self.config.master_key.as_ref();
        let lease = self.config.delivery_lease;
        let mut warnings =
            crate::send::readiness::check(&self.store, ws, &defs, key, lease).await?;
        let resolves = |name: &str| {
            defs.source(name)
                .is_some_and(|d| (self.dsn)(ws, d).is_some())
        };
        for p in defs.held_back(resolves) {
            warnings.push(format!("{}: {}", p.path, p.message));
        }
        Ok(warnings)
    }

    /// Polls every due trigger once (with `due_now`, every trigger of the workspace), with all
    /// pollers at once; the reports by trigger, and the control plane's error if one stopped a
    /// poller (the other pollers' reports are kept).
    pub async fn poll_once(
        &self,
        due_now: bool,
    ) -> Result<(Vec<PollReport>, Option<PollError>), WorkerError> {
        if due_now {
            poll::due_now(&self.store, &self.config.workspace, self.clock.now()).await?;
        }
        let mut all = Vec::new();
        let mut control_plane = None;
        let batches = self.pollers.iter().map(|p| p.poll_due());
        for batch in futures_util::future::join_all(batches).await {
            match batch {
                Ok(reports) => all.extend(reports),
                Err(e) => control_plane = Some(e),
            }
        }
        all.sort_by(|a, b| a.trigger.cmp(&b.trigger));
        Ok((all, control_plane))
    }

    /// Sends until nothing is due now.
    pub async fn send_once(&self) -> Result<SendReport, WorkerError> {
        Ok(self.sender.drain().await?)
    }

    /// How many passes the sender has finished (see [`Sender::passes`]): a way to wait for a
    /// running worker to have looked at its queue, without sleeping.
    pub fn passes(&self) -> watch::Receiver<u64> {
        self.sender.passes()
    }

    /// The worker's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Runs every poller and sender until `shutdown` resolves, then lets the polls and sends in
    /// progress finish and settle, and gives back every trigger lease this worker still holds
    /// (another worker polls those triggers at once). `on_report` hears every poll's report.
    /// Returns how many leases were given back.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()>,
        on_report: impl Fn(&PollReport) + Clone,
    ) -> Result<u64, WorkerError> {
        workers::register(&self.store, &self.me, self.clock.now()).await?;
        let alive = tokio::spawn(workers::keep_alive(
            self.store.clone(),
            self.me.clone(),
            self.clock.clone(),
        ));
        if self.config.listen {
            self.store.listen_for_work().await;
        }
        let (stop_tx, stop_rx) = watch::channel(false);
        let resync = self
            .config
            .sync_clock
            .then(|| tokio::spawn(keep_clock_synced(self.store.clone(), self.clock.clone())));
        let reread = self.stored.clone().map(|shared| {
            let key = self.config.master_key.clone();
            tokio::spawn(keep_dsns_read(self.store.clone(), key, shared))
        });
        let polls = self
            .pollers
            .iter()
            .map(|p| p.run_until(stop_rx.clone(), on_report.clone()));
        let work = futures_util::future::join(
            futures_util::future::join_all(polls),
            self.sender.run_until(stop_rx.clone()),
        );
        let stop = async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        };
        futures_util::future::join(stop, work).await;
        if let Some(resync) = resync {
            resync.abort();
        }
        if let Some(reread) = reread {
            reread.abort();
        }
        alive.abort();
        Ok(workers::stopped(&self.store, &self.me, self.clock.now()).await?)
    }
}

/// The DSN resolver for the sources of `workspaces`: each workspace's stored DSNs first, then,
/// for `operators` (the workspaces the operator runs) only, environment variables. Without a
/// master key, sealed DSNs are skipped (SQLite file URLs and environment variables still work).
/// A tenant's DSN connects only where the egress policy admits it (`source::pin`).
pub async fn source_dsns(
    store: &Store,
    workspaces: &[WorkspaceId],
    operators: &[WorkspaceId],
    key: Result<&MasterKey, &SecretError>,
    egress: Result<&Policy, &String>,
) -> Result<DsnResolver, StoredSecretError> {
    let stored = stored_dsns(store, workspaces, key).await?;
    let tenants = crate::operator::sources::tenant_check(&egress.cloned().map_err(String::clone));
    Ok(poll::stored_or_env_dsn(stored, operators, tenants))
}

/// Every DSN the workspaces stored, by workspace and source name.
async fn stored_dsns(
    store: &Store,
    workspaces: &[WorkspaceId],
    key: Result<&MasterKey, &SecretError>,
) -> Result<poll::StoredDsns, StoredSecretError> {
    let mut stored = std::collections::BTreeMap::new();
    for ws in workspaces {
        let mut found = secret::file_urls(store, ws).await?;
        match key {
            Ok(key) => found.extend(secret::open_named(store, key, ws, "source:", "dsn").await?),
            Err(e) => {
                tracing::debug!(error = %e, "no master key: stored source DSNs are not read");
            }
        };
        stored.extend(
            found
                .into_iter()
                .map(|(name, dsn)| ((ws.clone(), name), dsn)),
        );
    }
    Ok(stored)
}

/// Every workspace's stored DSNs, read now.
async fn all_stored_dsns(
    store: &Store,
    key: Result<&MasterKey, &SecretError>,
) -> Result<poll::StoredDsns, WorkerError> {
    let all: Vec<WorkspaceId> = crate::store::workspace::list(store)
        .await?
        .into_iter()
        .map(|w| w.id)
        .collect();
    Ok(stored_dsns(store, &all, key).await?)
}

/// Reads every workspace's stored DSNs again every minute (a workspace created, or a DSN stored,
/// since the worker started then resolves); a failed read keeps the last.
async fn keep_dsns_read(
    store: Store,
    key: Result<MasterKey, SecretError>,
    shared: Arc<std::sync::RwLock<poll::StoredDsns>>,
) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        match all_stored_dsns(&store, key.as_ref()).await {
            Ok(stored) => {
                *shared
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = stored;
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the stored source DSNs again; keeping the last")
            }
        }
    }
}

/// Measures the control plane's clock again every minute (host clocks drift); a failed
/// measurement keeps the last offset.
async fn keep_clock_synced(store: Store, clock: Clock) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(60)).await;
        if let Err(e) = store.sync_clock(&clock).await {
            tracing::warn!(error = %e, "could not read the control plane's clock; keeping the last offset");
        }
    }
}
