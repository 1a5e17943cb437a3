//! Sends queued deliveries from a PostgreSQL control plane to a local HTTP receiver on 127.0.0.1
//! that answers 200 at once, through the real sender (claim a batch with a lease, send through
//! the egress-checked client with Standard Webhooks signatures, settle by (id, token) with the
//! attempt recorded):
//!
//! - *drains and the peer, in rounds*: three rounds, each draining 100,000 deliveries, all due,
//!   with 1, 4 and 16 workers in one process (as `rowfire worker --concurrency N` runs them:
//!   one sender with 64×N requests in flight and claims of 200×N, `Config::with_concurrency`,
//!   on one control-plane pool and one HTTP client; graphile-worker's concurrency 16 is likewise
//!   one process with one pool), with 4 and 16 worker processes (a sender each at concurrency 1,
//!   each on a pool and HTTP client of its own, though all run in this one process), timed from
//!   start until every sender's `drain()` has returned, and 100,000 no-op jobs with
//!   graphile-worker at concurrency 16 on a scratch database
//!   (`../shared/peers/graphile-worker/run.sh`). Each round starts the six one place later, so
//!   no drain always runs first or last (three rounds cannot balance a steady drift exactly);
//!   medians are compared: 16 workers in one process against the best of 1 and 4, and against
//!   the peer; 16 workers with a pool each against 4;
//! - *a pass taken apart*: the first 100 batches of another 100,000-delivery backlog, claimed,
//!   sent and settled one after the other by one worker with the library's own pieces
//!   (`queue::claim_due`, `sender::outbound` and the client, `queue::settle_many`), each timed;
//! - *lateness*: 10,000 deliveries falling due at a steady 500 a second, starting two seconds
//!   after they are queued, sent by 1 and by 4 workers running `run_until` on the system clock;
//!   lateness is `sent_at − due_at`, reported as p50, p99 and max.
//!
//! Rowfire and the peer reach PostgreSQL over the same transport: plaintext TCP on loopback
//! unless `ROWFIRE_BENCH_PG` names an `sslmode` (sqlx would otherwise prefer TLS where
//! node-postgres uses none); with TLS, both use it.
//!
//! After every phase it checks that each delivery is `sent` and arrived exactly once at the
//! receiver (counted by the `webhook-id` header, which carries the delivery's id): 0 lost,
//! 0 duplicates, nothing received that is not marked sent, one attempt recorded per delivery.
//! Each drain also prints the CPU time of the senders, of the receiver's thread and of the rest
//! of the machine (PostgreSQL), from `/proc`, the transactions PostgreSQL committed for it
//! (`pg_stat_database.xact_commit`), the WAL it wrote and what PostgreSQL's backends waited on.
//! It fails unless 16 workers drain at least 5,000 deliveries/s and every p99 is under 250 ms.
//!
//! Deliveries are seeded with SQL (fires and their deliveries, as the poller would have written
//! them), then `ANALYZE`; seeding is not timed. A drained backlog shares one `due_at`, as the
//! deliveries of one poll do (they are due at the poll's now).
//!
//! Run: `cargo bench --bench deliver_queue` (PostgreSQL on 127.0.0.1:5432, or set
//! ROWFIRE_BENCH_PG; node and npm for the peer, which is skipped with a message without them).
//! `ROWFIRE_BENCH_DRAINS=4,16` runs one round of only those drains (in one process; `16p` for 16
//! worker processes) and stops.

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]
#![expect(
    clippy::disallowed_methods,
    reason = "lateness is measured against the system clock the senders run on"
)]

mod support;

