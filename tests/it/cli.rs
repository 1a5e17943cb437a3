//! The command line, run as a user would run it.

use std::process::{Command, Output};

use crate::support::{TestSqlite, now, sample_source};

/// Runs the binary with `args`, none of the machine's database URLs or master key, and `envs`.
pub fn rowfire(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rowfire"));
    cmd.args(args)
        .env_remove("SAMPLE_DATABASE_URL")
        .env_remove("DATABASE_URL")
        .env_remove("ROWFIRE_DATABASE_URL")
        .env_remove("ROWFIRE_MASTER_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

/// [`rowfire`], as whether it succeeded, its stdout and its stderr.
pub fn ran(args: &[&str], envs: &[(&str, &str)]) -> (bool, String, String) {
    let out = rowfire(args, envs);
    let (stdout, stderr) = text(&out);
    (out.status.success(), stdout, stderr)
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn validate_reports_three_independent_mistakes_at_once_with_their_paths() {
    let dir = tempfile::tempdir().unwrap();
    let broken = rowfire::fixture::SAMPLE_DEFINITIONS
        .replace("period: week", "period: fortnight")
        .replace(
            "    trigger: enterprise_signup\n",
            "    trigger: enterprise_sign_up\n",
        )
        .replacen(
            "    key: [meeting_id]",
            "    key: [meeting_id]\n    lookbak: 5m",
            1,
        );
    let file = dir.path().join("broken.yaml");
    std::fs::write(&file, broken).unwrap();
    let out = rowfire(&["validate", file.to_str().unwrap()], &[]);
    let (_, err) = text(&out);
    assert!(!out.status.success());
    assert!(err.contains("3 problems"), "{err}");
    assert!(
        err.contains(
            "rules.billing_ticket.period: unknown period \"fortnight\"; use day, week or month"
        ),
        "{err}"
    );
    assert!(err.contains("rules.enterprise_announcement.trigger: unknown trigger \"enterprise_sign_up\"; known triggers: declined_charge, enterprise_signup_naive, enterprise_signup, detractor, meeting_changed, meeting_booked, follow_up_open"), "{err}");
    assert!(
        err.contains("triggers.meeting_changed.lookbak: unknown key; did you mean \"lookback\"?"),
        "{err}"
    );
}

#[tokio::test]
async fn validate_checks_columns_when_the_source_is_reachable() {
    let db = TestSqlite::new();
    sample_source(&db.url, 100).await;
    let file = "examples/saas/definitions.yaml";
    let out = rowfire(&["validate", file], &[("SAMPLE_DATABASE_URL", &db.url)]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert_eq!(
        stdout
            .matches("columns ok on default (sqlite:sample.db)")
            .count(),
        7,
        "{stdout}"
    );

    let offline = rowfire(&["validate", file], &[]);
    assert!(offline.status.success());
    assert!(
        text(&offline)
            .0
            .contains("columns not checked (SAMPLE_DATABASE_URL is not set)")
    );

    let dir = tempfile::tempdir().unwrap();
    let wrong = dir.path().join("wrong.yaml");
    std::fs::write(
        &wrong,
        rowfire::fixture::SAMPLE_DEFINITIONS.replace("key: [meeting_id]", "key: [meeting]"),
    )
    .unwrap();
    let out = rowfire(
        &["validate", wrong.to_str().unwrap()],
        &[("SAMPLE_DATABASE_URL", &db.url)],
    );
    assert!(!out.status.success());
    assert!(
        text(&out)
            .0
            .contains("trigger meeting_changed: the query returns no column named meeting"),
        "{}",
        text(&out).0
    );
}

#[test]
fn the_demo_prints_a_headline_for_every_sample_rule_without_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let demo_dir = dir.path().join("demo");
    let out = rowfire(
        &[
            "demo",
            "--dir",
            demo_dir.to_str().unwrap(),
            "--now",
            "2026-11-29T12:00:00Z",
            "--once",
        ],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for rule in [
        "billing_ticket",
        "billing_heads_up",
        "enterprise_announcement_naive",
        "enterprise_announcement",
        "third_failed_payment",
        "detractor_follow_up",
    ] {
        assert!(
            stdout.contains(&format!("  {rule}: ")),
            "{rule} missing in\n{stdout}"
        );
    }
    assert!(demo_dir.join("sample.db").exists() && demo_dir.join("definitions.yaml").exists());
    // The worker polled the same window into the embedded control plane, and the ledger agrees
    // with the backtest; every fire landed in the Demo inbox.
    let line = stdout
        .lines()
        .find(|l| l.starts_with("  billing_ticket live fired="))
        .expect("a worker line for billing_ticket");
    let headline = stdout
        .lines()
        .find(|l| l.starts_with("  billing_ticket: "))
        .unwrap();
    let fired = line
        .split("fired=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap();
    assert!(
        headline.contains(&format!("→ {fired} fires")),
        "{headline} vs {line}"
    );
    assert!(
        stdout.contains("Demo inbox: 604 message(s) delivered"),
        "{stdout}"
    );
    let status = rowfire(
        &["status"],
        &[(
            "ROWFIRE_DATABASE_URL",
            &format!("sqlite://{}", demo_dir.join("rowfire.db").display()),
        )],
    );
    assert!(
        text(&status).0.contains("billing_ticket"),
        "{}",
        text(&status).0
    );
    let cp = format!("sqlite://{}", demo_dir.join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", cp.as_str())];
    let listed = text(&rowfire(
        &["deliveries", "--rule", "billing_ticket", "--limit", "2"],
        &env,
    ))
    .0;
    let sent = listed
        .lines()
        .filter(|l| l.contains(" sent ") && l.contains("inbox.ticket"));
    assert_eq!(sent.count(), 2, "{listed}");
    let shown = text(&rowfire(&["deliveries", "show", "1"], &env)).0;
    assert!(
        shown.contains("\"subject\": \"Card declined for "),
        "{shown}"
    );

    // Its headline agrees with a full backtest of the same rule.
    let url = format!("sqlite://{}", demo_dir.join("sample.db").display());
    let out = rowfire(
        &[
            "backtest",
            "billing_ticket",
            "-f",
            "examples/saas/definitions.yaml",
            "--days",
            "120",
            "--now",
            "2026-11-29T12:00:00Z",
            "--json",
        ],
        &[("SAMPLE_DATABASE_URL", &url)],
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let headline = format!(
        "billing_ticket: {} rows matched → {} fires over 120 days",
        report["rows_matched"], report["fires"]
    );
    assert!(stdout.contains(&headline), "{headline}\n{stdout}");
    assert!(
        report["caveat"]
            .as_str()
            .unwrap()
            .contains("floor, not a replay")
    );
    assert_eq!(report["per_day"].as_array().unwrap().len(), 121);
}

#[tokio::test]
async fn backtest_prints_the_report_with_its_sparkline_and_caveat() {
    let db = TestSqlite::new();
    sample_source(&db.url, 100).await;
    let now = now().to_string();
    let out = rowfire(
        &[
            "backtest",
            "billing_ticket",
            "-f",
            "examples/saas/definitions.yaml",
            "--days",
            "120",
            "--sample",
            "2",
            "--now",
            &now,
        ],
        &[("SAMPLE_DATABASE_URL", &db.url)],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for needle in [
        "rows matched",
        "collapsed by cadence",
        "rows with NULL clock",
        "fires per day (UTC; · = none)",
        "busiest day",
        "quietest day",
        "longest run without fires",
        "sample fires",
        "floor, not a replay",
    ] {
        assert!(stdout.contains(needle), "{needle} missing in\n{stdout}");
    }
    let unknown = rowfire(
        &["backtest", "nope", "-f", "examples/saas/definitions.yaml"],
        &[("SAMPLE_DATABASE_URL", &db.url)],
    );
    assert!(
        text(&unknown)
            .1
            .contains("unknown rule \"nope\"; known rules: billing_ticket"),
        "{}",
        text(&unknown).1
    );
}

/// The original Rowfire reads a trigger without `event_time` (its backtest reports totals only):
/// such a file is accepted and stored, and each read of the trigger says what it needs instead.
#[tokio::test]
async fn a_trigger_without_event_time_is_accepted_and_every_read_of_it_says_what_it_needs() {
    let db = TestSqlite::new();
    sample_source(&db.url, 20).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("timeless.yaml");
    std::fs::write(
        &file,
        "source: { dsn_env: SAMPLE_DATABASE_URL }
triggers:
  declines:
    sql: SELECT id, account_id FROM payment_attempts
    key: [account_id]
rules:
  heads_up: { trigger: declines }
",
    )
    .unwrap();
    let file = file.to_str().unwrap();
    let cp = format!("sqlite://{}?mode=rwc", dir.path().join("cp.db").display());
    let env = [
        ("SAMPLE_DATABASE_URL", db.url.as_str()),
        ("ROWFIRE_DATABASE_URL", &cp),
    ];
    let needs = "add `event_time: COLUMN`";

    let (ok, stdout, stderr) = ran(&["validate", file], &env);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("triggers.declines.event_time: not given"),
        "{stdout}"
    );
    assert!(
        stdout.contains("rule heads_up will not run until then"),
        "{stdout}"
    );

    let (ok, _, stderr) = ran(&["push", "-f", file], &env);
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning: triggers.declines.event_time"),
        "{stderr}"
    );

    let (ok, stdout, stderr) = ran(&["backtest", "heads_up", "-f", file, "--days", "30"], &env);
    assert!(!ok, "{stdout}");
    assert!(
        stderr.contains("names no event_time") && stderr.contains(needs),
        "{stderr}"
    );
    let (ok, _, stderr) = ran(&["explain", "declines", "-f", file], &env);
    assert!(!ok && stderr.contains(needs), "{stderr}");

    let (ok, stdout, stderr) = ran(&["worker", "--once", "--due-now"], &env);
    assert!(ok, "{stdout}{stderr}");
    assert!(stdout.contains("names no event_time"), "{stdout}");
}

/// Which workspaces are the operator's decides what their sources may reach: a list that cannot
/// be read stops `serve` and `worker` before they start, naming the variable.
#[test]
fn an_unreadable_operator_workspaces_list_stops_serve_and_worker() {
    let dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}?mode=rwc", dir.path().join("cp.db").display());
    let env = [
        ("ROWFIRE_DATABASE_URL", cp.as_str()),
        ("ROWFIRE_OPERATOR_WORKSPACES", "acme,Not An Id"),
    ];
    for args in [
        &["serve", "--listen", "127.0.0.1:0"][..],
        &["worker", "--once"][..],
    ] {
        let (ok, stdout, stderr) = ran(args, &env);
        assert!(!ok, "{args:?}: {stdout}");
        assert!(
            stderr.contains("ROWFIRE_OPERATOR_WORKSPACES")
                && stderr.contains("is not a workspace id"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn explain_prints_the_wrapped_sql_with_the_window_literals() {
    let out = rowfire(
        &[
            "explain",
            "declined_charge",
            "-f",
            "examples/saas/definitions.yaml",
            "--now",
            "2026-11-29T12:00:00Z",
        ],
        &[(
            "SAMPLE_DATABASE_URL",
            "postgres://reader:pw@db.internal:5432/app",
        )],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("t.\"attempted_at\" >= '2026-11-28T12:00:00Z'::timestamptz AND t.\"attempted_at\" < '2026-11-29T12:00:00Z'::timestamptz"), "{stdout}");
    // One statement, its rows streamed a page at a time.
    assert!(stdout.contains("\nSELECT t.* FROM ("), "{stdout}");
    let order = "ORDER BY t.\"attempted_at\", t.\"account_id\";";
    assert!(stdout.contains(order), "{stdout}");
    assert!(
        stdout.contains(
            "one statement in the read-only snapshot, its rows streamed in pages of 10000"
        ),
        "{stdout}"
    );
    assert!(!stdout.contains("CURSOR"), "{stdout}");
    assert!(!stdout.contains("pw@"), "no DSN in output");
    let lite = rowfire(
        &[
            "explain",
            "declined_charge",
            "-f",
            "examples/saas/definitions.yaml",
            "--now",
            "2026-11-29T12:00:00Z",
        ],
        &[("SAMPLE_DATABASE_URL", "sqlite://x.db")],
    );
    assert!(
        text(&lite)
            .0
            .contains(">= rowfire_clock_us('2026-11-28 12:00:00.000000')"),
        "{}",
        text(&lite).0
    );
}

#[test]
fn fixture_load_writes_the_sample_and_says_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("f.db").display());
    let out = rowfire(
        &["fixture", "load", "--into", &url, "--now", "2026-11-29"],
        &[],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with(
            "sample data placed relative to 2026-11-29T00:00:00Z: 3 plans, 120 accounts, "
        ),
        "{stdout}"
    );
    let bad = rowfire(&["fixture", "load", "--into", "redis://x/y"], &[]);
    assert!(
        text(&bad)
            .1
            .contains("--into must be a postgres://, mysql:// or sqlite:// URL")
    );
}

#[test]
fn push_pull_promote_and_status_work_on_the_embedded_control_plane() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    let list = rowfire(&["list"], &env);
    assert!(
        text(&list)
            .1
            .contains("not migrated (schema 0 of 15); run `rowfire migrate`"),
        "{}",
        text(&list).1
    );

    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    let (stdout, stderr) = text(&push);
    assert!(push.status.success(), "{stderr}");
    assert!(
        stdout.contains("pushed version 1") && stdout.contains("8 new rule(s), in shadow"),
        "{stdout}"
    );
    let pull = rowfire(&["pull"], &env);
    assert_eq!(
        pull.stdout,
        rowfire::fixture::SAMPLE_DEFINITIONS.as_bytes(),
        "byte for byte"
    );

    let promote = rowfire(&["promote", "billing_ticket"], &env);
    assert_eq!(text(&promote).0, "billing_ticket: shadow → live\n");
    let unknown = rowfire(&["promote", "nope"], &env);
    assert!(text(&unknown).1.contains("unknown rule \"nope\""));
    let list = text(&rowfire(&["list"], &env)).0;
    assert!(
        list.contains("billing_ticket")
            && list.contains("live")
            && list.contains("once per account_id per week, UTC"),
        "{list}"
    );

    let long = "x".repeat(501);
    let (ok, _, stderr) = ran(&["halt", &long], &env);
    assert!(!ok && stderr.contains("1 to 500 characters"), "{stderr}");
    assert!(
        rowfire(&["halt", "billing", "outage"], &env)
            .status
            .success()
    );
    assert!(text(&rowfire(&["status"], &env)).0.contains("HALTED since"));
    assert!(rowfire(&["resume"], &env).status.success());
    assert!(
        text(&rowfire(&["status"], &env))
            .0
            .contains("workspace default: running")
    );
}

/// A `rowfire worker` run in the background, its stderr read line by line.
struct Worker {
    child: std::process::Child,
    stderr: std::io::BufReader<std::process::ChildStderr>,
}

impl Worker {
    /// Pushes the sample definitions into `env`'s control plane and starts a worker on it.
    fn start(env: &[(&str, &str)]) -> Worker {
        assert!(
            rowfire(&["push", "-f", "examples/saas/definitions.yaml"], env)
                .status
                .success()
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_rowfire"))
            .arg("worker")
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut worker = Worker { child, stderr };
        worker.wait_for("worker running");
        worker
    }

    /// Reads stderr until a line contains `needle`; fails if the worker exits first.
    fn wait_for(&mut self, needle: &str) {
        use std::io::BufRead;
        let mut line = String::new();
        while !line.contains(needle) {
            line.clear();
            assert!(
                self.stderr.read_line(&mut line).unwrap() > 0,
                "the worker exited before printing {needle:?}"
            );
        }
    }

    /// Sends SIGTERM and returns the exit status and the rest of stderr.
    fn terminate(mut self) -> (std::process::ExitStatus, String) {
        let killed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = self.child.wait().unwrap();
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.stderr, &mut rest).unwrap();
        (status, rest)
    }
}

#[tokio::test]
async fn the_worker_stops_cleanly_on_sigterm() {
    let db = TestSqlite::new();
    sample_source(&db.url, 100).await;
    let dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let worker = Worker::start(&[
        ("ROWFIRE_DATABASE_URL", cp.as_str()),
        ("SAMPLE_DATABASE_URL", db.url.as_str()),
    ]);
    let (status, rest) = worker.terminate();
    assert!(status.success(), "{status:?} {rest}");
    assert!(
        rest.contains("stopping: finishing the polls and sends in progress"),
        "{rest}"
    );
}

/// A control plane that fails under a running worker delays work; it does not stop the worker.
#[tokio::test]
async fn the_worker_keeps_running_when_the_control_plane_fails() {
    let dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let mut worker = Worker::start(&[("ROWFIRE_DATABASE_URL", cp.as_str())]);
    let mut c = <sqlx::SqliteConnection as sqlx::Connection>::connect(&cp)
        .await
        .unwrap();
    sqlx::raw_sql("DROP TABLE trigger_state")
        .execute(&mut c)
        .await
        .unwrap();
    worker.wait_for("polling failed; retrying");
    worker.wait_for("polling failed; retrying");
    let (status, rest) = worker.terminate();
    assert!(
        status.success(),
        "the worker stopped cleanly after the failures: {status:?} {rest}"
    );
}
