//! The guard on a real PostgreSQL source with `dblink` and `adminpack` installed, connected as a
//! superuser (the worst case a customer might configure): every refused shape of issue 8 runs
//! through a backtest and a worker poll, and afterwards nothing outside the read has changed.

use std::sync::Arc;

use jiff::SignedDuration;
use rowfire::backtest::{self, BacktestError, Options};
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::source::{Source, SourceError};
use rowfire::sql_guard::GuardError;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row as _, SqliteConnection};

use crate::support::{TestPg, TestSqlite, now};

const SAFE_SQL: &str = "SELECT t.id, t.at, t.name FROM t";

fn definitions_text(sql: &str) -> String {
    let sql = sql.replace('\'', "''");
    format!(
        "version: 2\n\
         source:\n  type: postgres\n  dsn_env: GUARD_PG_UNUSED_URL\n  statement_timeout_ms: 5000\n\
         triggers:\n  t:\n    sql: '{sql}'\n    event_time: at\n    key: id\n\
         rules:\n  r:\n    trigger: t\n    policy: once_ever\n"
    )
}

/// What must not change: the source table, files, slots, locks, large objects, sessions.
#[derive(Debug, PartialEq, Eq)]
struct World {
    rows: i64,
    checksum: String,
    slots: i64,
    advisory_locks: i64,
    large_objects: i64,
    written_file: bool,
    kept_file: bool,
}

struct Names {
    slot: String,
    written: String,
    kept: String,
}

async fn observe(admin: &mut PgConnection, names: &Names) -> World {
    let row = sqlx::query(
        "SELECT count(*), md5(coalesce(string_agg(id || ':' || name || ':' || at::text, ',' ORDER BY id), '')) FROM t",
    )
    .fetch_one(&mut *admin)
    .await
    .unwrap();
    let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&names.slot)
            .fetch_one(&mut *admin)
            .await
            .unwrap();
    let advisory_locks = count(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&mut *admin)
    .await
    .unwrap();
    let large_objects = count("SELECT count(*) FROM pg_largeobject_metadata")
        .fetch_one(&mut *admin)
        .await
        .unwrap();
    let exists = |path: &str| {
        sqlx::query_scalar::<_, bool>("SELECT (pg_stat_file($1, true)).size IS NOT NULL")
            .bind(path.to_string())
    };
    World {
        rows: row.get(0),
        checksum: row.get(1),
        slots,
        advisory_locks,
        large_objects,
        written_file: exists(&names.written).fetch_one(&mut *admin).await.unwrap(),
        kept_file: exists(&names.kept).fetch_one(&mut *admin).await.unwrap(),
    }
}

/// Every refused shape of issue 8, written against this database.
fn refused_shapes(conninfo: &str, names: &Names, sentinel_pid: i32) -> Vec<String> {
    let Names {
        slot,
        written,
        kept,
    } = names;
    vec![
        format!(
            "SELECT t.id, t.at FROM dblink_exec('{conninfo}', 'DELETE FROM t WHERE id <= 10') AS d(x), t"
        ),
        format!(
            "SELECT t.id, t.at FROM t, dblink('{conninfo}', 'INSERT INTO t (id, at, name) VALUES (1000, now(), ''x'') RETURNING id') AS d(i int)"
        ),
        format!(
            "SELECT t.id, t.at, (SELECT \"dblink_exec\"('{conninfo}', 'DELETE FROM t')) FROM t"
        ),
        "SELECT t.id, t.at, f.x FROM t, pg_read_file('/etc/passwd', 0, 60) AS f(x)".into(),
        "WITH x AS (SELECT pg_catalog.pg_read_file('/etc/passwd') AS p) SELECT t.id, t.at FROM t, x"
            .into(),
        "SELECT t.id, t.at FROM t, pg_ls_dir('/') AS d(x)".into(),
        format!(
            "SELECT t.id, t.at FROM t, lo_export(lo_from_bytea(0, 'x'), '{written}') AS l(x)"
        ),
        "SELECT t.id, t.at FROM t, LATERAL (SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()) AS c"
            .into(),
        format!(
            "SELECT t.id, t.at FROM t CROSS JOIN LATERAL pg_terminate_backend({sentinel_pid}) AS k(x)"
        ),
        format!("SELECT t.id, t.at, pg_create_physical_replication_slot('{slot}', true) FROM t"),
        format!(
            "SELECT t.id, t.at FROM t WHERE pg_drop_replication_slot('{slot}') IS NULL"
        ),
        format!("SELECT t.id, t.at, pg_file_unlink('{kept}') FROM t"),
        format!("SELECT t.id, t.at FROM t, PG_CATALOG.PG_FILE_UNLINK('{kept}') AS u(x)"),
        "SELECT t.id, t.at, pg_stat_reset() FROM t".into(),
        format!(
            "SELECT t.id, t.at, query_to_xml('SELECT pg_terminate_backend({sentinel_pid})', true, true, '') FROM t"
        ),
        "SELECT t.id, t.at FROM t, ts_stat('SELECT to_tsvector(name) FROM t') AS s".into(),
        "SELECT t.id, t.at FROM t, set_config('statement_timeout', '0', false) AS s(x)".into(),
        "SELECT t.id, t.at FROM t, pg_try_advisory_lock(4545) AS l".into(),
        "SELECT t.id, t.at FROM t WHERE pg_advisory_lock(4546) IS NOT NULL".into(),
        "SELECT t.id, t.at FROM t, LATERAL \"pg_sleep\"(5) AS s".into(),
    ]
}

