//! Reads a 1,000,000-row window from PostgreSQL through the guard's wrapped query in one pass (a cursor)
//! and applies a weekly cadence (a real `rowfire backtest`), then reads the same rows with a
//! plain streamed SELECT (the driver's floor) and with one gathered `fetch_all`, in the same run.
//! Prints rows per second, the ratio to the floor, and each phase's peak memory.
//!
//! Run: `cargo bench --bench read_window` (PostgreSQL on 127.0.0.1:5432, or set ROWFIRE_BENCH_PG).

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

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let admin = support::admin_url();
    let (url, now) = prepare(&admin).await;
    let sql = "SELECT id, account_id, amount, status, happened_at FROM bench_events";
    let doc = format!(
        "version: 2
source: {{ dsn_env: ROWFIRE_BENCH_SOURCE, max_rows: 10000, statement_timeout_ms: 120000 }}
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
        "method: {ROWS} rows, {ACCOUNTS} keys, 30-day window, PostgreSQL on this machine; one process, three phases in one run"
    );

    // Phase 1: Rowfire — guard, wrapped query read in one pass (pages of 10,000), typed decoding,
    // weekly cadence in memory, NULL-clock and NULL-key counts.
    reset_peak();
    let started = Instant::now();
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
    let rowfire_secs = started.elapsed().as_secs_f64();
    let rowfire_peak = peak_mib();
    assert_eq!(
        report.rows_matched, ROWS as u64,
        "every row in the window is read"
    );
    let rowfire_rate = ROWS as f64 / rowfire_secs;

    // Phase 1b: Rowfire's reader alone — the guarded one-pass read, decoded, no cadence — to
    // show what the cadence costs on top of reading.
    let trigger = defs.trigger("events").unwrap();
    let query = source.check("events", sql).unwrap();
    let window = rowfire::sql_guard::Window {
        since: now - jiff::SignedDuration::from_hours(24 * 30),
        until: now,
    };
    reset_peak();
    let started = Instant::now();
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
    let reader_peak = peak_mib();
    assert_eq!(read, ROWS as u64);

    // Phase 2: the floor — the same rows streamed by one plain SELECT, no paging, no decoding.
    let mut c = PgConnection::connect(&url).await.unwrap();
    reset_peak();
    let started = Instant::now();
    let mut stream = sqlx::query(sql).fetch(&mut c);
    let mut streamed = 0u64;
    while stream.try_next().await.unwrap().is_some() {
        streamed += 1;
    }
    drop(stream);
    let plain_secs = started.elapsed().as_secs_f64();
    let plain_peak = peak_mib();
    assert_eq!(streamed, ROWS as u64);
    let plain_rate = ROWS as f64 / plain_secs;

    // Phase 3: what gathering costs — the whole window in memory at once.
    reset_peak();
    let started = Instant::now();
    let all = sqlx::query(sql).fetch_all(&mut c).await.unwrap();
    let gathered_secs = started.elapsed().as_secs_f64();
    let gathered_rows = all.len();
    drop(all);
    let gathered_peak = peak_mib();

    println!(
        "rowfire backtest (paged, decoded, weekly cadence): {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB  fires={} pages={}",
        rowfire_rate, rowfire_secs, rowfire_peak, report.fires, report.pages
    );
    println!(
        "rowfire reader alone (one pass, decoded):          {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        ROWS as f64 / reader_secs,
        reader_secs,
        reader_peak
    );
    println!(
        "plain streamed SELECT (driver floor):              {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        plain_rate, plain_secs, plain_peak
    );
    println!(
        "one gathered fetch_all ({gathered_rows} rows):               {:>9.0} rows/s  {:>6.2} s  peak {:>6.1} MiB",
        gathered_rows as f64 / gathered_secs,
        gathered_secs,
        gathered_peak
    );
    println!(
        "ratio rowfire reader alone / floor: {:.2}x",
        ROWS as f64 / reader_secs / plain_rate
    );
    println!(
        "ratio rowfire / floor: {:.2}x throughput; peak memory {:.0} MiB (limit 100 MiB) vs {:.0} MiB gathered",
        rowfire_rate / plain_rate,
        rowfire_peak,
        gathered_peak
    );
    if rowfire_peak.max(reader_peak) >= 100.0 {
        eprintln!("FAIL: peak memory {rowfire_peak:.1} MiB is not under 100 MiB");
        std::process::exit(1);
    }
}
