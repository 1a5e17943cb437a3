//! What the commands print: `worker --once` says what it did (or that nothing was due, and when
//! it will be), trigger-level counts count rows, `why` prints keys and buckets one way, and
//! `list` and `status` keep their columns aligned.

use std::sync::Arc;

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::ledger;
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::cli::{rowfire, text};
use crate::support::{TestSqlite, now, sample_source};

const TRIGGERS: [&str; 5] = [
    "declined_charge",
    "enterprise_signup_naive",
    "enterprise_signup",
    "detractor",
    "meeting_changed",
];

#[tokio::test]
async fn worker_once_says_when_nothing_is_due_and_polls_everything_with_due_now() {
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [
        ("ROWFIRE_DATABASE_URL", url.as_str()),
        ("SAMPLE_DATABASE_URL", sample.url.as_str()),
    ];
    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", text(&push).1);

    let first = rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = text(&first);
    assert!(first.status.success(), "{stdout}{stderr}");
    for t in TRIGGERS {
        assert!(stdout.contains(&format!("{t}: matched=")), "{stdout}");
    }

    let second = rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = text(&second);
    assert!(second.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.starts_with("no trigger is due; next due:\n"),
        "{stdout}"
    );
    for t in TRIGGERS {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{t} ")))
            .unwrap_or_else(|| panic!("{t} has no next-due line: {stdout}"));
        assert!(line.contains(" (in "), "{line}");
    }
    assert!(
        stdout.contains("`rowfire worker --once --due-now`")
            && stdout.contains("`rowfire rewind TRIGGER --days N`"),
        "{stdout}"
    );

    let forced = rowfire(&["worker", "--once", "--due-now"], &env);
    let (stdout, stderr) = text(&forced);
    assert!(forced.status.success(), "{stdout}{stderr}");
    assert!(!stdout.contains("no trigger is due"), "{stdout}");
    for t in TRIGGERS {
        assert!(stdout.contains(&format!("{t}: matched=")), "{stdout}");
    }
}

#[test]
fn worker_once_exits_non_zero_after_printing_every_poll_when_one_fails() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", text(&push).1);
    // SAMPLE_DATABASE_URL is not set: every poll with rules fails.
    let out = rowfire(&["worker", "--once"], &env);
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success(), "{stdout}{stderr}");
    for t in TRIGGERS {
        assert!(stdout.contains(&format!("{t}: matched=0")), "{stdout}");
    }
    assert!(
        stdout.contains(
            "failed: source default: the environment variable SAMPLE_DATABASE_URL is not set"
        ),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: the poll of declined_charge"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn a_trigger_line_counts_rows_so_fired_and_already_add_up_to_matched() {
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let cp = TestSqlite::new();
    let store = Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, SAMPLE_DEFINITIONS, now())
        .await
        .unwrap();
    let days = SignedDuration::from_hours(24 * 120);
    assert!(
        poll::rewind(&store, WS, "declined_charge", days, now())
            .await
            .unwrap()
    );
    let url = sample.url.clone();
    let poller = Poller::new(
        store.clone(),
        "w",
        Clock::fixed(now()),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let reports = poller.poll_due().await.unwrap();
    let declines = reports
        .iter()
        .find(|r| r.trigger == "declined_charge")
        .unwrap();
    assert_eq!(declines.status, PollStatus::Ok);
    assert!(declines.matched > 100, "{declines}");
    for r in &reports {
        assert_eq!(r.fired + r.already, r.matched, "{r}");
    }
    // Three rules share the trigger: their fires together exceed the rows that fired.
    let rule_fires: u64 = declines.rules.iter().map(|r| r.fired).sum();
    assert!(
        declines.rules.len() == 3 && rule_fires > declines.fired,
        "{declines}"
    );
    assert!(declines.fired > 0, "{declines}");
    let line = declines.to_string();
    assert!(
        line.starts_with(&format!(
            "declined_charge: matched={} fired={} already={}\n",
            declines.matched, declines.fired, declines.already
        )),
        "{line}"
    );
    for r in &declines.rules {
        assert!(
            line.contains(&format!(
                "  {} {} fired={} already={}\n",
                r.rule, r.mode, r.fired, r.already
            )),
            "{line}"
        );
    }
}

