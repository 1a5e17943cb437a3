//! The sender: claims due deliveries in batches, sends each with no transaction open, and settles
//! them by (id, token) with every attempt recorded. Credentials are opened and applied here, at
//! the moment of sending, and nowhere else.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use jiff::SignedDuration;
use tokio::sync::Mutex;

use super::client::Client;
use super::queue::{self, Claimed, Settled, Settlement};
use crate::clock::Clock;
use crate::definitions::{Definitions, versions};
use crate::secret::MasterKey;
use crate::send::request::secret_strings;
use crate::store::WorkspaceId;
use crate::store::{Store, StoreError, later};

pub use super::report::SendReport;

mod attempt;
mod recheck;

/// How many times a failing settle is tried (while the leases last).
const SETTLE_TRIES: u32 = 10;

/// At most this many finished sends are settled in one transaction (or the requests in flight,
/// if more, up to [`MAX_SETTLE_GROUP`]).
const SETTLE_GROUP: usize = 64;
const MAX_SETTLE_GROUP: usize = 512;

/// How a sender works.
#[derive(Debug, Clone)]
pub struct Config {
    /// Deliveries claimed per statement.
    pub batch: i64,
    /// How long a claim is held.
    pub lease: SignedDuration,
    /// Requests in flight at once.
    pub in_flight: usize,
    /// How long an idle sender waits before looking again (a wake-up ends the wait sooner).
    pub idle: Duration,
    /// How long definitions and credentials are reused before being read again.
    pub refresh: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batch: queue::DEFAULT_BATCH,
            lease: queue::DEFAULT_LEASE,
            in_flight: IN_FLIGHT,
            idle: Duration::from_secs(1),
            refresh: Duration::from_secs(5),
        }
    }
}

impl Config {
    /// A process's sender at `concurrency` (`rowfire worker --concurrency N`): the default's
    /// requests in flight and claim size, each `concurrency` times over, in one sender. One
    /// sender with N times the requests in flight sends what N senders would, with one claim
    /// and one settle running at a time instead of N of each, so raising N never costs more
    /// per delivery (BENCHMARKS.md, deliver_queue, twentieth session).
    pub fn with_concurrency(concurrency: usize) -> Config {
        let n = concurrency.clamp(1, 64);
        let default = Config::default();
        Config {
            batch: default.batch * n as i64,
            in_flight: default.in_flight * n,
            ..default
        }
    }
}

/// Requests in flight per unit of concurrency.
const IN_FLIGHT: usize = 64;

/// At most this many batches are claimed in one pass (each claimed while the last requests of
/// the one before are in flight), so a busy sender still ends passes and looks at its stop.
const BATCHES_PER_PASS: usize = 16;

/// What a workspace's deliveries need at send time, read at most every `refresh`.
struct Snapshot {
    read_at: Instant,
    defs: Option<Definitions>,
    credentials: HashMap<String, Result<BTreeMap<String, String>, String>>,
    /// Per integration, every form of its secrets to redact from answers, worked out once.
    secrets: HashMap<String, crate::send::redact::Secrets>,
}

/// A sender: one worker's claim, send and settle loop.
pub struct Sender {
    store: Store,
    client: Client,
    clock: Clock,
    config: Config,
    master_key: Result<MasterKey, String>,
    snapshots: Mutex<HashMap<WorkspaceId, Arc<Snapshot>>>,
    passes: tokio::sync::watch::Sender<u64>,
    /// Reaches sources to recheck a time-anchored send before it goes (`None`: no recheck).
    recheck: Option<crate::source::DsnResolver>,
    sources: crate::source::Connections,
    /// Triggers' queries prepared for the recheck, by workspace and trigger.
    prepared: Mutex<HashMap<(WorkspaceId, String), recheck::Prepared>>,
    /// Integrations this sender saw answer 429 or 410, by workspace and name: when, until when
    /// the deliveries it had already claimed then wait (later claims leave a paused or disabled
    /// integration alone), and the status.
    held: std::sync::Mutex<HashMap<(WorkspaceId, String), Hold>>,
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Sender {
    /// A sender on `store`, sending through `client`. `master_key` opens credentials (its error
    /// is reported on every delivery that needs one, which then waits).
    pub fn new(
        store: Store,
        client: Client,
        clock: Clock,
        master_key: Result<MasterKey, String>,
        config: Config,
    ) -> Sender {
        Sender {
            store,
            client,
            clock,
            config,
            master_key,
            snapshots: Mutex::default(),
            passes: tokio::sync::watch::Sender::new(0),
            recheck: None,
            sources: Default::default(),
            prepared: Mutex::default(),
            held: std::sync::Mutex::default(),
            metrics: None,
        }
    }

    /// Counts every settled send (by integration and outcome, with its lateness) in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Sender {
        self.metrics = Some(metrics);
        self
    }