fn is_guard_refusal(error: &GuardError) -> bool {
    matches!(error, GuardError::Function(_))
}

#[tokio::test]
async fn no_refused_shape_changes_anything_on_a_postgres_source_with_dblink_as_superuser() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut admin = pg.admin().await;
    let tag = format!("{}_{}", std::process::id(), fastrand::u32(..));
    let names = Names {
        slot: format!("rowfire_guard_{tag}"),
        written: format!("/tmp/rowfire_guard_written_{tag}"),
        kept: format!("/tmp/rowfire_guard_kept_{tag}"),
    };
    let start = now() - SignedDuration::from_hours(24 * 5);
    for sql in [
        "CREATE EXTENSION dblink".to_string(),
        "CREATE EXTENSION adminpack".to_string(),
        "CREATE TABLE t (id int PRIMARY KEY, at timestamptz NOT NULL, name text NOT NULL)".into(),
        format!(
            "INSERT INTO t SELECT i, '{start}'::timestamptz + i * interval '1 hour', 'row ' || i FROM generate_series(1, 50) AS i"
        ),
        format!("COPY (SELECT 'keep me') TO '{}'", names.kept),
    ] {
        sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let mut sentinel = pg.admin().await;
    let sentinel_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut sentinel)
        .await
        .unwrap();
    let before = observe(&mut admin, &names).await;
    assert_eq!(
        (
            before.rows,
            before.slots,
            before.advisory_locks,
            before.written_file,
            before.kept_file
        ),
        (50, 0, 0, false, true),
        "{before:?}"
    );
    // The observation can fail: an advisory lock held elsewhere is seen.
    sqlx::query("SELECT pg_advisory_lock(1)")
        .execute(&mut sentinel)
        .await
        .unwrap();
    assert_eq!(observe(&mut admin, &names).await.advisory_locks, 1);
    sqlx::query("SELECT pg_advisory_unlock(1)")
        .execute(&mut sentinel)
        .await
        .unwrap();

    let conninfo = format!(
        "dbname={} user=postgres host=127.0.0.1",
        pg.url.rsplit('/').next().unwrap()
    );
    let shapes = refused_shapes(&conninfo, &names, sentinel_pid);

    // Backtest: the safe SQL reads the rows (the harness works), every refused shape is refused
    // by the guard before it reaches the database.
    let safe = definitions::parse(&definitions_text(SAFE_SQL)).unwrap();
    let source = Source::connect(safe.source("default").unwrap(), &pg.url)
        .await
        .unwrap();
    let opts = Options {
        days: 30,
        sample: 3,
        now: now(),
    };
    let report = backtest::run(&safe, "r", &source, &opts).await.unwrap();
    assert_eq!((report.rows_matched, report.fires), (50, 50), "{report:?}");
    for sql in &shapes {
        assert!(
            definitions::parse(&definitions_text(sql)).is_err(),
            "the definitions accepted {sql}"
        );
        let mut defs = safe.clone();
        defs.triggers[0].sql = sql.clone();
        match backtest::run(&defs, "r", &source, &opts).await {
            Err(BacktestError::Source(SourceError::Guard { error, .. })) => {
                assert!(is_guard_refusal(&error), "{sql}: {error}")
            }
            other => panic!("{sql}: not refused by the guard: {other:?}"),
        }
    }

    // Worker poll: the control plane holds definitions pushed by a Rowfire without the
    // allowlist, one refused shape at a time; the poll fails on the guard and reads nothing.
    let cp = TestSqlite::new();
    let store = Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, &definitions_text(SAFE_SQL), now())
        .await
        .unwrap();
    let clock = Clock::fixed(now());
    let url = pg.url.clone();
    let poller = Poller::new(
        store.clone(),
        "guard-worker",
        clock.clone(),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let mut control = SqliteConnection::connect(&cp.url).await.unwrap();
    for sql in &shapes {
        sqlx::query("UPDATE definition_version SET document = ?1")
            .bind(definitions_text(sql))
            .execute(&mut control)
            .await
            .unwrap();
        poll::rewind(
            &store,
            WS,
            "t",
            SignedDuration::from_hours(24 * 10),
            clock.now(),
        )
        .await
        .unwrap();
        clock.advance(SignedDuration::from_mins(10));
        let reports = poller.poll_due().await.unwrap();
        let report = reports
            .iter()
            .find(|r| r.trigger == "t")
            .unwrap_or_else(|| panic!("{sql}: no poll of t in {reports:?}"));
        match &report.status {
            PollStatus::Failed(why) => assert!(
                why.contains("not on Rowfire's list of read-only functions"),
                "{sql}: {why}"
            ),
            other => panic!("{sql}: the poll was not refused: {other:?}"),
        }
        assert_eq!(report.matched, 0, "{sql}");
    }

    // Afterwards: nothing changed, and the other session is alive.
    let after = observe(&mut admin, &names).await;
    assert_eq!(after, before);
    let alive: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut sentinel)
        .await
        .expect("the sentinel session was not touched");
    assert_eq!(alive, 1);
    let _ = sqlx::raw_sql(AssertSqlSafe(format!(
        "SELECT pg_file_unlink('{}')",
        names.kept
    )))
    .execute(&mut admin)
    .await;
}

