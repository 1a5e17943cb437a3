//! Windows larger than a page are read completely: every row exactly once.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use rowfire::definitions::{self, DEFAULT_SOURCE};
use rowfire::row::Value;
use rowfire::source::Source;
use rowfire::sql_guard::{Shape, Window};
use sqlx::{AssertSqlSafe, Connection, SqliteConnection};

use crate::support::{TestMy, TestPg, TestSqlite, now, sample_source, source_def};

async fn read_ids(
    source: &Source,
    sql: &str,
    clock: &str,
    key: &[String],
    window: Window,
) -> (Vec<i64>, u32) {
    let query = source.check("t", sql).unwrap();
    let mut reader = source
        .read_window(&query, Shape { clock, key }, window)
        .await
        .unwrap();
    let mut ids = Vec::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        for row in page {
            let Some(Value::Int(id)) = row.get("id") else {
                panic!("no id in {row:?}")
            };
            ids.push(*id);
        }
    }
    (ids, reader.pages())
}

/// The fixed window around [`tie_rows`]' fixed instants: it moves with no clock.
fn ties_window() -> Window {
    Window {
        since: "2026-11-01T00:00:00Z".parse().unwrap(),
        until: "2026-11-29T12:00:00Z".parse().unwrap(),
    }
}

fn all_time() -> Window {
    Window {
        since: now() - SignedDuration::from_hours(24 * 400),
        until: now(),
    }
}

async fn three_pages_read_every_row_once(url: &str) {
    let (data, defs, _) = sample_source(url, 10_000).await;
    let trigger = defs.trigger("declined_charge").unwrap();
    let attempts = data.table("payment_attempts");
    let expected: BTreeSet<i64> = attempts
        .rows
        .iter()
        .filter(|r| {
            r[5] == Value::Text("declined".into())
                && !r[1].is_null()
                && r[7].as_timestamp().is_some_and(|t| t < now())
        })
        .map(|r| match r[0] {
            Value::Int(id) => id,
            _ => unreachable!(),
        })
        .collect();
    let page = expected.len().div_ceil(3);
    let source = Source::connect(&source_def(&defs, page), url)
        .await
        .unwrap();
    let (ids, pages) = read_ids(
        &source,
        &trigger.sql,
        &trigger.event_time,
        &trigger.key,
        all_time(),
    )
    .await;
    assert!(
        pages >= 3,
        "{pages} pages for {} rows in pages of {page}",
        expected.len()
    );
    assert_eq!(ids.len(), expected.len(), "no row read twice");
    assert_eq!(
        ids.iter().copied().collect::<BTreeSet<_>>(),
        expected,
        "no row skipped"
    );
}

#[tokio::test]
async fn a_window_of_three_pages_is_read_completely_on_sqlite() {
    let db = TestSqlite::new();
    three_pages_read_every_row_once(&db.url).await;
}

#[tokio::test]
async fn a_window_of_three_pages_is_read_completely_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    three_pages_read_every_row_once(&pg.url).await;
}

async fn ties_source(url: &str) -> Source {
    let defs = definitions::parse("version: 2\n").unwrap();
    let mut def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    def.page_size = 4;
    Source::connect(&def, url).await.unwrap()
}

/// Reads the `events` table of [`tie_rows`] in pages of four and checks each row came once.
async fn ties_are_read_once(url: &str) {
    let source = ties_source(url).await;
    let (mut ids, pages) = read_ids(
        &source,
        "SELECT id, k, at FROM events",
        "at",
        &["k".into()],
        ties_window(),
    )
    .await;
    ids.sort();
    assert_eq!(ids, (1..=14).collect::<Vec<_>>());
    assert_eq!(
        pages, 2,
        "the first page grows to hold the whole run of ties"
    );
}

/// Ten rows share one (clock, key) and straddle page boundaries of four rows.
fn tie_rows() -> Vec<(i64, &'static str, &'static str)> {
    let mut rows = vec![
        (1, "a", "2026-11-28T10:00:00Z"),
        (2, "a", "2026-11-28T10:30:00Z"),
    ];
    rows.extend((3..=12).map(|id| (id, "b", "2026-11-28T11:00:00Z")));
    rows.extend([
        (13, "a", "2026-11-28T11:00:00Z"),
        (14, "c", "2026-11-28T12:00:00Z"),
    ]);
    rows
}

