//! A PostgreSQL window is read by one streamed statement: many pages cost one statement, a
//! reader that claims slowly between pages outlasts the statement timeout as long as each page
//! comes in time, a reader dropped halfway leaves nothing running, and the server checks while
//! the statement runs that Rowfire is still connected.

use std::time::{Duration, Instant};

use jiff::SignedDuration;
use rowfire::row::Value;
use rowfire::source::Source;
use rowfire::sql_guard::Shape;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::sources::{def, read_all_pausing, window};
use crate::support::{TestPg, now};

/// Creates `wide (k, at, pad)` holding `rows` rows one second apart inside [`window`], each
/// with 200 bytes of padding: more than the sockets buffer, so the server is still sending
/// while the reader claims.
async fn wide_table(pg: &TestPg, rows: u32) {
    let mut admin = pg.admin().await;
    let start = now() - SignedDuration::from_hours(24 * 30);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE wide (k bigint PRIMARY KEY, at timestamptz NOT NULL, pad text NOT NULL);
         INSERT INTO wide SELECT g, timestamptz '{start}' + g * interval '1 second', repeat('x', 200)
           FROM generate_series(1, {rows}) AS g;
         ANALYZE wide;"
    )))
    .execute(&mut admin)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_postgres_window_of_many_pages_is_read_by_one_statement() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = wide_source(&pg, 1_000, Duration::from_secs(10), 64).await;
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

/// [`wide_table`] with `rows` rows, and a source on it reading pages of `page_size` under
/// `timeout`.
async fn wide_source(pg: &TestPg, rows: u32, timeout: Duration, page_size: usize) -> Source {
    wide_table(pg, rows).await;
    let mut paged = def(timeout);
    paged.page_size = page_size;
    Source::connect(&paged, &pg.url).await.unwrap()
}

/// The backend running the statement against `wide` (not a parallel worker) and when that
/// statement started, as the server sees it.
async fn statement_on_wide(admin: &mut PgConnection) -> Option<(i32, String)> {
    sqlx::query_as(
        "SELECT pid, query_start::text FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
           AND backend_type = 'client backend' AND state = 'active' AND query LIKE '%wide%'",
    )
    .fetch_optional(admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_server_runs_one_statement_from_a_postgres_windows_first_page_to_its_tenth() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = wide_source(&pg, 100_000, Duration::from_secs(10), 1_000).await;
    let query = source.check("wide", "SELECT k, at, pad FROM wide").unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut admin = pg.admin().await;
    let mut reader = source.read_window(&query, shape, window()).await.unwrap();
    reader.next_page().await.unwrap().unwrap();
    let first = statement_on_wide(&mut admin).await;
    assert!(first.is_some(), "the window's statement is running");
    for _ in 0..9 {
        reader.next_page().await.unwrap().unwrap();
    }
    // The same backend, still in the statement that started before the first page: no
    // statement per page (a cursor's FETCH would be a new one each time, and not name `wide`).
    assert_eq!(statement_on_wide(&mut admin).await, first);
    drop(reader);
}

#[tokio::test]
async fn a_postgres_window_read_outlasts_the_statement_timeout_while_the_reader_pauses_between_pages()
 {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = wide_source(&pg, 100_000, Duration::from_secs(1), 1_000).await;
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

/// The statements running on the server against `wide`, other than this one (a parallel
/// plan's workers not counted apart).
async fn running_on_wide(admin: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid() \
           AND backend_type = 'client backend' AND state = 'active' AND query LIKE '%wide%'",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_postgres_reader_dropped_halfway_leaves_no_query_running_and_both_pooled_reads_work_after()
 {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let source = wide_source(&pg, 100_000, Duration::from_secs(10), 1_000).await;
    let sql = "SELECT k, at, pad FROM wide";
    let query = source.check("wide", sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut admin = pg.admin().await;
    {
        let mut reader = source.read_window(&query, shape, window()).await.unwrap();
        let page = reader.next_page().await.unwrap().unwrap();
        assert_eq!(page.len(), 1_000);
        assert_eq!(
            running_on_wide(&mut admin).await,
            1,
            "the statement is still sending"
        );
        // Dropped halfway, without finish.
    }
    let started = Instant::now();
    while running_on_wide(&mut admin).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the dropped read's statement still runs"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (one, two) = tokio::join!(
        read_all_pausing(&source, sql, Duration::ZERO),
        read_all_pausing(&source, sql, Duration::ZERO)
    );
    assert_eq!(one.unwrap().0, 100_000);
    assert_eq!(two.unwrap().0, 100_000);
}

#[tokio::test]
async fn a_postgres_window_statement_runs_with_the_server_checking_that_rowfire_is_still_connected()
{
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut admin = pg.admin().await;
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::int")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let mut checked = def(Duration::from_secs(10));
    checked.allow_functions = vec!["current_setting".to_string()];
    let source = Source::connect(&checked, &pg.url).await.unwrap();
    let sql = format!(
        "SELECT g AS k, timestamptz '{}' AS at, \
                current_setting('client_connection_check_interval', true) AS every, \
                current_setting('statement_timeout') AS limited \
           FROM generate_series(1, 3) AS g",
        now() - SignedDuration::from_hours(24)
    );
    let query = source.check("checked", &sql).unwrap();
    let key = vec!["k".to_string()];
    let shape = Shape {
        clock: "at",
        key: &key,
    };
    let mut reader = source.read_window(&query, shape, window()).await.unwrap();
    let page = reader.next_page().await.unwrap().unwrap();
    reader.finish().await;
    assert_eq!(page.len(), 3);
    // The server's own statement limit is the read's cap for the streamed statement (an hour,
    // a hundred times 10 s being less; each page is bounded by Rowfire instead) ...
    assert_eq!(page[0].get("limited"), Some(&Value::Text("1h".into())));
    // ... and from PostgreSQL 14 on, the server checks every second that Rowfire is there.
    if version >= 140000 {
        assert_eq!(page[0].get("every"), Some(&Value::Text("1s".into())));
    }
}