#[tokio::test]
async fn why_prints_a_key_one_way_and_a_once_ever_bucket_as_once_ever() {
    let defs_text = format!(
        "{SAMPLE_DEFINITIONS}\n  meeting_once:\n    trigger: meeting_changed\n    policy: once_ever\n"
    );
    let defs = definitions::parse(&defs_text).unwrap();
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let cp = TestSqlite::new();
    let store = Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    push::push(&store, WS, &defs_text, now()).await.unwrap();
    let days = SignedDuration::from_hours(24 * 120);
    assert!(
        poll::rewind(&store, WS, "meeting_changed", days, now())
            .await
            .unwrap()
    );
    let url = sample.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let poller = Poller::new(store.clone(), "w", Clock::fixed(now()), dsn.clone());
    poller.poll_due().await.unwrap();
    let mut tx = store.begin(WS).await.unwrap();
    let fires = ledger::fires(&mut tx, WS, "meeting_once", None)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let fired = &fires.first().expect("some meeting fired").key;
    // Meeting ids are numbers: stored as `[5]`.
    let typed = fired.trim_matches(|c| c == '[' || c == ']').to_string();
    assert!(typed.parse::<i64>().is_ok(), "{fired}");

    let why = |key: String| {
        let (store, defs, dsn) = (store.clone(), defs.clone(), dsn.clone());
        async move {
            let q = rowfire::explanation::Question {
                rule: "meeting_once",
                key: &key,
                days: 120,
                now: now(),
            };
            rowfire::explanation::why(&store, WS, &defs, q, &dsn)
                .await
                .unwrap()
                .to_string()
        }
    };
    let with_fires = why(typed.clone()).await;
    assert!(
        with_fires.starts_with(&format!("meeting_once for key {typed}:\n")),
        "{with_fires}"
    );
    assert!(with_fires.contains(" once ever "), "{with_fires}");
    assert!(!with_fires.contains("''"), "{with_fires}");
    let without = why("987654".to_string()).await;
    assert!(
        without.starts_with("meeting_once for key 987654:\n  no fires\n"),
        "{without}"
    );
}

/// The character column at which `needle` starts on each line that starts with one of `names`.
fn columns_of(output: &str, names: &[&str], needle: &str) -> Vec<usize> {
    output
        .lines()
        .filter(|l| names.iter().any(|n| l.trim_start().starts_with(n)))
        .map(|l| {
            let byte = l.find(needle).unwrap_or_else(|| panic!("{needle} in {l}"));
            l[..byte].chars().count()
        })
        .collect()
}

#[test]
fn list_and_status_keep_their_columns_aligned_for_long_rule_names() {
    let long = "escalate_every_declined_enterprise_card_payment_to_the_account_team";
    let defs_text = format!(
        "{SAMPLE_DEFINITIONS}\n  {long}:\n    trigger: declined_charge\n    policy: once_ever\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("long.yaml");
    std::fs::write(&file, &defs_text).unwrap();
    let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", url.as_str())];
    let push = rowfire(&["push", "-f", file.to_str().unwrap()], &env);
    assert!(push.status.success(), "{}", text(&push).1);
    let rules = [
        "billing_ticket ",
        "billing_heads_up ",
        "enterprise_announcement_naive ",
        "enterprise_announcement ",
        "third_failed_payment ",
        "detractor_follow_up ",
        long,
    ];

    let list = text(&rowfire(&["list"], &env)).0;
    for needle in [" on ", " shadow "] {
        let at = columns_of(&list, &rules, needle);
        assert_eq!(at.len(), rules.len(), "{list}");
        assert!(
            at.windows(2).all(|w| w[0] == w[1]),
            "{needle}: {at:?}\n{list}"
        );
    }
    let triggers: Vec<String> = TRIGGERS.iter().map(|t| format!("{t} ")).collect();
    let triggers: Vec<&str> = triggers.iter().map(String::as_str).collect();
    let at = columns_of(&list, &triggers, " key [");
    assert!(at.windows(2).all(|w| w[0] == w[1]), "{at:?}\n{list}");

    let status = text(&rowfire(&["status"], &env)).0;
    let at = columns_of(&status, &rules, " on ");
    assert_eq!(at.len(), rules.len(), "{status}");
    assert!(at.windows(2).all(|w| w[0] == w[1]), "{at:?}\n{status}");
    let at = columns_of(&status, &triggers, " watermark ");
    assert_eq!(at.len(), TRIGGERS.len(), "{status}");
    assert!(at.windows(2).all(|w| w[0] == w[1]), "{at:?}\n{status}");
}
