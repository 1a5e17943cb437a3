//! Source sessions are clean and bounded: SQL run inside a read cannot lift its limits for later
//! statements, nothing it does outlives the read, and SQLite reads end by wall-clock time.

use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::definitions::{self, DEFAULT_SOURCE, SourceDef};
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::row::{Row, Value};
use rowfire::source::{Source, SourceError};
use rowfire::sql_guard::{Shape, Window};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Row as _};

use crate::support::{TestPg, TestSqlite, now};

/// The functions outside the allowlist that [`hostile_sql`] calls: a source must opt in to them.
const HOSTILE_FUNCTIONS: &[&str] = &[
    "set_config",
    "current_setting",
    "pg_sleep",
    "pg_try_advisory_lock",
    "stubborn",
];

fn def(timeout: Duration, page_size: usize) -> SourceDef {
    let defs = definitions::parse("version: 2\n").unwrap();
    let mut def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    def.statement_timeout = timeout;
    def.page_size = page_size;
    // The guard refuses these functions unless the source opts in; the session must hold its
    // limits even then.
    def.allow_functions = HOSTILE_FUNCTIONS.iter().map(|f| f.to_string()).collect();
    def
}

/// A clock a day inside the window, as SQLite text.
fn yesterday_text() -> String {
    (now() - SignedDuration::from_hours(24))
        .strftime("%Y-%m-%d %H:%M:%S")
        .to_string()
}

fn window() -> Window {
    Window {
        since: now() - SignedDuration::from_hours(24 * 7),
        until: now(),
    }
}

/// Trigger SQL that calls session-changing functions from `FROM`, as an attacker would write it
/// (or as a customer would, having opted in to a function that does so). Every test builds its
/// hostile SQL here. Today's guard admits functions used as tables in `FROM`.
// The source opts in to HOSTILE_FUNCTIONS (`allow_functions`, in `def` and in the poll test's
// definitions), or the guard would refuse this SQL before the session is ever tested.
fn hostile_sql(select: &str, from: &str) -> String {
    format!(
        "SELECT g AS k, timestamptz '{}' AS at, {select} FROM {from}",
        now() - SignedDuration::from_hours(24)
    )
}

/// Reads every page of `sql`'s window (key `k`, clock `at`) and ends the read cleanly.
async fn read_all(source: &Source, sql: &str) -> Result<Vec<Row>, SourceError> {
    let query = source.check("hostile", sql)?;
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut reader = source.read_window(&query, shape, window()).await?;
    let mut rows = Vec::new();
    while let Some(page) = reader.next_page().await? {
        rows.extend(page);
    }
    reader.finish().await;
    Ok(rows)
}

