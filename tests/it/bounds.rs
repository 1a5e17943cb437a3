//! Every number is bounded where it enters, inputs are refused in linear time, a stored time
//! out of range is an error with advice that `rewind` and `push` repair, and output stops
//! quietly on a closed pipe.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection};

use crate::cli::{rowfire, text};
use crate::support::{TestSqlite, now, sample_source};

/// The problems `text` has, as one string; panics if it parses.
fn problems(text: &str) -> String {
    match definitions::parse(text) {
        Ok(_) => panic!("the document was accepted"),
        Err(p) => p.to_string(),
    }
}

#[test]
fn every_oversized_number_in_the_definitions_is_refused_with_its_maximum() {
    let cases = [
        (
            "    key: [account_id]\n    occurrence: [id]\n",
            "    key: [account_id]\n    occurrence: [id]\n    lookback: 2400000000h\n",
            "triggers.declined_charge.lookback: lookback may be at most 90d",
        ),
        (
            "    key: [account_id]\n    occurrence: [id]\n",
            "    key: [account_id]\n    occurrence: [id]\n    poll_interval: 9223372036854775807s\n",
            "triggers.declined_charge.poll_interval: poll_interval may be at most 7d",
        ),
        (
            "  statement_timeout_ms: 10000\n",
            "  statement_timeout_ms: 99999999999999\n",
            "source.statement_timeout_ms: statement_timeout_ms may be at most 3600000",
        ),
        (
            "    period: week\n",
            "    period: week\n    expire_after: 100000d\n",
            "rules.billing_ticket.expire_after: expire_after may be at most 366d",
        ),
    ];
    for (from, to, expected) in cases {
        assert!(SAMPLE_DEFINITIONS.contains(from), "{from}");
        let got = problems(&SAMPLE_DEFINITIONS.replacen(from, to, 1));
        assert!(got.contains(expected), "{expected}\n{got}");
    }
    let anchored = SAMPLE_DEFINITIONS.replace(
        "    policy: once_ever\n",
        "    anchor: { column: created_at, lead: 2400000000h, look_ahead: 100000d, grace: 99999h }\n",
    );
    let got = problems(&anchored);
    for expected in [
        "anchor.lead: lead may be at most 90d",
        "anchor.look_ahead: look_ahead may be at most 90d",
        "anchor.grace: grace may be at most 7d",
    ] {
        assert!(got.contains(expected), "{expected}\n{got}");
    }
    // The maxima themselves are accepted, and whole days may be written as days.
    let at_most = SAMPLE_DEFINITIONS.replacen(
        "    occurrence: [id]\n",
        "    occurrence: [id]\n    lookback: 90d\n    poll_interval: 7d\n",
        1,
    );
    let defs = definitions::parse(&at_most).unwrap();
    let t = defs.trigger("declined_charge").unwrap();
    assert_eq!(t.lookback, SignedDuration::from_hours(24 * 90));
    assert_eq!(t.poll_interval, SignedDuration::from_hours(24 * 7));
}

/// Parses `text`, asserting it is refused within a second with a message containing `expected`.
fn refused_quickly(what: &str, text: &str, expected: &str) {
    let started = Instant::now();
    let result = std::panic::catch_unwind(|| definitions::parse(text));
    let took = started.elapsed();
    let got = match result {
        Ok(Err(p)) => p.to_string(),
        Ok(Ok(_)) => panic!("{what}: accepted"),
        Err(_) => panic!("{what}: panicked"),
    };
    assert!(got.contains(expected), "{what}: {got}");
    assert!(
        took < Duration::from_secs(1),
        "{what}: took {took:?} to refuse"
    );
}

