//! Backtest counts against independent computations over the generated sample data.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use rowfire::backtest::{self, Options, Outcome, Report, Simulator};
use rowfire::definitions::Definitions;
use rowfire::fixture::{Dataset, planted};
use rowfire::row::Value;
use rowfire::source::Source;
use rowfire::sql_guard::{Shape, Window};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row as _, SqliteConnection};

use crate::support::{TestMy, TestPg, TestSqlite, now, sample_source};

const DAYS: u32 = 120;

fn since() -> Timestamp {
    now() - SignedDuration::from_hours(24 * i64::from(DAYS))
}

/// Counts computed by plain SQL on the sample tables, without Rowfire's code.
#[derive(Debug, Default)]
struct Expected {
    matched: u64,
    null_keys: u64,
    null_clocks: u64,
    distinct_keys: u64,
    weekly: u64,
    daily: u64,
    every_third: u64,
    future: u64,
    enterprise_naive: u64,
    enterprise: u64,
    detractors: u64,
    detractor_months: u64,
}

const DECLINED: &str = "FROM payment_attempts WHERE status = 'declined' AND attempted_at >= {S} AND attempted_at < {U}";
const ENTERPRISE: &str = "FROM accounts a JOIN plans p ON p.id = a.plan_id WHERE p.name = 'Enterprise' AND a.created_at >= {S} AND a.created_at < {U}";
const DETRACTORS: &str = "FROM nps_responses r JOIN accounts a ON a.id = r.account_id WHERE r.score <= 6 AND r.responded_at >= {S} AND r.responded_at < {U}";

fn queries(week: &str, day: &str, month: &str) -> Vec<String> {
    vec![
        format!("SELECT count(*) {DECLINED}"),
        format!("SELECT count(*) {DECLINED} AND account_id IS NULL"),
        "SELECT count(*) FROM payment_attempts WHERE status = 'declined' AND attempted_at IS NULL"
            .into(),
        format!("SELECT count(DISTINCT account_id) {DECLINED}"),
        format!(
            "SELECT count(*) FROM (SELECT DISTINCT account_id, {week} {DECLINED} AND account_id IS NOT NULL) AS x"
        ),
        format!(
            "SELECT count(*) FROM (SELECT DISTINCT account_id, {day} {DECLINED} AND account_id IS NOT NULL) AS x"
        ),
        format!(
            "SELECT CAST(coalesce(sum((c + 2) / 3), 0) AS BIGINT) FROM (SELECT count(*) AS c {DECLINED} AND account_id IS NOT NULL GROUP BY account_id) AS x"
        ),
        "SELECT count(*) FROM payment_attempts WHERE status = 'declined' AND attempted_at >= {U}"
            .into(),
        format!("SELECT count(*) {ENTERPRISE}"),
        format!("SELECT count(*) {ENTERPRISE} AND NOT a.is_internal AND NOT a.is_test"),
        format!("SELECT count(*) {DETRACTORS}"),
        format!("SELECT count(*) FROM (SELECT DISTINCT r.account_id, {month} {DETRACTORS}) AS x"),
    ]
}

fn fill(values: Vec<u64>) -> Expected {
    let v = |i: usize| values[i];
    Expected {
        matched: v(0),
        null_keys: v(1),
        null_clocks: v(2),
        distinct_keys: v(3),
        weekly: v(4),
        daily: v(5),
        every_third: v(6),
        future: v(7),
        enterprise_naive: v(8),
        enterprise: v(9),
        detractors: v(10),
        detractor_months: v(11),
    }
}

