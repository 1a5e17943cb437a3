//! Trigger leases held by real worker processes on a PostgreSQL control plane: a worker killed
//! mid-poll is taken over within its (short) lease, a worker stopped with SIGTERM gives its
//! trigger back at once, and `rowfire status` shows who holds what.
//!
//! The source is PostgreSQL too, with a trigger that sleeps in every statement, so a poll of its
//! window (twenty pages) takes seconds and a worker can be caught holding it. Everything is
//! stamped on the control plane's clock (a synced system clock), never on the tests' fixed one.
//! Waiting for processes takes real time: every wait polls a condition under a deadline.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::{self, Lease, Poller, Settle, workers::WorkerId};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, PgConnection, Row};

use crate::support::TestPg;

/// Rows in the slow trigger's window; three per page, so twenty pages.
pub(crate) const ROWS: i64 = 60;

/// Worker processes, killed when the test ends however it ends.
pub(crate) struct Workers {
    pub children: Vec<Child>,
    env: Vec<(String, String)>,
    args: Vec<String>,
}

impl Workers {
    pub fn new(env: &[(&str, &str)], args: &[&str]) -> Workers {
        Workers {
            children: Vec::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    /// Starts one more worker; returns its index.
    pub fn start(&mut self) -> usize {
        let child = Command::new(env!("CARGO_BIN_EXE_rowfire"))
            .arg("worker")
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push(child);
        self.children.len() - 1
    }

    /// Replaces worker `i` by a fresh process.
    pub fn restart(&mut self, i: usize) {
        let _ = self.children[i].kill();
        let _ = self.children[i].wait();
        let last = self.start();
        self.children.swap(i, last);
        self.children.pop();
    }

    /// The index of the worker whose process id is `pid`.
    pub fn by_pid(&self, pid: u32) -> Option<usize> {
        self.children.iter().position(|c| c.id() == pid)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The process id in a worker id (`host:pid@start`).
pub(crate) fn pid_of(worker: &str) -> Option<u32> {
    let (_, rest) = worker.split_once(':')?;
    rest.split_once('@')?.0.parse().ok()
}

/// Polls `check` every 50 ms until it returns `Some`, or gives up after `deadline`.
pub(crate) async fn wait_for<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(t) = check().await {
            return Some(t);
        }
        if started.elapsed() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A trigger's lease as stored: (holder, fencing token, a run of it is in progress).
pub(crate) async fn lease_of(url: &str, trigger: &str) -> (Option<String>, i64, bool) {
    let mut c = PgConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT t.lease_owner, t.fencing_token,
                EXISTS (SELECT 1 FROM run r WHERE r.trigger_name = t.trigger_name
                        AND r.fencing_token = t.fencing_token AND r.status = 'running')
         FROM trigger_state t WHERE t.trigger_name = $1",
    )
    .bind(trigger)
    .fetch_one(&mut c)
    .await
    .unwrap();
    (row.get(0), row.get(1), row.get(2))
}

/// Fires in the ledger for `rule`, and how many distinct (key, bucket) among them.
pub(crate) async fn fires(url: &str, rule: &str) -> (i64, i64) {
    let mut c = PgConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*), count(DISTINCT (dedup_key, dedup_bucket)) FROM fire WHERE rule_name = $1",
    )
    .bind(rule)
    .fetch_one(&mut c)
    .await
    .unwrap();
    (row.get(0), row.get(1))
}

/// A PostgreSQL source whose `slow` trigger reads [`ROWS`] rows from the last hour in twenty
/// pages, each statement sleeping `sleep` seconds; a migrated control plane with it pushed and
/// rewound a day (due now). Returns (control plane, source, store, synced clock, and the control
/// plane's URL as its non-superuser owner, which the workers connect as).
async fn slow_world(sleep: f64) -> Option<(TestPg, TestPg, Store, Clock, String)> {
    let cp = TestPg::new().await?;
    let source = TestPg::new().await?;
    let mut c = source.admin().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE events (id BIGINT PRIMARY KEY, account TEXT NOT NULL, at TIMESTAMPTZ NOT NULL);
         INSERT INTO events SELECT g, 'acct_' || g, now() - g * interval '30 seconds'
         FROM generate_series(1, {ROWS}) AS g;"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    let owner = cp.owner_url().await;
    let store = Store::open(&owner).await.unwrap();
    store.migrate().await.unwrap();
    let clock = Clock::system();
    store.sync_clock(&clock).await.unwrap();
    let doc = format!(
        r#"version: 2
source:
  dsn_env: SLOW_URL
  max_rows: 3
  allow_functions: [pg_sleep]
triggers:
  slow:
    sql: "SELECT e.id, e.account, e.at FROM events e, pg_sleep({sleep}) AS z"
    event_time: at
    key: [id]
rules:
  every_event:
    trigger: slow
    policy: once_ever
"#
    );
    rowfire::push::push(&store, WS, &doc, clock.now())
        .await
        .unwrap();
    assert!(
        poll::rewind(
            &store,
            WS,
            "slow",
            SignedDuration::from_hours(24),
            clock.now()
        )
        .await
        .unwrap()
    );
    Some((cp, source, store, clock, owner))
}

/// Waits until a worker holds `slow` and is reading its window; returns (holder, token).
async fn caught_mid_poll(url: &str) -> (String, i64) {
    wait_for(Duration::from_secs(30), || async {
        match lease_of(url, "slow").await {
            (Some(holder), token, true) => Some((holder, token)),
            _ => None,
        }
    })
    .await
    .expect("no worker started polling the slow trigger within 30 s")
}

/// Waits until someone other than `victim` holds a newer lease of `slow`; returns it.
async fn taken_over(url: &str, victim: &str, token: i64, within: Duration) -> (String, i64) {
    wait_for(within, || async {
        match lease_of(url, "slow").await {
            (Some(holder), t, _) if t > token && holder != victim => Some((holder, t)),
            _ => None,
        }
    })
    .await
    .unwrap_or_else(|| panic!("no other worker took the slow trigger over within {within:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_poll_is_taken_over_within_its_lease_and_its_late_settle_changes_nothing()
 {
    let Some((cp, source, store, clock, owner)) = slow_world(0.1).await else {
        return;
    };
    let lease = Duration::from_secs(2);
    let env = [
        ("ROWFIRE_DATABASE_URL", owner.as_str()),
        ("SLOW_URL", source.url.as_str()),
    ];
    let mut workers = Workers::new(&env, &["--trigger-lease", "2s", "--poll-only"]);
    workers.start();
    workers.start();
    let (victim, token) = caught_mid_poll(&cp.url).await;
    let i = workers
        .by_pid(pid_of(&victim).expect("the holder's id names its process"))
        .expect("the holder is one of the test's workers");
    workers.children[i].kill().unwrap(); // SIGKILL
    let killed = Instant::now();
    workers.children[i].wait().unwrap();
    let (heir, _) = taken_over(&cp.url, &victim, token, Duration::from_secs(10)).await;
    let took = killed.elapsed();
    assert!(
        took <= lease + Duration::from_secs(1),
        "the killed worker's trigger was taken over after {took:?}, more than its lease (2 s) plus one second"
    );
    assert_ne!(heir, victim);

    // The killed poll's settle, arriving late, changes nothing: its token is stale.
    let now = clock.now();
    let bogus = now + SignedDuration::from_hours(24 * 365);
    let stale = Lease {
        workspace: WS.clone(),
        trigger: "slow".to_string(),
        worker: victim.clone(),
        token,
        watermark: now,
        origin: now,
        lookback: SignedDuration::ZERO,
        poll_interval: SignedDuration::from_mins(1),
        expires_at: now,
        problem: None,
        clock_counts: None,
    };
    let late = Settle {
        watermark: Some(bogus),
        next_poll_at: bogus,
        error: Some("late".into()),
        now,
        clock_counts: None,
    };
    assert!(!poll::settle(&store, &stale, &late).await.unwrap());
    // The heir finishes the window: every row fired once, none lost.
    let done = wait_for(Duration::from_secs(30), || async {
        (fires(&cp.url, "every_event").await.0 == ROWS).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "fires after the takeover: {:?}",
        fires(&cp.url, "every_event").await
    );
    assert_eq!(fires(&cp.url, "every_event").await, (ROWS, ROWS));
    let state = poll::list(&store, WS).await.unwrap();
    let slow = state.iter().find(|t| t.trigger == "slow").unwrap();
    assert!(slow.watermark < bogus && slow.next_poll_at < bogus);
    assert_ne!(slow.last_error.as_deref(), Some("late"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_with_sigterm_mid_poll_gives_its_trigger_back_at_once() {
    let Some((cp, source, store, _clock, owner)) = slow_world(0.1).await else {
        return;
    };
    let env = [
        ("ROWFIRE_DATABASE_URL", owner.as_str()),
        ("SLOW_URL", source.url.as_str()),
    ];
    // A 30 s lease: waiting for it to lapse would show.
    let mut workers = Workers::new(&env, &["--trigger-lease", "30s", "--poll-only"]);
    workers.start();
    workers.start();
    let (victim, token) = caught_mid_poll(&cp.url).await;
    let pid = pid_of(&victim).unwrap();
    let i = workers.by_pid(pid).unwrap();
    let term = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let stopped = Instant::now();
    let (heir, _) = taken_over(&cp.url, &victim, token, Duration::from_secs(10)).await;
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "the trigger was taken over {:?} after SIGTERM",
        stopped.elapsed()
    );
    assert_ne!(heir, victim);
    let status = workers.children[i].wait().unwrap();
    assert!(status.success(), "{status:?}");
    let seen = poll::workers::recent(&store, Timestamp::UNIX_EPOCH)
        .await
        .unwrap();
    let gone = seen
        .iter()
        .find(|w| w.id == victim)
        .expect("the worker was seen");
    assert!(gone.stopped_at.is_some(), "the stopped worker says so");
    let done = wait_for(Duration::from_secs(30), || async {
        (fires(&cp.url, "every_event").await.0 == ROWS).then_some(())
    })
    .await;
    assert!(done.is_some());
    assert_eq!(fires(&cp.url, "every_event").await, (ROWS, ROWS));
}

#[tokio::test]
async fn status_shows_each_lease_holder_its_expiry_and_a_warning_for_an_overdue_trigger() {
    let Some(cp) = TestPg::new().await else {
        return;
    };
    let store = Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    let clock = Clock::system();
    store.sync_clock(&clock).await.unwrap();
    let doc = r#"version: 2
source:
  dsn_env: NOWHERE_URL
triggers:
  first:
    sql: "SELECT id, at FROM a"
    event_time: at
    key: [id]
  second:
    sql: "SELECT id, at FROM b"
    event_time: at
    key: [id]
rules:
  r1:
    trigger: first
    policy: once_ever
  r2:
    trigger: second
    policy: once_ever
"#;
    rowfire::push::push(&store, WS, doc, clock.now())
        .await
        .unwrap();
    let me = WorkerId::new("testhost", 4242, clock.now());
    poll::workers::register(&store, &me, clock.now())
        .await
        .unwrap();
    let poller = Poller::new(
        store.clone(),
        me.id.clone(),
        clock.clone(),
        Arc::new(|_, _| None),
    )
    .with_lease(SignedDuration::from_mins(5));
    let held = poller.lease().await.unwrap().expect("a due trigger");
    let other = if held.trigger == "first" {
        "second"
    } else {
        "first"
    };
    // The other one has been due for ten minutes by the control plane's clock.
    let mut c = cp.admin().await;
    sqlx::query(
        "UPDATE trigger_state SET next_poll_at = now() - interval '10 minutes' WHERE trigger_name = $1",
    )
    .bind(other)
    .execute(&mut c)
    .await
    .unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_rowfire"))
        .arg("status")
        .env("ROWFIRE_DATABASE_URL", &cp.url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let block = |name: &str| -> Vec<&str> {
        let at = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no line for {name}: {text}"));
        lines[at + 1..]
            .iter()
            .take_while(|l| l.starts_with("    "))
            .copied()
            .collect()
    };
    let held_lines = block(&held.trigger).join("\n");
    let prefix = format!("lease held by {} until ", me.id);
    let until: Timestamp = held_lines
        .split_once(&prefix)
        .and_then(|(_, rest)| rest.split_once(' '))
        .unwrap_or_else(|| panic!("no holder shown: {text}"))
        .0
        .parse()
        .unwrap();
    assert!(
        until.duration_until(held.expires_at).abs() < SignedDuration::from_millis(1),
        "shown expiry {until}, lease expires {}",
        held.expires_at
    );
    assert!(!held_lines.contains("WARNING"), "{text}");
    let other_lines = block(other).join("\n");
    assert!(other_lines.contains("lease free"), "{text}");
    assert!(other_lines.contains("due for 10m"), "{text}");
    assert!(
        other_lines.contains("WARNING: due for 10m")
            && other_lines.contains("longer than its lease (30s) plus its poll interval (1m)"),
        "{text}"
    );
    assert!(
        text.contains("workers seen in the last")
            && text.contains(&format!("{}  last heartbeat", me.id)),
        "{text}"
    );
}

async fn a_poll_whose_lease_was_taken_over_stops_before_claiming_and_does_not_settle(url: &str) {
    let sample = crate::support::TestSqlite::new();
    crate::support::sample_source(&sample.url, 50).await;
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    let clock = Clock::fixed(crate::support::now());
    rowfire::push::push(
        &store,
        WS,
        rowfire::fixture::SAMPLE_DEFINITIONS,
        clock.now(),
    )
    .await
    .unwrap();
    let ago = SignedDuration::from_hours(24 * 120);
    poll::rewind(&store, WS, "declined_charge", ago, clock.now())
        .await
        .unwrap();
    let source = sample.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(source.clone().into()));
    let second = SignedDuration::from_secs(1);
    let a = Poller::new(store.clone(), "a", clock.clone(), dsn.clone()).with_lease(second);
    let b = Poller::new(store.clone(), "b", clock.clone(), dsn.clone()).with_lease(second);
    let mut held = Vec::new();
    while let Some(lease) = a.lease().await.unwrap() {
        held.push(lease);
    }
    let lease_a = held
        .into_iter()
        .find(|l| l.trigger == "declined_charge")
        .unwrap();
    // A stalls past its lease without renewing it; B takes the trigger over.
    clock.advance(SignedDuration::from_secs(2));
    let lease_b = b.lease().await.unwrap().expect("the lapsed lease");
    assert!(lease_b.token > lease_a.token);
    let (report, _) = a.poll(&lease_a).await;
    assert_eq!(report.status, poll::PollStatus::LeaseLost, "{report}");
    assert!(!report.settled);
    assert_eq!(report.fired, 0, "no page was claimed under a lost lease");
    let mut tx = store.begin(WS).await.unwrap();
    let fired = rowfire::ledger::fires(&mut tx, WS, "billing_ticket", None)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(fired.is_empty());
    // B's lease stands: its poll claims the window and settles.
    let (report_b, outcome) = b.poll(&lease_b).await;
    assert!(report_b.fired > 0, "{report_b}");
    assert!(poll::settle(&store, &lease_b, &outcome).await.unwrap());
}
on_both_engines!(
    a_poll_whose_lease_was_taken_over_stops_before_claiming_and_does_not_settle_,
    a_poll_whose_lease_was_taken_over_stops_before_claiming_and_does_not_settle
);

#[test]
fn a_trigger_lease_outside_one_second_to_an_hour_is_refused_with_the_bounds() {
    for bad in ["0s", "500ms", "2h", "soon"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rowfire"))
            .args(["worker", "--trigger-lease", bad])
            .env("ROWFIRE_DATABASE_URL", "sqlite:///nonexistent/never.db")
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("from 1s to 1h") || err.contains("is not a duration"),
            "{bad}: {err}"
        );
    }
}
