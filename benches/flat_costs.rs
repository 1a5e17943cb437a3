//! Costs that stay flat as what is stored grows: the same work against a small and a large
//! history, each pair measured in this one run, alternating, medians compared (and each side's
//! range printed).
//!
//! - *claims*: the real poller (`Poller::poll` of a leased trigger) claiming 20,000 new fires
//!   in batches into an empty ledger, and into one already holding 10,000,000 fires (of other
//!   rules, seeded with SQL);
//! - *delivery claims*: `queue::claim_spread` (as a sender claims) of a batch of 200 due
//!   deliveries with 100, and with 10,000,000, finished (sent, failed, dead) deliveries stored
//!   beside 10,000 pending ones;
//! - *idle tick*: one `Poller::poll_due` that finds nothing due, one `Sender::step` that claims
//!   nothing and one `queue::next_due`, with 10 and with 1,000 triggers defined, none due;
//! - *poll*: the real poller's poll of a window holding 1,000 new rows, on a source table of
//!   10,000 and one of 10,000,000 rows, the clock indexed.
//!
//! Large tables are generated server-side (`generate_series`) and kept between runs where they
//! are only read (the source tables) or put back as they were (the ledger and the queue).
//! `ROWFIRE_BENCH_SCALE=100` divides the large sizes by 100 for a quick run; record full-scale
//! figures. Run: `cargo bench --bench flat_costs` (PostgreSQL on 127.0.0.1:5432, or
//! ROWFIRE_BENCH_PG).

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]

mod support;

use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::secret::MasterKey;
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::queue;
use rowfire::send::sender::{Config, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

const REPS: usize = 5;
const NEW_ROWS: i64 = 1_000;
const CLAIMED: i64 = 20_000;

/// The large sizes' divisor (`ROWFIRE_BENCH_SCALE`, default 1: full scale).
#[allow(
    clippy::disallowed_methods,
    reason = "the benchmark's own setting, not Rowfire's"
)]
fn scale() -> i64 {
    std::env::var("ROWFIRE_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1i64)
        .max(1)
}

async fn sql(url: &str, text: String) {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(text))
        .execute(&mut c)
        .await
        .unwrap();
}

async fn count(url: &str, text: &str) -> Option<i64> {
    let mut c = PgConnection::connect(url).await.ok()?;
    sqlx::query(AssertSqlSafe(text.to_string()))
        .fetch_one(&mut c)
        .await
        .ok()
        .map(|r| r.get(0))
}

/// A side of a pair as printed: its median and the range of its repetitions, which shows a
/// stall that only some repetitions hit (for example a 40 ms wait for a delayed ACK).
fn spread(v: &[f64]) -> String {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("median {:.2} ms ({lo:.2} to {hi:.2})", support::median(v))
}

/// Prints a pair (median and range of each side) and whether the large one's median is within
/// 1.5x of the small one's.
fn pair(what: &str, small: (&str, &[f64]), large: (&str, &[f64])) -> bool {
    let ratio = support::median(large.1) / support::median(small.1);
    let met = ratio <= 1.5;
    println!(
        "{what}: {} {}; {} {}; ratio {ratio:.2}x (target <= 1.5x: {})",
        small.0,
        spread(small.1),
        large.0,
        spread(large.1),
        if met { "met" } else { "MISSED" }
    );
    met
}

/// A database on the server, kept between runs; created when missing.
async fn kept_database(admin: &str, db: &str) -> String {
    let mut c = PgConnection::connect(admin).await.unwrap();
    let exists: bool = sqlx::query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(db)
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
    if !exists {
        sqlx::raw_sql(AssertSqlSafe(format!("CREATE DATABASE {db}")))
            .execute(&mut c)
            .await
            .unwrap();
    }
    support::url_for(admin, db)
}

