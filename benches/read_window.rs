//! Reads a 1,000,000-row window from PostgreSQL through the guard's wrapped query in one pass (a cursor)
//! and applies a weekly cadence (a real `rowfire backtest`), then reads it with Rowfire's reader
//! alone and with a plain streamed SELECT (the driver's floor), three rounds in turn, then the
//! same ordered window read through a cursor and through one streamed statement, decoding
//! nothing, and once with one gathered `fetch_all`, in the same run. Prints each round, the medians' rows per
//! second, the ratios to the floor, each phase's peak memory, and the CPU time each round's
//! phase took in this process and in the rest of the machine (PostgreSQL). It runs on the multi-threaded
//! runtime, as the `rowfire` binary does.
//!
//! Run: `cargo bench --bench read_window` (PostgreSQL on 127.0.0.1:5432, or set ROWFIRE_BENCH_PG).

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]

mod support;

use std::str::FromStr;
use std::time::Instant;

use futures_util::TryStreamExt;
use jiff::Timestamp;
use rowfire::backtest::{self, Options};
use rowfire::definitions;
use rowfire::source::Source;
use sqlx::postgres::PgConnectOptions;
use sqlx::{Connection, PgConnection, Row};

const ROWS: i64 = 1_000_000;
const ACCOUNTS: i64 = 50_000;
const DB: &str = "rowfire_bench";
/// Rounds of the three compared phases; medians are compared.
const ROUNDS: usize = 3;

