//! `rowfire init` drafts a definitions file from the sample database's catalogue on every
//! engine: the draft validates unchanged and every rule in it backtests.

use rowfire::backtest::{self, Options};
use rowfire::definitions;
use rowfire::source::Source;

use crate::support::{TestMy, TestPg, TestSqlite, now, sample_source};

use crate::cli::ran as rowfire;

async fn a_draft_of_the_sample_validates_and_backtests(url: &str) {
    sample_source(url, 1000).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("draft.yaml");
    let out = out.to_str().unwrap();
    let (ok, printed, err) = rowfire(&["init", "--source", url, "--out", out], &[]);
    assert!(ok, "{printed}\n{err}");
    assert!(printed.contains("skipped plans: no timestamp"), "{printed}");
    let yaml = std::fs::read_to_string(out).unwrap();
    for want in [
        "payment_attempts:",
        "event_time: \"attempted_at\"  # attempted_at is the table's time column, and indexed",
        "key: [\"account_id\"]  # account_id is named like a reference to another table",
        "event_time: \"created_at\"  # created_at is when the row was created",
        "event_time: \"updated_at\"  # updated_at is when the row last changed",
    ] {
        assert!(yaml.contains(want), "{want} in\n{yaml}");
    }

    // It validates unchanged, against the source too.
    let (ok, printed, err) = rowfire(&["validate", out], &[("DATABASE_URL", url)]);
    assert!(ok, "{printed}\n{err}\n{yaml}");

    // Every rule backtests.
    let defs = definitions::parse(&yaml).unwrap();
    let source = Source::connect(defs.source("default").unwrap(), url)
        .await
        .unwrap();
    let opts = Options {
        days: 400,
        sample: 1,
        now: now(),
    };
    assert!(defs.rules.len() >= 5, "{yaml}");
    let mut matched = 0;
    for rule in &defs.rules {
        let report = backtest::run(&defs, &rule.name, &source, &opts)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{yaml}", rule.name));
        matched += report.rows_matched;
    }
    assert!(matched > 100, "{matched} rows matched");

    // An existing draft is kept unless --force.
    let (ok, _, err) = rowfire(&["init", "--source", url, "--out", out], &[]);
    assert!(!ok && err.contains("--force"), "{err}");
    let (ok, _, err) = rowfire(&["init", "--source", url, "--out", out, "--force"], &[]);
    assert!(ok, "{err}");
}

#[tokio::test]
async fn a_draft_of_the_sample_on_sqlite_validates_and_every_rule_backtests() {
    let db = TestSqlite::new();
    a_draft_of_the_sample_validates_and_backtests(&db.url).await;
}

#[tokio::test]
async fn a_draft_of_the_sample_on_postgres_validates_and_every_rule_backtests() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    a_draft_of_the_sample_validates_and_backtests(&pg.url).await;
}

#[tokio::test]
async fn a_draft_of_the_sample_on_mariadb_validates_and_every_rule_backtests() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    a_draft_of_the_sample_validates_and_backtests(&my.url).await;
}

#[tokio::test]
async fn init_reads_the_catalogue_as_a_select_only_user_and_keeps_the_password_off_the_command_line()
 {
    let Some(my) = TestMy::new().await else {
        return;
    };
    sample_source(&my.url, 1000).await;
    let reader = my.reader_url("n0t-shown").await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("draft.yaml");
    let out = out.to_str().unwrap();
    let (ok, _, err) = rowfire(&["init", "--source", &reader, "--out", out], &[]);
    assert!(!ok && err.contains("--source-env"), "{err}");
    assert!(!err.contains("n0t-shown"), "{err}");
    let (ok, printed, err) = rowfire(
        &["init", "--source-env", "SUPPORT_URL", "--out", out],
        &[("SUPPORT_URL", &reader)],
    );
    assert!(ok, "{printed}\n{err}");
    assert!(!printed.contains("n0t-shown") && !err.contains("n0t-shown"));
    let yaml = std::fs::read_to_string(out).unwrap();
    assert!(yaml.contains("dsn_env: \"SUPPORT_URL\""), "{yaml}");
    assert!(yaml.contains("payment_attempts:"), "{yaml}");
    let (ok, printed, err) = rowfire(&["validate", out], &[("SUPPORT_URL", &reader)]);
    assert!(ok, "{printed}\n{err}");
}

#[tokio::test]
async fn fixture_load_and_simulate_write_the_sample_into_mariadb() {
    let Some(my) = TestMy::new().await else {
        return;
    };
    let (ok, out, err) = rowfire(
        &["fixture", "load", "--into", &my.url, "--now", "2026-11-29"],
        &[],
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("120 accounts"), "{out}");
    let mut admin = my.admin().await;
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_attempts")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let (ok, out, err) = rowfire(&["fixture", "simulate", "--into", &my.url], &[]);
    assert!(ok, "{out}\n{err}");
    let after: i64 = sqlx::query_scalar("SELECT count(*) FROM payment_attempts")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert!(after > before, "{before} → {after}");
}
