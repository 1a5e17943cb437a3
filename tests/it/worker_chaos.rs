//! Poll chaos on a PostgreSQL control plane: three worker processes poll twenty triggers on a
//! PostgreSQL source that receives new rows throughout; one worker is killed (SIGKILL) at random
//! moments a dozen times and restarted. Afterwards the ledger equals a backtest of the same
//! window fire for fire, and no trigger went unpolled for longer than its lease plus its poll
//! interval. Short leases (3 s) and poll intervals (2 s) keep it under a minute.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rowfire::backtest::{Outcome, Simulator};
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::ledger;
use rowfire::poll::{self, Poller};
use rowfire::source::Source;
use rowfire::sql_guard::Window;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, PgConnection, Row};

use crate::support::TestPg;
use crate::worker_leases::{Workers, wait_for};

const TRIGGERS: usize = 20;
const KILLS: usize = 12;
const LEASE: SignedDuration = SignedDuration::from_secs(3);
const INTERVAL: SignedDuration = SignedDuration::from_secs(2);

/// Twenty triggers, one per kind of event; even ones fire once per event, odd ones once per
/// account ever.
fn definitions() -> String {
    let mut doc = String::from("version: 2\nsource:\n  dsn_env: EVENTS_URL\ntriggers:\n");
    for k in 0..TRIGGERS {
        let key = if k % 2 == 0 { "id" } else { "account" };
        doc.push_str(&format!(
            "  t{k:02}:\n    sql: \"SELECT id, account, at FROM events WHERE kind = {k}\"\n    event_time: at\n    key: [{key}]\n    poll_interval: {}s\n",
            INTERVAL.as_secs()
        ));
    }
    doc.push_str("rules:\n");
    for k in 0..TRIGGERS {
        doc.push_str(&format!(
            "  r{k:02}:\n    trigger: t{k:02}\n    policy: once_ever\n"
        ));
    }
    doc
}

/// Runs started so far.
async fn runs(url: &str) -> i64 {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM run")
        .fetch_one(&mut c)
        .await
        .unwrap()
}

