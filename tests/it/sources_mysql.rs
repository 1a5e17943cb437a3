//! The source suite on MariaDB (or MySQL): sessions are only read, time out with advice, come
//! back to the pool clean, name the fix for a missing grant or column, keep values exact and
//! never show a secret. Shares its checks with `sources.rs`.

use std::time::Duration;

use jiff::SignedDuration;
use rowfire::row::Value;
use rowfire::source::{Source, SourceError};
use rowfire::sql_guard::Shape;
use sqlx::AssertSqlSafe;

use crate::sources::{
    def, first_page, read_all_pausing, text_survives_exactly, window, writes_are_refused,
};
use crate::support::{TestMy, now, sample_source};

#[tokio::test]
async fn a_mariadb_source_session_refuses_writes_that_slip_past_the_guard() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    // Connected as the server's administrator: the session alone refuses.
    let (_, _, source) = sample_source(&my.url, 100).await;
    writes_are_refused(&source).await;
    let err = source
        .execute_unguarded("INSERT INTO plans (id, name, price_cents) VALUES ('x', 'x', 1)")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("sources are only read"), "{err}");
    // The read's transaction cannot be switched to read-write once it has begun.
    let err = source
        .execute_unguarded("SET TRANSACTION READ WRITE")
        .await
        .unwrap_err();
    assert!(
        err.to_string().to_lowercase().contains("transaction"),
        "{err}"
    );
    let mut admin = my.admin().await;
    let plans: i64 = sqlx::query_scalar("SELECT count(*) FROM plans")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(plans, 3, "nothing was written");
}

#[tokio::test]
async fn a_slow_mariadb_query_times_out_with_advice() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let source = Source::connect(&def(Duration::from_millis(300)), &my.url)
        .await
        .unwrap();
    // Slow by arithmetic over MariaDB's sequence tables, with a clock inside the window.
    let sql = format!(
        "SELECT max(a.seq * b.seq) AS k, CAST('{}' AS DATETIME(6)) AS at \
         FROM seq_1_to_100000 a, seq_1_to_100000 b WHERE (a.seq ^ b.seq) = 7",
        (now() - SignedDuration::from_hours(24)).strftime("%Y-%m-%d %H:%M:%S")
    );
    let started = std::time::Instant::now();
    let err = first_page(&source, &sql).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("0.3s statement timeout") && msg.contains("narrow it"),
        "{msg}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_mysql_dsn_and_its_password_never_appear_in_an_error() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let good = my.reader_url("hunter2").await;
    let wrong = good.replace(":hunter2@", ":hunter3@");
    let err = Source::connect(&def(Duration::from_secs(2)), &wrong)
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&format!("/{}", my.name)), "{msg}");
    assert!(!msg.contains("hunter"), "{msg}");
    let err = Source::connect(
        &def(Duration::from_secs(1)),
        "mysql://rowfire:hunter2@127.0.0.1:1/secretdb",
    )
    .await
    .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("127.0.0.1:1/secretdb"), "{msg}");
    assert!(
        !msg.contains("hunter2") && !msg.contains("rowfire:"),
        "{msg}"
    );
    // The server's own schemas are not a source.
    let err = Source::connect(
        &def(Duration::from_secs(1)),
        "mysql://root:hunter2@127.0.0.1:3306/mysql",
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("the server's own schema"), "{err}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn a_mariadb_table_the_user_may_not_read_is_named_with_the_grant_to_give() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    sample_source(&my.url, 100).await;
    let reader = my.reader_url("s3cret").await;
    let mut admin = my.admin().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "REVOKE SELECT ON {0}.* FROM '{0}_r'@'%'; GRANT SELECT ON {0}.accounts TO '{0}_r'@'%'",
        my.name
    )))
    .execute(&mut admin)
    .await
    .unwrap();
    let source = Source::connect(&def(Duration::from_secs(5)), &reader)
        .await
        .unwrap();
    let query = source
        .check("t", "SELECT id, created_at FROM plans")
        .unwrap();
    let key = vec!["id".to_string()];
    let shape = Shape {
        clock: "created_at",
        key: &key,
    };
    let err = source
        .check_shape("t", &query, shape, &[], window())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("GRANT SELECT ON"), "{msg}");
    assert!(!msg.contains("s3cret"), "{msg}");
    // An unknown column is named with where to look.
    let query = source
        .check("t", "SELECT id, created FROM accounts")
        .unwrap();
    let err = source
        .check_shape("t", &query, shape, &[], window())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("check the column names"), "{err}");
}

#[tokio::test]
async fn a_missing_clock_or_key_column_is_named_on_mariadb_too() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let (_, _, source) = sample_source(&my.url, 100).await;
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
            &[],
            window(),
        )
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("no column named created_at, account_id")
            && msg.contains("it returns: id, name"),
        "{msg}"
    );
}

