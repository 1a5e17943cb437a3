//! Sources are only read, time out with advice, and never show a secret.

use std::time::Duration;

use jiff::SignedDuration;
use rowfire::definitions::{self, DEFAULT_SOURCE, SourceDef};
use rowfire::row::Value;
use rowfire::source::{Source, SourceError};
use rowfire::sql_guard::{Shape, Window};

use crate::support::{TestPg, TestSqlite, now, sample_source};

pub(crate) fn def(timeout: Duration) -> SourceDef {
    let defs = definitions::parse("version: 2\n").unwrap();
    let mut def = defs.source(DEFAULT_SOURCE).unwrap().clone();
    def.statement_timeout = timeout;
    def
}

pub(crate) fn window() -> Window {
    Window {
        since: now() - SignedDuration::from_hours(24 * 400),
        until: now(),
    }
}

/// Reads every page of `sql` (clock `at`, key `k`, the `wide` tables of the pass tests), pausing
/// `pause` after the first: the rows and the pages.
pub(crate) async fn read_all_pausing(
    source: &Source,
    sql: &str,
    pause: Duration,
) -> Result<(usize, u32), SourceError> {
    let query = source.check("wide", sql)?;
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut reader = source.read_window(&query, shape, window()).await?;
    let mut rows = 0;
    while let Some(page) = reader.next_page().await? {
        if rows == 0 {
            tokio::time::sleep(pause).await;
        }
        rows += page.len();
    }
    let pages = reader.pages();
    reader.finish().await;
    Ok((rows, pages))
}

pub(crate) async fn writes_are_refused(source: &Source) {
    for sql in [
        "CREATE TABLE sneaky (a int)",
        "INSERT INTO plans (id, name, price_cents) VALUES (9, 'x', 1)",
        "DELETE FROM accounts",
        "DROP TABLE plans",
    ] {
        let err = source.execute_unguarded(sql).await.expect_err(sql);
        let msg = err.to_string().to_lowercase();
        assert!(
            msg.contains("read-only") || msg.contains("readonly") || msg.contains("read only"),
            "{sql}: {msg}"
        );
    }
}

#[tokio::test]
async fn a_postgres_source_session_refuses_writes_that_slip_past_the_guard() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let (_, _, source) = sample_source(&pg.url, 100).await;
    writes_are_refused(&source).await;
    // A string that tries to switch the transaction to read-write before writing is refused too:
    // the read-only transaction has already taken its snapshot.
    let err = source
        .execute_unguarded("SET TRANSACTION READ WRITE; CREATE TABLE x (a int)")
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("read-write mode must be set before any query"),
        "{err}"
    );
}

#[tokio::test]
async fn a_sqlite_source_session_refuses_writes_that_slip_past_the_guard() {
    let db = TestSqlite::new();
    let (_, _, source) = sample_source(&db.url, 100).await;
    writes_are_refused(&source).await;
    let err = source
        .execute_unguarded("PRAGMA query_only = OFF; CREATE TABLE x (a int)")
        .await
        .expect_err("file opened read-only");
    assert!(err.to_string().to_lowercase().contains("readonly"), "{err}");
}

pub(crate) async fn first_page(
    source: &Source,
    sql: &str,
) -> Result<Option<Vec<rowfire::row::Row>>, SourceError> {
    let query = source.check("slow", sql)?;
    let key = vec!["k".to_string()];
    let mut reader = source
        .read_window(
            &query,
            Shape {
                clock: "at",
                key: &key,
            },
            window(),
        )
        .await?;
    reader.next_page().await
}

#[tokio::test]
async fn a_slow_postgres_query_times_out_with_advice() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(200)), &pg.url)
        .await
        .unwrap();
    // Slow by arithmetic alone (no server clock, no sleep), with a clock a day inside the
    // tests' window, so the planner can never prove the window filter false.
    let sql = format!(
        "SELECT max(g) AS k, timestamptz '{}' AS at FROM generate_series(1, 2000000000) AS g",
        now() - SignedDuration::from_hours(24)
    );
    let err = first_page(&source, &sql).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("0.2s statement timeout") && msg.contains("narrow it"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_slow_sqlite_query_times_out_with_advice() {
    let db = TestSqlite::new();
    sample_source(&db.url, 100).await;
    let source = Source::connect(&def(Duration::from_millis(200)), &db.url)
        .await
        .unwrap();
    let slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 500000000) SELECT max(x) AS k, '2026-11-01T00:00:00Z' AS at FROM c";
    let err = first_page(&source, slow).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
}

#[tokio::test]
async fn a_dsn_and_its_password_never_appear_in_a_connection_error() {
    let dsn = "postgres://rowfire:hunter2@127.0.0.1:1/secretdb";
    let err = Source::connect(&def(Duration::from_secs(1)), dsn)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("127.0.0.1:1/secretdb"), "{msg}");
    assert!(
        !msg.contains("hunter2") && !msg.contains("rowfire:"),
        "{msg}"
    );
    let err = Source::connect(&def(Duration::from_secs(1)), "sqlite:///nowhere/at/all.db")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no database file"), "{err}");
}