    /// Rechecks time-anchored sends whose rule asks for it (`recheck`, on by default) on their
    /// source just before sending, reaching sources through `dsn`. Without it a rule's recheck
    /// cannot run and its sends wait (and expire after their grace), never go unchecked.
    pub fn with_recheck(mut self, dsn: crate::source::DsnResolver) -> Sender {
        self.recheck = Some(dsn);
        self
    }

    /// How many passes [`Sender::run_until`] has finished: a way to wait for a running sender to
    /// have looked at the queue (and, finding nothing, to be idle) without sleeping.
    pub fn passes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.passes.subscribe()
    }

    /// A pass: claims a batch of due deliveries and sends it, and, while the batch's last
    /// requests are in flight, claims the next (while each claim comes back full, at most 16
    /// batches a pass), so requests keep flowing between claims. A batch no larger than the
    /// requests in flight is sent whole before the next is claimed, so each claim sees the
    /// outcome of the one before. Returns what happened (`claimed == 0`: nothing was due).
    pub async fn step(&self) -> Result<SendReport, StoreError> {
        self.pass(None).await
    }

    /// [`Sender::step`], claiming no further batch once `stop` turns true.
    async fn pass(
        &self,
        stop: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<SendReport, StoreError> {
        let first = self.claim().await?;
        let mut report = SendReport::default();
        if first.is_empty() {
            return Ok(report);
        }
        let unsettled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let feed = Feed {
            batch: Vec::new().into_iter(),
            rechecked: HashMap::new(),
            next: None,
            batches: 1,
            more: true,
            unsettled: unsettled.clone(),
            stop,
        };
        // Boxed: the compiler cannot otherwise prove the pass's future `Send` for a spawned task.
        let feed =
            futures_util::stream::unfold((feed, Some(first)), |state| self.feed(state)).boxed();
        // Settle what has finished as it finishes (in groups of what has finished meanwhile, at
        // most as many as are in flight and 512, one transaction each), so a crash re-sends as
        // little as possible: only what was sent and not yet recorded. Sending and settling are
        // polled together, so neither waits on a transaction the other holds.
        let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
        let sending = feed
            .map(|(c, recheck)| self.process(c, recheck))
            .buffer_unordered(self.config.in_flight.max(1))
            .for_each(move |settled| {
                let _ = done.send(settled);
                std::future::ready(())
            });
        let group_at_most = settle_group(self.config.in_flight);
        let settling = async {
            let mut group = Vec::with_capacity(SETTLE_GROUP);
            while finished.recv_many(&mut group, group_at_most).await > 0 {
                let took = self.settle_with_retries(&group).await;
                unsettled.fetch_sub(group.len(), std::sync::atomic::Ordering::Relaxed);
                for (item, took) in group.drain(..).zip(took) {
                    // Every delivery claimed is settled once, whatever became of it.
                    report.claimed += 1;
                    if let Some(m) = &self.metrics {
                        record(m, &item, took);
                    }
                    match (&item.outcome, took) {
                        (_, false) => report.stale += 1,
                        (Settlement::Sent, true) => report.sent += 1,
                        (Settlement::Retry { .. } | Settlement::Release { .. }, true) => {
                            report.waiting += 1
                        }
                        (Settlement::Terminal { .. } | Settlement::Unsent { .. }, true) => {
                            report.finished_unsent += 1
                        }
                    }
                }
            }
        };
        tokio::join!(sending, settling);
        Ok(report)
    }

    /// The pass's next delivery to send (with its recheck's verdict, if any): from the batch
    /// being sent, claiming the next batch once what is left of this one fits in flight, or
    /// `None` when the last claim came back short or failed, or the pass has claimed enough.
    /// `arrived`: a batch just claimed, to send next.
    async fn feed(
        &self,
        (mut feed, mut arrived): (Feed, Option<Vec<Claimed>>),
    ) -> Option<((Claimed, Option<Settlement>), (Feed, Option<Vec<Claimed>>))> {
        loop {
            if let Some(batch) = arrived.take() {
                feed.more = batch.len() as i64 >= self.config.batch;
                // Time-anchored sends are rechecked together, just before their batch goes.
                feed.rechecked = self.recheck_all(&batch).await;
                feed.batch = batch.into_iter();
            }
            // The next batch is claimed once what is left of this one fits in flight, unless
            // the batch fits in flight whole, settling has fallen more than a batch and a settle
            // group behind (sent and not recorded, those would be claimed again when their
            // leases lapse), or the sender is stopping.
            let in_flight = self.config.in_flight;
            let batch = usize::try_from(self.config.batch).unwrap_or(0);
            if feed.next.is_none()
                && feed.more
                && feed.batches < BATCHES_PER_PASS
                && batch > in_flight
                && feed.batch.len() <= in_flight
                && feed.unsettled.load(std::sync::atomic::Ordering::Relaxed)
                    <= in_flight + batch + settle_group(in_flight)
                && !feed.stop.as_ref().is_some_and(|s| *s.borrow())
            {
                feed.next = Some(Claiming(tokio::spawn(self.claim())));
                feed.batches += 1;
            }
            if let Some(c) = feed.batch.next() {
                feed.unsettled
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let recheck = feed.rechecked.remove(&c.id);
                return Some(((c, recheck), (feed, None)));
            }
            match feed.next.take()?.finish().await {
                Ok(batch) if !batch.is_empty() => arrived = Some(batch),
                Ok(_) => return None,
                Err(e) => {
                    tracing::warn!(error = %e, "claiming more due deliveries failed; the next pass tries again");
                    return None;
                }
            }
        }
    }

    /// Claims a batch, starting in a lane of the sender's own choosing, so concurrent senders
    /// seldom read past each other's leases (queue::claim_spread). The future borrows nothing,
    /// so the next batch's claim can run beside the sends.
    fn claim(&self) -> impl Future<Output = Result<Vec<Claimed>, StoreError>> + Send + 'static {
        let store = self.store.clone();
        let (now, batch, lease) = (self.clock.now(), self.config.batch, self.config.lease);
        async move { queue::claim_spread(&store, now, batch, lease, fastrand::u8(..)).await }
    }

    /// Settles a group of finished sends, retrying a failing control plane while the group's
    /// leases last. If the group still fails, its items are settled one by one, so one that
    /// cannot be written does not hold back the rest. Returns, per item, whether its settle took
    /// effect; one given up on (logged) is sent again once its lease lapses.
    async fn settle_with_retries(&self, group: &[Settled]) -> Vec<bool> {
        let ids: Vec<String> = group.iter().map(|s| s.claimed.id.to_string()).collect();
        let span = tracing::info_span!(
            "settle",
            deliveries = %ids.join(","),
            count = group.len(),
            duration_ms = tracing::field::Empty,
        );
        crate::telemetry::timed(span, self.settle_group(group)).await
    }

    async fn settle_group(&self, group: &[Settled]) -> Vec<bool> {
        let mut failed = match self.settle_retrying(group).await {
            Ok(took) => return took,
            Err(e) => Some(e),
        };
        let mut took = Vec::with_capacity(group.len());
        for item in group {
            // A group of one has already had its tries.
            let one = match failed.take().filter(|_| group.len() == 1) {
                Some(e) => Err(e),
                None => self.settle_retrying(std::slice::from_ref(item)).await,
            };
            took.push(one.map(|t| t[0]).unwrap_or_else(|e| {
                tracing::error!(delivery = item.claimed.id, error = %e, "could not record this send; it goes again when its lease lapses");
                false
            }));
        }
        took
    }

    async fn settle_retrying(&self, group: &[Settled]) -> Result<Vec<bool>, StoreError> {
        let mut pause = Duration::from_millis(100);
        let mut tries = 1;
        loop {
            let e = match queue::settle_many(&self.store, group).await {
                Ok(took) => return Ok(took),
                Err(e) => e,
            };
            let lease_left = group
                .iter()
                .map(|s| s.claimed.lease_expires_at)
                .min()
                .map_or(SignedDuration::ZERO, |l| self.clock.now().duration_until(l));
            // Only a failure that may pass (a lost connection, a conflict) is worth waiting
            // for; any other is given back at once, to be tried item by item.
            if !e.kind().is_transient()
                || tries >= SETTLE_TRIES
                || lease_left < SignedDuration::try_from(pause * 2).unwrap_or_default()
            {
                return Err(e);
            }
            tracing::warn!(error = %e, "settling finished sends failed; retrying");
            let until = later(
                self.clock.now(),
                SignedDuration::try_from(pause).unwrap_or_default(),
            );
            self.clock.sleep_until(until).await;
            pause = (pause * 2).min(Duration::from_secs(5));
            tries += 1;
        }
    }

    /// Sends until nothing is due now; the sum of every pass.
    pub async fn drain(&self) -> Result<SendReport, StoreError> {
        let mut total = SendReport::default();
        loop {
            let step = self.step().await?;
            total.add(step);
            if step.claimed == 0 {
                return Ok(total);
            }
        }
    }

    /// Sends until `stop` turns true: a pass, then, when nothing was due, a wait that a wake-up
    /// (work enqueued here, or NOTIFY from elsewhere) ends early. Control-plane errors are
    /// logged and ridden out.
    pub async fn run_until(&self, mut stop: tokio::sync::watch::Receiver<bool>) {
        while !*stop.borrow() {
            let woken = self.store.work_signal().notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let busy = match self.pass(Some(stop.clone())).await {
                Ok(r) => r.claimed > 0,
                Err(e) => {
                    tracing::error!(error = %e, "delivery pass failed; retrying shortly");
                    false
                }
            };
            self.passes.send_modify(|n| *n += 1);
            if !busy {
                // Sleep until the next delivery falls due (at most `idle`), or until woken.
                // A due time already past (a delivery due but not claimable: leased elsewhere)
                // is looked at again shortly; a future one is slept to exactly.
                let nap = match queue::next_due(&self.store).await {
                    Ok(Some(due)) => match Duration::try_from(self.clock.now().duration_until(due))
                    {
                        Ok(d) if !d.is_zero() => d.min(self.config.idle),
                        _ => Duration::from_millis(5),
                    },
                    _ => self.config.idle,
                };
                tokio::select! {
                    _ = &mut woken => {}
                    _ = tokio::time::sleep(nap) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }

    async fn snapshot(&self, workspace: &WorkspaceId) -> Result<Arc<Snapshot>, String> {
        let mut cache = self.snapshots.lock().await;
        if let Some(s) = cache.get(workspace)
            && s.read_at.elapsed() < self.config.refresh
        {
            return Ok(s.clone());
        }
        let defs = versions::in_force(&self.store, workspace)
            .await
            .map_err(|e| e.to_string())?
            .map(|(_, d)| d);
        let mut credentials = HashMap::new();
        let mut secrets = HashMap::new();
        let none = BTreeMap::new();
        for integration in defs.iter().flat_map(|d| &d.integrations) {
            let opened = match (&self.master_key, integration.spec.credentials().is_empty()) {
                (_, true) => None,
                (Err(e), false) => Some(Err(e.clone())),
                (Ok(key), false) => Some(
                    crate::secret::open_all(
                        &self.store,
                        key,
                        workspace,
                        &crate::secret::integration_owner(&integration.name),
                    )
                    .await
                    .map_err(|e| e.to_string()),
                ),
            };
            // What to hide in answers: the integration's fixed secrets and whatever opened.
            let known = match &opened {
                Some(Ok(c)) => c,
                _ => &none,
            };
            secrets.insert(
                integration.name.clone(),
                crate::send::redact::Secrets::new(secret_strings(&integration.spec, known)),
            );
            if let Some(opened) = opened {
                credentials.insert(integration.name.clone(), opened);
            }
        }
        let snapshot = Arc::new(Snapshot {
            read_at: Instant::now(),
            defs,
            credentials,
            secrets,
        });
        cache.insert(workspace.clone(), snapshot.clone());
        Ok(snapshot)
    }

    /// Sends one claimed delivery (or decides not to) and says how it ended. `recheck`: how its
    /// recheck ended it, if it did.
    async fn process(&self, claimed: Claimed, recheck: Option<Settlement>) -> Settled {
        let span = tracing::info_span!(
            "send",
            workspace = %claimed.workspace,
            delivery = claimed.id,
            integration = %claimed.integration,
            action = %claimed.action,
            attempt = claimed.attempts,
            outcome = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let attempting = async {
            let (outcome, attempt) = self.attempt(&claimed, recheck).await;
            tracing::Span::current().record("outcome", outcome_name(&outcome));
            (outcome, attempt)
        };
        let (outcome, attempt) = crate::telemetry::timed(span, attempting).await;
        Settled {
            claimed,
            outcome,
            attempt,
            at: self.clock.now(),
        }
    }
}

/// A settlement in a word, for the send span's `outcome` field.
fn outcome_name(outcome: &Settlement) -> &'static str {
    match outcome {
        Settlement::Sent => "sent",
        Settlement::Retry { .. } => "retry",
        Settlement::Release { .. } => "released",
        Settlement::Terminal { status, .. } | Settlement::Unsent { status, .. } => status.as_str(),
    }
}

/// Counts one settle in `metrics`: its outcome by integration and, when sent, how late; a settle
/// that found its lease taken over counts as a takeover instead.
fn record(m: &crate::metrics::Metrics, item: &Settled, took: bool) {
    if !took {
        m.takeover("delivery");
        return;
    }
    let (outcome, late) = match &item.outcome {
        Settlement::Sent => {
            let late = item.claimed.due_at.duration_until(item.at);
            ("sent", Some(Duration::try_from(late).unwrap_or_default()))
        }
        Settlement::Retry { .. } => ("retry", None),
        Settlement::Release { .. } => ("waiting", None),
        Settlement::Terminal { status, .. } => (status.as_str(), None),
        Settlement::Unsent { status, .. } => (status.as_str(), None),
    };
    m.delivery(&item.claimed.integration, outcome, late);
}

/// An integration held back in one sender (see `Sender::held`).
#[derive(Debug, Clone, Copy)]
struct Hold {
    /// When the answer came.
    at: jiff::Timestamp,
    /// Until when the deliveries claimed before `at` wait.
    until: jiff::Timestamp,
    /// The answer's status.
    status: u16,
}

/// The most finished sends settled in one transaction, with `in_flight` requests in flight.
fn settle_group(in_flight: usize) -> usize {
    in_flight.clamp(SETTLE_GROUP, MAX_SETTLE_GROUP)
}

/// What a pass sends from: the batch being sent, its recheck verdicts, and the next batch's
/// claim once it has begun.
struct Feed {
    batch: std::vec::IntoIter<Claimed>,
    rechecked: HashMap<i64, Settlement>,
    next: Option<Claiming>,
    /// Batches claimed in this pass (begun included).
    batches: usize,
    /// The last claim came back full: more may be due.
    more: bool,
    /// Deliveries handed to the sends and not yet settled.
    unsettled: Arc<std::sync::atomic::AtomicUsize>,
    /// Turns true when the sender is to stop: no further batch is claimed.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// A claim running beside the sends. Dropped unfinished (the pass ended), it is stopped; what
/// it claimed, if it committed, is claimed again when its lease lapses.
struct Claiming(tokio::task::JoinHandle<Result<Vec<Claimed>, StoreError>>);

impl Claiming {
    async fn finish(mut self) -> Result<Vec<Claimed>, String> {
        match (&mut self.0).await {
            Ok(claimed) => claimed.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Drop for Claiming {
    fn drop(&mut self) {
        self.0.abort();
    }
}