#[tokio::test]
async fn a_read_that_turns_its_statement_timeout_off_and_sleeps_ends_at_its_timeout() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(300), 100), &pg.url)
        .await
        .unwrap();
    // Every statement switches the timeout off for the transaction, then sleeps 20 s.
    let sql = hostile_sql(
        "s.v AS v",
        "set_config('statement_timeout', '0', true) AS s(v), \
         LATERAL pg_sleep(CASE WHEN s.v = '0' THEN 20 ELSE 0 END) AS z, \
         generate_series(1, 6) AS g",
    );
    let started = Instant::now();
    let err = read_all(&source, &sql).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the read took {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_timeout_switched_off_by_one_statement_does_not_unbound_the_next_ones() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    // Pages of two rows: the six rows come in three pages of the window's one statement.
    let source = Source::connect(&def(Duration::from_millis(300), 2), &pg.url)
        .await
        .unwrap();
    // Each statement first reads the timeout it started under (once: OFFSET 0 keeps the
    // subquery whole), sleeps 20 s if it is off, then switches it off for the rest of the
    // transaction and for the session; the lateral references fix that order.
    let sql = hostile_sql(
        "b.before AS before",
        "(SELECT current_setting('statement_timeout') AS before OFFSET 0) AS b \
         CROSS JOIN LATERAL pg_sleep(CASE WHEN b.before = '0' THEN 20 ELSE 0 END) AS z \
         CROSS JOIN LATERAL set_config('statement_timeout', '0' || z::text, true) AS s(v) \
         CROSS JOIN LATERAL set_config('statement_timeout', '0' || z::text, false) AS w(v) \
         CROSS JOIN LATERAL generate_series(1, 6 + 0 * length(s.v) + 0 * length(w.v)) AS g",
    );
    let started = Instant::now();
    let rows = read_all(&source, &sql).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(rows.len(), 6);
    // The window's statement starts under the read's cap (an hour here), never with the
    // server's timeout off; Rowfire bounds each of its pages by the 300 ms.
    for row in &rows {
        assert_eq!(row.get("before"), Some(&Value::Text("1h".into())));
    }
    // The statements after it (the counts of a poll or a backtest, on the pooled connections
    // the read handed back) start under the source's 300 ms again: were the switch still in
    // force, each would sleep 20 s and fail at Rowfire's deadline instead.
    let query = source.check("hostile", &sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    for _ in 0..3 {
        let started = Instant::now();
        let nulls = source
            .count_null_clocks(&query, shape, window())
            .await
            .unwrap();
        assert_eq!(nulls, 0);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}

#[tokio::test]
async fn a_window_statement_that_sleeps_past_its_timeout_before_its_first_page_is_ended() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(300), 2), &pg.url)
        .await
        .unwrap();
    // The statement sleeps 20 s before its first row: the first page is bounded by the 300 ms
    // as any statement is, though the server's own limit for the whole read is an hour.
    let sql = hostile_sql("1 AS one", "pg_sleep(20) AS z, generate_series(1, 6) AS g");
    let started = Instant::now();
    let err = read_all(&source, &sql).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the read took {:?}",
        started.elapsed()
    );
    // The backend was ended, not left sleeping on the customer's database.
    let mut admin = pg.admin().await;
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%pg_sleep(20)%' AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(running, 0);
}

#[tokio::test]
async fn a_pooled_source_connection_holds_no_advisory_lock_and_no_changed_setting_after_a_read() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(2000), 100), &pg.url)
        .await
        .unwrap();
    let mut admin = pg.admin().await;
    let default_work_mem: String = sqlx::query_scalar("SELECT current_setting('work_mem')")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    // Session-level (not transaction-local) changes, and a session-level advisory lock.
    let sql = hostile_sql(
        "l.locked AS locked",
        "pg_try_advisory_lock(4545) AS l(locked), \
         set_config('work_mem', '77kB', false) AS w, \
         set_config('statement_timeout', '0', false) AS s, \
         set_config('lock_timeout', '0', false) AS t, \
         set_config('search_path', 'nowhere', false) AS p, \
         generate_series(1, 6) AS g",
    );
    let rows = read_all(&source, &sql).await.unwrap();
    assert_eq!(rows[0].get("locked"), Some(&Value::Bool(true)));

    let advisory = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
                    AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    let held: i64 = sqlx::query_scalar(AssertSqlSafe(advisory))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(held, 0, "an advisory lock outlived the read");

    // Read again, on the connection the pool hands back, what the session's settings are.
    let probe = format!(
        "SELECT 1 AS k, timestamptz '{}' AS at, current_setting('work_mem') AS work_mem, \
         current_setting('search_path') AS search_path, \
         current_setting('statement_timeout') AS statement_timeout, \
         current_setting('lock_timeout') AS lock_timeout",
        now() - SignedDuration::from_hours(1)
    );
    for _ in 0..3 {
        let rows = read_all(&source, &probe).await.unwrap();
        assert_eq!(
            rows[0].get("work_mem"),
            Some(&Value::Text(default_work_mem.as_str().into()))
        );
        assert_ne!(
            rows[0].get("search_path"),
            Some(&Value::Text("nowhere".into()))
        );
        // Inside a read, the limits are the read's own, set in its transaction: the lock
        // timeout the source's, the server's statement timeout the read's cap for the window's
        // one streamed statement (an hour; Rowfire bounds each page by the 2 s instead).
        assert_eq!(rows[0].get("lock_timeout"), Some(&Value::Text("2s".into())));
        assert_eq!(
            rows[0].get("statement_timeout"),
            Some(&Value::Text("1h".into()))
        );
    }
    // Outside any read, the pooled connections keep the source's own statement timeout.
    let sessions = "SELECT count(*) FROM pg_stat_activity \
                    WHERE application_name = 'rowfire' AND datname = current_database() \
                    AND state <> 'idle'";
    let busy: i64 = sqlx::query_scalar(AssertSqlSafe(sessions))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(busy, 0, "a source connection was left inside a transaction");
    let held: i64 = sqlx::query_scalar(AssertSqlSafe(advisory))
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(held, 0);
}