#[tokio::test]
async fn rows_tied_on_clock_and_key_across_a_page_boundary_are_read_once_on_sqlite() {
    let db = TestSqlite::new();
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", db.url))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE events (id INTEGER PRIMARY KEY, k TEXT, at TEXT)")
        .execute(&mut c)
        .await
        .unwrap();
    for (id, k, at) in tie_rows() {
        sqlx::query("INSERT INTO events VALUES (?1, ?2, ?3)")
            .bind(id)
            .bind(k)
            .bind(at)
            .execute(&mut c)
            .await
            .unwrap();
    }
    ties_are_read_once(&db.url).await;
}

#[tokio::test]
async fn rows_tied_on_clock_and_key_across_a_page_boundary_are_read_once_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut c = pg.admin().await;
    sqlx::raw_sql("CREATE TABLE events (id bigint PRIMARY KEY, k text, at timestamptz)")
        .execute(&mut c)
        .await
        .unwrap();
    for (id, k, at) in tie_rows() {
        let at: Timestamp = at.parse().unwrap();
        sqlx::query(AssertSqlSafe(
            "INSERT INTO events VALUES ($1, $2, $3)".to_string(),
        ))
        .bind(id)
        .bind(k)
        .bind(jiff_sqlx::Timestamp::from(at))
        .execute(&mut c)
        .await
        .unwrap();
    }
    ties_are_read_once(&pg.url).await;
}

#[tokio::test]
async fn a_backtest_in_small_pages_equals_one_in_a_single_page() {
    let db = TestSqlite::new();
    let (_, defs, big) = sample_source(&db.url, 10_000).await;
    let small = Source::connect(&source_def(&defs, 7), &db.url)
        .await
        .unwrap();
    let opts = rowfire::backtest::Options {
        days: 120,
        sample: 0,
        now: now(),
    };
    for rule in ["billing_ticket", "third_failed_payment"] {
        let a = rowfire::backtest::run(&defs, rule, &big, &opts)
            .await
            .unwrap();
        let b = rowfire::backtest::run(&defs, rule, &small, &opts)
            .await
            .unwrap();
        assert!(b.pages > 10);
        assert_eq!(
            (a.rows_matched, a.fires, a.collapsed),
            (b.rows_matched, b.fires, b.collapsed),
            "{rule}"
        );
    }
}

/// Keys that SQL finds equal but that differ as values (`1.1`, `1.10`, `1.100` as numeric) at one
/// instant, straddling page boundaries: SQL decides where a page ends, so each row is read once.
#[tokio::test]
async fn keys_equal_in_sql_but_not_in_text_straddling_pages_are_read_once_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut c = pg.admin().await;
    let setup = "CREATE TABLE events (id bigint PRIMARY KEY, k numeric, at timestamptz);
        INSERT INTO events SELECT g, (ARRAY[1.1, 1.10, 1.100, 2])[g % 4 + 1], TIMESTAMPTZ '2026-11-28T11:00:00Z' FROM generate_series(1, 11) g;";
    sqlx::raw_sql(setup).execute(&mut c).await.unwrap();
    let source = ties_source(&pg.url).await;
    let (mut ids, _) = read_ids(
        &source,
        "SELECT id, k, at FROM events",
        "at",
        &["k".into()],
        ties_window(),
    )
    .await;
    ids.sort();
    assert_eq!(ids, (1..=11).collect::<Vec<_>>());
}

#[tokio::test]
async fn sqlite_clocks_in_unix_seconds_are_read_as_times() {
    let db = TestSqlite::new();
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", db.url))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE events (id INTEGER PRIMARY KEY, k TEXT, at INTEGER)")
        .execute(&mut c)
        .await
        .unwrap();
    let inside = now().as_second() - 3600;
    for (id, at) in [(1, inside), (2, inside + 1), (3, now().as_second() + 60)] {
        sqlx::query("INSERT INTO events VALUES (?1, 'a', ?2)")
            .bind(id)
            .bind(at)
            .execute(&mut c)
            .await
            .unwrap();
    }
    let source = ties_source(&db.url).await;
    let (ids, _) = read_ids(
        &source,
        "SELECT id, k, at FROM events",
        "at",
        &["k".into()],
        all_time(),
    )
    .await;
    assert_eq!(
        ids,
        vec![1, 2],
        "the row an hour ahead of the window's end is outside it"
    );
}

#[tokio::test]
async fn a_window_of_three_pages_is_read_completely_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    three_pages_read_every_row_once(&my.url).await;
}

