//! A trigger on a source the file does not declare (as files written for the original Rowfire
//! do): only that trigger's rules wait, with the fix; the rest of the file validates, pushes,
//! polls and fires; once the source is stored, the trigger runs too.

use std::process::Command;

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::secret;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::support::{TestSqlite, now, sample_source};

const FIX: &str = "rowfire sources add billing_replica --url-env VAR";

/// The sample definitions plus a trigger on `billing_replica`, a source they do not declare,
/// and one rule on it.
fn with_undeclared_source() -> String {
    let trigger = r#"
  refund_issued:
    description: A refund, from a file whose sources were saved connections.
    source: billing_replica
    sql: |
      SELECT pa.id, pa.account_id, pa.attempted_at FROM payment_attempts pa
      WHERE pa.status = 'refunded'
    event_time: attempted_at
    key: [account_id]
"#;
    let rule = r##"
  refund_note:
    trigger: refund_issued
    policy: once_ever
    actions:
      - action: inbox.chat_message
        params:
          channel: "#billing"
          text: "Refund for {{ account_id }}"
"##;
    let doc = SAMPLE_DEFINITIONS.replacen("\nrules:\n", &format!("{trigger}\nrules:\n"), 1);
    format!("{doc}{rule}")
}

fn rowfire(args: &[&str], dir: &std::path::Path, envs: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rowfire"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("SAMPLE_DATABASE_URL")
        .env_remove("ROWFIRE_DATABASE_URL")
        .env_remove("ROWFIRE_MASTER_KEY");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_file_with_a_trigger_on_an_undeclared_source_validates_pushes_and_runs_its_other_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("definitions.yaml");
    std::fs::write(&file, with_undeclared_source()).unwrap();
    let file = file.to_str().unwrap();

    // validate: one problem, for that trigger's rule, with the fix; the file passes.
    let (ok, out, err) = rowfire(&["validate", file], dir.path(), &[]);
    assert!(ok, "{out}\n{err}");
    let problems: Vec<&str> = out.lines().filter(|l| l.contains(FIX)).collect();
    assert_eq!(problems.len(), 1, "{out}");
    assert!(
        problems[0].contains("triggers.refund_issued.source")
            && problems[0].contains("rule refund_note will not run")
            && problems[0].contains("declare it under `sources:`")
            && problems[0].contains(FIX),
        "{}",
        problems[0]
    );

    // push: done, with the same warning; then a worker polls everything else.
    let sample = TestSqlite::new();
    sample_source(&sample.url, 1000).await;
    let cp_dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}", cp_dir.path().join("rowfire.db").display());
    let env = [
        ("ROWFIRE_DATABASE_URL", cp.as_str()),
        ("SAMPLE_DATABASE_URL", sample.url.as_str()),
    ];
    let (ok, out, err) = rowfire(&["push", "-f", file], dir.path(), &env);
    assert!(ok && out.contains("pushed version 1"), "{out}\n{err}");
    assert!(
        err.contains("triggers.refund_issued.source") && err.contains(FIX),
        "{err}"
    );
    let (_, out, err) = rowfire(&["worker", "--once"], dir.path(), &env);
    assert!(out.contains("declined_charge: "), "{out}\n{err}");
    let (ok, status, _) = rowfire(&["status"], dir.path(), &env);
    assert!(ok);
    let line = |name: &str| {
        status
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} in\n{status}"))
            .to_string()
    };
    assert!(line("refund_issued").contains(FIX), "{status}");
    assert!(
        line("declined_charge").ends_with("last error: -"),
        "{status}"
    );

    // Stored as the error says (a SQLite file's URL needs no master key), the trigger runs.
    let stored = [("REPLICA_URL", sample.url.as_str()), env[0]];
    let add = [
        "sources",
        "add",
        "billing_replica",
        "--url-env",
        "REPLICA_URL",
    ];
    let (ok, out, err) = rowfire(&add, dir.path(), &stored);
    assert!(ok && out.contains("not encrypted"), "{out}\n{err}");
    let (ok, _, err) = rowfire(
        &["rewind", "refund_issued", "--days", "1"],
        dir.path(),
        &env,
    );
    assert!(ok, "{err}");
    let (_, out, err) = rowfire(&["worker", "--once"], dir.path(), &env);
    assert!(
        out.contains("refund_issued: ") && !err.contains(FIX),
        "{out}\n{err}"
    );
    let (_, status, _) = rowfire(&["status"], dir.path(), &env);
    let refunds = status
        .lines()
        .find(|l| l.trim_start().starts_with("refund_issued "))
        .unwrap();
    assert!(refunds.ends_with("last error: -"), "{status}");
}