#[tokio::test]
async fn a_read_that_fails_halfway_closes_its_connection_and_releases_its_lock() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(2000), 2), &pg.url)
        .await
        .unwrap();
    // The lock is taken, then a later row divides by zero.
    let sql = hostile_sql(
        "1 / (4 - g) AS boom",
        "pg_try_advisory_lock(4546) AS l(locked), generate_series(1, 6) AS g",
    );
    read_all(&source, &sql).await.unwrap_err();
    let mut admin = pg.admin().await;
    // The closed connection's backend ends on its own time: wait for it, bounded.
    let mut held = 1i64;
    for _ in 0..100 {
        held = sqlx::query(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap()
        .get(0);
        if held == 0 {
            break;
        }
        tokio::task::yield_now().await;
        let _ = sqlx::query("SELECT pg_sleep(0.05)")
            .execute(&mut admin)
            .await;
    }
    assert_eq!(held, 0, "a failed read's lock outlived it");
}

#[tokio::test]
async fn a_sqlite_read_of_heavy_values_ends_at_its_timeout() {
    let db = TestSqlite::new();
    crate::support::sample_source(&db.url, 100).await;
    let source = Source::connect(&def(Duration::from_millis(200), 100), &db.url)
        .await
        .unwrap();
    // Few VM steps, each one heavy: 3,000 rows each building and upper-casing 20 MB (about 20 s
    // in all, in some tens of thousands of VM steps).
    let sql = format!(
        "WITH RECURSIVE c(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM c WHERE g < 3000) \
         SELECT g AS k, '{}' AS at, \
         length(upper(printf('%.*c', 20000000 + g, 'x'))) AS heavy FROM c",
        yesterday_text()
    );
    let started = Instant::now();
    let err = read_all(&source, &sql).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "the read took {elapsed:?}"
    );
}

#[tokio::test]
async fn a_sqlite_value_larger_than_the_limit_is_refused_not_built() {
    let db = TestSqlite::new();
    crate::support::sample_source(&db.url, 100).await;
    let source = Source::connect(&def(Duration::from_secs(20), 100), &db.url)
        .await
        .unwrap();
    let started = Instant::now();
    // A 40 MB string built from a 20 MB one is refused outright.
    let sql = format!(
        "SELECT 1 AS k, '{}' AS at, replace(printf('%.*c', 20000000, 'x'), 'x', 'xy') AS huge",
        yesterday_text()
    );
    let err = read_all(&source, &sql).await.unwrap_err();
    assert!(err.to_string().contains("too big"), "{err}");
    // printf gives up on a 2 GB string and yields NULL instead of building it.
    let sql = format!(
        "SELECT 1 AS k, '{}' AS at, printf('%.*c', 2000000000, 'x') AS huge",
        yesterday_text()
    );
    match read_all(&source, &sql).await {
        Ok(rows) => assert_eq!(rows[0].get("huge"), Some(&Value::Null)),
        Err(err) => assert!(err.to_string().contains("too big"), "{err}"),
    }
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_read_whose_server_side_timeout_is_defeated_still_ends_at_rowfires_deadline() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    // A function in the customer's database that swallows every cancel, the statement
    // timeout's included: the server-side timeout cannot end a query that calls it.
    let mut admin = pg.admin().await;
    sqlx::raw_sql(
        "CREATE FUNCTION stubborn(secs float8) RETURNS int LANGUAGE plpgsql AS $$
         DECLARE started timestamptz := clock_timestamp();
         BEGIN
           LOOP
             BEGIN
               PERFORM pg_sleep(0.02);
             EXCEPTION WHEN query_canceled THEN NULL;
             END;
             EXIT WHEN clock_timestamp() - started > secs * interval '1 second';
           END LOOP;
           RETURN 1;
         END $$",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let source = Source::connect(&def(Duration::from_millis(300), 100), &pg.url)
        .await
        .unwrap();
    let sql = hostile_sql(
        "s.v AS v",
        "stubborn(20) AS s(v), generate_series(1, 6) AS g",
    );
    let started = Instant::now();
    let err = read_all(&source, &sql).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the read took {:?}",
        started.elapsed()
    );
    // The backend was ended, not left running on the customer's database.
    let running: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%stubborn(20)%' AND pid <> pg_backend_pid()",
    )
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(running, 0);
    // The source still reads.
    let rows = read_all(
        &source,
        &hostile_sql("1 AS one", "generate_series(1, 6) AS g"),
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 6);
}