/// A source table `name` of `rows` rows, all older than `now - 1 day` but the last `NEW_ROWS`,
/// which fall in the ten minutes before `now`; the clock indexed. Kept when it already holds
/// that many rows.
async fn source_table(url: &str, name: &str, rows: i64, now: Timestamp) {
    if count(url, &format!("SELECT count(*) FROM {name}")).await == Some(rows) {
        return;
    }
    let old = rows - NEW_ROWS;
    sql(
        url,
        format!(
            "DROP TABLE IF EXISTS {name};
             CREATE TABLE {name} (id bigint PRIMARY KEY, account_id text NOT NULL, happened_at timestamptz NOT NULL);
             INSERT INTO {name} SELECT g, 'acct_' || (g % 50000), TIMESTAMPTZ '{now}' - interval '1 day' - (g * interval '1 second')
               FROM generate_series(1::bigint, {old}) g;
             INSERT INTO {name} SELECT {old} + g, 'new_' || g, TIMESTAMPTZ '{now}' - interval '10 minutes' + (g * interval '500 milliseconds')
               FROM generate_series(1::bigint, {NEW_ROWS}) g;
             CREATE INDEX {name}_happened_at ON {name} (happened_at);
             ANALYZE {name};"
        ),
    )
    .await;
}

fn poller(store: &Store, clock: &Clock, source: &str) -> Poller {
    let source = source.to_string();
    Poller::new(
        store.clone(),
        "bench",
        clock.clone(),
        Arc::new(move |_, _| Some(source.clone().into())),
    )
}

/// A fresh control plane with `doc` pushed at `at`.
async fn control_plane(admin: &str, db: &str, doc: &str, at: Timestamp) -> (String, Store) {
    let url = support::fresh_database(admin, db).await;
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, doc, at).await.unwrap();
    (url, store)
}

/// Polls one leased trigger and settles it; milliseconds, and the rows it matched.
async fn timed_poll(poller: &Poller, store: &Store) -> (f64, u64) {
    let started = Instant::now();
    let lease = poller.lease().await.unwrap().expect("a trigger is due");
    let (report, settle) = poller.poll(&lease).await;
    poll::settle(store, &lease, &settle).await.unwrap();
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    assert!(matches!(report.status, poll::PollStatus::Ok), "{report}");
    (ms, report.matched)
}