async fn only_the_undeclared_sources_trigger_waits_until_the_source_is_stored(url: &str) {
    let sample = TestSqlite::new();
    sample_source(&sample.url, 1000).await;
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    let doc = with_undeclared_source();
    let defs = definitions::parse(&doc).unwrap();
    push::push(&store, WS, &doc, now()).await.unwrap();
    let ago = SignedDuration::from_hours(24 * 120);
    poll::rewind(&store, WS, "declined_charge", ago, now())
        .await
        .unwrap();
    secret::put_file_url(&store, WS, "default", &sample.url, now())
        .await
        .unwrap();
    let clock = Clock::fixed(now());
    let poller = |store: Store, stored: std::collections::BTreeMap<String, String>| {
        let stored = stored
            .into_iter()
            .map(|(name, dsn)| ((WS.clone(), name), dsn))
            .collect();
        Poller::new(
            store,
            "w",
            clock.clone(),
            poll::stored_or_env_dsn(
                stored,
                std::slice::from_ref(WS),
                std::sync::Arc::new(|_| Ok(())),
            ),
        )
    };
    let stored = secret::file_urls(&store, WS).await.unwrap();
    let reports = poller(store.clone(), stored).poll_due().await.unwrap();
    let report = |name: &str| reports.iter().find(|r| r.trigger == name).unwrap().clone();
    let declined = report("declined_charge");
    assert_eq!(declined.status, PollStatus::Ok);
    assert!(declined.fired > 10, "{declined}");
    let PollStatus::Failed(why) = report("refund_issued").status else {
        panic!("{}", report("refund_issued"))
    };
    assert!(why.contains(FIX), "{why}");
    let states = poll::list(&store, WS).await.unwrap();
    let state = |name: &str| states.iter().find(|s| s.trigger == name).unwrap();
    assert!(
        state("refund_issued")
            .last_error
            .as_deref()
            .unwrap()
            .contains(FIX)
    );
    assert_eq!(state("declined_charge").last_error, None);

    // Stored (a SQLite file needs no master key): resolved, and the trigger runs.
    secret::put_file_url(&store, WS, "billing_replica", &sample.url, now())
        .await
        .unwrap();
    let names = secret::stored_sources(&store, WS).await.unwrap();
    assert!(defs.unresolved_sources(|n| names.contains(n)).is_empty());
    clock.advance(SignedDuration::from_mins(2));
    let stored = secret::file_urls(&store, WS).await.unwrap();
    let reports = poller(store.clone(), stored).poll_due().await.unwrap();
    let refunds = reports
        .iter()
        .find(|r| r.trigger == "refund_issued")
        .expect("polled again");
    assert_eq!(refunds.status, PollStatus::Ok, "{refunds}");
    let states = poll::list(&store, WS).await.unwrap();
    let state = states
        .iter()
        .find(|s| s.trigger == "refund_issued")
        .unwrap();
    assert_eq!(state.last_error, None);
}
on_both_engines!(
    only_the_undeclared_sources_trigger_waits_until_the_source_is_stored_,
    only_the_undeclared_sources_trigger_waits_until_the_source_is_stored
);
