//! Polls 100,000 matching rows into a PostgreSQL ledger for a rule with no actions, claiming in
//! batches and (on a 20,000-row window) one row per transaction, in the same run; then races 1, 4
//! and 16 workers over 32 triggers sharing the 100,000 rows. Prints fires per second, the ratio,
//! and lost or duplicate fires (which must be 0).
//!
//! Run: `cargo bench --bench poll_ledger` (PostgreSQL on 127.0.0.1:5432, or set ROWFIRE_BENCH_PG).

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]

mod support;

use std::sync::Arc;
use std::time::Instant;

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::{self, ClaimStyle, Poller};
use rowfire::push;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

const ROWS: i64 = 100_000;
const SMALL: i64 = 20_000;
const TRIGGERS: i64 = 32;

async fn source_data(admin: &str, now: Timestamp) -> String {
    let url = support::fresh_database(admin, "rowfire_bench_source").await;
    let mut c = PgConnection::connect(&url).await.unwrap();
    let sql = format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, account_id text NOT NULL, happened_at timestamptz NOT NULL);
         INSERT INTO events SELECT g, 'acct_' || g, TIMESTAMPTZ '{now}' - (g * interval '500 milliseconds') FROM generate_series(1::bigint, {ROWS}) g;
         CREATE INDEX events_happened_at ON events (happened_at);
         CREATE TABLE small_events AS SELECT * FROM events WHERE id <= {SMALL};
         CREATE INDEX small_events_happened_at ON small_events (happened_at);
         ANALYZE;"
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
    url
}

fn definitions(triggers: &[(String, String)]) -> String {
    let mut doc =
        String::from("version: 2\nsource: { dsn_env: BENCH_SOURCE, max_rows: 10000 }\ntriggers:\n");
    for (name, sql) in triggers {
        doc.push_str(&format!(
            "  {name}: {{ sql: \"{sql}\", event_time: happened_at, key: [account_id] }}\n"
        ));
    }
    doc.push_str("rules:\n");
    for (name, _) in triggers {
        doc.push_str(&format!(
            "  {name}_once: {{ trigger: {name}, policy: once_ever }}\n"
        ));
    }
    doc
}

/// A control plane with `doc` pushed and every trigger rewound over all the rows.
async fn control_plane(admin: &str, doc: &str, now: Timestamp) -> (String, Store) {
    let url = support::fresh_database(admin, "rowfire_bench_cp").await;
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, doc, now).await.unwrap();
    for t in poll::list(&store, WS).await.unwrap() {
        poll::rewind(&store, WS, &t.trigger, SignedDuration::from_hours(24), now)
            .await
            .unwrap();
    }
    (url, store)
}

async fn fire_counts(url: &str) -> (i64, i64) {
    let mut c = PgConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*), count(DISTINCT (rule_name, mode, dedup_key, dedup_bucket)) FROM fire",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    (row.get(0), row.get(1))
}

/// One fire as the ledger stored it: key, bucket, clock and row.
type Written = (String, String, Timestamp, String);

/// One page of fires as the claim binds them: keys, buckets, clocks and rows, column by column.
type Arrays = (
    Vec<String>,
    Vec<String>,
    Vec<jiff_sqlx::Timestamp>,
    Vec<String>,
);

/// The fires a poll wrote, in the order it wrote them.
async fn written_fires(url: &str) -> Vec<Written> {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::query("SELECT dedup_key, dedup_bucket, clock, row_json FROM fire ORDER BY id")
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            let clock: jiff_sqlx::Timestamp = r.get("clock");
            (
                r.get("dedup_key"),
                r.get("dedup_bucket"),
                clock.to_jiff(),
                r.get("row_json"),
            )
        })
        .collect()
}

/// Inserts `fires` with the ledger's claim statement (`ledger::insert_fires`' text, the relation
/// bound as `unnest` arrays), a page of 10,000 per transaction, from one connection; times only
/// the statements and their commits.
async fn raw_claims(url: &str, fires: &[Written], now: Timestamp) -> f64 {
    let mut c = PgConnection::connect(url).await.unwrap();
    let pages: Vec<Arrays> = fires
        .chunks(10_000)
        .map(|page| {
            (
                page.iter().map(|f| f.0.clone()).collect(),
                page.iter().map(|f| f.1.clone()).collect(),
                page.iter()
                    .map(|f| jiff_sqlx::Timestamp::from(f.2))
                    .collect(),
                page.iter().map(|f| f.3.clone()).collect(),
            )
        })
        .collect();
    let sql = "WITH u (k, b, c, r) AS (SELECT * FROM unnest($7::text[], $8::text[], $9::timestamptz[], $10::text[]))
         INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, run_id, fired_at)
         SELECT $1, $2, $3, u.k, u.b, $4, u.c, u.r, $5, $6 FROM u WHERE true
         ON CONFLICT (workspace_id, rule_name, mode, dedup_key, dedup_bucket) DO NOTHING
         RETURNING id, dedup_key, dedup_bucket";
    let started = Instant::now();
    for (k, b, clock, r) in &pages {
        let mut tx = c.begin().await.unwrap();
        let returned = sqlx::query(sql)
            .bind(WS)
            .bind("events_once")
            .bind("shadow")
            .bind("events")
            .bind(1i64)
            .bind(jiff_sqlx::Timestamp::from(now))
            .bind(k)
            .bind(b)
            .bind(clock)
            .bind(r)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
        assert_eq!(returned.len(), k.len());
        tx.commit().await.unwrap();
    }
    started.elapsed().as_secs_f64()
}