async fn expected_pg(url: &str) -> Expected {
    let mut c = PgConnection::connect(url).await.unwrap();
    let mut out = Vec::new();
    for q in queries(
        "date_trunc('week', attempted_at AT TIME ZONE 'UTC')",
        "(attempted_at AT TIME ZONE 'UTC')::date",
        "date_trunc('month', r.responded_at AT TIME ZONE 'America/New_York')",
    ) {
        let sql = q.replace("{S}", "$1").replace("{U}", "$2");
        let row = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(jiff_sqlx::Timestamp::from(since()))
            .bind(jiff_sqlx::Timestamp::from(now()))
            .fetch_one(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        out.push(row.try_get::<i64, _>(0).unwrap() as u64);
    }
    fill(out)
}

/// SQLite cannot bucket months in New York time; that count is re-done in Rust from the rows.
async fn expected_sqlite(url: &str, data: &Dataset) -> Expected {
    let mut c = SqliteConnection::connect(url).await.unwrap();
    let fmt = |t: Timestamp| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let mut out = Vec::new();
    for q in queries(
        "date(attempted_at, 'weekday 0', '-6 days')",
        "date(attempted_at)",
        "'unused'",
    ) {
        let sql = q.replace("{S}", "?1").replace("{U}", "?2");
        let row = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(fmt(since()))
            .bind(fmt(now()))
            .fetch_one(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        out.push(row.try_get::<i64, _>(0).unwrap() as u64);
    }
    let mut e = fill(out);
    e.detractor_months = detractor_months(data);
    e
}

/// Detractor months in New York time, counted in Rust from the rows (for engines without time
/// zone data).
fn detractor_months(data: &Dataset) -> u64 {
    let ny = TimeZone::get("America/New_York").unwrap();
    let nps = data.table("nps_responses");
    let mut months = std::collections::HashSet::new();
    for (account, (score, at)) in nps
        .column("account_id")
        .zip(nps.column("score").zip(nps.column("responded_at")))
    {
        let (Value::Int(score), Value::Timestamp(at)) = (score, at) else {
            continue;
        };
        if *score <= 6 && *at >= since() && *at < now() {
            let zoned = at.to_zoned(ny.clone());
            months.insert((account.to_string(), zoned.year(), zoned.month()));
        }
    }
    months.len() as u64
}

/// MariaDB has no time zone tables by default: months are re-done in Rust, as for SQLite.
async fn expected_mysql(my: &TestMy, data: &Dataset) -> Expected {
    let mut c = my.admin().await;
    let fmt = |t: Timestamp| t.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string();
    let mut out = Vec::new();
    for q in queries(
        "DATE_SUB(DATE(attempted_at), INTERVAL WEEKDAY(attempted_at) DAY)",
        "DATE(attempted_at)",
        "'unused'",
    ) {
        let sql = q
            .replace("{S}", "CAST(? AS DATETIME(6))")
            .replace("{U}", "CAST(? AS DATETIME(6))")
            .replace("(c + 2) / 3", "(c + 2) DIV 3")
            .replace("AS BIGINT)", "AS SIGNED)");
        let binds = sql.matches('?').count();
        let mut query = sqlx::query(AssertSqlSafe(sql.clone()));
        for i in 0..binds {
            query = query.bind(fmt(if i % 2 == 0 { since() } else { now() }));
        }
        let row = query
            .fetch_one(&mut c)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        out.push(row.try_get::<i64, _>(0).unwrap() as u64);
    }
    let mut e = fill(out);
    e.detractor_months = detractor_months(data);
    e
}

async fn run(defs: &Definitions, source: &Source, rule: &str) -> Report {
    let opts = Options {
        days: DAYS,
        sample: 3,
        now: now(),
    };
    backtest::run(defs, rule, source, &opts).await.unwrap()
}

async fn backtest_counts_match_sql(
    url: &str,
    expected: Expected,
    defs: &Definitions,
    source: &Source,
) {
    assert!(
        expected.matched > 100 && expected.weekly > 10,
        "the sample data is too thin: {expected:?}"
    );
    assert!(
        expected.future > 0 && expected.null_clocks > 0 && expected.null_keys > 0,
        "edge cases missing: {expected:?}"
    );

    let weekly = run(defs, source, "billing_ticket").await;
    assert_eq!(weekly.rows_matched, expected.matched, "{url}");
    assert_eq!(weekly.fires, expected.weekly);
    assert_eq!(weekly.null_key_rows, expected.null_keys);
    assert_eq!(
        weekly.collapsed,
        expected.matched - expected.null_keys - expected.weekly
    );
    assert_eq!(weekly.null_clock_rows, expected.null_clocks);
    assert_eq!(weekly.distinct_keys, expected.distinct_keys);
    assert_eq!(
        weekly.per_day.iter().map(|d| d.fires).sum::<u64>(),
        weekly.fires
    );
    assert_eq!(weekly.samples.len(), 3);
    // The planted stretch without payments is the longest quiet run.
    let quiet = weekly.longest_zero_run.as_ref().expect("a quiet stretch");
    // Activity for "d days back" falls in [now - d days, now - d days + 24h), so with now at noon
    // the whole UTC dates from (end - 1) to start days back have no rows at all.
    let date_back = |days: i64| {
        (now() - SignedDuration::from_hours(24 * days))
            .to_zoned(TimeZone::UTC)
            .date()
            .to_string()
    };
    let (start, end) = (*planted::QUIET_DAYS.start(), *planted::QUIET_DAYS.end());
    assert!(quiet.days >= (end - start) as u64, "{quiet:?}");
    assert!(
        quiet.from <= date_back(end - 1) && quiet.to >= date_back(start),
        "{quiet:?}"
    );

    assert_eq!(
        run(defs, source, "billing_heads_up").await.fires,
        expected.daily
    );
    assert_eq!(
        run(defs, source, "third_failed_payment").await.fires,
        expected.every_third
    );
    let naive = run(defs, source, "enterprise_announcement_naive").await;
    let corrected = run(defs, source, "enterprise_announcement").await;
    assert_eq!(naive.fires, expected.enterprise_naive);
    assert_eq!(corrected.fires, expected.enterprise);
    assert_eq!(
        naive.fires - corrected.fires,
        planted::INTERNAL_ACCOUNTS.len() as u64,
        "the naive trigger catches the internal accounts"
    );
    let detractor = run(defs, source, "detractor_follow_up").await;
    assert_eq!(detractor.rows_matched, expected.detractors);
    assert_eq!(detractor.fires, expected.detractor_months);
    assert_eq!(detractor.time_zone, "America/New_York");
}

#[tokio::test]
async fn backtest_counts_equal_plain_sql_over_the_sample_on_sqlite() {
    let db = TestSqlite::new();
    let (data, defs, source) = sample_source(&db.url, 10_000).await;
    let expected = expected_sqlite(&db.url, &data).await;
    backtest_counts_match_sql(&db.url, expected, &defs, &source).await;
}

#[tokio::test]
async fn backtest_counts_equal_plain_sql_over_the_sample_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let (_, defs, source) = sample_source(&pg.url, 10_000).await;
    let expected = expected_pg(&pg.url).await;
    backtest_counts_match_sql(&pg.url, expected, &defs, &source).await;
}

/// The sample's reminders, counted from the generated rows: one send per booked meeting (open
/// follow-up) whose start minus its own minutes, else ten (due time minus an hour), fell in the
/// window, per UTC day.
fn expected_sends(data: &Dataset) -> [(u64, Vec<(String, u64)>); 2] {
    let count = |dues: Vec<Timestamp>| {
        let mut days = std::collections::BTreeMap::new();
        for due in dues.iter().filter(|d| **d >= since() && **d < now()) {
            let day = due.to_zoned(TimeZone::UTC).date().to_string();
            *days.entry(day).or_insert(0u64) += 1;
        }
        (days.values().sum(), days.into_iter().collect())
    };
    let table = |name: &str| {
        let t = data.table(name);
        let cols: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
        t.rows
            .iter()
            .map(|r| cols.iter().copied().zip(r.iter().cloned()).collect())
            .collect::<Vec<std::collections::HashMap<&str, Value>>>()
    };
    let mins = SignedDuration::from_mins;
    let meetings = table("meetings")
        .into_iter()
        .filter(|m| m["status"] == Value::Text("booked".into()))
        .filter_map(|m| match (&m["starts_at"], &m["lead_minutes"]) {
            (Value::Timestamp(at), Value::Int(lead)) => Some(*at - mins(*lead)),
            (Value::Timestamp(at), _) => Some(*at - mins(10)),
            _ => None,
        })
        .collect();
    let follow_ups = table("follow_ups")
        .into_iter()
        .filter(|f| f["done"] == Value::Bool(false))
        .filter_map(|f| match &f["due_at"] {
            Value::Timestamp(at) => Some(*at - mins(60)),
            _ => None,
        })
        .collect();
    [count(meetings), count(follow_ups)]
}

async fn anchored_sample_backtests_count_the_sends_due_in_the_window(url: &str) {
    let (data, defs, source) = sample_source(url, 10_000).await;
    let expected = expected_sends(&data);
    assert!(
        expected[0].0 > 10,
        "the sample calendar is too thin: {expected:?}"
    );
    for (rule, (sends, days)) in ["meeting_nudge", "follow_up_reminder"].iter().zip(expected) {
        let r = run(&defs, &source, rule).await;
        assert_eq!((r.fires, r.rows_matched), (sends, sends), "{rule}: {r}");
        let counted: Vec<(String, u64)> = r
            .per_day
            .iter()
            .filter(|d| d.fires > 0)
            .map(|d| (d.date.clone(), d.fires))
            .collect();
        assert_eq!(counted, days, "{rule}");
        assert!(r.anchored_caveat.is_some() && r.headline().contains(" sends over "));
    }
}

#[tokio::test]
async fn anchored_sample_backtests_count_the_sends_due_in_the_window_on_sqlite() {
    let db = TestSqlite::new();
    anchored_sample_backtests_count_the_sends_due_in_the_window(&db.url).await;
}

#[tokio::test]
async fn anchored_sample_backtests_count_the_sends_due_in_the_window_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    anchored_sample_backtests_count_the_sends_due_in_the_window(&pg.url).await;
}