/// A poll of 1,000 new rows on a table of 10,000 and one of 10,000,000 (clock indexed).
async fn polls(admin: &str, large: i64) -> bool {
    let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
    let source = kept_database(admin, "rowfire_bench_flat_source").await;
    let seeding = Instant::now();
    source_table(&source, "small_events", 10_000, now).await;
    source_table(&source, "large_events", large, now).await;
    println!(
        "poll: source tables ready in {:.1} s (not timed)",
        seeding.elapsed().as_secs_f64()
    );
    let doc = "version: 2
source: { dsn_env: BENCH_SOURCE, max_rows: 10000 }
triggers:
  small: { sql: \"SELECT id, account_id, happened_at FROM small_events\", event_time: happened_at, key: [account_id] }
  large: { sql: \"SELECT id, account_id, happened_at FROM large_events\", event_time: happened_at, key: [account_id] }
rules:
  small_once: { trigger: small, policy: once_ever }
  large_once: { trigger: large, policy: once_ever }
";
    let pushed = now - SignedDuration::from_mins(10);
    let (cp, store) = control_plane(admin, "rowfire_bench_flat_cp", doc, pushed).await;
    let clock = Clock::fixed(now);
    let poller = poller(&store, &clock, &source);
    let (mut small, mut big) = (Vec::new(), Vec::new());
    for rep in 0..REPS {
        // Each rep polls one trigger, then the other (in turn first), over the same window.
        let order = if rep % 2 == 0 {
            ["small", "large"]
        } else {
            ["large", "small"]
        };
        for name in order {
            poll::rewind(&store, WS, name, SignedDuration::from_mins(10), now)
                .await
                .unwrap();
            // Only this trigger is due: the other waits an hour.
            let other = if name == "small" { "large" } else { "small" };
            not_due(&cp, other, now).await;
            let (ms, matched) = timed_poll(&poller, &store).await;
            assert_eq!(matched, NEW_ROWS as u64, "{name} read its new rows only");
            if name == "small" {
                small.push(ms);
            } else {
                big.push(ms);
            }
        }
    }
    pair(
        "poll of 1,000 new rows",
        ("10,000-row table", &small),
        (&format!("{large}-row table"), &big),
    )
}

/// Makes `trigger` (`%` for every one) due an hour after `now`.
async fn not_due(url: &str, trigger: &str, now: Timestamp) {
    let later = now + SignedDuration::from_hours(1);
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::query("UPDATE trigger_state SET next_poll_at = $1 WHERE trigger_name LIKE $2")
        .bind(jiff_sqlx::Timestamp::from(later))
        .bind(trigger)
        .execute(&mut c)
        .await
        .unwrap();
}

/// The claims' definitions: one trigger and once-ever rule per repetition over `claim_events`.
fn claims_doc() -> String {
    let mut doc =
        String::from("version: 2\nsource: { dsn_env: BENCH_SOURCE, max_rows: 10000 }\ntriggers:\n");
    for r in 0..REPS {
        doc.push_str(&format!(
            "  claims_{r}: {{ sql: \"SELECT id, account_id, happened_at FROM claim_events\", event_time: happened_at, key: [account_id] }}\n"
        ));
    }
    doc.push_str("rules:\n");
    for r in 0..REPS {
        doc.push_str(&format!(
            "  claims_{r}_once: {{ trigger: claims_{r}, policy: once_ever }}\n"
        ));
    }
    doc
}

/// A ledger holding `history` fires of 100 other rules, kept between runs (this run's own
/// fires, of the `claims_` rules, are deleted first); `history` 0 is a fresh empty ledger.
async fn ledger(admin: &str, db: &str, history: i64, at: Timestamp) -> (String, Store) {
    let url = if history == 0 {
        support::fresh_database(admin, db).await
    } else {
        kept_database(admin, db).await
    };
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, &claims_doc(), at).await.unwrap();
    let held = count(
        &url,
        "SELECT count(*) FROM fire WHERE rule_name LIKE 'history_%'",
    )
    .await;
    if held != Some(history) {
        sql(
            &url,
            format!(
                "DELETE FROM fire;
                 INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, fired_at)
                 SELECT '{WS}', 'history_' || (g % 100), 'live', '[\"acct_' || g || '\"]', '', 'history',
                        TIMESTAMPTZ '{at}' - (g * interval '1 second'), '{{}}', TIMESTAMPTZ '{at}'
                 FROM generate_series(1::bigint, {history}) g;
                 ANALYZE fire;"
            ),
        )
        .await;
    }
    sql(
        &url,
        "DELETE FROM fire WHERE rule_name LIKE 'claims_%'".into(),
    )
    .await;
    (url, store)
}

