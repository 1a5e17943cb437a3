//! Reminders before a moment, on PostgreSQL (a source and a control plane on this machine), in one
//! run:
//!
//! - *an idle tick*: two fresh control planes, one holding 1,000,000 pending sends due days from
//!   now and one holding 100 (fires and deliveries seeded with SQL as a sweep would have written
//!   them, then `VACUUM (ANALYZE)`); an idle tick is what an idle `Sender::run_until` does before
//!   it sleeps: one `Sender::step()` that claims nothing and one `queue::next_due`. Ticks are
//!   timed many times, alternating between the two queues, and the medians compared; the
//!   benchmark fails unless the 1,000,000-send tick's median is under 1.5× the 100-send one's;
//! - *materialising*: a source table of 100,000 meetings for 1,000 accounts (100 meetings each,
//!   every start distinct), starting so that their reminders (default lead, 10 minutes) fall due
//!   evenly over ten minutes from about 1–2 minutes after materialising ends; one time-anchored
//!   rule keyed by account on the Demo inbox (`inbox.chat_message`). The real
//!   `Poller::poll_due` on the system clock sweeps the look-ahead and queues the sends through
//!   the ledger (one fire per rule, mode, key and anchor instant); it is timed and must leave
//!   exactly 100,000 pending deliveries;
//! - *lateness*: one `Sender::run_until` (or `ROWFIRE_BENCH_SENDERS` of them, each its own
//!   connection pool) on the system clock (able to reach the source, since
//!   the rule rechecks its reminders' rows just before they go, as it does by default) sends
//!   them all as they fall due;
//!   lateness is `sent_at − due_at` read back from `delivery`, reported as p50, p99 and max. It
//!   checks that every delivery is sent and has exactly one inbox message (0 lost, 0 duplicates),
//!   and fails unless p99 is under 100 ms.
//!
//! Run: `cargo bench --bench reminders` (PostgreSQL on 127.0.0.1:5432, or set ROWFIRE_BENCH_PG).
//! It takes about 15 minutes, most of it waiting for the reminders to fall due.

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]
#![expect(
    clippy::disallowed_methods,
    reason = "materialising, sending and lateness are measured against the system clock the poller and sender run on"
)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::Poller;
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::secret::MasterKey;
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::queue;
use rowfire::send::sender::{Config, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

const KEYS: i64 = 1_000;
const PER_KEY: i64 = 100;
const REMINDERS: i64 = KEYS * PER_KEY;
/// The reminders fall due evenly over this span.
const SPAN: SignedDuration = SignedDuration::from_secs(600);
/// The first reminder falls due this long after the source is written (materialising runs in
/// between).
const HEAD: SignedDuration = SignedDuration::from_secs(120);
/// The rule's default lead.
const LEAD: SignedDuration = SignedDuration::from_mins(10);
const BIG_QUEUE: i64 = 1_000_000;
const SMALL_QUEUE: i64 = 100;
const WARM_TICKS: usize = 20;
const TICKS: usize = 1_000;

const DEFINITIONS: &str = "version: 2
source: { dsn_env: BENCH_SOURCE }
integrations:
  inbox: { catalog: demo_inbox }
triggers:
  meetings:
    sql: SELECT id, account_id, title, starts_at, reminder_minutes FROM meeting WHERE NOT cancelled
    event_time: starts_at
    key: [account_id]
    poll_interval: 1m
rules:
  nudge:
    trigger: meetings
    anchor: { column: starts_at, lead_column: reminder_minutes, interval: 1h }
    actions:
      - action: inbox.chat_message
        recipient: team
        params: { text: \"{{ title }} starts soon\" }
";

/// A fresh control plane `db` with the definitions pushed and the rule live.
async fn control_plane(admin: &str, db: &str) -> (String, Store) {
    let url = support::fresh_database(admin, db).await;
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    let now = Timestamp::now();
    push::push(&store, WS, DEFINITIONS, now).await.unwrap();
    rules::set_mode(&store, WS, "nudge", Mode::Live, now)
        .await
        .unwrap();
    (url, store)
}

async fn run_sql(url: &str, sql: String) {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
}

/// Seeds `n` pending reminders as a sweep writes them (a fire per account and anchor instant,
/// a Demo inbox delivery each), the first due a day from now and one a second after another.
async fn seed_future(url: &str, n: i64) -> Timestamp {
    let first = micros(Timestamp::now() + SignedDuration::from_hours(24));
    let now = micros(Timestamp::now());
    run_sql(
        url,
        format!(
            "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, fired_at)
             SELECT '{WS}', 'nudge', 'live', 'acct_' || (g % {KEYS}), (TIMESTAMPTZ '{first}' + interval '10 minutes' + (g - 1) * interval '1 second')::text,
                    'meetings', TIMESTAMPTZ '{first}' + interval '10 minutes' + (g - 1) * interval '1 second',
                    json_build_object('id', g, 'account_id', 'acct_' || (g % {KEYS}), 'title', 'Meeting ' || g)::text, TIMESTAMPTZ '{now}'
             FROM generate_series(1::bigint, {n}) g;
             INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, recipient, body, status,
                                   due_at, expires_at, anchor_at, lead_from, created_at)
             SELECT workspace_id, id, rule_name, mode, 0, 'inbox', 'chat_message', 'team',
                    json_build_object('text', (row_json::json ->> 'title') || ' starts soon')::text, 'pending',
                    clock - interval '10 minutes', clock - interval '5 minutes', clock, 'default', TIMESTAMPTZ '{now}'
             FROM fire ORDER BY id;"
        ),
    )
    .await;
    run_sql(url, "VACUUM (ANALYZE)".into()).await;
    first
}

/// `at` to whole microseconds, as PostgreSQL stores it.
fn micros(at: Timestamp) -> Timestamp {
    Timestamp::from_microsecond(at.as_microsecond()).unwrap()
}

fn sender(store: Store, key: &str, source: Option<String>) -> Sender {
    let sender = Sender::new(
        store,
        Client::new(Policy::parse("127.0.0.1", false).unwrap()),
        Clock::system(),
        Ok(MasterKey::parse(key).unwrap()),
        Config::default(),
    );
    match source {
        // A worker's sender reaches sources through the same resolver as its pollers, for the
        // rule's recheck (on by default) just before each reminder goes.
        Some(dsn) => sender.with_recheck(Arc::new(move |_, _| Some(dsn.clone().into()))),
        None => sender,
    }
}

/// One idle tick: a pass that claims nothing, then the read of the next due time. Milliseconds.
async fn tick(sender: &Sender, store: &Store, expect_next: Timestamp) -> f64 {
    let t = Instant::now();
    let step = sender.step().await.unwrap();
    let next = queue::next_due(store).await.unwrap();
    let ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(step.claimed, 0, "an idle tick claims nothing");
    assert_eq!(next, Some(expect_next), "the next due time is the earliest");
    ms
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// Idle ticks on 1,000,000 and on 100 future sends, alternating; (big p50, big p90, small p50,
/// small p90) in milliseconds.
async fn idle_ticks(admin: &str, key: &str) -> (f64, f64, f64, f64) {
    let (big_url, big_store) = control_plane(admin, "rowfire_bench_remind_big").await;
    let seeding = Instant::now();
    let big_first = seed_future(&big_url, BIG_QUEUE).await;
    println!(
        "idle tick: seeded {BIG_QUEUE} future sends in {:.1} s (not timed)",
        seeding.elapsed().as_secs_f64()
    );
    let (small_url, small_store) = control_plane(admin, "rowfire_bench_remind_small").await;
    let small_first = seed_future(&small_url, SMALL_QUEUE).await;
    let big = sender(Store::open(&big_url).await.unwrap(), key, None);
    let small = sender(Store::open(&small_url).await.unwrap(), key, None);
    for _ in 0..WARM_TICKS {
        tick(&big, &big_store, big_first).await;
        tick(&small, &small_store, small_first).await;
    }
    let (mut b, mut s) = (Vec::with_capacity(TICKS), Vec::with_capacity(TICKS));
    for i in 0..TICKS {
        // Alternate which goes first, so neither always follows the other.
        if i % 2 == 0 {
            b.push(tick(&big, &big_store, big_first).await);
            s.push(tick(&small, &small_store, small_first).await);
        } else {
            s.push(tick(&small, &small_store, small_first).await);
            b.push(tick(&big, &big_store, big_first).await);
        }
    }
    b.sort_by(f64::total_cmp);
    s.sort_by(f64::total_cmp);
    let mut c = PgConnection::connect(&big_url).await.unwrap();
    let pending: i64 = sqlx::query("SELECT count(*) FROM delivery WHERE status = 'pending'")
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
    assert_eq!(pending, BIG_QUEUE, "idle ticks changed nothing");
    (
        quantile(&b, 0.5),
        quantile(&b, 0.9),
        quantile(&s, 0.5),
        quantile(&s, 0.9),
    )
}

/// The meetings source: `REMINDERS` meetings for `KEYS` accounts, reminders due evenly over
/// `SPAN` from `first_due`.
async fn source(admin: &str, first_due: Timestamp) -> String {
    let url = support::fresh_database(admin, "rowfire_bench_remind_source").await;
    let step_us = SPAN.as_micros() as i64 / REMINDERS;
    run_sql(
        &url,
        format!(
            "CREATE TABLE meeting (id bigint PRIMARY KEY, account_id text NOT NULL, title text NOT NULL, starts_at timestamptz NOT NULL,
                                   reminder_minutes integer, cancelled boolean NOT NULL DEFAULT false);
             INSERT INTO meeting (id, account_id, title, starts_at)
             SELECT g, 'acct_' || (g % {KEYS}), 'Meeting ' || g,
                    TIMESTAMPTZ '{first_due}' + interval '{} seconds' + (g - 1) * interval '{step_us} microseconds'
             FROM generate_series(1::bigint, {REMINDERS}) g;
             CREATE INDEX meeting_starts_at ON meeting (starts_at);
             ANALYZE;",
            LEAD.as_secs()
        ),
    )
    .await;
    url
}

#[tokio::main]
async fn main() {
    support::init_logging();
    let admin = support::admin_url();
    let key = MasterKey::generate();
    let config = Config::default();
    let senders: usize = std::env::var("ROWFIRE_BENCH_SENDERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    println!(
        "method: PostgreSQL source and control plane on this machine; idle tick = one Sender::step() claiming nothing + one queue::next_due, {TICKS} ticks alternating between a queue of {BIG_QUEUE} future sends and one of {SMALL_QUEUE} (seeded with SQL, VACUUM ANALYZE), medians compared; then {REMINDERS} meetings for {KEYS} accounts whose reminders (lead {LEAD:#}) fall due evenly over {SPAN:#}, materialised by the real Poller::poll_due on the system clock and sent to the Demo inbox by {senders} Sender::run_until with the rule's recheck (one source read per claimed batch and cluster of nearby anchors; batches of {}, {} in flight, {:#} leases, idle at most {:?}); lateness = sent_at - due_at",
        config.batch, config.in_flight, config.lease, config.idle
    );
    let mut failed = false;
    let verdict = |met: bool| if met { "met" } else { "MISSED" };

    // Idle ticks.
    let (big50, big90, small50, small90) = idle_ticks(&admin, &key).await;
    let ratio = big50 / small50;
    println!(
        "idle tick, {BIG_QUEUE} future sends: median {big50:.3} ms (p90 {big90:.3} ms); {SMALL_QUEUE} future sends: median {small50:.3} ms (p90 {small90:.3} ms); ratio {ratio:.2}x"
    );
    println!("target: idle tick ratio < 1.5: {}", verdict(ratio < 1.5));
    failed |= ratio.is_nan() || ratio >= 1.5;

    // Materialising.
    let first_due = micros(Timestamp::now() + HEAD);
    let source_url = source(&admin, first_due).await;
    let (url, store) = control_plane(&admin, "rowfire_bench_remind").await;
    let dsn = source_url.clone();
    let poller = Poller::new(
        store.clone(),
        "bench",
        Clock::system(),
        Arc::new(move |_, _| Some(dsn.clone().into())),
    );
    let started = Instant::now();
    let reports = poller.poll_due().await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    let swept: Vec<_> = reports
        .iter()
        .flat_map(|r| &r.sweeps)
        .map(|(rule, s)| {
            s.clone()
                .unwrap_or_else(|e| panic!("the sweep of {rule} failed: {e}"))
        })
        .collect();
    assert_eq!(swept.len(), 1, "one anchored rule is swept");
    let report = &swept[0];
    println!(
        "materialise: {} sends queued in {secs:.2} s = {:.0} sends/s ({report})",
        report.queued,
        report.queued as f64 / secs
    );
    let mut c = PgConnection::connect(&url).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*) FILTER (WHERE status = 'pending'), count(*), (SELECT count(*) FROM fire),
                (SELECT count(DISTINCT dedup_key) FROM fire), min(due_at) = $1::text::timestamptz
         FROM delivery",
    )
    .bind(first_due.to_string())
    .fetch_one(&mut c)
    .await
    .unwrap();
    let (pending, deliveries, fires, keys): (i64, i64, i64, i64) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let first_ok: Option<bool> = row.get(4);
    println!(
        "    check: {pending} pending of {deliveries} deliveries, {fires} fires over {keys} keys, first due at the first reminder: {}",
        first_ok == Some(true)
    );
    failed |= pending != REMINDERS || deliveries != REMINDERS || fires != REMINDERS || keys != KEYS;
    let head = Timestamp::now().duration_until(first_due);
    println!("    the first reminder falls due {head:#} after materialising ended");
    assert!(
        head > SignedDuration::from_secs(10),
        "materialising took too long for the lateness phase to mean anything"
    );

    // Lateness: `senders` workers, each on a connection pool of its own.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    for _ in 0..senders {
        let sending = sender(
            Store::open(&url).await.unwrap(),
            &key,
            Some(source_url.clone()),
        );
        let stopped = stopped.clone();
        tasks.push(tokio::spawn(
            async move { sending.run_until(stopped).await },
        ));
    }
    let deadline = Instant::now()
        + Duration::try_from(head + SPAN).unwrap_or_default()
        + Duration::from_secs(120);
    let mut last_report = Instant::now();
    loop {
        let sent: i64 = sqlx::query("SELECT count(*) FROM delivery WHERE status = 'sent'")
            .fetch_one(&mut c)
            .await
            .unwrap()
            .get(0);
        let open: i64 = sqlx::query("SELECT count(*) FROM delivery WHERE status = 'pending'")
            .fetch_one(&mut c)
            .await
            .unwrap()
            .get(0);
        if sent == REMINDERS || open == 0 || Instant::now() > deadline {
            break;
        }
        if last_report.elapsed() > Duration::from_secs(60) {
            println!("    … {sent} sent");
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let row = sqlx::query(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms), min(ms)
         FROM (SELECT extract(epoch FROM sent_at - due_at)::float8 * 1000 AS ms FROM delivery WHERE status = 'sent') l",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let get = |i: usize| row.get::<Option<f64>, _>(i).unwrap_or(f64::NAN);
    let (p50, p99, max, min) = (get(0), get(1), get(2), get(3));
    println!(
        "lateness, {senders} sender(s), {REMINDERS} due over {SPAN:#}: p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms (min {min:.1} ms)"
    );
    let row = sqlx::query(
        "SELECT (SELECT count(*) FROM delivery WHERE status = 'sent'),
                (SELECT count(*) FROM delivery d LEFT JOIN inbox_message m ON m.workspace_id = d.workspace_id AND m.delivery_id = d.id
                 WHERE d.status = 'sent' AND m.id IS NULL),
                (SELECT count(*) - count(DISTINCT delivery_id) FROM inbox_message),
                (SELECT count(*) FROM inbox_message m LEFT JOIN delivery d ON d.id = m.delivery_id AND d.status = 'sent' WHERE d.id IS NULL),
                (SELECT count(*) FROM delivery WHERE attempts <> 1),
                (SELECT count(*) FROM inbox_message),
                (SELECT count(*) FROM delivery WHERE due_at <> anchor_at - interval '10 minutes' OR reason IS NOT NULL)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let (sent, lost, duplicates, strangers, reclaimed, messages, moved): (
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
        i64,
    ) = (
        row.get(0),
        row.get(1),
        row.get(2),
        row.get(3),
        row.get(4),
        row.get(5),
        row.get(6),
    );
    println!(
        "    check: {sent}/{REMINDERS} sent, {messages} inbox messages, lost {lost}, duplicates {duplicates}, messages not from a sent delivery {strangers}, claimed more than once {reclaimed}, due time moved or a reason recorded {moved}"
    );
    failed |= sent != REMINDERS || lost != 0 || duplicates != 0 || strangers != 0 || moved != 0;
    println!("target: lateness p99 < 100 ms: {}", verdict(p99 < 100.0));
    failed |= p99.is_nan() || p99 >= 100.0;

    if failed {
        eprintln!("FAIL: a target was missed, or a reminder was lost, duplicated or not sent");
        std::process::exit(1);
    }
}