#[test]
fn each_oversized_file_shape_is_refused_clearly_in_under_a_second() {
    let nested = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    refused_quickly(
        "nested flow sequences",
        &nested,
        "collections are nested more than 64 deep",
    );
    let nested_maps = format!("a: {}{}", "{a: ".repeat(100_000), "}".repeat(100_000));
    refused_quickly(
        "nested flow mappings",
        &nested_maps,
        "collections are nested more than 64 deep",
    );
    // Brackets inside quoted scalars do not close anything: counting characters is fooled.
    let quoted = format!("x: {}1{}", "[\"]\",".repeat(60_000), "]".repeat(60_000));
    refused_quickly(
        "nested sequences hiding closers in quotes",
        &quoted,
        "line 1: collections are nested more than 64 deep",
    );
    let indented: String = (0..200)
        .map(|i| format!("{}k{i}:\n", " ".repeat(i)))
        .collect();
    refused_quickly(
        "deep indentation",
        &indented,
        "collections are nested more than 64 deep",
    );
    let columns: Vec<String> = (0..100_000).map(|i| format!("c{i}")).collect();
    let wide_key = SAMPLE_DEFINITIONS.replacen(
        "    key: [account_id]\n",
        &format!("    key: [{}]\n", columns.join(", ")),
        1,
    );
    refused_quickly(
        "a 100,000-column key",
        &wide_key,
        "key may list at most 16 columns, found 100000",
    );
    let rule = |i: usize| format!("  r{i}: {{trigger: declined_charge, policy: once_ever}}\n");
    let huge: String = (0..300_000).map(rule).collect();
    refused_quickly(
        "300,000 rules",
        &format!("{SAMPLE_DEFINITIONS}{huge}"),
        "a definitions file may be at most 1048576 bytes (1 MiB)",
    );
    let many: String = (0..2_001).map(rule).collect();
    refused_quickly(
        "2,001 rules",
        &format!("{SAMPLE_DEFINITIONS}{many}"),
        "2009 rules; a definitions file may have at most 2000",
    );
    let actions = format!(
        "    actions:\n{}",
        "      - action: inbox.ticket\n".repeat(20)
    );
    refused_quickly(
        "21 actions on one rule",
        &SAMPLE_DEFINITIONS.replacen("    actions:\n", &actions, 1),
        "a rule may bind at most 20 actions, found 21",
    );
}