#[tokio::test]
async fn a_mariadb_clock_that_is_text_is_refused_with_a_cast_to_try() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let (_, _, source) = sample_source(&my.url, 100).await;
    let query = source
        .check(
            "t",
            "SELECT id, DATE_FORMAT(created_at, '%Y-%m-%d') AS created FROM accounts",
        )
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
    assert!(
        err.to_string().contains("CAST(created AS DATETIME(6))"),
        "{err}"
    );
}

#[tokio::test]
async fn non_ascii_quotes_and_percent_signs_survive_the_read_on_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    text_survives_exactly(&my.url).await;
}

#[tokio::test]
async fn mariadb_decimals_bits_json_unsigned_integers_and_binary_strings_keep_their_exact_form() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let mut admin = my.admin().await;
    sqlx::raw_sql(
        "CREATE TABLE v (id INT PRIMARY KEY, amount DECIMAL(12, 2), tiny DECIMAL(20, 7), \
         big BIGINT UNSIGNED, flags BIT(10), doc JSON, raw VARBINARY(8), day DATE, \
         at DATETIME(6), stamp TIMESTAMP(6) NULL, note VARCHAR(20), ok BOOLEAN)",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    let at = (now() - SignedDuration::from_hours(24 * 28))
        .round(jiff::Unit::Second)
        .unwrap()
        + SignedDuration::from_micros(123_457);
    let text = at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string();
    sqlx::query(
        r#"INSERT INTO v VALUES (1, 1.10, 0.0000001, 18446744073709551615, b'1000000001',
         '{"a": [1, 2]}', X'00ff10', '2026-03-08', ?, ?, 'a\b ''q''', TRUE)"#,
    )
    .bind(&text)
    .bind(&text)
    .execute(&mut admin)
    .await
    .unwrap();
    let source = Source::connect(&def(Duration::from_secs(5)), &my.url)
        .await
        .unwrap();
    let query = source.check("t", "SELECT id AS k, v.* FROM v").unwrap();
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
        .await
        .unwrap();
    let rows = reader.next_page().await.unwrap().unwrap();
    reader.finish().await;
    let row = &rows[0];
    assert_eq!(row.get("amount"), Some(&Value::Decimal("1.10".into())));
    assert_eq!(row.get("tiny"), Some(&Value::Decimal("0.0000001".into())));
    assert_eq!(
        row.get("big"),
        Some(&Value::Decimal("18446744073709551615".into()))
    );
    assert_eq!(row.get("flags"), Some(&Value::Int(513)));
    // MariaDB's JSON is text that holds a document (MySQL's is a JSON type, read as one).
    match row.get("doc") {
        Some(Value::Json(doc)) => assert_eq!(doc, &serde_json::json!({"a": [1, 2]})),
        Some(Value::Text(doc)) => assert_eq!(doc, r#"{"a": [1, 2]}"#),
        other => panic!("{other:?}"),
    }
    assert_eq!(row.get("raw"), Some(&Value::Bytes(vec![0, 0xff, 0x10])));
    assert_eq!(row.get("day").unwrap().to_string(), "2026-03-08");
    assert_eq!(row.get("at"), Some(&Value::Timestamp(at)));
    assert_eq!(row.get("stamp"), Some(&Value::Timestamp(at)));
    assert_eq!(row.get("note"), Some(&Value::Text(r"a\b 'q'".into())));
    assert_eq!(row.get("ok"), Some(&Value::Bool(true)));
    assert_eq!(row.clock, Some(at));
}

#[tokio::test]
async fn a_pooled_mariadb_connection_comes_back_with_its_limits_and_time_zone_after_a_read_changed_them()
 {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let mut admin = my.admin().await;
    let at = (now() - SignedDuration::from_hours(24))
        .round(jiff::Unit::Second)
        .unwrap()
        + SignedDuration::from_micros(1);
    sqlx::raw_sql("CREATE TABLE stamps (id INT PRIMARY KEY, at TIMESTAMP(6) NULL)")
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query("INSERT INTO stamps VALUES (1, ?)")
        .bind(at.strftime("%Y-%m-%d %H:%M:%S%.6f").to_string())
        .execute(&mut admin)
        .await
        .unwrap();
    let mut one = def(Duration::from_millis(300));
    one.page_size = 10;
    let source = Source::connect(&one, &my.url).await.unwrap();
    // What only a statement the guard refuses can do: change the session's settings.
    for _ in 0..3 {
        source
            .execute_unguarded(
                "SET SESSION time_zone = '+05:00', SESSION max_statement_time = 0, SESSION sql_mode = 'ANSI_QUOTES'",
            )
            .await
            .unwrap();
    }
    let rows = first_page(&source, "SELECT id AS k, at FROM stamps")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows[0].clock, Some(at), "read in UTC again");
    let slow = format!(
        "SELECT max(a.seq * b.seq) AS k, CAST('{}' AS DATETIME(6)) AS at \
         FROM seq_1_to_100000 a, seq_1_to_100000 b WHERE (a.seq ^ b.seq) = 7",
        (now() - SignedDuration::from_hours(24)).strftime("%Y-%m-%d %H:%M:%S")
    );
    let err = first_page(&source, &slow).await.unwrap_err();
    assert!(matches!(err, SourceError::Timeout { .. }), "{err:?}");
    // "…" is a string again (no ANSI_QUOTES): the guard rendered it as one.
    let rows = first_page(&source, "SELECT id AS k, at, \"text\" AS word FROM stamps")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rows[0].get("word"), Some(&Value::Text("text".into())));
}