#[tokio::test]
async fn a_poll_whose_sql_turns_its_statement_timeout_off_and_sleeps_fails_at_its_timeout() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let control = TestSqlite::new();
    let store = Store::open(&format!("{}?mode=rwc", control.url))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let sql = hostile_sql(
        "s.v AS v",
        "set_config('statement_timeout', '0', true) AS s(v), \
         LATERAL pg_sleep(CASE WHEN s.v = '0' THEN 20 ELSE 0 END) AS z, \
         generate_series(1, 6) AS g",
    );
    let allow = format!("allow_functions: [{}]", HOSTILE_FUNCTIONS.join(", "));
    let definitions = format!(
        r##"version: 2
source:
  dsn_env: HOSTILE_URL
  statement_timeout_ms: 300
  {allow}
integrations:
  inbox:
    catalog: demo_inbox
triggers:
  hostile:
    sql: "{sql}"
    event_time: at
    key: [k]
rules:
  ever:
    trigger: hostile
    policy: once_ever
    actions: [{{action: inbox.chat_message, params: {{channel: "#x", text: "{{{{ k }}}}"}}}}]
"##
    );
    push::push(&store, WS, &definitions, now()).await.unwrap();
    assert!(
        poll::rewind(&store, WS, "hostile", SignedDuration::from_hours(48), now())
            .await
            .unwrap()
    );
    let url = pg.url.clone();
    let poller = Poller::new(
        store.clone(),
        "w1",
        Clock::fixed(now()),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let started = Instant::now();
    let reports = poller.poll_due().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let report = reports.iter().find(|r| r.trigger == "hostile").unwrap();
    match &report.status {
        PollStatus::Failed(why) => assert!(why.contains("0.3s statement timeout"), "{why}"),
        other => panic!("the poll did not fail at its timeout: {other:?}"),
    }
}

#[tokio::test]
async fn a_sqlite_page_larger_than_the_memory_bound_is_refused_with_advice() {
    let db = TestSqlite::new();
    crate::support::sample_source(&db.url, 100).await;
    let mut source = Source::connect(&def(Duration::from_secs(20), 100), &db.url)
        .await
        .unwrap();
    // The bound is 256 MiB; shown here at 1 MiB so the test stays small.
    source.limit_page_bytes(1 << 20);
    // Twenty values of 100 kB each: every value is allowed, a page of all of them is not.
    let sql = format!(
        "WITH RECURSIVE c(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM c WHERE g < 20) \
         SELECT g AS k, '{}' AS at, printf('%.*c', 100000 + g, 'x') AS big FROM c",
        yesterday_text()
    );
    let err = read_all(&source, &sql).await.unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("more than 1 MiB") && msg.contains("lower max_rows"),
        "{msg}"
    );
    // Smaller pages of the same rows are read.
    let mut source = Source::connect(&def(Duration::from_secs(20), 5), &db.url)
        .await
        .unwrap();
    source.limit_page_bytes(1 << 20);
    assert_eq!(read_all(&source, &sql).await.unwrap().len(), 20);
}