#[test]
fn every_oversized_number_on_the_command_line_is_refused_with_its_maximum() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", text(&push).1);
    let cases: &[(&[&str], &str)] = &[
        (
            &["rewind", "declined_charge", "--days", "3000000"],
            "days may be at most 3650, found 3000000",
        ),
        (
            &["why", "billing_ticket", "acct_001", "--days", "99999999999"],
            "days may be at most 3650",
        ),
        (
            &["deliveries", "prune", "--older-than", "9999999999999d"],
            "an age may be at most 3650d",
        ),
        (
            &["deliveries", "prune", "--older-than", "9000000000h"],
            "an age may be at most 3650d",
        ),
        (&["deliveries", "--limit=-1"], "from 1 to 10000"),
        (
            &[
                "fixture",
                "load",
                "--into",
                "sqlite://x.db",
                "--now=1000-01-01",
            ],
            "out of range; give a time from 1970-01-01T00:00:00Z to 9000-01-01T00:00:00Z",
        ),
        (
            &[
                "fixture",
                "simulate",
                "--into",
                "sqlite://x.db",
                "--rows",
                "1000000000",
            ],
            "rows may be at most 100000",
        ),
        (
            &["worker", "--once", "--concurrency", "100000"],
            "workers may be at most 64",
        ),
        (
            &["worker", "--once", "--delivery-lease", "9000000000h"],
            "the delivery lease may be at most 1h",
        ),
        (
            &[
                "backtest",
                "billing_ticket",
                "-f",
                "examples/saas/definitions.yaml",
                "--days",
                "4000",
            ],
            "days may be at most 3650",
        ),
        (
            &[
                "backtest",
                "billing_ticket",
                "-f",
                "examples/saas/definitions.yaml",
                "--sample",
                "99999999",
            ],
            "sample fires may be at most 1000",
        ),
    ];
    for (args, expected) in cases {
        let out = rowfire(args, &env);
        let (stdout, stderr) = text(&out);
        assert!(!out.status.success(), "{args:?} succeeded: {stdout}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A file past 1 MiB is refused without being read whole, by `validate` and by `push`.
    let big = dir.path().join("big.yaml");
    std::fs::write(
        &big,
        format!("{SAMPLE_DEFINITIONS}#{}\n", "x".repeat(2 << 20)),
    )
    .unwrap();
    for command in ["validate", "push"] {
        let args = if command == "push" {
            vec![command, "-f", big.to_str().unwrap()]
        } else {
            vec![command, big.to_str().unwrap()]
        };
        let out = rowfire(&args, &env);
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{command}");
        assert!(
            stderr.contains("the file is larger than 1048576 bytes (1 MiB)"),
            "{command}: {stderr}"
        );
    }
    // The largest accepted values run.
    let rewind = rowfire(&["rewind", "declined_charge", "--days", "3650"], &env);
    assert!(rewind.status.success(), "{}", text(&rewind).1);
    let prune = rowfire(&["deliveries", "prune", "--older-than", "3650d"], &env);
    assert!(prune.status.success(), "{}", text(&prune).1);
}

/// Stores an out-of-range watermark for `trigger` straight into the control plane, as a rewind
/// of three million days did before days were bounded (PostgreSQL stores nothing before
/// 4713 BC, so there the year is -3999).
async fn plant_watermark(url: &str, trigger: &str) {
    let value = if url.starts_with("postgres") {
        "'4000-03-01 00:00:00+00 BC'::timestamptz"
    } else {
        "'-6187-03-01T00:00:00.000000Z'"
    };
    let sql =
        format!("UPDATE trigger_state SET watermark = {value} WHERE trigger_name = '{trigger}'");
    if url.starts_with("postgres") {
        // Row-level security admits the row only in its workspace's scope.
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let scoped = format!("SELECT set_config('app.workspace_id', 'default', false); {sql}");
        let planted = sqlx::raw_sql(AssertSqlSafe(scoped))
            .execute(&mut c)
            .await
            .unwrap();
        assert_eq!(planted.rows_affected(), 2, "the SELECT and the planted row");
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

/// Stores intervals far past the definitions' bounds, as a push before the bounds could.
async fn plant_intervals(url: &str, trigger: &str) {
    let sql = format!(
        "UPDATE trigger_state SET lookback_ms = 9000000000000000000, poll_interval_ms = 9000000000000000000 WHERE trigger_name = '{trigger}'"
    );
    if url.starts_with("postgres") {
        // Row-level security admits the row only in its workspace's scope.
        let mut c = sqlx::PgConnection::connect(url).await.unwrap();
        let scoped = format!("SELECT set_config('app.workspace_id', 'default', false); {sql}");
        let planted = sqlx::raw_sql(AssertSqlSafe(scoped))
            .execute(&mut c)
            .await
            .unwrap();
        assert_eq!(planted.rows_affected(), 2, "the SELECT and the planted row");
    } else {
        let mut c = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(AssertSqlSafe(sql))
            .execute(&mut c)
            .await
            .unwrap();
    }
}

async fn an_out_of_range_stored_watermark_fails_its_trigger_with_advice_until_rewind_or_push_repairs_it(
    url: &str,
) {
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    plant_watermark(url, "declined_charge").await;
    plant_intervals(url, "detractor").await;
    let sample_url = sample.url.clone();
    let clock = Clock::fixed(now());
    let poller = Poller::new(
        store.clone(),
        "w1",
        clock.clone(),
        Arc::new(move |_, _| Some(sample_url.clone().into())),
    );
    let state = |name: &'static str| {
        let store = store.clone();
        async move {
            poll::list(&store, WS)
                .await
                .expect("listing never fails on a bad stored time")
                .into_iter()
                .find(|t| t.trigger == name)
                .unwrap()
        }
    };
    let advice = "run `rowfire rewind declined_charge --days 1` or push the definitions again";
    let listed = state("declined_charge").await;
    assert!(
        listed
            .problem
            .as_deref()
            .is_some_and(|p| p.contains(advice)),
        "{listed:?}"
    );

    // Every trigger is polled; the bad one fails with the advice, the others (the one with
    // intervals past the bounds included) poll normally.
    let reports = poller.poll_due().await.expect("the worker does not fail");
    assert_eq!(reports.len(), 7, "{reports:?}");
    for r in &reports {
        match (&r.status, r.trigger.as_str()) {
            (PollStatus::Failed(why), "declined_charge") => assert!(why.contains(advice), "{why}"),
            (PollStatus::Ok, name) => assert_ne!(name, "declined_charge"),
            (PollStatus::Skipped(_), "meeting_changed") => {}
            other => panic!("{other:?}"),
        }
    }
    let detractor = state("detractor").await;
    assert_eq!(detractor.problem, None);
    assert_eq!(
        detractor.next_poll_at,
        now() + SignedDuration::from_hours(24 * 7),
        "a stored interval past the bound is read as the bound"
    );
    assert!(
        state("declined_charge")
            .await
            .last_error
            .is_some_and(|e| e.contains(advice))
    );

    // `rewind` repairs it; the next poll reads the rewound window.
    let day = SignedDuration::from_hours(24);
    assert!(
        poll::rewind(&store, WS, "declined_charge", day, now())
            .await
            .unwrap()
    );
    let repaired = state("declined_charge").await;
    assert_eq!(repaired.problem, None);
    assert_eq!(repaired.watermark, now() - day);
    let reports = poller.poll_due().await.unwrap();
    assert_eq!(reports.len(), 1, "{reports:?}");
    assert_eq!(reports[0].status, PollStatus::Ok, "{}", reports[0]);

    // So does pushing the definitions again, even unchanged.
    plant_watermark(url, "declined_charge").await;
    assert!(state("declined_charge").await.problem.is_some());
    let later = now() + SignedDuration::from_mins(5);
    let summary = push::push(&store, WS, SAMPLE_DEFINITIONS, later)
        .await
        .unwrap();
    assert!(summary.unchanged);
    let repaired = state("declined_charge").await;
    assert_eq!((repaired.problem, repaired.watermark), (None, later));
}
on_both_engines!(
    an_out_of_range_stored_watermark_is_repaired,
    an_out_of_range_stored_watermark_fails_its_trigger_with_advice_until_rewind_or_push_repairs_it
);

#[test]
fn status_and_worker_name_an_out_of_range_watermark_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", text(&push).1);
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(plant_watermark(&url, "declined_charge"));
    let advice = "run `rowfire rewind declined_charge --days 1`";

    let status = rowfire(&["status"], &env);
    let (stdout, stderr) = text(&status);
    assert!(status.status.success(), "{stderr}");
    assert!(stdout.contains(advice), "{stdout}");

    let worker = rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = text(&worker);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!worker.status.success(), "a failed poll exits non-zero");
    assert!(stdout.contains(advice), "{stdout}");

    let rewind = rowfire(&["rewind", "declined_charge", "--days", "1"], &env);
    assert!(rewind.status.success(), "{}", text(&rewind).1);
    let status = text(&rowfire(&["status"], &env)).0;
    let line = status
        .lines()
        .find(|l| l.trim_start().starts_with("declined_charge"))
        .unwrap();
    assert!(line.contains(" watermark 20"), "{status}");
}

#[test]
fn output_into_a_pipe_closed_after_one_line_stops_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    // Enough rules that `status` and `list` write far more than a pipe holds (64 KiB), so the
    // writer is still writing when the reader goes away.
    let rules: String = (0..1_500)
        .map(|i| format!("  rule_with_a_long_descriptive_name_{i:04}:\n    trigger: declined_charge\n    policy: once_ever\n"))
        .collect();
    let file = dir.path().join("many.yaml");
    std::fs::write(&file, format!("{SAMPLE_DEFINITIONS}{rules}")).unwrap();
    let push = rowfire(&["push", "-f", file.to_str().unwrap()], &env);
    assert!(push.status.success(), "{}", text(&push).1);

    for command in ["status", "list", "pull"] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rowfire"))
            .arg(command)
            .env("ROWFIRE_DATABASE_URL", &url)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut first = String::new();
        let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        stdout.read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{command}");
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "{command}: {stderr}");
        assert!(out.status.success(), "{command}: {:?}", out.status);
    }
}
