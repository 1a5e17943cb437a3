//! A MariaDB source beside a PostgreSQL one: a trigger names the source `support`, stored with
//! `rowfire sources add` as a MariaDB DSN (encrypted), and one worker polls and fires its rules
//! beside the rules on the PostgreSQL default source.

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll::{self, PollStatus, Poller};
use rowfire::push;
use rowfire::secret::{self, MasterKey};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::support::{TestMy, TestPg, now, sample_source};

/// The sample definitions plus a trigger on `support`, a source the file does not declare, and
/// one rule on it.
fn with_support_source() -> String {
    let trigger = r#"
  support_detractor:
    description: A detractor, as the support desk's MariaDB copy has it.
    source: support
    sql: |
      SELECT r.id, r.account_id, r.score, r.comment, r.responded_at
      FROM nps_responses r
      WHERE r.score <= 6
    event_time: responded_at
    key: [account_id]
"#;
    let rule = r##"
  support_call:
    trigger: support_detractor
    policy: once_per_period
    period: week
    actions:
      - action: inbox.ticket
        params:
          subject: "Call {{ account_id }}"
          body: "They scored {{ score }}: {{ comment }}"
"##;
    let doc = SAMPLE_DEFINITIONS.replacen("\nrules:\n", &format!("{trigger}\nrules:\n"), 1);
    format!("{doc}{rule}")
}

use crate::cli::ran as rowfire;

#[tokio::test]
async fn a_trigger_on_a_stored_mariadb_source_polls_and_fires_beside_rules_on_a_postgres_source() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let Some(my) = TestMy::new().await else {
        return;
    };
    sample_source(&pg.url, 1000).await;
    sample_source(&my.url, 1000).await;
    let support_dsn = my.reader_url("sup3r-secret").await;
    let dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let (ok, key, err) = rowfire(&["keygen"], &[]);
    assert!(ok, "{err}");
    let key = key.trim().to_string();
    let env = [
        ("ROWFIRE_DATABASE_URL", cp.as_str()),
        ("ROWFIRE_MASTER_KEY", key.as_str()),
        ("SUPPORT_URL", support_dsn.as_str()),
    ];
    let (ok, _, err) = rowfire(&["migrate"], &env);
    assert!(ok, "{err}");
    let (ok, out, err) = rowfire(
        &["sources", "add", "support", "--url-env", "SUPPORT_URL"],
        &env,
    );
    assert!(ok && out.contains("encrypted"), "{out}\n{err}");
    assert!(
        !out.contains("sup3r-secret") && !err.contains("sup3r-secret"),
        "{out}\n{err}"
    );

    let store = Store::open(&cp).await.unwrap();
    let master = MasterKey::parse(&key).unwrap();
    // The default source (PostgreSQL) is stored the same way, so no environment is shared.
    secret::put(&store, &master, WS, "source:default", "dsn", &pg.url, now())
        .await
        .unwrap();
    let doc = with_support_source();
    push::push(&store, WS, &doc, now()).await.unwrap();
    let ago = SignedDuration::from_hours(24 * 120);
    for trigger in ["declined_charge", "support_detractor"] {
        poll::rewind(&store, WS, trigger, ago, now()).await.unwrap();
    }
    let dsns = rowfire::worker::source_dsns(
        &store,
        std::slice::from_ref(WS),
        std::slice::from_ref(WS),
        Ok(&master),
        Ok(&rowfire::send::egress::Policy::default()),
    )
    .await
    .unwrap();
    let poller = Poller::new(store.clone(), "w", Clock::fixed(now()), dsns);
    let reports = poller.poll_due().await.unwrap();
    let report = |name: &str| {
        reports
            .iter()
            .find(|r| r.trigger == name)
            .unwrap_or_else(|| panic!("{name} polled"))
            .clone()
    };
    let declined = report("declined_charge");
    assert_eq!(declined.status, PollStatus::Ok, "{declined}");
    assert!(declined.fired > 10, "{declined}");
    let support = report("support_detractor");
    assert_eq!(support.status, PollStatus::Ok, "{support}");
    assert!(support.fired > 5, "{support}");
    assert_eq!(
        support.fired + support.already,
        support.matched,
        "{support}"
    );
    let states = poll::list(&store, WS).await.unwrap();
    for name in ["declined_charge", "support_detractor"] {
        let state = states.iter().find(|s| s.trigger == name).unwrap();
        assert_eq!(state.last_error, None, "{name}");
    }
}