async fn run(pollers: Vec<Poller>) -> f64 {
    let started = Instant::now();
    let results = futures_util::future::join_all(pollers.iter().map(|p| p.poll_due())).await;
    for r in results {
        for report in r.unwrap() {
            assert!(matches!(report.status, poll::PollStatus::Ok), "{report}");
        }
    }
    started.elapsed().as_secs_f64()
}

fn poller(store: Store, name: &str, now: Timestamp, source: &str, style: ClaimStyle) -> Poller {
    let source = source.to_string();
    Poller::new(
        store,
        name,
        Clock::fixed(now),
        Arc::new(move |_, _| Some(source.clone().into())),
    )
    .with_claim_style(style)
}

#[tokio::main]
async fn main() {
    let admin = support::admin_url();
    let now: Timestamp = "2026-11-29T00:00:00Z".parse().unwrap();
    let source = source_data(&admin, now).await;
    println!(
        "method: rows in a PostgreSQL source, ledger in a PostgreSQL control plane on this machine, once_ever rules with no actions, pages of 10,000; each phase starts from an empty ledger"
    );

    // Batched claims: one INSERT … ON CONFLICT DO NOTHING RETURNING per 1,000 fires.
    let all = vec![(
        "events".to_string(),
        "SELECT id, account_id, happened_at FROM events".to_string(),
    )];
    let (url, store) = control_plane(&admin, &definitions(&all), now).await;
    let secs = run(vec![poller(
        store,
        "batched",
        now,
        &source,
        ClaimStyle::Batched,
    )])
    .await;
    let (fires, distinct) = fire_counts(&url).await;
    assert_eq!((fires, distinct), (ROWS, ROWS));
    let batched = fires as f64 / secs;
    println!("batched claims:        {fires:>7} fires in {secs:>6.2} s = {batched:>8.0} fires/s");

    // The raw claim statement alone: the same fires, as prepared arrays, inserted by one client
    // with the ledger's own batched statement, a transaction per page, no Rowfire code around.
    let fires_written = written_fires(&url).await;
    let (url, _) = control_plane(&admin, &definitions(&all), now).await;
    let raw_secs = raw_claims(&url, &fires_written, now).await;
    let (fires, distinct) = fire_counts(&url).await;
    assert_eq!((fires, distinct), (ROWS, ROWS));
    let raw = fires as f64 / raw_secs;
    println!(
        "raw claim statement:   {fires:>7} fires in {raw_secs:>6.2} s = {raw:>8.0} fires/s (batched poll / raw: {:.2}x, needs >= 0.7x)",
        batched / raw
    );

    // One transaction per row, on a 20,000-row window.
    let small = vec![(
        "small".to_string(),
        "SELECT id, account_id, happened_at FROM small_events".to_string(),
    )];
    let (url, store) = control_plane(&admin, &definitions(&small), now).await;
    let secs = run(vec![poller(
        store,
        "per-row",
        now,
        &source,
        ClaimStyle::PerRow,
    )])
    .await;
    let (fires, _) = fire_counts(&url).await;
    assert_eq!(fires, SMALL);
    let per_row = fires as f64 / secs;
    println!("one claim per row:     {fires:>7} fires in {secs:>6.2} s = {per_row:>8.0} fires/s");
    println!(
        "ratio batched / per-row: {:.1}x (needs >= 5x; batched needs >= 30,000 fires/s)",
        batched / per_row
    );

    // Workers racing over 32 triggers that split the rows between them.
    let split: Vec<(String, String)> = (0..TRIGGERS)
        .map(|k| {
            (
                format!("slice_{k}"),
                format!(
                    "SELECT id, account_id, happened_at FROM events WHERE id % {TRIGGERS} = {k}"
                ),
            )
        })
        .collect();
    let mut failed = batched < 30_000.0 || batched / per_row < 5.0 || batched / raw < 0.7;
    for workers in [1usize, 4, 16] {
        let (url, _) = control_plane(&admin, &definitions(&split), now).await;
        let mut pollers = Vec::new();
        for i in 0..workers {
            // A store per worker: separate connections, as separate processes would have.
            let store = Store::open(&url).await.unwrap();
            pollers.push(poller(
                store,
                &format!("w{i}"),
                now,
                &source,
                ClaimStyle::Batched,
            ));
        }
        let secs = run(pollers).await;
        let (fires, distinct) = fire_counts(&url).await;
        let lost = ROWS - distinct;
        let duplicates = fires - distinct;
        println!(
            "{workers:>2} worker(s), {TRIGGERS} triggers: {fires:>7} fires in {secs:>6.2} s = {:>8.0} fires/s, lost {lost}, duplicates {duplicates}",
            fires as f64 / secs
        );
        failed |= lost != 0 || duplicates != 0;
    }
    if failed {
        eprintln!("FAIL: a threshold was missed or a fire was lost or duplicated");
        std::process::exit(1);
    }
}
