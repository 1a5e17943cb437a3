//! Chaos: real worker processes are killed with SIGKILL at random moments (after a random number
//! of arrivals) while 10,000 deliveries flow to the receiver, and restarted; at the end every
//! worker is killed and a restarted one drains what is left. Afterwards every delivery is in a terminal
//! state, the receiver has seen every delivery id, and any id it saw twice was in flight at a kill.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::secret::MasterKey;
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::sender::{self, Sender};
use rowfire::store::Store;
use sqlx::{Connection, PgConnection, Row};

use crate::receiver::Receiver;
use crate::sending::{Options, add_signups, prepare};
use crate::support::{TestPg, TestSqlite};

const DELIVERIES: u32 = 10_000;
const WORKERS: usize = 3;

fn start_worker(env: &[(&str, String)]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_rowfire"))
        .args(["worker", "--concurrency", "2", "--delivery-lease", "5s"])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// (all deliveries, those not yet in a terminal state)
async fn progress(url: &str) -> (i64, i64) {
    let mut c = PgConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*), count(*) FILTER (WHERE status NOT IN ('sent', 'skipped', 'suppressed', 'failed', 'dead', 'expired', 'cancelled')) FROM delivery",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_workers_mid_flight_loses_nothing_and_duplicates_only_what_was_in_flight() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    #[expect(
        clippy::disallowed_methods,
        reason = "the killed workers are child processes on the system clock"
    )]
    let now = jiff::Timestamp::now();
    let receiver = Receiver::start().await;
    receiver.pace(Duration::from_millis(3));
    let source = TestSqlite::new();
    add_signups(&source, 0..DELIVERIES, now).await;
    // The workers connect as the database's owner, bound by row-level security; the progress
    // counts read as the superuser.
    let owner = pg.owner_url().await;
    let store = Store::open(&owner).await.unwrap();
    store.migrate().await.unwrap();
    let key_text = prepare(&store, &receiver.url, &Options::default(), now).await;
    let env = [
        ("ROWFIRE_DATABASE_URL", owner.clone()),
        ("SIGNUPS_URL", source.url.clone()),
        ("ROWFIRE_EGRESS_ALLOW", "127.0.0.1".to_string()),
        ("ROWFIRE_MASTER_KEY", key_text.clone()),
        ("RUST_LOG", "off".to_string()),
    ];
    let mut workers: Vec<Child> = (0..WORKERS).map(|_| start_worker(&env)).collect();

    // The first request means the one-page poll has committed all 10,000 fires and their
    // deliveries, so the kills below hit sending, not the poll.
    assert!(
        receiver
            .wait_for_requests(1, Duration::from_secs(120))
            .await,
        "the workers never sent anything"
    );
    assert_eq!(progress(&pg.url).await.0, i64::from(DELIVERIES));
    // Kill at random moments while deliveries flow: after a random number of further arrivals.
    let mut kills = Vec::new();
    let mut threshold = 0;
    for _ in 0..12 {
        threshold += fastrand::usize(200..700);
        assert!(
            receiver
                .wait_for_requests(threshold, Duration::from_secs(60))
                .await,
            "sending stalled before {threshold} requests"
        );
        let victim = fastrand::usize(..WORKERS);
        workers[victim].kill().unwrap(); // SIGKILL
        kills.push(Instant::now());
        workers[victim].wait().unwrap();
        workers[victim] = start_worker(&env);
    }
    // The last kill: every worker, mid-flight.
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    kills.push(Instant::now());
    // A restarted worker finishes the job. Driven in-process with its clock past every lease
    // (5 s), it takes over what the dead held and drains the queue until nothing is due.
    #[expect(
        clippy::disallowed_methods,
        reason = "a minute past the system clock, after the dead workers' leases"
    )]
    let restarted = Sender::new(
        store.clone(),
        Client::new(Policy::parse("127.0.0.1", false).unwrap()),
        Clock::fixed(jiff::Timestamp::now() + SignedDuration::from_mins(1)),
        MasterKey::parse(&key_text).map_err(|e| e.to_string()),
        sender::Config::default(),
    );
    restarted.drain().await.unwrap();
    let (total, open) = progress(&pg.url).await;
    assert_eq!((total, open), (i64::from(DELIVERIES), 0));

    let mut c = PgConnection::connect(&pg.url).await.unwrap();
    let statuses: Vec<(String, i64)> =
        sqlx::query_as("SELECT status, count(*) FROM delivery GROUP BY status")
            .fetch_all(&mut c)
            .await
            .unwrap();
    assert_eq!(
        statuses,
        [("sent".to_string(), i64::from(DELIVERIES))],
        "every delivery was sent"
    );
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM delivery")
        .fetch_all(&mut c)
        .await
        .unwrap();
    let mut arrivals: HashMap<String, Vec<Instant>> = HashMap::new();
    for seen in receiver.seen() {
        arrivals
            .entry(seen.header("webhook-id").to_string())
            .or_default()
            .push(seen.at);
    }
    for id in &ids {
        assert!(
            arrivals.contains_key(&id.to_string()),
            "delivery {id} never reached the receiver"
        );
    }
    let mut twice = 0;
    for (id, times) in &arrivals {
        if times.len() > 1 {
            twice += 1;
            let (first, last) = (times[0], *times.last().unwrap());
            assert!(
                kills.iter().any(|k| first <= *k && *k <= last),
                "delivery {id} arrived {} times without a kill between: a duplicate by race",
                times.len()
            );
        }
    }
    eprintln!(
        "{} kills; {} deliveries; {} ids seen more than once, each in flight at a kill",
        kills.len(),
        ids.len(),
        twice
    );
}