use support::receiver::Receiver;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures_util::StreamExt as _;
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::definitions::versions;
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::secret::{self, MasterKey};
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::outcome::AttemptResult;
use rowfire::send::queue::{self, Attempt, Settled, Settlement};
use rowfire::send::sender::{Config, SendReport, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

const DRAINED: i64 = 100_000;
const PACED: i64 = 10_000;
const PER_SECOND: i64 = 500;
const LEAD: SignedDuration = SignedDuration::from_secs(2);
const PEER_CONCURRENCY: usize = 16;
const BREAKDOWN_BATCHES: usize = 100;
/// The drains compared, in the order of the first round.
const DRAINS: [(usize, Layout); 5] = [
    (1, Layout::OneProcess),
    (4, Layout::OneProcess),
    (16, Layout::OneProcess),
    (4, Layout::Processes),
    (16, Layout::Processes),
];

/// How a drain's workers are housed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// One worker process at concurrency N, as `rowfire worker --concurrency N` runs it: one
    /// sender with N times the requests in flight, on one control-plane pool and HTTP client.
    OneProcess,
    /// N workers as N processes would have them: each sender on a pool and an HTTP client of
    /// its own (all in this benchmark's one process and runtime).
    Processes,
}

impl Layout {
    fn label(self, workers: usize) -> String {
        match self {
            Layout::OneProcess => format!("{workers:>2} worker(s) in one process"),
            Layout::Processes => format!("{workers:>2} workers, a pool each   "),
        }
    }
}
/// Rounds of drains at every worker count; medians are compared.
const ROUNDS: usize = 3;

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn signing_secret() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"rowfire-bench-signing-secret-012")
    )
}

/// A fresh control plane with the definitions pushed, the rule live, the signing secret stored,
/// and `n` fires with one pending delivery each, due from `first_due` one every `spacing`.
async fn control_plane(
    admin: &str,
    receiver: &Receiver,
    key: &str,
    n: i64,
    first_due: impl Fn() -> Timestamp,
    spacing: SignedDuration,
) -> (String, Timestamp) {
    let url = support::fresh_database(admin, "rowfire_bench_deliver").await;
    let store = Store::open(&url).await.unwrap();
    store.migrate().await.unwrap();
    let now = Timestamp::now();
    push::push(
        &store,
        WS,
        &support::receiver::definitions(&receiver.url),
        now,
    )
    .await
    .unwrap();
    rules::set_mode(&store, WS, "welcome", Mode::Live, now)
        .await
        .unwrap();
    let signing_secret = signing_secret();
    let master = MasterKey::parse(key).unwrap();
    secret::put(
        &store,
        &master,
        WS,
        "integration:hooks",
        "signing_secret",
        &signing_secret,
        now,
    )
    .await
    .unwrap();
    let first = first_due();
    let mut c = PgConnection::connect(&url).await.unwrap();
    let sql = format!(
        "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, fired_at)
         SELECT '{WS}', 'welcome', 'live', 'u' || g, 'ever', 'signups', TIMESTAMPTZ '{now}', '{{\"id\":\"u' || g || '\"}}', TIMESTAMPTZ '{now}'
         FROM generate_series(1::bigint, {n}) g;
         INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, method, url, headers, body, status, due_at, created_at)
         SELECT workspace_id, id, rule_name, mode, 0, 'hooks', 'send', 'POST', '{}/hooks', '{{}}',
                json_build_object('type', 'user.signed_up', 'data', json_build_object('key', dedup_key, 'fire', id))::text,
                'pending', TIMESTAMPTZ '{first}' + (id - 1) * interval '{} microseconds', TIMESTAMPTZ '{now}'
         FROM fire ORDER BY id;
         ANALYZE;",
        receiver.url,
        spacing.as_micros()
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
    (url, first)
}

/// The senders of `workers` workers: in one process, the one sender `rowfire worker
/// --concurrency N` runs (`Config::with_concurrency`: N times the requests in flight and the
/// claim, on the process's one store and HTTP client); as processes, one sender each, each on a
/// store (connection pool) and HTTP client of its own.
async fn senders(url: &str, key: &str, workers: usize, layout: Layout) -> Vec<Arc<Sender>> {
    let sender = |store, config| {
        Arc::new(Sender::new(
            store,
            Client::new(Policy::parse("127.0.0.1", false).unwrap()),
            Clock::system(),
            Ok(MasterKey::parse(key).unwrap()),
            config,
        ))
    };
    match layout {
        Layout::OneProcess => vec![sender(
            Store::open(url).await.unwrap(),
            Config::with_concurrency(workers),
        )],
        Layout::Processes => {
            let mut out = Vec::new();
            for _ in 0..workers {
                out.push(sender(Store::open(url).await.unwrap(), Config::default()));
            }
            out
        }
    }
}