/// Creates `wide (k, at, pad)` holding `rows` rows one second apart inside [`window`], each
/// with 200 bytes of padding: more than the sockets buffer, so the server is still sending
/// while the reader claims.
async fn wide_table(my: &TestMy, rows: u32) {
    let mut admin = my.admin().await;
    let start = (now() - SignedDuration::from_hours(24 * 30)).strftime("%Y-%m-%d %H:%M:%S");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE wide (k BIGINT PRIMARY KEY, at DATETIME(6) NOT NULL, pad VARCHAR(200) NOT NULL);
         INSERT INTO wide SELECT seq, '{start}' + INTERVAL seq SECOND, REPEAT('x', 200)
           FROM seq_1_to_{rows};"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_mariadb_window_of_many_pages_is_read_by_one_statement() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    wide_table(&my, 1_000).await;
    let mut paged = def(Duration::from_secs(10));
    paged.page_size = 64;
    let source = Source::connect(&paged, &my.url).await.unwrap();
    let before = source.statements();
    let (rows, pages) = read_all_pausing(&source, "SELECT k, at FROM wide", Duration::ZERO)
        .await
        .unwrap();
    assert_eq!((rows, pages), (1_000, 16));
    let sent = source.statements();
    assert_eq!(
        sent.windowed - before.windowed,
        1,
        "sixteen pages, one statement: {sent:?}"
    );
}

#[tokio::test]
async fn a_mariadb_window_read_outlasts_the_statement_timeout_while_the_reader_pauses_between_pages()
 {
    let Some(my) = TestMy::new().await else {
        return;
    };
    wide_table(&my, 100_000).await;
    let mut paged = def(Duration::from_secs(1));
    paged.page_size = 1_000;
    let source = Source::connect(&paged, &my.url).await.unwrap();
    // The server is still sending when the reader pauses past the statement timeout: each page
    // arrives in time, so the read goes on.
    let (rows, pages) = read_all_pausing(
        &source,
        "SELECT k, at, pad FROM wide",
        Duration::from_millis(2_500),
    )
    .await
    .unwrap();
    assert_eq!((rows, pages), (100_000, 100));
}

/// The statements running on the server against `wide`, other than this one.
async fn running_on_wide(admin: &mut sqlx::MySqlConnection, db: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.PROCESSLIST \
         WHERE DB = ? AND ID <> CONNECTION_ID() AND INFO LIKE '%wide%'",
    )
    .bind(db)
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_mariadb_reader_dropped_halfway_leaves_no_query_running_and_both_pooled_reads_work_after()
{
    let Some(my) = TestMy::new().await else {
        return;
    };
    wide_table(&my, 100_000).await;
    let mut paged = def(Duration::from_secs(10));
    paged.page_size = 1_000;
    let source = Source::connect(&paged, &my.url).await.unwrap();
    let sql = "SELECT k, at, pad FROM wide";
    let query = source.check("wide", sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut admin = my.admin().await;
    {
        let mut reader = source.read_window(&query, shape, window()).await.unwrap();
        let page = reader.next_page().await.unwrap().unwrap();
        assert_eq!(page.len(), 1_000);
        assert_eq!(
            running_on_wide(&mut admin, &my.name).await,
            1,
            "the statement is still sending"
        );
        // Dropped halfway, without finish.
    }
    let started = std::time::Instant::now();
    while running_on_wide(&mut admin, &my.name).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the dropped read's statement still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The pool holds two connections; both are free again, and each read is whole.
    let (one, two) = tokio::join!(
        read_all_pausing(&source, sql, Duration::ZERO),
        read_all_pausing(&source, sql, Duration::ZERO)
    );
    assert_eq!(one.unwrap().0, 100_000);
    assert_eq!(two.unwrap().0, 100_000);
}
