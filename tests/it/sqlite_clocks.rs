//! SQLite clocks are read, compared and bound to the microsecond, the same as PostgreSQL's; and a
//! clock that is there but is not a time is reported as unreadable, not as NULL.

use std::sync::Arc;

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use rowfire::backtest::{self, Options, Report};
use rowfire::clock::Clock;
use rowfire::definitions::{self, Definitions};
use rowfire::explanation::{self, Question};
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::source::Source;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, SqliteConnection};

use crate::support::{TestPg, TestSqlite, now, source_def};

const DAYS: u32 = 40;

const DEFINITIONS: &str = r##"version: 2
source:
  dsn_env: EVENTS_URL
integrations:
  inbox:
    catalog: demo_inbox
triggers:
  event:
    sql: SELECT id, k, at FROM events
    event_time: at
    key: [k]
rules:
  ever:
    trigger: event
    policy: once_ever
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
  daily_utc:
    trigger: event
    policy: once_per_period
    period: day
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
  daily_new_york:
    trigger: event
    policy: once_per_period
    period: day
    timezone: America/New_York
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
  weekly_kolkata:
    trigger: event
    policy: once_per_period
    period: week
    timezone: Asia/Kolkata
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
  monthly_new_york:
    trigger: event
    policy: once_per_period
    period: month
    timezone: America/New_York
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
  every_second:
    trigger: event
    policy: once_per_n
    n: 2
    actions: [{action: inbox.chat_message, params: {channel: "#x", text: "{{ k }}"}}]
"##;

fn defs() -> Definitions {
    definitions::parse(DEFINITIONS).unwrap()
}

/// One generated event: its key and its clock (`None`: a NULL clock).
type Event = (String, Option<Timestamp>);

/// Events of a few keys over the window, with the edges that millisecond clocks get wrong:
/// pairs of one key 1 µs apart at and across local midnights (UTC, New York, Kolkata), and
/// events 1 µs either side of the window's bounds.
fn events() -> Vec<Event> {
    let mut rng = fastrand::Rng::with_seed(20261129);
    let until = now();
    let since = until - SignedDuration::from_hours(24 * i64::from(DAYS));
    let us = SignedDuration::from_micros(1);
    let mut out: Vec<Event> = Vec::new();
    for _ in 0..400 {
        let offset = rng.i64(0..i64::from(DAYS) * 86_400_000_000);
        let at = since + SignedDuration::from_micros(offset);
        out.push((format!("k{}", rng.u8(0..12)), Some(at)));
    }
    for (i, zone) in ["UTC", "America/New_York", "Asia/Kolkata"]
        .into_iter()
        .enumerate()
    {
        let tz = TimeZone::get(zone).unwrap();
        for day in [3, 11, 17, 25, 31] {
            let date = (until - SignedDuration::from_hours(24 * day))
                .to_zoned(tz.clone())
                .date();
            let midnight = date.to_zoned(tz.clone()).unwrap().timestamp();
            let key = format!("m{i}_{day}");
            // Across midnight, 1 µs apart.
            out.push((key.clone(), Some(midnight - us)));
            out.push((key.clone(), Some(midnight)));
            // Just after midnight, 1 µs apart.
            out.push((key.clone(), Some(midnight + us)));
            out.push((format!("{key}b"), Some(midnight + us)));
            out.push((format!("{key}b"), Some(midnight + us + us)));
        }
    }
    for at in [since - us, since, since + us, until - us, until] {
        out.push(("edge".into(), Some(at)));
    }
    out.push(("nullclock".into(), None));
    out
}