/// Checks that `expected` deliveries are sent and that each sent one, and nothing else, arrived
/// exactly once; prints the check.
async fn check(url: &str, receiver: &Receiver, expected: i64) -> bool {
    let mut c = PgConnection::connect(url).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*), count(*) FILTER (WHERE status = 'sent'), (SELECT count(*) FROM delivery_attempt) FROM delivery",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let (total, sent, attempts): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    let ids: HashSet<i64> = sqlx::query("SELECT id FROM delivery WHERE status = 'sent'")
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tally = receiver.take();
    let lost = ids
        .iter()
        .filter(|id| !tally.by_id.contains_key(id))
        .count();
    let duplicates: u64 = tally.by_id.values().map(|c| u64::from(c - 1)).sum();
    let strangers =
        tally.by_id.keys().filter(|id| !ids.contains(id)).count() as u64 + tally.without_id;
    println!(
        "    check: {sent}/{total} sent, {} distinct received, lost {lost}, duplicates {duplicates}, received but not sent {strangers}, attempts recorded {attempts}",
        tally.by_id.len()
    );
    sent == expected && attempts == expected && lost == 0 && duplicates == 0 && strangers == 0
}

/// Samples `pg_stat_activity` of the database at `url` every 20 ms until `stop` turns true:
/// per sample, each backend but its own that is not idle, by what it waits on (`CPU` when it
/// waits on nothing), and how many connections are open. Returns the tallies, most seen first,
/// with the number of samples and the mean count of connections.
async fn sample_waits(
    url: String,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> (Vec<(String, u64)>, u64, f64) {
    let mut c = PgConnection::connect(&url).await.unwrap();
    let mut tally: std::collections::HashMap<String, u64> = Default::default();
    let (mut samples, mut connections) = (0u64, 0u64);
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        let rows = sqlx::query(
            "SELECT CASE WHEN state = 'idle' THEN 'idle' ELSE coalesce(wait_event_type || ':' || wait_event, 'CPU') END AS w, count(*) AS n
             FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
             GROUP BY 1",
        )
        .fetch_all(&mut c)
        .await
        .unwrap();
        samples += 1;
        for r in rows {
            let (w, n): (String, i64) = (r.get(0), r.get(1));
            connections += n as u64;
            if w != "idle" {
                *tally.entry(w).or_default() += n as u64;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let mut tally: Vec<_> = tally.into_iter().collect();
    tally.sort_by_key(|t| std::cmp::Reverse(t.1));
    (tally, samples, connections as f64 / samples.max(1) as f64)
}

/// Drains every due delivery with `workers` senders at once; seconds and the summed report.
/// Prints what PostgreSQL's backends waited on meanwhile (sampled every 20 ms).
async fn drain(
    url: &str,
    key: &str,
    (workers, layout): (usize, Layout),
    receiver: &Receiver,
    expected: u64,
) -> (f64, SendReport, Cpu) {
    let senders = senders(url, key, workers, layout).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn(sample_waits(url.to_string(), stop.clone()));
    let commits0 = commits(url).await;
    let wal0 = wal(url).await;
    let index0 = claim_indexes(url).await;
    let (own0, busy0) = support::cpu_seconds();
    let receiver0 = support::thread_cpu_seconds(support::receiver::THREAD);
    let received0 = receiver.received();
    let started = Instant::now();
    // Each worker's report and the moment it returned.
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|s| {
            tokio::spawn(async move {
                let report = s.drain().await.unwrap();
                (report, started.elapsed())
            })
        })
        .collect();
    // While the senders work, note when the receiver has seen a tenth and nine tenths of the
    // backlog: the middle of the drain, apart from its start (pools, connections, the first
    // claims) and its end (the last batches finishing).
    // Also how many the receiver had seen when the first worker returned (the queue was then
    // empty): what was left is the other workers' claimed batches, the tail of the drain.
    let mut pending: futures_util::stream::FuturesUnordered<_> = tasks.into_iter().collect();
    let mut results = Vec::new();
    let mut at_first_return = None;
    let (mut first, mut tenth, mut nine_tenths) = (None, None, None);
    loop {
        tokio::select! {
            done = pending.next() => match done {
                Some(done) => {
                    at_first_return.get_or_insert(receiver.received() - received0);
                    results.push(done);
                }
                None => break,
            },
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                let seen = (receiver.received() - received0) * 10;
                if seen > 0 {
                    first.get_or_insert(started.elapsed());
                }
                if seen >= expected {
                    tenth.get_or_insert(started.elapsed());
                }
                if seen >= expected * 9 {
                    nine_tenths.get_or_insert(started.elapsed());
                }
            }
        }
    }
    let mut total = SendReport::default();
    let mut returned = Vec::new();
    for r in results {
        let (r, at) = r.unwrap();
        returned.push(at.as_secs_f64());
        total.claimed += r.claimed;
        total.sent += r.sent;
        total.waiting += r.waiting;
        total.finished_unsent += r.finished_unsent;
        total.stale += r.stale;
    }
    let secs = started.elapsed().as_secs_f64();
    if let (Some(a), Some(b)) = (tenth, nine_tenths) {
        let (a, b) = (a.as_secs_f64(), b.as_secs_f64());
        println!(
            "    phases: the first tenth in {a:.2} s, the middle eight tenths at {:.0} deliveries/s, the last tenth in {:.2} s",
            (expected * 8) as f64 / 10.0 / (b - a).max(1e-9),
            secs - b
        );
    }
    returned.sort_by(f64::total_cmp);
    let (first_back, last_back) = (
        returned.first().copied().unwrap_or(f64::NAN),
        returned.last().copied().unwrap_or(f64::NAN),
    );
    let tail = expected.saturating_sub(at_first_return.unwrap_or(0));
    let tail_rate = match last_back - first_back {
        spread if spread >= 0.01 && tail > 0 => format!("{:.0}/s", tail as f64 / spread),
        _ => "n/a".to_string(),
    };
    // Times are sampled every 5 ms (the first delivery, the tail's start).
    println!(
        "    ends: the first delivery arrived after {:.3} s; the workers returned between {first_back:.3} and {last_back:.3} s, the last {tail} deliveries after the first returned, at {tail_rate}",
        first.map_or(f64::NAN, |f| f.as_secs_f64()),
    );
    let (own1, busy1) = support::cpu_seconds();
    let receiving = support::thread_cpu_seconds(support::receiver::THREAD) - receiver0;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (waits, samples, connections) = sampler.await.unwrap();
    let shown: Vec<String> = waits
        .iter()
        .take(6)
        .map(|(w, n)| format!("{w} {:.2}", *n as f64 / samples.max(1) as f64))
        .collect();
    println!(
        "    PostgreSQL backends, mean per sample over {samples} samples: {connections:.1} connections; active by wait: {}",
        shown.join(", ")
    );
    backends_gone(url).await;
    let committed = commits(url).await - commits0;
    let wal1 = wal(url).await;
    for ((index, i0), i1) in CLAIM_INDEXES
        .iter()
        .zip(&index0)
        .zip(claim_indexes(url).await)
    {
        let scans = (i1.0 - i0.0).max(1);
        println!(
            "    the claim's index {index}: {scans} scans, {:.0} entries read and {:.0} rows fetched per scan",
            (i1.1 - i0.1) as f64 / scans as f64,
            (i1.2 - i0.2) as f64 / scans as f64
        );
    }
    println!(
        "    WAL written: {:.1} MiB ({:.0} bytes per delivery); checkpoints begun meanwhile: {}",
        (wal1.0 - wal0.0) as f64 / 1_048_576.0,
        (wal1.0 - wal0.0) as f64 / total.sent.max(1) as f64,
        wal1.1 - wal0.1
    );
    println!(
        "    transactions committed: {committed} ({:.1} deliveries per commit)",
        total.sent as f64 / committed.max(1) as f64
    );
    let cpu = Cpu {
        senders: own1 - own0 - receiving,
        receiver: receiving,
        rest: (busy1 - busy0) - (own1 - own0),
    };
    (secs, total, cpu)
}

/// CPU seconds a drain took: the senders (this process but the receiver), the receiver's thread,
/// and the rest of the machine (mostly PostgreSQL).
struct Cpu {
    senders: f64,
    receiver: f64,
    rest: f64,
}

/// Waits (up to 5 s) until no other connection to the database at `url` is open: a backend
/// flushes its statistics as it exits, so the counts read next are whole.
async fn backends_gone(url: &str) {
    let mut c = PgConnection::connect(url).await.unwrap();
    for _ in 0..100 {
        let others: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        if others == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.close().await.unwrap();
}

/// One row of `sql`, a statistics query, from a fresh view of the server's statistics: each
/// backend flushes its counts at most every second (and as it exits), so it is read after the
/// drain's backends are gone.
async fn stats(url: &str, sql: &str) -> sqlx::postgres::PgRow {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("SELECT pg_stat_clear_snapshot()")
        .execute(&mut c)
        .await
        .unwrap();
    let row = sqlx::query(AssertSqlSafe(sql.to_string()))
        .fetch_one(&mut c)
        .await
        .unwrap();
    c.close().await.unwrap();
    row
}

/// Transactions committed so far in the database at `url`.
async fn commits(url: &str) -> i64 {
    stats(
        url,
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .await
    .get(0)
}

/// The claim's two partial indexes: the lanes a claim starts in, and the whole queue it takes
/// the rest from.
const CLAIM_INDEXES: [&str; 2] = ["delivery_lane", "delivery_due"];

/// How often each of the claim's partial indexes was scanned, and how many entries and rows those
/// scans read, so far: what the claims walked past.
async fn claim_indexes(url: &str) -> Vec<(i64, i64, i64)> {
    let mut out = Vec::new();
    for index in CLAIM_INDEXES {
        let row = stats(
            url,
            &format!(
                "SELECT idx_scan, idx_tup_read, idx_tup_fetch FROM pg_stat_user_indexes WHERE indexrelname = '{index}'"
            ),
        )
        .await;
        out.push((row.get(0), row.get(1), row.get(2)));
    }
    out
}

/// The server's WAL position in bytes and how many checkpoints it has begun (timed or
/// requested), to see what a phase wrote and whether a checkpoint's full-page writes fell in it.
async fn wal(url: &str) -> (i64, i64) {
    let row = stats(
        url,
        "SELECT (pg_current_wal_lsn() - '0/0')::bigint, checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter",
    )
    .await;
    (row.get(0), row.get(1))
}

/// One worker's pass taken apart with the library's own pieces (the claim, `sender::outbound`
/// and the client, `settle_many`), one after the other, for `batches` batches: milliseconds per
/// batch spent claiming, sending and settling, and deliveries per second overall.
async fn breakdown(url: &str, batches: usize) -> (f64, f64, f64, f64) {
    let store = Store::open(url).await.unwrap();
    let client = Client::new(Policy::parse("127.0.0.1", false).unwrap());
    let (_, defs) = versions::in_force(&store, WS).await.unwrap().unwrap();
    let integration = &defs.integration("hooks").unwrap().spec;
    let action = &integration.actions["send"];
    let credentials = BTreeMap::from([("signing_secret".to_string(), signing_secret())]);
    let (mut claim, mut send, mut settle, mut sent) = (0.0, 0.0, 0.0, 0usize);
    let started = Instant::now();
    for _ in 0..batches {
        let t = Instant::now();
        let claimed = queue::claim_due(
            &store,
            Timestamp::now(),
            queue::DEFAULT_BATCH,
            queue::DEFAULT_LEASE,
        )
        .await
        .unwrap();
        claim += t.elapsed().as_secs_f64();
        assert_eq!(claimed.len() as i64, queue::DEFAULT_BATCH);
        let t = Instant::now();
        let settled: Vec<Settled> = futures_util::stream::iter(claimed)
            .map(|c| {
                let (client, credentials) = (&client, &credentials);
                async move {
                    let now = Timestamp::now();
                    let request = rowfire::send::request::outbound(
                        &c,
                        &c.id.to_string(),
                        integration,
                        action,
                        credentials,
                        now,
                    )
                    .unwrap();
                    let (result, latency) = client.send(&request).await;
                    assert!(
                        matches!(result, AttemptResult::Response { status: 200, .. }),
                        "{result:?}"
                    );
                    Settled {
                        claimed: c,
                        outcome: Settlement::Sent,
                        attempt: Some(Attempt {
                            started_at: now,
                            latency_ms: latency.as_millis() as i64,
                            status_code: Some(200),
                            error_class: None,
                            response: Some(String::new()),
                        }),
                        at: Timestamp::now(),
                    }
                }
            })
            .buffer_unordered(Config::default().in_flight)
            .collect()
            .await;
        send += t.elapsed().as_secs_f64();
        let t = Instant::now();
        let took = queue::settle_many(&store, &settled).await.unwrap();
        assert!(took.iter().all(|t| *t));
        settle += t.elapsed().as_secs_f64();
        sent += took.len();
    }
    let rate = sent as f64 / started.elapsed().as_secs_f64();
    let per = |s: f64| s * 1000.0 / batches as f64;
    (per(claim), per(send), per(settle), rate)
}

/// Runs `workers` senders on the system clock until every paced delivery is sent; returns
/// lateness in milliseconds (p50, p99, max) and how long sending took after the first was due.
async fn paced(url: &str, key: &str, workers: usize, first: Timestamp) -> (f64, f64, f64, f64) {
    let senders = senders(url, key, workers, Layout::OneProcess).await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|s| {
            let stopped = stopped.clone();
            tokio::spawn(async move { s.run_until(stopped).await })
        })
        .collect();
    let head = Timestamp::now().duration_until(first);
    assert!(
        head > SignedDuration::ZERO,
        "the workers started {head:#} after the first delivery was due; seeding took too long"
    );
    let mut c = PgConnection::connect(url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs((PACED / PER_SECOND) as u64 + 2 + 60);
    loop {
        let sent: i64 = sqlx::query("SELECT count(*) FROM delivery WHERE status = 'sent'")
            .fetch_one(&mut c)
            .await
            .unwrap()
            .get(0);
        if sent == PACED || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let span = first.duration_until(Timestamp::now()).as_secs_f64();
    stop.send(true).unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let row = sqlx::query(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), max(ms)
         FROM (SELECT extract(epoch FROM sent_at - due_at)::float8 * 1000 AS ms FROM delivery WHERE status = 'sent') l",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    (
        row.get::<Option<f64>, _>(0).unwrap_or(f64::NAN),
        row.get::<Option<f64>, _>(1).unwrap_or(f64::NAN),
        row.get::<Option<f64>, _>(2).unwrap_or(f64::NAN),
        span,
    )
}

/// graphile-worker draining `DRAINED` no-op jobs on a scratch database: jobs per second, or
/// `None` (with the reason printed) when it cannot run.
async fn peer(admin: &str, tls: bool) -> Option<f64> {
    let url = support::node_url(
        &support::fresh_database(admin, "rowfire_bench_peer").await,
        tls,
    );
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/peers/graphile-worker/run.sh");
    let ran = tokio::task::spawn_blocking(move || {
        std::process::Command::new("bash")
            .arg(&script)
            .arg(&url)
            .arg(DRAINED.to_string())
            .arg(PEER_CONCURRENCY.to_string())
            .output()
    })
    .await
    .unwrap();
    let out = match ran {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            println!(
                "graphile-worker: DID NOT RUN (npm install or node failed, {}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return None;
        }
        Err(e) => {
            println!("graphile-worker: DID NOT RUN (bash could not start run.sh: {e})");
            return None;
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    let parsed = line.and_then(|l| serde_json::from_str::<serde_json::Value>(l).ok());
    match parsed.as_ref().and_then(|v| v["jobs_per_s"].as_f64()) {
        Some(rate) => {
            let secs = parsed.as_ref().and_then(|v| v["seconds"].as_f64());
            println!(
                "graphile-worker 0.16.6, concurrency {PEER_CONCURRENCY}: {DRAINED:>7} jobs in {:>6.2} s = {rate:>8.0} jobs/s",
                secs.unwrap_or(f64::NAN)
            );
            Some(rate)
        }
        None => {
            println!("graphile-worker: DID NOT RUN (no jobs_per_s in its output: {stdout:?})");
            None
        }
    }
}

#[tokio::main]
async fn main() {
    support::init_logging();
    let admin = support::plaintext_unless_named(&support::admin_url());
    let tls = support::uses_tls(&admin).await;
    let key = MasterKey::generate();
    let receiver = Receiver::start();
    let config = Config::default();
    println!(
        "method: deliveries queued in a PostgreSQL control plane on this machine (seeded with SQL, then ANALYZE), sent by the real sender (per unit of concurrency: batches of {}, {} in flight; {:#} leases, Standard Webhooks signatures) to a receiver on 127.0.0.1 answering 200 at once; N workers in one process are one sender at concurrency N on one control-plane pool and HTTP client (as `rowfire worker --concurrency N` runs them), N worker processes are N senders with a pool and client each; every phase starts from a fresh database",
        config.batch, config.in_flight, config.lease
    );
    println!(
        "transport: {} for Rowfire and the peer alike (ROWFIRE_BENCH_PG=...?sslmode=prefer for TLS)",
        if tls {
            "TLS"
        } else {
            "plaintext TCP on 127.0.0.1"
        }
    );
    let mut failed = false;

    // `ROWFIRE_BENCH_DRAINS=4,16` runs one round of only those drains (for profiling one of
    // them; `16p` is 16 worker processes) and stops; `ROWFIRE_BENCH_DELIVERIES` then sets how
    // many each drains.
    let only: Option<Vec<(usize, Layout)>> = std::env::var("ROWFIRE_BENCH_DRAINS").ok().map(|v| {
        v.split(',')
            .filter_map(|w| match w.trim().strip_suffix('p') {
                Some(n) => Some((n.parse().ok()?, Layout::Processes)),
                None => Some((w.trim().parse().ok()?, Layout::OneProcess)),
            })
            .collect()
    });
    let drained: i64 = only
        .as_ref()
        .and_then(|_| std::env::var("ROWFIRE_BENCH_DELIVERIES").ok())
        .and_then(|n| n.parse().ok())
        .unwrap_or(DRAINED);
    // Rounds of every drain, each starting one place later, so no drain always runs first or
    // last; medians are compared.
    let (counts, rounds) = match &only {
        Some(counts) => (counts.clone(), 1),
        None => (DRAINS.to_vec(), ROUNDS),
    };
    // Each round also drains the peer, in its turn, so its figure shares the machine's moment.
    let turns = counts.len() + usize::from(only.is_none());
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); counts.len()];
    let mut peers: Vec<f64> = Vec::new();
    for round in 0..rounds {
        for turn in 0..turns {
            let at = (turn + round) % turns;
            let Some(&(workers, layout)) = counts.get(at) else {
                print!("round {}: ", round + 1);
                peers.extend(peer(&admin, tls).await);
                continue;
            };
            let (url, _) = control_plane(
                &admin,
                &receiver,
                &key,
                drained,
                Timestamp::now,
                SignedDuration::ZERO,
            )
            .await;
            let (secs, report, cpu) =
                drain(&url, &key, (workers, layout), &receiver, drained as u64).await;
            let rate = drained as f64 / secs;
            println!(
                "round {}: drain, {}: {:>7} sent in {secs:>6.2} s = {rate:>8.0} deliveries/s (stale settles {}, waiting {}, unsent {})",
                round + 1,
                layout.label(workers),
                report.sent,
                report.stale,
                report.waiting,
                report.finished_unsent
            );
            println!(
                "    CPU: senders {:.1} s, receiver {:.1} s, the rest of the machine (mostly PostgreSQL) {:.1} s, of {:.1} s on {} cores; {:.0} us a delivery ({:.0} without the receiver)",
                cpu.senders,
                cpu.receiver,
                cpu.rest,
                secs * cores() as f64,
                cores(),
                (cpu.senders + cpu.receiver + cpu.rest) * 1e6 / drained as f64,
                (cpu.senders + cpu.rest) * 1e6 / drained as f64
            );
            failed |= !check(&url, &receiver, drained).await;
            rates[at].push(rate);
        }
    }
    if only.is_some() {
        return;
    }
    let medians: Vec<f64> = rates.iter().map(|r| support::median(r)).collect();
    for (&(workers, layout), (median, all)) in counts.iter().zip(medians.iter().zip(&rates)) {
        let all: Vec<String> = all.iter().map(|r| format!("{r:.0}")).collect();
        println!(
            "drain, {}: median {median:>8.0} deliveries/s over {rounds} rounds ({})",
            layout.label(workers),
            all.join(", ")
        );
    }
    let median_of = |n: usize, layout: Layout| {
        counts
            .iter()
            .position(|&c| c == (n, layout))
            .map(|i| medians[i])
            .expect("every drain compared runs in every round")
    };
    let sixteen = median_of(16, Layout::OneProcess);
    let best_fewer = median_of(1, Layout::OneProcess).max(median_of(4, Layout::OneProcess));
    let verdict = |met: bool| if met { "met" } else { "MISSED" };
    println!(
        "16 workers / best of 1 and 4 workers, in one process: {:.2}x (medians): {}",
        sixteen / best_fewer,
        verdict(sixteen >= best_fewer)
    );
    let apart = median_of(16, Layout::Processes) / median_of(4, Layout::Processes);
    println!(
        "16 workers / 4 workers, a pool each: {apart:.2}x (medians): {}",
        if apart >= 1.0 { "not slower" } else { "slower" }
    );
    println!(
        "target: 16 workers >= 5,000 deliveries/s: {}",
        verdict(sixteen >= 5_000.0)
    );
    failed |= sixteen < 5_000.0;

    let (url, _) = control_plane(
        &admin,
        &receiver,
        &key,
        DRAINED,
        Timestamp::now,
        SignedDuration::ZERO,
    )
    .await;
    let (claim, send, settle, rate) = breakdown(&url, BREAKDOWN_BATCHES).await;
    println!(
        "one worker's pass taken apart, the first {BREAKDOWN_BATCHES} batches of 200 of the {DRAINED}: per batch, claim {claim:.1} ms, send {send:.1} ms, settle {settle:.1} ms ({rate:.0} deliveries/s)"
    );
    failed |= !check(
        &url,
        &receiver,
        BREAKDOWN_BATCHES as i64 * queue::DEFAULT_BATCH,
    )
    .await;

    if peers.is_empty() {
        println!("ratio Rowfire / graphile-worker: not measured (the peer did not run)");
    } else {
        let shown: Vec<String> = peers.iter().map(|r| format!("{r:.0}")).collect();
        let peer = support::median(&peers);
        println!(
            "graphile-worker 0.16.6, concurrency {PEER_CONCURRENCY}: median {peer:.0} jobs/s over {} rounds ({})",
            shown.len(),
            shown.join(", ")
        );
        println!(
            "ratio Rowfire 16 workers in one process / graphile-worker at concurrency 16 (one process): {:.2}x (medians; target 5x); 16 workers with a pool each / graphile-worker: {:.2}x",
            sixteen / peer,
            median_of(16, Layout::Processes) / peer
        );
    }

    let spacing = SignedDuration::from_micros(1_000_000 / PER_SECOND);
    for workers in [1usize, 4] {
        let (url, first) = control_plane(
            &admin,
            &receiver,
            &key,
            PACED,
            || Timestamp::now() + LEAD,
            spacing,
        )
        .await;
        let (p50, p99, max, span) = paced(&url, &key, workers, first).await;
        println!(
            "lateness, {workers} worker(s), {PACED} due at {PER_SECOND}/s: p50 {p50:>6.1} ms, p99 {p99:>6.1} ms, max {max:>6.1} ms (all sent {span:.2} s after the first was due)"
        );
        failed |= !check(&url, &receiver, PACED).await;
        println!("target: lateness p99 < 250 ms: {}", verdict(p99 < 250.0));
        failed |= p99.is_nan() || p99 >= 250.0;
    }

    if failed {
        eprintln!("FAIL: a target was missed, or a delivery was lost, duplicated or not sent");
        std::process::exit(1);
    }
}