#[tokio::test]
async fn a_missing_clock_or_key_column_is_named_with_the_columns_the_query_has() {
    let db = TestSqlite::new();
    let (_, _, source) = sample_source(&db.url, 100).await;
    let query = source.check("t", "SELECT id, name FROM accounts").unwrap();
    let key = vec!["account_id".to_string()];
    let err = source
        .check_shape(
            "t",
            &query,
            Shape {
                clock: "created_at",
                key: &key,
            },
            &["invoice_id"],
            window(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("no column named created_at, account_id, invoice_id")
            && msg.contains("it returns: id, name"),
        "{msg}"
    );
}

/// PostgreSQL returns two columns of one name; a row holds one value per name, so the key and
/// the templates could read different ones: refused, naming the column.
#[tokio::test]
async fn a_query_returning_two_columns_of_one_name_is_refused() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let (_, _, source) = sample_source(&pg.url, 10).await;
    let query = source
        .check("t", "SELECT id AS k, created_at, name AS k FROM accounts")
        .unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "created_at",
        key: &key,
    };
    let err = source
        .check_shape("t", &query, shape, &[], window())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("two columns named k"), "{err}");
    // A repeated name the trigger does not read (`SELECT *` over a join) is left be.
    let query = source
        .check("t", "SELECT id AS k, created_at, name, name FROM accounts")
        .unwrap();
    source
        .check_shape("t", &query, shape, &[], window())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_postgres_clock_that_is_text_is_refused_with_a_cast_to_try() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let (_, _, source) = sample_source(&pg.url, 100).await;
    let query = source
        .check("t", "SELECT id, created_at::text AS created FROM accounts")
        .unwrap();
    let key = vec!["id".to_string()];
    let err = source
        .check_shape(
            "t",
            &query,
            Shape {
                clock: "created",
                key: &key,
            },
            &[],
            window(),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("created::timestamptz"), "{err}");
}

pub(crate) async fn text_survives_exactly(url: &str) {
    let (data, _, source) = sample_source(url, 100).await;
    let query = source
        .check("t", "SELECT id, name, created_at FROM accounts")
        .unwrap();
    let key = vec!["id".to_string()];
    let mut reader = source
        .read_window(
            &query,
            Shape {
                clock: "created_at",
                key: &key,
            },
            window(),
        )
        .await
        .unwrap();
    let mut read = std::collections::HashMap::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        for row in page {
            read.insert(
                row.get("id").unwrap().to_string(),
                row.get("name").unwrap().clone(),
            );
        }
    }
    let accounts = data.table("accounts");
    for (id, name) in accounts.column("id").zip(accounts.column("name")) {
        assert_eq!(read.get(&id.to_string()), Some(name), "{id}");
    }
    assert_eq!(
        read.get("acct_008"),
        Some(&Value::Text("東京データ株式会社".into()))
    );
    assert_eq!(
        read.get("acct_009"),
        Some(&Value::Text("O'Brien & Sons \"Quality\" Ltd".into()))
    );
    assert_eq!(
        read.get("acct_010"),
        Some(&Value::Text("100% Organic Co.".into()))
    );
}

#[tokio::test]
async fn non_ascii_quotes_and_percent_signs_survive_the_read_on_sqlite() {
    let db = TestSqlite::new();
    text_survives_exactly(&db.url).await;
}

#[tokio::test]
async fn non_ascii_quotes_and_percent_signs_survive_the_read_on_postgres() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    text_survives_exactly(&pg.url).await;
}

/// The first row `sql` returns on the PostgreSQL at `url`.
async fn first_pg_row(url: &str, sql: &str) -> rowfire::row::Row {
    let source = Source::connect(&def(Duration::from_secs(5)), url)
        .await
        .unwrap();
    let rows = first_page(&source, sql).await.unwrap().unwrap();
    rows.into_iter().next().expect("a row")
}

#[tokio::test]
async fn postgres_decimals_dates_and_json_keep_their_exact_form() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let at = now() - SignedDuration::from_hours(24 * 28);
    let sql = format!(
        "SELECT 1.10::numeric AS amount, 0.0000001::numeric AS tiny, DATE '2026-03-08' AS day, '{{\"a\": [1, 2]}}'::jsonb AS doc, gen_random_uuid() AS u, 'x' AS k, TIMESTAMPTZ '{at}' AS at"
    );
    let row = first_pg_row(&pg.url, &sql).await;
    assert_eq!(row.get("amount"), Some(&Value::Decimal("1.10".into())));
    assert_eq!(row.get("tiny"), Some(&Value::Decimal("0.0000001".into())));
    assert_eq!(row.get("day").unwrap().to_string(), "2026-03-08");
    assert_eq!(
        row.get("doc"),
        Some(&Value::Json(serde_json::json!({"a": [1, 2]})))
    );
    assert_eq!(row.clock, Some(at));
}

/// `infinity` is PostgreSQL's "never" (a `valid_until` that has no end): no instant holds it, so
/// it is read as its name, and one such row does not stop the read.
#[tokio::test]
async fn postgres_infinite_times_and_dates_are_read_as_their_names() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let at = now() - SignedDuration::from_hours(24);
    let sql = format!(
        "SELECT 'x' AS k, TIMESTAMPTZ '{at}' AS at, 'infinity'::timestamptz AS until_tz, '-infinity'::timestamp AS since, 'infinity'::date AS day, '-infinity'::date AS first_day"
    );
    let row = first_pg_row(&pg.url, &sql).await;
    for (column, word) in [
        ("until_tz", "infinity"),
        ("since", "-infinity"),
        ("day", "infinity"),
        ("first_day", "-infinity"),
    ] {
        assert_eq!(row.get(column), Some(&Value::Text(word.into())), "{column}");
    }
    assert_eq!(row.clock, Some(at));
}