/// The same clock in the shapes a SQLite clock column holds, chosen by row.
fn sqlite_clock(i: usize, at: Timestamp) -> SqliteClock {
    let kolkata = TimeZone::get("Asia/Kolkata").unwrap();
    match i % 5 {
        0 => SqliteClock::Text(at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string()),
        1 => SqliteClock::Text(at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
        2 => SqliteClock::Text(
            at.to_zoned(kolkata)
                .strftime("%Y-%m-%dT%H:%M:%S%.6f%:z")
                .to_string(),
        ),
        3 => SqliteClock::Real(at.as_microsecond() as f64 / 1e6),
        _ if at.subsec_nanosecond() == 0 => SqliteClock::Int(at.as_second()),
        _ => SqliteClock::Text(at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string()),
    }
}

enum SqliteClock {
    Text(String),
    Real(f64),
    Int(i64),
}

async fn load_sqlite(url: &str, events: &[Event], extra: &[(&str, &str)]) {
    let mut c = SqliteConnection::connect(&format!("{url}?mode=rwc"))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE events (id INTEGER PRIMARY KEY, k TEXT, at)")
        .execute(&mut c)
        .await
        .unwrap();
    for (i, (k, at)) in events.iter().enumerate() {
        let q = sqlx::query("INSERT INTO events (id, k, at) VALUES (?1, ?2, ?3)")
            .bind(i as i64)
            .bind(k);
        let q = match at.map(|at| sqlite_clock(i, at)) {
            None => q.bind(None::<String>),
            Some(SqliteClock::Text(t)) => q.bind(t),
            Some(SqliteClock::Real(r)) => q.bind(r),
            Some(SqliteClock::Int(n)) => q.bind(n),
        };
        q.execute(&mut c).await.unwrap();
    }
    for (k, at) in extra {
        sqlx::query("INSERT INTO events (k, at) VALUES (?1, ?2)")
            .bind(*k)
            .bind(*at)
            .execute(&mut c)
            .await
            .unwrap();
    }
}

async fn load_postgres(url: &str, events: &[Event]) {
    let mut c = PgConnection::connect(url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE events (id BIGINT PRIMARY KEY, k TEXT, at TIMESTAMPTZ)")
        .execute(&mut c)
        .await
        .unwrap();
    for (i, (k, at)) in events.iter().enumerate() {
        sqlx::query("INSERT INTO events (id, k, at) VALUES ($1, $2, CAST($3 AS TIMESTAMPTZ))")
            .bind(i as i64)
            .bind(k)
            .bind(at.map(|at| at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

async fn backtest(defs: &Definitions, source: &Source, rule: &str) -> Report {
    let opts = Options {
        days: DAYS,
        sample: 5,
        now: now(),
    };
    backtest::run(defs, rule, source, &opts).await.unwrap()
}

/// Everything a report says about the rows, not about where they were read from.
fn findings(r: &Report) -> String {
    let samples: Vec<_> = r
        .samples
        .iter()
        .map(|s| (&s.clock, &s.key, &s.bucket))
        .collect();
    format!(
        "matched={} fires={} collapsed={} keys={} null_clocks={} null_keys={} unreadable={} \
         per_day={:?} busiest={:?} quietest={:?} zero_run={:?} samples={samples:?}",
        r.rows_matched,
        r.fires,
        r.collapsed,
        r.distinct_keys,
        r.null_clock_rows,
        r.null_key_rows,
        r.unreadable_clocks.rows,
        r.per_day,
        r.busiest_day,
        r.quietest_day,
        r.longest_zero_run
    )
}

#[tokio::test]
async fn the_same_events_give_identical_backtests_on_postgres_and_on_sqlite_to_the_microsecond() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let lite = TestSqlite::new();
    let events = events();
    load_postgres(&pg.url, &events).await;
    load_sqlite(&lite.url, &events, &[]).await;
    let defs = defs();
    // Small pages: the page boundaries fall between clocks 1 µs apart too.
    for page_size in [7, 10_000] {
        let pg_source = Source::connect(&source_def(&defs, page_size), &pg.url)
            .await
            .unwrap();
        let lite_source = Source::connect(&source_def(&defs, page_size), &lite.url)
            .await
            .unwrap();
        for rule in &defs.rules {
            let a = backtest(&defs, &pg_source, &rule.name).await;
            let b = backtest(&defs, &lite_source, &rule.name).await;
            assert_eq!(
                findings(&a),
                findings(&b),
                "{} in pages of {page_size}",
                rule.name
            );
        }
    }
    // The edges are really there: the window keeps `since` and drops `until`, and the 1 µs
    // pairs count as separate occurrences.
    let lite_source = Source::connect(&source_def(&defs, 100), &lite.url)
        .await
        .unwrap();
    let in_window = events
        .iter()
        .filter(|(_, at)| {
            at.is_some_and(|at| {
                at >= now() - SignedDuration::from_hours(24 * i64::from(DAYS)) && at < now()
            })
        })
        .count() as u64;
    let ever = backtest(&defs, &lite_source, "ever").await;
    assert_eq!(ever.rows_matched, in_window);
    assert_eq!(ever.null_clock_rows, 1);
    let daily = backtest(&defs, &lite_source, "daily_utc").await;
    let utc_pairs: u64 = events
        .iter()
        .filter(|(k, _)| k.starts_with("m0_") && !k.ends_with('b'))
        .count() as u64;
    assert!(utc_pairs == 15 && daily.fires > 10, "{}", findings(&daily));
}

#[tokio::test]
async fn two_events_one_microsecond_apart_across_a_local_midnight_are_two_days_and_two_occurrences()
{
    let lite = TestSqlite::new();
    let new_york = TimeZone::get("America/New_York").unwrap();
    let midnight = (now() - SignedDuration::from_hours(24 * 9))
        .to_zoned(new_york.clone())
        .date()
        .to_zoned(new_york)
        .unwrap()
        .timestamp();
    let us = SignedDuration::from_micros(1);
    let events = vec![
        ("a".to_string(), Some(midnight - us)),
        ("a".to_string(), Some(midnight)),
    ];
    load_sqlite(&lite.url, &events, &[]).await;
    let defs = defs();
    let source = Source::connect(&source_def(&defs, 1), &lite.url)
        .await
        .unwrap();
    let daily = backtest(&defs, &source, "daily_new_york").await;
    assert_eq!(
        (daily.rows_matched, daily.fires),
        (2, 2),
        "{}",
        findings(&daily)
    );
    let every_second = backtest(&defs, &source, "every_second").await;
    assert_eq!(
        (every_second.fires, every_second.collapsed),
        (1, 1),
        "{}",
        findings(&every_second)
    );
}

/// A SQLite source whose clock column holds `'yesterday'` (key `u1`) and `'\N'` (key `u2`) next
/// to a readable row and a NULL clock.
async fn unreadable_source(lite: &TestSqlite) {
    let at = now() - SignedDuration::from_hours(30);
    let events = vec![("ok".to_string(), Some(at)), ("null".to_string(), None)];
    load_sqlite(&lite.url, &events, &[("u1", "yesterday"), ("u2", "\\N")]).await;
}

#[tokio::test]
async fn a_text_clock_that_is_not_a_time_is_reported_unreadable_not_null_by_a_backtest() {
    let lite = TestSqlite::new();
    unreadable_source(&lite).await;
    let defs = defs();
    let source = Source::connect(&source_def(&defs, 100), &lite.url)
        .await
        .unwrap();
    let report = backtest(&defs, &source, "ever").await;
    assert_eq!(report.rows_matched, 1);
    assert_eq!(report.null_clock_rows, 1, "only the NULL clock is NULL");
    assert_eq!(report.unreadable_clocks.rows, 2);
    let example = report.unreadable_clocks.example.as_ref().unwrap();
    assert!(
        [("yesterday", r#"["u1"]"#), ("\\N", r#"["u2"]"#)]
            .contains(&(example.clock.as_str(), example.key.as_str())),
        "{example:?}"
    );
    let text = report.to_string();
    assert!(text.contains("rows with unreadable clock"), "{text}");
    assert!(
        text.contains(&format!("e.g. {:?}", example.clock)),
        "{text}"
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["unreadable_clocks"]["rows"], 2);
    assert_eq!(json["null_clock_rows"], 1);
    assert_eq!(
        json["unreadable_clocks"]["example"]["key"],
        example.key.as_str()
    );
}

#[tokio::test]
async fn a_poll_and_why_report_an_unreadable_clock_apart_from_null_clocks() {
    let lite = TestSqlite::new();
    unreadable_source(&lite).await;
    let control = TestSqlite::new();
    let store = Store::open(&format!("{}?mode=rwc", control.url))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, DEFINITIONS, now()).await.unwrap();
    let clock = Clock::fixed(now());
    assert!(
        poll::rewind(&store, WS, "event", SignedDuration::from_hours(48), now())
            .await
            .unwrap()
    );
    let url = lite.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let poller = Poller::new(store.clone(), "w1", clock, dsn.clone());
    let reports = poller.poll_due().await.unwrap();
    let report = reports.iter().find(|r| r.trigger == "event").unwrap();
    assert_eq!(report.matched, 1);
    assert_eq!(report.null_clocks, 1);
    assert_eq!(report.unreadable_clocks.rows, 2);
    let printed = report.to_string();
    assert!(
        printed.contains("1 with a NULL clock, 2 with an unreadable clock")
            && printed.contains("unreadable clock: e.g."),
        "{printed}"
    );

    let mut c = SqliteConnection::connect(&control.url).await.unwrap();
    let (null, unreadable, example): (i64, i64, Option<String>) = sqlx::query_as(AssertSqlSafe(
        "SELECT null_clocks, unreadable_clocks, unreadable_clock_example FROM run ORDER BY id DESC LIMIT 1",
    ))
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!((null, unreadable), (1, 2));
    let example = example.unwrap();
    assert!(example.contains("(key [\"u"), "{example}");

    let defs = defs();
    let question = Question {
        rule: "ever",
        key: "ok",
        days: 7,
        now: now(),
    };
    let explained = explanation::why(&store, WS, &defs, question, &dsn)
        .await
        .unwrap();
    assert_eq!(explained.unreadable_clocks.rows, 2);
    let printed = explained.to_string();
    assert!(
        printed.contains("2 row(s) with an unreadable clock, e.g."),
        "{printed}"
    );
}

/// Polls one due trigger `event` at the clock's time and returns its report.
async fn poll_event(poller: &Poller, store: &Store, clock: &Clock) -> poll::PollReport {
    poll::due_now(store, WS, clock.now()).await.unwrap();
    let reports = poller.poll_due().await.unwrap();
    reports.into_iter().find(|r| r.trigger == "event").unwrap()
}

#[tokio::test]
async fn a_poll_sends_no_statement_over_the_whole_query_between_two_counts_of_null_clocks() {
    let lite = TestSqlite::new();
    unreadable_source(&lite).await;
    let control = TestSqlite::new();
    let store = Store::open(&format!("{}?mode=rwc", control.url))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, DEFINITIONS, now()).await.unwrap();
    let clock = Clock::fixed(now());
    assert!(
        poll::rewind(&store, WS, "event", SignedDuration::from_hours(48), now())
            .await
            .unwrap()
    );
    let url = lite.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let poller = Poller::new(store.clone(), "w1", clock.clone(), dsn);

    // The first poll counts: one NULL clock and two unreadable ones, over the whole query.
    let first = poll_event(&poller, &store, &clock).await;
    assert_eq!((first.null_clocks, first.unreadable_clocks.rows), (1, 2));
    assert!(first.clocks_recounted);
    assert_eq!(first.clocks_counted_at, Some(now()));
    let counted = poller.source_statements().await;
    assert_eq!(counted.whole_query, 2, "{counted:?}");

    // A new NULL clock arrives. Within the hour, polls read only their window and report the
    // last count with when it was taken.
    let mut c = SqliteConnection::connect(&lite.url).await.unwrap();
    sqlx::query("INSERT INTO events (k, at) VALUES ('late', NULL)")
        .execute(&mut c)
        .await
        .unwrap();
    let mut before = counted;
    for minutes in [10, 59] {
        clock.set(now() + SignedDuration::from_mins(minutes));
        let report = poll_event(&poller, &store, &clock).await;
        let sent = poller.source_statements().await;
        assert_eq!(
            sent.whole_query, counted.whole_query,
            "no statement over the whole query {minutes} min after the count: {sent:?}"
        );
        assert!(sent.windowed > before.windowed, "the window was read");
        before = sent;
        assert_eq!((report.null_clocks, report.unreadable_clocks.rows), (1, 2));
        assert!(!report.clocks_recounted);
        assert_eq!(report.clocks_counted_at, Some(now()));
        let printed = report.to_string();
        assert!(
            printed.contains(&format!("(clocks as counted at {})", now())),
            "{printed}"
        );
    }

    // An hour after the count, the next poll counts again and finds the new NULL clock.
    clock.set(now() + SignedDuration::from_mins(60));
    let recount = poll_event(&poller, &store, &clock).await;
    assert!(recount.clocks_recounted);
    assert_eq!(
        (recount.null_clocks, recount.unreadable_clocks.rows),
        (2, 2)
    );
    assert_eq!(poller.source_statements().await.whole_query, 4);
}

#[tokio::test]
async fn a_changed_trigger_counts_its_null_clocks_again_on_its_next_poll() {
    let lite = TestSqlite::new();
    unreadable_source(&lite).await;
    let control = TestSqlite::new();
    let store = Store::open(&format!("{}?mode=rwc", control.url))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, DEFINITIONS, now()).await.unwrap();
    let clock = Clock::fixed(now());
    let url = lite.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let poller = Poller::new(store.clone(), "w1", clock.clone(), dsn);
    assert!(poll_event(&poller, &store, &clock).await.clocks_recounted);
    clock.set(now() + SignedDuration::from_mins(5));
    assert!(!poll_event(&poller, &store, &clock).await.clocks_recounted);

    // The trigger now leaves out the unreadable rows: its next poll counts again.
    let changed = DEFINITIONS.replace(
        "sql: SELECT id, k, at FROM events",
        "sql: SELECT id, k, at FROM events WHERE k NOT LIKE 'u%'",
    );
    push::push(&store, WS, &changed, clock.now()).await.unwrap();
    clock.set(now() + SignedDuration::from_mins(6));
    let report = poll_event(&poller, &store, &clock).await;
    assert!(report.clocks_recounted);
    assert_eq!((report.null_clocks, report.unreadable_clocks.rows), (1, 0));
}