/// Creates `events (id, k, at)` on MariaDB holding `rows` (clock as UTC text).
async fn mariadb_events(my: &TestMy, key_type: &str, rows: &[(i64, String, String)]) {
    let mut c = my.admin().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE events (id BIGINT PRIMARY KEY, k {key_type}, at DATETIME(6))"
    )))
    .execute(&mut c)
    .await
    .unwrap();
    for (id, k, at) in rows {
        let at: Timestamp = at.parse().unwrap();
        sqlx::query("INSERT INTO events VALUES (?, ?, ?)")
            .bind(id)
            .bind(k)
            .bind(at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string())
            .execute(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn rows_tied_on_clock_and_key_across_a_page_boundary_are_read_once_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let rows: Vec<(i64, String, String)> = tie_rows()
        .into_iter()
        .map(|(id, k, at)| (id, k.to_string(), at.to_string()))
        .collect();
    mariadb_events(&my, "VARCHAR(10)", &rows).await;
    ties_are_read_once(&my.url).await;
}

/// Twenty-two rows in pages of four: runs of rows tied on (clock, key), one microsecond apart
/// from their neighbours, straddle the first and the second page boundaries, so the window takes
/// at least three pages and no run is split, skipped or read twice.
fn three_page_tie_rows() -> Vec<(i64, String, String)> {
    let mut rows = Vec::new();
    let mut id = 0;
    let mut push = |k: &str, at: &str, n: usize| {
        for _ in 0..n {
            id += 1;
            rows.push((id, k.to_string(), at.to_string()));
        }
    };
    push("a", "2026-11-28T10:00:00Z", 3);
    push("b", "2026-11-28T10:00:00.000001Z", 3);
    push("a", "2026-11-28T10:00:00.000001Z", 1);
    push("c", "2026-11-28T10:30:00Z", 5);
    push("b", "2026-11-28T10:30:00Z", 2);
    push("a", "2026-11-28T11:00:00Z", 4);
    push("d", "2026-11-28T11:00:00.999999Z", 3);
    push("a", "2026-11-28T12:00:00Z", 1);
    rows
}

async fn three_pages_with_ties_are_read_once(url: &str) {
    let source = ties_source(url).await;
    let (ids, pages) = read_ids(
        &source,
        "SELECT id, k, at FROM events",
        "at",
        &["k".into()],
        ties_window(),
    )
    .await;
    assert!(pages >= 3, "{pages} pages");
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=22).collect::<Vec<_>>(), "read {ids:?}");
}

#[tokio::test]
async fn a_three_page_window_with_ties_straddling_pages_is_read_once_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    mariadb_events(&my, "VARCHAR(10)", &three_page_tie_rows()).await;
    three_pages_with_ties_are_read_once(&my.url).await;
}

#[tokio::test]
async fn a_three_page_window_with_ties_straddling_pages_is_read_once_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut c = pg.admin().await;
    sqlx::raw_sql("CREATE TABLE events (id bigint PRIMARY KEY, k text, at timestamptz)")
        .execute(&mut c)
        .await
        .unwrap();
    for (id, k, at) in three_page_tie_rows() {
        let at: Timestamp = at.parse().unwrap();
        sqlx::query("INSERT INTO events VALUES ($1, $2, $3)")
            .bind(id)
            .bind(k)
            .bind(jiff_sqlx::Timestamp::from(at))
            .execute(&mut c)
            .await
            .unwrap();
    }
    three_pages_with_ties_are_read_once(&pg.url).await;
}

#[tokio::test]
async fn a_three_page_window_with_ties_straddling_pages_is_read_once_on_sqlite() {
    let db = TestSqlite::new();
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", db.url))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE events (id INTEGER PRIMARY KEY, k TEXT, at TEXT)")
        .execute(&mut c)
        .await
        .unwrap();
    for (id, k, at) in three_page_tie_rows() {
        sqlx::query("INSERT INTO events VALUES (?1, ?2, ?3)")
            .bind(id)
            .bind(k)
            .bind(at)
            .execute(&mut c)
            .await
            .unwrap();
    }
    three_pages_with_ties_are_read_once(&db.url).await;
}