/// Batched claims of 20,000 new fires into an empty ledger and into one of `large` fires.
async fn claims(admin: &str, large: i64) -> bool {
    let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
    let source = kept_database(admin, "rowfire_bench_flat_source").await;
    if count(&source, "SELECT count(*) FROM claim_events").await != Some(CLAIMED) {
        sql(
            &source,
            format!(
                "DROP TABLE IF EXISTS claim_events;
                 CREATE TABLE claim_events (id bigint PRIMARY KEY, account_id text NOT NULL, happened_at timestamptz NOT NULL);
                 INSERT INTO claim_events SELECT g, 'c_' || g, TIMESTAMPTZ '{now}' - interval '10 minutes' + (g * interval '25 milliseconds')
                   FROM generate_series(1::bigint, {CLAIMED}) g;
                 CREATE INDEX claim_events_happened_at ON claim_events (happened_at);
                 ANALYZE claim_events;"
            ),
        )
        .await;
    }
    let pushed = now - SignedDuration::from_mins(10);
    let seeding = Instant::now();
    let (small_url, small) = ledger(admin, "rowfire_bench_flat_ledger_small", 0, pushed).await;
    let (big_url, big) = ledger(admin, "rowfire_bench_flat_ledger_big", large, pushed).await;
    println!(
        "claims: ledgers ready in {:.1} s (not timed)",
        seeding.elapsed().as_secs_f64()
    );
    let clock = Clock::fixed(now);
    let (mut s, mut b) = (Vec::new(), Vec::new());
    for rep in 0..REPS {
        let order: [(&str, &Store, bool); 2] = if rep % 2 == 0 {
            [(&small_url, &small, false), (&big_url, &big, true)]
        } else {
            [(&big_url, &big, true), (&small_url, &small, false)]
        };
        for (url, store, is_big) in order {
            // Only this repetition's trigger is due.
            not_due(url, "%", now).await;
            poll::rewind(
                store,
                WS,
                &format!("claims_{rep}"),
                SignedDuration::from_mins(10),
                now,
            )
            .await
            .unwrap();
            let (ms, matched) = timed_poll(&poller(store, &clock, &source), store).await;
            assert_eq!(matched, CLAIMED as u64);
            let rate = CLAIMED as f64 / (ms / 1000.0);
            if is_big {
                b.push(ms);
            } else {
                s.push(ms);
            }
            let _ = rate;
        }
    }
    let fired = count(
        &big_url,
        "SELECT count(*) FROM fire WHERE rule_name LIKE 'claims_%'",
    )
    .await;
    assert_eq!(
        fired,
        Some(CLAIMED * REPS as i64),
        "every claim made its fires"
    );
    println!(
        "claims: {CLAIMED} new fires, batched: empty ledger {:.0} fires/s; ledger of {large} fires {:.0} fires/s",
        CLAIMED as f64 / (support::median(&s) / 1000.0),
        CLAIMED as f64 / (support::median(&b) / 1000.0)
    );
    pair(
        "claims of 20,000 new fires (poll time)",
        ("empty ledger", &s),
        (&format!("{large}-fire ledger"), &b),
    )
}

/// A queue of 10,000 pending deliveries, due, beside `finished` sent, failed and dead ones,
/// kept between runs (leases taken by an earlier run have lapsed by the next).
async fn queue_of(admin: &str, db: &str, finished: i64) -> (String, Store) {
    let url = kept_database(admin, db).await;
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    let held = count(
        &url,
        "SELECT count(*) FROM delivery WHERE status <> 'pending'",
    )
    .await;
    if held != Some(finished) {
        let at = Clock::system().now() - SignedDuration::from_hours(1);
        sql(
            &url,
            format!(
                "DELETE FROM delivery; DELETE FROM fire;
                 INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, fired_at)
                 VALUES ('{WS}', 'r', 'live', '[\"k\"]', '', 't', TIMESTAMPTZ '{at}', '{{}}', TIMESTAMPTZ '{at}');
                 INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, status, reason, due_at, created_at)
                 SELECT '{WS}', (SELECT id FROM fire), 'r', 'live', g, 'hook', 'post',
                        (ARRAY['sent', 'failed', 'dead'])[g % 3 + 1], CASE WHEN g % 3 = 0 THEN NULL ELSE 'seeded' END,
                        TIMESTAMPTZ '{at}' - interval '1 day' - (g * interval '1 second'), TIMESTAMPTZ '{at}'
                 FROM generate_series(1::bigint, {finished}) g;
                 INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, status, due_at, created_at)
                 SELECT '{WS}', (SELECT id FROM fire), 'r', 'live', {finished} + g, 'hook', 'post', 'pending',
                        TIMESTAMPTZ '{at}' + (g * interval '1 millisecond'), TIMESTAMPTZ '{at}'
                 FROM generate_series(1::bigint, 10000) g;
                 ANALYZE delivery;"
            ),
        )
        .await;
    }
    (url, store)
}

