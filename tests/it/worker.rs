//! The library's worker type, run in-process: assembled from a `WorkerConfig`, it polls a real
//! source and sends to the scripted receiver until idle, then stops cleanly when its shutdown
//! future resolves. No child process and no sleep: the test waits on the senders' passes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::outbox;
use rowfire::secret::MasterKey;
use rowfire::send::egress::Policy;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use rowfire::worker::{Worker, WorkerConfig, WorkerError};

use crate::receiver::Receiver;
use crate::sending::{Options, add_signups, prepare};
use crate::support::{TestSqlite, now};
use rowfire::outbox::DeliveryStatus;

const ROWS: u32 = 30;

/// Deliveries not yet in a terminal state.
async fn open_deliveries(store: &Store) -> usize {
    let mut tx = store.begin(WS).await.unwrap();
    let all = outbox::list(&mut tx, WS, &Default::default())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    all.iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .count()
}

fn config(source_url: String, key: MasterKey) -> WorkerConfig {
    WorkerConfig {
        workspace: WS.clone(),
        operators: vec![WS.clone()],
        name: "in-process".into(),
        concurrency: 2,
        listen: true,
        delivery_lease: SignedDuration::from_secs(60),
        trigger_lease: rowfire::poll::DEFAULT_LEASE,
        count_clocks_every: rowfire::poll::DEFAULT_CLOCK_COUNT_EVERY,
        egress: Policy::parse("127.0.0.1", false).unwrap(),
        master_key: Ok(key),
        dsn: Some(Arc::new(move |_, _| Some(source_url.clone().into()))),
        sync_clock: false,
        metrics: None,
    }
}

async fn a_worker_polls_and_sends_until_idle_and_stops_when_its_shutdown_resolves(url: &str) {
    let receiver = Receiver::start().await;
    let source = TestSqlite::new();
    add_signups(&source, 0..ROWS, now()).await;
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    let key_text = prepare(&store, &receiver.url, &Options::default(), now()).await;
    let key = MasterKey::parse(&key_text).unwrap();
    let worker = Worker::new(
        store.clone(),
        Clock::fixed(now()),
        config(source.url.clone(), key),
    )
    .await
    .unwrap();
    assert_eq!(worker.warnings().await.unwrap(), Vec::<String>::new());

    // Idle: every row's delivery has arrived and none is left pending. Checked after each pass
    // of the first sender, which looks at the queue at least once a second while idle.
    let mut passes = worker.passes();
    let idle = async {
        loop {
            passes.changed().await.unwrap();
            if receiver.seen().len() >= ROWS as usize && open_deliveries(&store).await == 0 {
                break;
            }
        }
    };
    let fired = AtomicU64::new(0);
    let run = worker.run_until(idle, |r| {
        fired.fetch_add(r.fired, Ordering::SeqCst);
    });
    // A guard, not a wait: the run ends as soon as the worker is idle.
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("the worker stops once idle and asked to")
        .expect("the worker registers and gives its leases back");

    assert_eq!(fired.load(Ordering::SeqCst), u64::from(ROWS));
    let mut ids: Vec<String> = receiver
        .seen()
        .iter()
        .map(|s| s.header("webhook-id").to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), ROWS as usize, "each delivery arrives once");
    let mut tx = store.begin(WS).await.unwrap();
    let all = outbox::list(&mut tx, WS, &Default::default())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(all.len(), ROWS as usize);
    assert!(
        all.iter().all(|d| d.status == DeliveryStatus::Sent),
        "{all:?}"
    );
}

on_both_engines!(
    worker_runs_in_process_until_idle,
    a_worker_polls_and_sends_until_idle_and_stops_when_its_shutdown_resolves
);

#[tokio::test]
async fn a_worker_refuses_a_delivery_lease_shorter_than_the_shortest_accepted() {
    let db = TestSqlite::new();
    let store = Store::open(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let mut short = config(
        String::new(),
        MasterKey::parse(&MasterKey::generate()).unwrap(),
    );
    short.delivery_lease = SignedDuration::from_secs(1);
    let err = Worker::new(store, Clock::fixed(now()), short)
        .await
        .err()
        .expect("a 1 s lease is refused");
    assert!(matches!(err, WorkerError::LeaseTooShort { .. }), "{err}");
    assert!(err.to_string().contains("give at least 5s"), "{err}");
}