#[tokio::test]
async fn backtest_counts_equal_plain_sql_over_the_sample_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let (data, defs, source) = sample_source(&my.url, 10_000).await;
    let expected = expected_mysql(&my, &data).await;
    backtest_counts_match_sql(&my.url, expected, &defs, &source).await;
}

/// A report as JSON, without what names the engine or depends on it: where the source is, how
/// long the query took, and the sample rows' values as each engine types them (a SQLite clock
/// is text, a boolean is 0 or 1 there); their clocks, keys and buckets stay.
fn comparable(report: &Report) -> serde_json::Value {
    let mut json = serde_json::to_value(report).unwrap();
    let object = json.as_object_mut().unwrap();
    object.remove("source");
    object.remove("query_ms");
    if let Some(samples) = object.get_mut("samples").and_then(|s| s.as_array_mut()) {
        for sample in samples {
            sample.as_object_mut().unwrap().remove("row");
        }
    }
    json
}

#[tokio::test]
async fn the_sample_definitions_backtest_to_identical_reports_on_postgres_sqlite_and_mariadb() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let Some(my) = TestMy::new().await else {
        return;
    };
    let lite = TestSqlite::new();
    let (_, defs, pg_source) = sample_source(&pg.url, 10_000).await;
    let (_, _, lite_source) = sample_source(&lite.url, 10_000).await;
    let (_, _, my_source) = sample_source(&my.url, 10_000).await;
    for rule in &defs.rules {
        let a = run(&defs, &pg_source, &rule.name).await;
        let b = run(&defs, &lite_source, &rule.name).await;
        let c = run(&defs, &my_source, &rule.name).await;
        assert!(a.rows_matched > 0, "{}", rule.name);
        assert_eq!(comparable(&a), comparable(&b), "{} on SQLite", rule.name);
        assert_eq!(comparable(&a), comparable(&c), "{} on MariaDB", rule.name);
    }
}