/// Claims of 200 due deliveries with 100 and with `large` finished deliveries stored.
async fn delivery_claims(admin: &str, large: i64) -> bool {
    let seeding = Instant::now();
    let (_, small) = queue_of(admin, "rowfire_bench_flat_queue_small", 100).await;
    let (_, big) = queue_of(admin, "rowfire_bench_flat_queue_big", large).await;
    println!(
        "delivery claims: queues ready in {:.1} s (not timed)",
        seeding.elapsed().as_secs_f64()
    );
    let (mut s, mut b) = (Vec::new(), Vec::new());
    for rep in 0..REPS * 5 {
        let order = if rep % 2 == 0 {
            [(&small, false), (&big, true)]
        } else {
            [(&big, true), (&small, false)]
        };
        for (store, is_big) in order {
            let started = Instant::now();
            // As a sender claims: starting in a lane (each repetition another).
            let claimed = queue::claim_spread(
                store,
                Clock::system().now(),
                200,
                queue::DEFAULT_LEASE,
                rep as u8,
            )
            .await
            .unwrap();
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(claimed.len(), 200, "a full batch is due");
            if is_big {
                b.push(ms);
            } else {
                s.push(ms);
            }
        }
    }
    pair(
        "claim of 200 due deliveries",
        ("100 finished stored", &s),
        (&format!("{large} finished stored"), &b),
    )
}

/// An idle worker's tick with 10 and with 1,000 triggers defined, none due.
async fn idle_ticks(admin: &str) -> bool {
    let now = Clock::system().now();
    let source = kept_database(admin, "rowfire_bench_flat_source").await;
    let key = MasterKey::generate();
    let mut ticks = Vec::new();
    for (n, db) in [
        (10, "rowfire_bench_flat_idle_small"),
        (1_000, "rowfire_bench_flat_idle_big"),
    ] {
        let mut doc = String::from("version: 2\nsource: { dsn_env: BENCH_SOURCE }\ntriggers:\n");
        for t in 0..n {
            doc.push_str(&format!(
                "  t{t}: {{ sql: \"SELECT id, account_id, happened_at FROM small_events\", event_time: happened_at, key: [account_id] }}\n"
            ));
        }
        doc.push_str("rules:\n");
        for t in 0..n {
            doc.push_str(&format!("  r{t}: {{ trigger: t{t}, policy: once_ever }}\n"));
        }
        let (url, store) = control_plane(admin, db, &doc, now).await;
        not_due(&url, "%", now).await;
        sql(&url, "VACUUM ANALYZE".into()).await;
        let sender = Sender::new(
            store.clone(),
            Client::new(Policy::parse("127.0.0.1", false).unwrap()),
            Clock::system(),
            Ok(MasterKey::parse(&key).unwrap()),
            Config::default(),
        );
        ticks.push((poller(&store, &Clock::system(), &source), sender, store));
    }
    async fn tick((poller, sender, store): &(Poller, Sender, Store)) -> f64 {
        let started = Instant::now();
        let polled = poller.poll_due().await.unwrap();
        let step = sender.step().await.unwrap();
        let _ = queue::next_due(store).await.unwrap();
        assert!(
            polled.is_empty() && step.claimed == 0,
            "an idle tick does nothing"
        );
        started.elapsed().as_secs_f64() * 1000.0
    }
    let (mut s, mut b) = (Vec::new(), Vec::new());
    for i in 0..220 {
        let (first, second) = if i % 2 == 0 { (0, 1) } else { (1, 0) };
        let a = tick(&ticks[first]).await;
        let c = tick(&ticks[second]).await;
        // The first 20 warm the connections and caches.
        if i >= 20 {
            let (small, big) = if first == 0 { (a, c) } else { (c, a) };
            s.push(small);
            b.push(big);
        }
    }
    pair("idle tick", ("10 triggers", &s), ("1,000 triggers", &b))
}

#[tokio::main]
async fn main() {
    let admin = support::admin_url();
    let large = 10_000_000 / scale();
    println!(
        "method: PostgreSQL source and control plane on this machine; each pair measured in this run, {REPS} repetitions alternating small and large, medians; large size {large} (ROWFIRE_BENCH_SCALE={})",
        scale()
    );
    let mut met = true;
    met &= polls(&admin, large).await;
    met &= claims(&admin, large).await;
    met &= delivery_claims(&admin, large).await;
    met &= idle_ticks(&admin).await;
    if !met {
        eprintln!("FAIL: a large-history cost is more than 1.5x its small one");
        std::process::exit(1);
    }
}