/// Peak resident memory of this process since the last reset, in MiB.
fn peak_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// Resets the peak so each phase is measured on its own (Linux: clear_refs 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn prepare(admin_url: &str) -> (String, Timestamp) {
    let mut admin = PgConnection::connect(admin_url)
        .await
        .expect("PostgreSQL for the benchmark");
    let exists: bool = sqlx::query("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
        .bind(DB)
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get(0);
    if !exists {
        sqlx::raw_sql("CREATE DATABASE rowfire_bench")
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let opts = PgConnectOptions::from_str(admin_url).unwrap().database(DB);
    let url = format!(
        "postgres://{}@{}:{}/{DB}",
        opts.get_username(),
        opts.get_host(),
        opts.get_port()
    );
    let mut c = PgConnection::connect(&url).await.unwrap();
    let now: Timestamp = "2026-11-29T00:00:00Z".parse().unwrap();
    let have: Option<i64> = sqlx::query("SELECT count(*) FROM bench_events")
        .fetch_one(&mut c)
        .await
        .ok()
        .map(|r| r.get(0));
    if have != Some(ROWS) {
        println!("generating {ROWS} rows (once; kept in database {DB})");
        let setup = format!(
            "DROP TABLE IF EXISTS bench_events;
             CREATE TABLE bench_events (id bigint PRIMARY KEY, account_id text NOT NULL, amount numeric(10,2) NOT NULL,
                                        status text NOT NULL, happened_at timestamptz NOT NULL);
             INSERT INTO bench_events
               SELECT g, 'acct_' || (g * 7919 % {ACCOUNTS}), (g % 1000) / 10.0, CASE WHEN g % 3 = 0 THEN 'declined' ELSE 'failed' END,
                      TIMESTAMPTZ '2026-11-29T00:00:00Z' - (g * interval '2.5 seconds')
               FROM generate_series(1::bigint, {ROWS}) AS g;
             CREATE INDEX bench_events_happened_at ON bench_events (happened_at);
             ANALYZE bench_events;"
        );
        sqlx::raw_sql(sqlx::AssertSqlSafe(setup))
            .execute(&mut c)
            .await
            .unwrap();
    }
    (url, now)
}

#[tokio::main]
async fn main() {
    let admin = support::admin_url();
    let (url, now) = prepare(&admin).await;
    let sql = "SELECT id, account_id, amount, status, happened_at FROM bench_events";
    let doc = format!(
        "version: 2
source: {{ dsn_env: BENCH_SOURCE_URL, max_rows: 10000, statement_timeout_ms: 120000 }}
triggers:
  events: {{ sql: \"{sql}\", event_time: happened_at, key: [account_id] }}
rules:
  weekly: {{ trigger: events, policy: once_per_period, period: week }}
"
    );
    let defs = definitions::parse(&doc).unwrap();
    let source = Source::connect(defs.source("default").unwrap(), &url)
        .await
        .unwrap();

    println!(
        "method: {ROWS} rows, {ACCOUNTS} keys, 30-day window, PostgreSQL on this machine; one process; {ROUNDS} rounds of (backtest, reader alone, floor) in turn, medians compared; then one gathered read"
    );
    let trigger = defs.trigger("events").unwrap();
    let query = source.check("events", sql).unwrap();
    let window = rowfire::sql_guard::Window {
        since: now - jiff::SignedDuration::from_hours(24 * 30),
        until: now,
    };
    let mut c = PgConnection::connect(&url).await.unwrap();
    let (mut backtests, mut readers, mut floors) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rowfire_peak, mut reader_peak, mut plain_peak) = (0f64, 0f64, 0f64);
    let mut last_report = None;
    for round in 1..=ROUNDS {
        // Rowfire: guard, one ordered pass (one streamed statement, pages of 10,000), typed decoding, weekly
        // cadence in memory, NULL-key and NULL-clock counts.
        reset_peak();
        let started = Instant::now();
        let cpu = support::cpu_seconds();
        let report = backtest::run(
            &defs,
            "weekly",
            &source,
            &Options {
                days: 30,
                sample: 5,
                now,
            },
        )
        .await
        .unwrap();
        let backtest_secs = started.elapsed().as_secs_f64();
        let backtest_cpu = cpu_since(cpu);
        rowfire_peak = rowfire_peak.max(peak_mib());
        assert_eq!(
            report.rows_matched, ROWS as u64,
            "every row in the window is read"
        );

        // Rowfire's reader alone: the guarded one-pass read, decoded, no cadence.
        reset_peak();
        let started = Instant::now();
        let cpu = support::cpu_seconds();
        let mut reader = source
            .read_window(&query, trigger.shape(), window)
            .await
            .unwrap();
        let mut read = 0u64;
        while let Some(page) = reader.next_page().await.unwrap() {
            read += page.len() as u64;
        }
        reader.finish().await;
        let reader_secs = started.elapsed().as_secs_f64();
        let reader_cpu = cpu_since(cpu);
        reader_peak = reader_peak.max(peak_mib());
        assert_eq!(read, ROWS as u64);

        // The floor: the same rows streamed by one plain SELECT, no paging, no decoding.
        reset_peak();
        let started = Instant::now();
        let cpu = support::cpu_seconds();
        let mut stream = sqlx::query(sql).fetch(&mut c);
        let mut streamed = 0u64;
        while stream.try_next().await.unwrap().is_some() {
            streamed += 1;
        }
        drop(stream);
        let plain_secs = started.elapsed().as_secs_f64();
        let plain_cpu = cpu_since(cpu);
        plain_peak = plain_peak.max(peak_mib());
        assert_eq!(streamed, ROWS as u64);
        println!(
            "round {round}: backtest {backtest_secs:.2} s ({backtest_cpu}), reader alone {reader_secs:.2} s ({reader_cpu}), floor {plain_secs:.2} s ({plain_cpu})"
        );
        backtests.push(backtest_secs);
        readers.push(reader_secs);
        floors.push(plain_secs);
        last_report = Some(report);
    }
    // Why one streamed statement and not a cursor: the same ordered window as Rowfire's pass
    // (by the clock; the text key is not sorted by), decoding nothing, through a `NO SCROLL`
    // cursor fetched 10,000 rows at a time and through one statement.
    let ordered = query
        .window_sql(
            trigger.shape(),
            window,
            rowfire::sql_guard::Placeholders::Inline,
            &[false],
        )
        .sql;
    let (mut cursors, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        sqlx::raw_sql("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            .execute(&mut c)
            .await
            .unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DECLARE compared NO SCROLL CURSOR FOR {ordered}"
        )))
        .execute(&mut c)
        .await
        .unwrap();
        let mut fetched = 0u64;
        loop {
            let mut got = 0u64;
            let mut page = sqlx::query("FETCH FORWARD 10000 FROM compared").fetch(&mut c);
            while page.try_next().await.unwrap().is_some() {
                got += 1;
            }
            drop(page);
            fetched += got;
            if got < 10_000 {
                break;
            }
        }
        sqlx::raw_sql("ROLLBACK").execute(&mut c).await.unwrap();
        assert_eq!(fetched, ROWS as u64);
        cursors.push(started.elapsed().as_secs_f64());
        let started = Instant::now();
        let mut stream = sqlx::query(sqlx::AssertSqlSafe(ordered.clone())).fetch(&mut c);
        let mut streamed = 0u64;
        while stream.try_next().await.unwrap().is_some() {
            streamed += 1;
        }
        drop(stream);
        assert_eq!(streamed, ROWS as u64);
        streams.push(started.elapsed().as_secs_f64());
    }
    let (cursor_secs, stream_secs) = (support::median(&cursors), support::median(&streams));
    println!(
        "the ordered window, decoding nothing: a cursor fetched 10,000 rows at a time {cursor_secs:.2} s, one streamed statement {stream_secs:.2} s (medians; PostgreSQL materialises each FETCH before sending it)"
    );

    let report = last_report.expect("at least one round");
    let (rowfire_secs, reader_secs, plain_secs) = (
        support::median(&backtests),
        support::median(&readers),
        support::median(&floors),
    );

    // What gathering costs: the whole window in memory at once.
    reset_peak();
    let started = Instant::now();
    let all = sqlx::query(sql).fetch_all(&mut c).await.unwrap();
    let gathered_secs = started.elapsed().as_secs_f64();
    let gathered_rows = all.len();
    drop(all);
    let gathered_peak = peak_mib();

    let rate = |secs: f64| ROWS as f64 / secs;
    println!(
        "rowfire backtest (one pass, decoded, weekly cadence): {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB  fires={} pages={}",
        rate(rowfire_secs),
        rowfire_secs,
        rowfire_peak,
        report.fires,
        report.pages
    );
    println!(
        "rowfire reader alone (one pass, decoded):             {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        rate(reader_secs),
        reader_secs,
        reader_peak
    );
    println!(
        "plain streamed SELECT (driver floor):                 {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        rate(plain_secs),
        plain_secs,
        plain_peak
    );
    println!(
        "one gathered fetch_all ({gathered_rows} rows):                  {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        gathered_rows as f64 / gathered_secs,
        gathered_secs,
        gathered_peak
    );
    println!(
        "ratio rowfire reader alone / floor: {:.2}x (medians)",
        plain_secs / reader_secs
    );
    println!(
        "ratio rowfire backtest / floor: {:.2}x throughput (medians; target 0.5x); peak memory {:.0} MiB (limit 100 MiB) vs {:.0} MiB gathered",
        plain_secs / rowfire_secs,
        rowfire_peak,
        gathered_peak
    );
    if rowfire_peak.max(reader_peak) >= 100.0 {
        eprintln!("FAIL: peak memory {rowfire_peak:.1} MiB is not under 100 MiB");
        std::process::exit(1);
    }
}

/// CPU seconds used since `before` (from `support::cpu_seconds`), by this process and by the
/// rest of the machine (mostly PostgreSQL), as printed.
fn cpu_since(before: (f64, f64)) -> String {
    let (own, busy) = support::cpu_seconds();
    let mine = own - before.0;
    format!(
        "CPU: here {mine:.2} s, rest {:.2} s",
        (busy - before.1) - mine
    )
}