/// Reads the declined_charge window and runs one rule's cadence over one account's rows.
async fn outcomes_for(
    defs: &Definitions,
    source: &Source,
    rule: &str,
    account: &str,
) -> Vec<(Timestamp, Outcome)> {
    let (rule, trigger) = defs.rule_and_trigger(rule).unwrap();
    let query = source.check(&trigger.name, &trigger.sql).unwrap();
    let shape = Shape {
        clock: &trigger.event_time,
        key: &trigger.key,
    };
    let mut reader = source
        .read_window(
            &query,
            shape,
            Window {
                since: since(),
                until: now(),
            },
        )
        .await
        .unwrap();
    let mut sim = Simulator::new(&rule.cadence, &trigger.key, &trigger.occurrence);
    let mut out = Vec::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        for row in page {
            let outcome = sim.evaluate(&row);
            if row.get("account_id") == Some(&Value::Text(account.into())) {
                out.push((row.clock.unwrap(), outcome));
            }
        }
    }
    out
}

fn fired(outcomes: &[(Timestamp, Outcome)]) -> Vec<String> {
    outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Fired { bucket, .. } => Some(bucket.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn nine_declines_in_one_week_make_one_weekly_ticket() {
    let db = TestSqlite::new();
    let (_, defs, source) = sample_source(&db.url, 10_000).await;
    let outcomes = outcomes_for(&defs, &source, "billing_ticket", planted::STORMY_ACCOUNT).await;
    assert_eq!(outcomes.len(), 9);
    assert_eq!(fired(&outcomes).len(), 1, "{outcomes:?}");
}

#[tokio::test]
async fn a_four_times_retried_invoice_escalates_on_the_first_and_fourth_failure() {
    let db = TestSqlite::new();
    let (_, defs, source) = sample_source(&db.url, 10_000).await;
    let outcomes = outcomes_for(
        &defs,
        &source,
        "third_failed_payment",
        planted::RETRIED_INVOICE_ACCOUNT,
    )
    .await;
    assert_eq!(outcomes.len(), 4);
    assert_eq!(fired(&outcomes), vec!["1", "4"]);
}

#[tokio::test]
async fn detractors_around_a_new_york_month_boundary_land_in_new_york_months() {
    let db = TestSqlite::new();
    let (data, defs, _) = sample_source(&db.url, 10_000).await;
    let rule = defs.rule("detractor_follow_up").unwrap();
    let nps = data.table("nps_responses");
    let find = |needle: &str| {
        nps.column("comment")
            .zip(nps.column("responded_at"))
            .find(|(c, _)| c.to_string().contains(needle))
            .map(|(_, at)| at.as_timestamp().unwrap())
            .unwrap()
    };
    let before = find("month boundary, before");
    let after = find("month boundary, after");
    let period = rowfire::cadence::Period::Month;
    let ny = rule.cadence.time_zone();
    assert_ne!(
        period.start(&ny, before),
        period.start(&ny, after),
        "New York months differ"
    );
    assert_eq!(
        period.start(&TimeZone::UTC, before),
        period.start(&TimeZone::UTC, after),
        "both are the same UTC month"
    );
    // And both sides of the latest DST change are in the data, an hour and a half either way.
    let change = TimeZone::get(planted::DST_ZONE)
        .unwrap()
        .preceding(now())
        .next()
        .unwrap()
        .timestamp();
    let dst_rows: Vec<Timestamp> = nps
        .column("comment")
        .zip(nps.column("responded_at"))
        .filter(|(c, _)| c.to_string().contains("DST check"))
        .map(|(_, at)| at.as_timestamp().unwrap())
        .collect();
    assert_eq!(dst_rows.iter().filter(|t| **t < change).count(), 2);
    assert_eq!(dst_rows.iter().filter(|t| **t > change).count(), 2);
}

#[tokio::test]
async fn anchored_sample_backtests_count_the_sends_due_in_the_window_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    anchored_sample_backtests_count_the_sends_due_in_the_window(&my.url).await;
}