/// What a backtest of `rule` over `window` fires: (key, bucket) pairs.
async fn backtest(
    defs: &definitions::Definitions,
    source: &Source,
    rule: &str,
    window: Window,
) -> BTreeSet<(String, String)> {
    let (rule, trigger) = defs.rule_and_trigger(rule).unwrap();
    let query = source.check(&trigger.name, &trigger.sql).unwrap();
    let mut reader = source
        .read_window(&query, trigger.shape(), window)
        .await
        .unwrap();
    let mut sim = Simulator::new(&rule.cadence, &trigger.key, &trigger.occurrence);
    let mut out = BTreeSet::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        for row in page {
            if let Outcome::Fired { key, bucket } = sim.evaluate(&row) {
                out.insert((key, bucket));
            }
        }
    }
    reader.finish().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_pollers_at_random_loses_no_fire_doubles_none_and_leaves_no_trigger_unpolled() {
    let Some(cp) = TestPg::new().await else {
        return;
    };
    let Some(events) = TestPg::new().await else {
        return;
    };
    let mut src = events.admin().await;
    sqlx::raw_sql(
        "CREATE TABLE events (id BIGSERIAL PRIMARY KEY, kind INT NOT NULL, account TEXT NOT NULL, at TIMESTAMPTZ NOT NULL)",
    )
    .execute(&mut src)
    .await
    .unwrap();
    // The workers connect as the control plane's owner, bound by row-level security; the run
    // counts read as the superuser.
    let owner = cp.owner_url().await;
    let store = Store::open(&owner).await.unwrap();
    store.migrate().await.unwrap();
    let clock = Clock::system();
    store.sync_clock(&clock).await.unwrap();
    let doc = definitions();
    let pushed = clock.now();
    rowfire::push::push(&store, WS, &doc, pushed).await.unwrap();

    // New rows throughout, stamped by the source's clock as they are written.
    let writing = Arc::new(AtomicBool::new(true));
    let written = Arc::new(AtomicU64::new(0));
    let writer = {
        let (writing, written, url) = (writing.clone(), written.clone(), events.url.clone());
        tokio::spawn(async move {
            let mut c = PgConnection::connect(&url).await.unwrap();
            while writing.load(Ordering::SeqCst) {
                let kind = fastrand::i32(0..TRIGGERS as i32);
                let account = format!("acct_{}", fastrand::u8(0..40));
                sqlx::query(
                    "INSERT INTO events (kind, account, at) VALUES ($1, $2, clock_timestamp())",
                )
                .bind(kind)
                .bind(account)
                .execute(&mut c)
                .await
                .unwrap();
                written.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };

    let env = [
        ("ROWFIRE_DATABASE_URL", owner.as_str()),
        ("EVENTS_URL", events.url.as_str()),
    ];
    let lease_arg = format!("{}s", LEASE.as_secs());
    let mut workers = Workers::new(&env, &["--trigger-lease", &lease_arg, "--poll-only"]);
    for _ in 0..3 {
        workers.start();
    }
    let chaos_from = clock.now();
    // Kill at random moments: after a random number of further poll runs.
    let mut threshold = 0;
    // Each killed worker's process id and when it was killed (the latest its lease was renewed).
    let mut kills: Vec<(u32, Timestamp)> = Vec::new();
    for kill in 0..KILLS {
        threshold += fastrand::i64(5..25);
        let reached = wait_for(Duration::from_secs(20), || async {
            (runs(&cp.url).await >= threshold).then_some(())
        })
        .await;
        assert!(
            reached.is_some(),
            "polling stalled before {threshold} runs (kill {kill})"
        );
        let victim = fastrand::usize(..workers.children.len());
        kills.push((workers.children[victim].id(), clock.now()));
        workers.restart(victim); // SIGKILL, then a fresh process
    }
    // Let the last restarted worker take part before the end of the chaos.
    threshold += 20;
    let reached = wait_for(Duration::from_secs(20), || async {
        (runs(&cp.url).await >= threshold).then_some(())
    })
    .await;
    assert!(reached.is_some(), "polling stalled after the kills");
    let chaos_until = clock.now();
    writing.store(false, Ordering::SeqCst);
    writer.await.unwrap();
    drop(workers); // SIGKILL, every one

    // No trigger went unpolled longer than its lease plus its poll interval. A trigger falls due
    // a poll interval after its last poll finished; a run cut short by a kill does not end that:
    // the trigger stays due until another worker takes it over. So each run's start is measured
    // from the moment its trigger last fell due (the status command's overdue measure), and
    // that wait is at most a lease (a dead holder) plus a poll interval. Separately, the whole
    // gap from one poll's end to the next start stays within lease plus poll interval plus a
    // second for picking the trigger up on a loaded machine.
    let rows = sqlx::query(
        "SELECT trigger_name, started_at, finished_at, worker FROM run
         WHERE started_at >= $1 AND started_at <= $2 ORDER BY trigger_name, started_at",
    )
    .bind(jiff_sqlx::Timestamp::from(chaos_from))
    .bind(jiff_sqlx::Timestamp::from(chaos_until))
    .fetch_all(&mut cp.admin().await)
    .await
    .unwrap();
    type Runs = Vec<(Timestamp, Option<Timestamp>, String)>;
    let mut by_trigger: BTreeMap<String, Runs> = BTreeMap::new();
    for r in &rows {
        let started: jiff_sqlx::Timestamp = r.get(1);
        let ended: Option<jiff_sqlx::Timestamp> = r.get(2);
        by_trigger.entry(r.get(0)).or_default().push((
            started.to_jiff(),
            ended.map(|t| t.to_jiff()),
            r.get(3),
        ));
    }
    assert_eq!(by_trigger.len(), TRIGGERS, "every trigger was polled");
    let bound = LEASE + INTERVAL;
    let gap_bound = bound + SignedDuration::from_secs(1);
    // When the worker of a run (`host:pid@start`) that started at `started` was killed.
    let killed = |worker: &str, started: Timestamp| {
        let pid: u32 = worker.split_once(':')?.1.split_once('@')?.0.parse().ok()?;
        kills
            .iter()
            .find(|&&(p, at)| p == pid && at >= started)
            .map(|&(_, at)| at)
    };
    // A killed worker may have renewed its lease until it died: its trigger is then taken over
    // within a lease of the death (plus a second for picking it up on a loaded machine), which
    // can be later than the bounds above when its run started late or ran long.
    let takeover = LEASE + SignedDuration::from_secs(1);
    let (mut worst_wait, mut worst_gap) = (SignedDuration::ZERO, SignedDuration::ZERO);
    let mut deaths = 0;
    for (trigger, runs) in &by_trigger {
        let mut due_since: Option<Timestamp> = None;
        let mut last_end: Option<Timestamp> = None;
        // When the worker of the previous run, cut short, was killed.
        let mut death: Option<Timestamp> = None;
        for (started, finished, worker) in runs {
            let (started, finished) = (*started, *finished);
            let taken_over = death.is_some_and(|d| d.duration_until(started) <= takeover);
            if let Some(due) = due_since {
                let wait = due.duration_until(started);
                worst_wait = worst_wait.max(wait);
                assert!(
                    wait <= bound || taken_over,
                    "{trigger} was due from {due} and unpolled until {started}: {wait:#}, more than its lease plus poll interval ({bound:#}), and not within {takeover:#} of its last holder's death ({death:?})"
                );
            }
            if let Some(end) = last_end {
                let gap = end.duration_until(started);
                worst_gap = worst_gap.max(gap);
                assert!(
                    gap <= gap_bound || taken_over,
                    "{trigger} went unpolled from {end} to {started}: {gap:#}, more than {gap_bound:#}, and not within {takeover:#} of its last holder's death ({death:?})"
                );
            }
            // A finished run makes the trigger due again a poll interval later; a killed one
            // leaves it due since whenever it was.
            if let Some(f) = finished {
                due_since = Some(f + INTERVAL);
            }
            last_end = Some(finished.unwrap_or(started));
            death = match finished {
                Some(_) => None,
                None => killed(worker, started),
            };
            deaths += usize::from(death.is_some());
        }
    }

    // The rows written meanwhile are all evaluated: one worker catches every trigger up to a
    // moment after the last row (once the killed workers' leases lapse).
    let end = clock.now() + SignedDuration::from_secs(1);
    let url = events.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let poller = Poller::new(store.clone(), "final", clock.clone(), dsn).with_lease(LEASE);
    let caught_up = wait_for(Duration::from_secs(20), || {
        let (store, poller, clock) = (&store, &poller, &clock);
        async move {
            if clock.now() > end {
                poll::due_now(store, WS, clock.now()).await.unwrap();
                poller.poll_due().await.unwrap();
            }
            let state = poll::list(store, WS).await.unwrap();
            state.iter().all(|t| t.watermark >= end).then_some(state)
        }
    })
    .await
    .expect("the triggers were not caught up within 20 s");

    // The ledger equals a backtest of the same window, fire for fire.
    let defs = definitions::parse(&doc).unwrap();
    let source = Source::connect(defs.source("default").unwrap(), &events.url)
        .await
        .unwrap();
    let mut total = 0;
    for t in &caught_up {
        let rule = format!("r{}", &t.trigger[1..]);
        let window = Window {
            since: pushed - SignedDuration::from_mins(1),
            until: t.watermark,
        };
        let expected = backtest(&defs, &source, &rule, window).await;
        let mut tx = store.begin(WS).await.unwrap();
        let fired = ledger::fires(&mut tx, WS, &rule, None).await.unwrap();
        tx.rollback().await.unwrap();
        let got: BTreeSet<(String, String)> = fired
            .iter()
            .map(|f| (f.key.clone(), f.bucket.clone()))
            .collect();
        assert_eq!(got.len(), fired.len(), "{rule}: a fire twice");
        assert_eq!(
            got, expected,
            "{rule}: the ledger differs from the backtest"
        );
        total += fired.len();
    }
    assert!(total > 100, "too few fires to mean anything: {total}");
    let cut_short: i64 = sqlx::query_scalar("SELECT count(*) FROM run WHERE status = 'running'")
        .fetch_one(&mut cp.admin().await)
        .await
        .unwrap();
    eprintln!(
        "{KILLS} kills; {} rows written; {total} fires; {} runs, {cut_short} cut short by a kill ({deaths} matched to one); longest wait once due {worst_wait:#}, longest gap {worst_gap:#}",
        written.load(Ordering::SeqCst),
        rows.len()
    );
}