/// Keys that MariaDB's case- and accent-insensitive collation finds equal but that differ as
/// text (`a`, `A`, `á`) at one instant, and decimals equal in SQL but not in text (`1.1`,
/// `1.10`), straddling page boundaries: SQL decides where a page ends, so each row is read once.
#[tokio::test]
async fn keys_equal_in_sql_but_not_in_text_straddling_pages_are_read_once_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let words = ["a", "A", "á", "b"];
    let rows: Vec<(i64, String, String)> = (1..=11)
        .map(|i| {
            (
                i,
                words[(i % 4) as usize].to_string(),
                "2026-11-28T11:00:00Z".to_string(),
            )
        })
        .collect();
    mariadb_events(
        &my,
        "VARCHAR(10) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci",
        &rows,
    )
    .await;
    let source = ties_source(&my.url).await;
    let (mut ids, _) = read_ids(
        &source,
        "SELECT id, k, at FROM events",
        "at",
        &["k".into()],
        ties_window(),
    )
    .await;
    ids.sort();
    assert_eq!(ids, (1..=11).collect::<Vec<_>>());
    let mut c = my.admin().await;
    sqlx::raw_sql(
        "CREATE TABLE amounts (id BIGINT PRIMARY KEY, k DECIMAL(10, 3), at DATETIME(6));
         INSERT INTO amounts SELECT seq, ELT(seq % 4 + 1, 1.1, 1.10, 1.100, 2), '2026-11-28 11:00:00' FROM seq_1_to_11;",
    )
    .execute(&mut c)
    .await
    .unwrap();
    let (mut ids, _) = read_ids(
        &source,
        "SELECT id, k, at FROM amounts",
        "at",
        &["k".into()],
        ties_window(),
    )
    .await;
    ids.sort();
    assert_eq!(ids, (1..=11).collect::<Vec<_>>());
}

/// Reads `events` (four keyed rows, 500 rows with a NULL key, then two keyed rows) in pages of
/// four with a page memory bound far under what the NULL-key rows take together: they are
/// counted and dropped as they are read, so they never fill a page.
async fn a_long_run_of_null_keys_is_counted_and_never_fills_a_page(url: &str) {
    let mut source = ties_source(url).await;
    source.limit_page_bytes(2_000);
    let query = source.check("t", "SELECT id, k, at FROM events").unwrap();
    let key = ["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut reader = source
        .read_window(&query, shape, ties_window())
        .await
        .unwrap();
    let mut ids = Vec::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        ids.extend(page.iter().map(|r| r.get("id").cloned()));
    }
    let null_keys = reader.null_keys();
    reader.finish().await;
    let expected: Vec<Option<Value>> = [1, 2, 3, 4, 1001, 1002]
        .into_iter()
        .map(|id| Some(Value::Int(id)))
        .collect();
    assert_eq!(ids, expected);
    assert_eq!(null_keys, 500);
}

const NULL_KEY_ROWS: &str = "
    INSERT INTO events VALUES (1, 'a', '2026-11-28T01:00:00Z'), (2, 'b', '2026-11-28T02:00:00Z'),
                              (3, 'c', '2026-11-28T03:00:00Z'), (4, 'd', '2026-11-28T04:00:00Z'),
                              (1001, 'e', '2026-11-28T20:00:00Z'), (1002, 'f', '2026-11-28T21:00:00Z')";

#[tokio::test]
async fn a_long_run_of_null_keys_is_counted_and_never_fills_a_page_on_sqlite() {
    let db = TestSqlite::new();
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", db.url))
        .await
        .unwrap();
    let setup = format!(
        "CREATE TABLE events (id INTEGER PRIMARY KEY, k TEXT, at TEXT);
         {NULL_KEY_ROWS};
         WITH RECURSIVE g(n) AS (SELECT 5 UNION ALL SELECT n + 1 FROM g WHERE n < 504)
         INSERT INTO events SELECT n, NULL, '2026-11-28T10:' || printf('%02d', n % 60) || ':00Z' FROM g;"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&mut c)
        .await
        .unwrap();
    a_long_run_of_null_keys_is_counted_and_never_fills_a_page(&db.url).await;
}

#[tokio::test]
async fn a_long_run_of_null_keys_is_counted_and_never_fills_a_page_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut c = pg.admin().await;
    let setup = format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, k text, at timestamptz);
         {NULL_KEY_ROWS};
         INSERT INTO events SELECT n, NULL, TIMESTAMPTZ '2026-11-28T10:00:00Z' + n * interval '1 second'
           FROM generate_series(5, 504) AS n;"
    );
    sqlx::raw_sql(AssertSqlSafe(setup))
        .execute(&mut c)
        .await
        .unwrap();
    a_long_run_of_null_keys_is_counted_and_never_fills_a_page(&pg.url).await;
}