/// A customer's own function is refused until the source opts in to it; then the backtest reads it.
#[tokio::test]
async fn a_sources_own_function_runs_once_the_source_opts_in_to_it() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut admin = pg.admin().await;
    let start = now() - SignedDuration::from_hours(24 * 5);
    for sql in [
        "CREATE SCHEMA app".to_string(),
        "CREATE FUNCTION app.score(i int) RETURNS int LANGUAGE sql IMMUTABLE AS 'SELECT i * 2'"
            .into(),
        "CREATE TABLE t (id int PRIMARY KEY, at timestamptz NOT NULL, name text NOT NULL)".into(),
        format!(
            "INSERT INTO t SELECT i, '{start}'::timestamptz + i * interval '1 hour', 'row ' || i FROM generate_series(1, 20) AS i"
        ),
    ] {
        sqlx::raw_sql(AssertSqlSafe(sql.clone()))
            .execute(&mut admin)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let sql = "SELECT t.id, t.at, app.score(t.id) AS score FROM t WHERE app.score(t.id) > 10";
    let opts = Options {
        days: 30,
        sample: 3,
        now: now(),
    };
    let problems = definitions::parse(&definitions_text(sql))
        .unwrap_err()
        .to_string();
    assert!(problems.contains("app.score()"), "{problems}");
    let with = definitions_text(sql).replace(
        "  statement_timeout_ms: 5000\n",
        "  statement_timeout_ms: 5000\n  allow_functions: [app.score]\n",
    );
    let defs = definitions::parse(&with).unwrap();
    let source = Source::connect(defs.source("default").unwrap(), &pg.url)
        .await
        .unwrap();
    let report = backtest::run(&defs, "r", &source, &opts).await.unwrap();
    assert_eq!(report.rows_matched, 15, "{report:?}");
    // The same definitions without the opt-in, as a source sees them: refused by the guard.
    let mut bare = defs.clone();
    bare.sources[0].allow_functions.clear();
    let source = Source::connect(bare.source("default").unwrap(), &pg.url)
        .await
        .unwrap();
    match backtest::run(&bare, "r", &source, &opts).await {
        Err(BacktestError::Source(SourceError::Guard { error, .. })) => {
            assert_eq!(error, GuardError::Function("app.score".into()))
        }
        other => panic!("not refused by the guard: {other:?}"),
    }
}
