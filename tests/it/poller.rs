//! The poller and the ledger: exactly-once fires, watermarks that never skip a row, leases that
//! survive a dead worker. Control planes on both engines; the sample source is a SQLite file.

use std::collections::BTreeSet;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use rowfire::backtest::{Outcome, Simulator};
use rowfire::clock::Clock;
use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::ledger;
use rowfire::poll::{self, PollReport, PollStatus, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::source::Source;
use rowfire::sql_guard::{Shape, Window};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store, workspace};
use sqlx::{Connection, SqliteConnection};

use crate::support::{TestSqlite, now, sample_source};
use rowfire::outbox::DeliveryStatus;

const DAYS_120: SignedDuration = SignedDuration::from_hours(24 * 120);

/// A control plane with the sample definitions pushed at [`now`], and a sample source.
struct World {
    store: Store,
    clock: Clock,
    sample: TestSqlite,
}

impl World {
    async fn new(control_plane: &str, definitions: &str) -> World {
        let sample = TestSqlite::new();
        sample_source(&sample.url, 10_000).await;
        let store = Store::open(control_plane).await.unwrap();
        store.migrate().await.unwrap();
        push::push(&store, WS, definitions, now()).await.unwrap();
        World {
            store,
            clock: Clock::fixed(now()),
            sample,
        }
    }

    /// The sample pushed, declined_charge rewound over 120 days and polled once.
    async fn declines_polled(control_plane: &str) -> World {
        let w = World::new(control_plane, SAMPLE_DEFINITIONS).await;
        w.rewind("declined_charge", DAYS_120).await;
        w.poll().await;
        w
    }

    fn poller(&self, name: &str) -> Poller {
        let url = self.sample.url.clone();
        Poller::new(
            self.store.clone(),
            name,
            self.clock.clone(),
            Arc::new(move |_, _| Some(url.clone().into())),
        )
    }

    async fn poll(&self) -> Vec<PollReport> {
        self.poller("w1").poll_due().await.unwrap()
    }

    async fn rewind(&self, trigger: &str, by: SignedDuration) {
        assert!(
            poll::rewind(&self.store, WS, trigger, by, self.clock.now())
                .await
                .unwrap()
        );
    }

    async fn fires(&self, rule: &str) -> Vec<ledger::Fire> {
        let mut tx = self.store.begin(WS).await.unwrap();
        let fires = ledger::fires(&mut tx, WS, rule, None).await.unwrap();
        tx.rollback().await.unwrap();
        fires
    }
}

fn report<'a>(reports: &'a [PollReport], trigger: &str) -> &'a PollReport {
    reports
        .iter()
        .find(|r| r.trigger == trigger)
        .unwrap_or_else(|| panic!("no poll of {trigger} in {reports:?}"))
}

async fn a_second_poll_of_a_rewound_window_finds_every_row_already_claimed(url: &str) {
    let w = World::new(url, SAMPLE_DEFINITIONS).await;
    w.rewind("declined_charge", DAYS_120).await;
    let first = w.poll().await;
    let first = report(&first, "declined_charge");
    assert!(first.fired > 0, "{first}");
    w.rewind("declined_charge", DAYS_120).await;
    let second = w.poll().await;
    let second = report(&second, "declined_charge");
    let n = second.matched;
    assert!(n > 0);
    assert_eq!(
        second.to_string().lines().next().unwrap(),
        format!("declined_charge: matched={n} fired=0 already={n}")
    );
    for r in &second.rules {
        assert_eq!((r.fired, r.already), (0, n), "{}", r.rule);
    }
}
on_both_engines!(
    a_second_poll_of_a_rewound_window_finds_every_row_already_claimed_,
    a_second_poll_of_a_rewound_window_finds_every_row_already_claimed
);

async fn a_new_trigger_fires_nothing_on_its_first_poll(url: &str) {
    let w = World::new(url, SAMPLE_DEFINITIONS).await;
    w.clock.advance(SignedDuration::from_mins(1));
    let reports = w.poll().await;
    assert_eq!(reports.len(), 7, "every trigger was due");
    for r in &reports {
        assert_eq!(r.fired, 0, "{r}");
    }
    assert!(w.fires("billing_ticket").await.is_empty());
}
on_both_engines!(
    a_new_trigger_fires_nothing_on_its_first_poll_,
    a_new_trigger_fires_nothing_on_its_first_poll
);

async fn insert_declines(sample_url: &str, at: Timestamp, accounts: &[&str]) {
    let mut c = SqliteConnection::connect(sample_url).await.unwrap();
    for (i, account) in accounts.iter().enumerate() {
        sqlx::query("INSERT INTO payment_attempts VALUES (?1, ?2, ?3, 1, 2900, 'declined', 'card_declined', ?4)")
            .bind(900_000 + i as i64 + at.as_second() % 1000 * 100)
            .bind(*account)
            .bind(format!("inv_new_{i}"))
            .bind(at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
            .execute(&mut c)
            .await
            .unwrap();
    }
}

async fn rows_that_arrive_while_halted_fire_after_resume(url: &str) {
    let w = World::new(url, SAMPLE_DEFINITIONS).await;
    w.poll().await;
    workspace::halt(&w.store, WS, "maintenance", w.clock.now())
        .await
        .unwrap();
    w.clock.advance(SignedDuration::from_mins(2));
    insert_declines(
        &w.sample.url,
        w.clock.now() - SignedDuration::from_secs(30),
        &["acct_200", "acct_201"],
    )
    .await;
    w.clock.advance(SignedDuration::from_mins(30));
    let halted = w.poll().await;
    assert!(
        matches!(&report(&halted, "declined_charge").status, PollStatus::Skipped(why) if why.contains("maintenance"))
    );
    let state = poll::list(&w.store, WS).await.unwrap();
    assert_eq!(
        state
            .iter()
            .find(|s| s.trigger == "declined_charge")
            .unwrap()
            .watermark,
        now(),
        "a halted poll does not advance"
    );

    workspace::resume(&w.store, WS).await.unwrap();
    w.clock.advance(SignedDuration::from_mins(5));
    let resumed = w.poll().await;
    let r = report(&resumed, "declined_charge");
    assert_eq!(r.matched, 2, "{r}");
    let billing = r.rules.iter().find(|x| x.rule == "billing_ticket").unwrap();
    assert_eq!(billing.fired, 2);
}
on_both_engines!(
    rows_that_arrive_while_halted_fire_after_resume_,
    rows_that_arrive_while_halted_fire_after_resume
);

/// The (key, bucket) pairs a backtest's simulator finds for a rule over the last 120 days.
async fn simulated(w: &World, rule_name: &str) -> BTreeSet<(String, String)> {
    let defs = definitions::parse(SAMPLE_DEFINITIONS).unwrap();
    let (rule, trigger) = defs.rule_and_trigger(rule_name).unwrap();
    let source = Source::connect(defs.source("default").unwrap(), &w.sample.url)
        .await
        .unwrap();
    let query = source.check(&trigger.name, &trigger.sql).unwrap();
    let shape = Shape {
        clock: &trigger.event_time,
        key: &trigger.key,
    };
    let mut reader = source
        .read_window(
            &query,
            shape,
            Window {
                since: now() - DAYS_120,
                until: w.clock.now(),
            },
        )
        .await
        .unwrap();
    let mut sim = Simulator::new(&rule.cadence, &trigger.key, &trigger.occurrence);
    let mut out = BTreeSet::new();
    while let Some(page) = reader.next_page().await.unwrap() {
        for row in page {
            if let Outcome::Fired { key, bucket } = sim.evaluate(&row) {
                out.insert((key, bucket));
            }
        }
    }
    out
}

async fn a_backtest_and_a_fresh_live_ledger_agree_fire_for_fire_even_in_small_pages(url: &str) {
    let small_pages = SAMPLE_DEFINITIONS.replace("max_rows: 10000", "max_rows: 40");
    let w = World::new(url, &small_pages).await;
    w.rewind("declined_charge", DAYS_120).await;
    w.rewind("detractor", DAYS_120).await;
    let reports = w.poll().await;
    assert!(
        report(&reports, "declined_charge").matched > 3 * 40,
        "the window spans more than three pages"
    );
    for rule in [
        "billing_ticket",
        "billing_heads_up",
        "third_failed_payment",
        "detractor_follow_up",
    ] {
        let fires = w.fires(rule).await;
        let ledger: BTreeSet<(String, String)> = fires
            .iter()
            .map(|f| (f.key.clone(), f.bucket.clone()))
            .collect();
        assert_eq!(ledger.len(), fires.len(), "no duplicate fire for {rule}");
        assert_eq!(ledger, simulated(&w, rule).await, "{rule}");
    }
}
on_both_engines!(
    a_backtest_and_a_fresh_live_ledger_agree_fire_for_fire_even_in_small_pages_,
    a_backtest_and_a_fresh_live_ledger_agree_fire_for_fire_even_in_small_pages
);

async fn a_dead_workers_lease_is_taken_over_and_its_late_settle_changes_nothing(url: &str) {
    let w = World::new(url, SAMPLE_DEFINITIONS).await;
    w.poll().await;
    w.rewind("declined_charge", DAYS_120).await;
    // Worker A leases the only due trigger and claims, then dies before settling.
    let a = w.poller("a");
    let lease_a = a.lease().await.unwrap().expect("a trigger is due");
    assert_eq!(lease_a.trigger, "declined_charge");
    let (report_a, late_settle) = a.poll(&lease_a).await;
    assert!(report_a.fired > 0);
    let b = w.poller("b");
    assert_eq!(
        b.lease().await.unwrap(),
        None,
        "the lease holds until it expires"
    );

    w.clock
        .advance(poll::DEFAULT_LEASE + SignedDuration::from_secs(1));
    let reports = b.poll_due().await.unwrap();
    let report_b = report(&reports, "declined_charge");
    assert_eq!(
        report_b.fired, 0,
        "B re-reads A's window and the ledger stops every duplicate"
    );
    assert_eq!(report_b.matched, report_a.matched, "no row skipped");
    assert!(report_b.settled);
    assert!(
        !poll::settle(&w.store, &lease_a, &late_settle)
            .await
            .unwrap(),
        "A's late settle changes nothing"
    );
    let state = poll::list(&w.store, WS).await.unwrap();
    assert_eq!(
        state
            .iter()
            .find(|s| s.trigger == "declined_charge")
            .unwrap()
            .watermark,
        w.clock.now(),
        "B's watermark stands"
    );
    let fires = w.fires("billing_ticket").await;
    assert_eq!(fires.len() as u64, report_a.rules[0].fired);
}
on_both_engines!(
    a_dead_workers_lease_is_taken_over_and_its_late_settle_changes_nothing_,
    a_dead_workers_lease_is_taken_over_and_its_late_settle_changes_nothing
);

async fn replaying_a_poll_never_shifts_a_once_per_n_count(url: &str) {
    let w = World::declines_polled(url).await;
    let first: Vec<(String, String)> = w
        .fires("third_failed_payment")
        .await
        .into_iter()
        .map(|f| (f.key, f.bucket))
        .collect();
    for _ in 0..2 {
        w.clock.advance(SignedDuration::from_mins(1));
        w.rewind("declined_charge", DAYS_120).await;
        let again = w.poll().await;
        let r = report(&again, "declined_charge")
            .rules
            .iter()
            .find(|r| r.rule == "third_failed_payment")
            .unwrap()
            .clone();
        assert_eq!(r.fired, 0);
    }
    // A new failure for a key continues its count: the 4th occurrence of acct_012 fired; the 5th
    // and 6th do not, the 7th does.
    let after: Vec<(String, String)> = w
        .fires("third_failed_payment")
        .await
        .into_iter()
        .map(|f| (f.key, f.bucket))
        .collect();
    assert_eq!(first, after);
    let retried: Vec<&str> = after
        .iter()
        .filter(|(k, _)| k == "[\"acct_012\"]")
        .map(|(_, b)| b.as_str())
        .collect();
    assert_eq!(retried, vec!["1", "4"]);
    for i in 0..3 {
        w.clock.advance(SignedDuration::from_mins(1));
        insert_declines(
            &w.sample.url,
            w.clock.now() - SignedDuration::from_secs(10 + i),
            &["acct_012"],
        )
        .await;
    }
    w.clock.advance(SignedDuration::from_mins(1));
    w.poll().await;
    let now_fired: Vec<String> = w
        .fires("third_failed_payment")
        .await
        .into_iter()
        .filter(|f| f.key == "[\"acct_012\"]")
        .map(|f| f.bucket)
        .collect();
    assert_eq!(now_fired, vec!["1", "4", "7"]);
}
on_both_engines!(
    replaying_a_poll_never_shifts_a_once_per_n_count_,
    replaying_a_poll_never_shifts_a_once_per_n_count
);

async fn promoting_a_rule_lets_it_send_for_keys_it_claimed_in_shadow(url: &str) {
    let w = World::declines_polled(url).await;
    let shadow = w.fires("billing_ticket").await;
    assert!(!shadow.is_empty() && shadow.iter().all(|f| f.mode == Mode::Shadow));
    rules::set_mode(&w.store, WS, "billing_ticket", Mode::Live, w.clock.now())
        .await
        .unwrap();
    w.clock.advance(SignedDuration::from_mins(1));
    w.rewind("declined_charge", DAYS_120).await;
    let reports = w.poll().await;
    let live = report(&reports, "declined_charge")
        .rules
        .iter()
        .find(|r| r.rule == "billing_ticket")
        .unwrap()
        .clone();
    assert_eq!((live.mode, live.fired), (Mode::Live, shadow.len() as u64));
    let all = w.fires("billing_ticket").await;
    assert_eq!(
        all.iter().filter(|f| f.mode == Mode::Live).count(),
        shadow.len()
    );
}
on_both_engines!(
    promoting_a_rule_lets_it_send_for_keys_it_claimed_in_shadow_,
    promoting_a_rule_lets_it_send_for_keys_it_claimed_in_shadow
);

async fn deliveries(w: &World) -> Vec<rowfire::outbox::Delivery> {
    let mut tx = w.store.begin(WS).await.unwrap();
    let all = rowfire::outbox::list(&mut tx, WS, &Default::default())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    all
}

async fn every_fire_is_written_with_its_deliveries_shadow_ones_suppressed(url: &str) {
    let w = World::declines_polled(url).await;
    let fires = w.fires("billing_ticket").await;
    let ds: Vec<_> = deliveries(&w)
        .await
        .into_iter()
        .filter(|d| d.rule == "billing_ticket")
        .collect();
    assert_eq!(
        ds.len(),
        fires.len(),
        "one delivery per binding of every fire"
    );
    assert!(ds.iter().all(|d| d.status == DeliveryStatus::Suppressed
        && d.reason.as_deref() == Some("shadow")
        && d.mode == Mode::Shadow));
    let fire_ids: BTreeSet<i64> = fires.iter().map(|f| f.id).collect();
    assert_eq!(
        ds.iter().map(|d| d.fire_id).collect::<BTreeSet<_>>(),
        fire_ids
    );
}
on_both_engines!(
    every_fire_is_written_with_its_deliveries_shadow_ones_suppressed_,
    every_fire_is_written_with_its_deliveries_shadow_ones_suppressed
);

async fn a_live_rule_delivers_rendered_requests_to_the_demo_inbox(url: &str) {
    let w = World::new(url, SAMPLE_DEFINITIONS).await;
    rules::set_mode(&w.store, WS, "billing_ticket", Mode::Live, w.clock.now())
        .await
        .unwrap();
    w.clock.advance(SignedDuration::from_mins(1));
    insert_declines(
        &w.sample.url,
        w.clock.now() - SignedDuration::from_secs(20),
        &["acct_009"],
    )
    .await;
    w.clock.advance(SignedDuration::from_mins(1));
    w.poll().await;
    let ds: Vec<_> = deliveries(&w)
        .await
        .into_iter()
        .filter(|d| d.rule == "billing_ticket")
        .collect();
    assert_eq!(ds.len(), 1);
    let d = &ds[0];
    assert_eq!(
        (d.status.as_str(), d.mode.as_str(), d.action.as_str()),
        ("sent", "live", "inbox.ticket")
    );
    let body: serde_json::Value = serde_json::from_str(d.body.as_deref().unwrap()).unwrap();
    assert_eq!(
        body["subject"],
        "Card declined for O'Brien & Sons \"Quality\" Ltd"
    );
    assert_eq!(
        body["priority"], "normal",
        "an unbound parameter takes its default"
    );
    assert!(body["requester"].as_str().unwrap().starts_with("owner@"));
    let mut tx = w.store.begin(WS).await.unwrap();
    let inbox = rowfire::outbox::inbox(&mut tx, WS, 10).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].0, "ticket");
}
on_both_engines!(
    a_live_rule_delivers_rendered_requests_to_the_demo_inbox_,
    a_live_rule_delivers_rendered_requests_to_the_demo_inbox
);

async fn a_template_naming_a_missing_column_fails_that_delivery_with_the_name(url: &str) {
    let broken = SAMPLE_DEFINITIONS.replace(
        "Card declined for {{ account_name }}",
        "Card declined for {{ customer_name }}",
    );
    let w = World::new(url, &broken).await;
    w.rewind("declined_charge", DAYS_120).await;
    w.poll().await;
    let ds: Vec<_> = deliveries(&w)
        .await
        .into_iter()
        .filter(|d| d.rule == "billing_ticket")
        .collect();
    assert!(!ds.is_empty());
    for d in &ds {
        assert_eq!(d.status, DeliveryStatus::Failed);
        assert!(
            d.reason.as_deref().unwrap().contains("customer_name"),
            "{:?}",
            d.reason
        );
        assert_eq!(d.body, None, "nothing is rendered with a hole in it");
    }
    let others = deliveries(&w)
        .await
        .into_iter()
        .filter(|d| d.rule == "billing_heads_up")
        .all(|d| d.status == DeliveryStatus::Suppressed);
    assert!(others, "other rules are untouched");
}
on_both_engines!(
    a_template_naming_a_missing_column_fails_that_delivery_with_the_name_,
    a_template_naming_a_missing_column_fails_that_delivery_with_the_name
);

#[tokio::test]
async fn simulated_activity_fires_on_the_next_poll() {
    let cp = TestSqlite::new();
    let w = World::new(&cp.url, SAMPLE_DEFINITIONS).await;
    w.poll().await;
    let later = w.clock.now() + SignedDuration::from_mins(2);
    rowfire::fixture::simulate(&w.sample.url, later, 4)
        .await
        .unwrap();
    w.clock.set(later + SignedDuration::from_secs(1));
    let reports = w.poll().await;
    assert!(
        report(&reports, "declined_charge").matched >= 4,
        "{reports:?}"
    );
    assert!(report(&reports, "detractor").matched >= 1);
}

#[tokio::test]
async fn why_shows_which_fire_took_the_bucket_of_rows_that_did_not_fire() {
    let cp = TestSqlite::new();
    let w = World::new(&cp.url, SAMPLE_DEFINITIONS).await;
    w.rewind("declined_charge", DAYS_120).await;
    w.poll().await;
    let defs = definitions::parse(SAMPLE_DEFINITIONS).unwrap();
    let url = w.sample.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let q = rowfire::explanation::Question {
        rule: "billing_ticket",
        key: rowfire::fixture::planted::STORMY_ACCOUNT,
        days: 120,
        now: w.clock.now(),
    };
    let e = rowfire::explanation::why(&w.store, WS, &defs, q, &dsn)
        .await
        .unwrap();
    assert_eq!(e.key, "[\"acct_013\"]");
    assert_eq!(
        e.fires.len(),
        1,
        "nine declines in one week make one weekly fire"
    );
    assert_eq!(e.rows.len(), 9);
    let text = e.to_string();
    assert_eq!(text.matches(" fired (fire #").count(), 1, "{text}");
    assert_eq!(text.matches("did not fire: bucket").count(), 8, "{text}");
    assert!(
        text.contains(&format!("was taken by fire #{}", e.fires[0].id)),
        "{text}"
    );
}

#[tokio::test]
async fn a_failed_poll_keeps_its_watermark_and_the_next_poll_recovers_the_window() {
    let cp = TestSqlite::new();
    let w = World::new(&cp.url, SAMPLE_DEFINITIONS).await;
    w.poll().await;
    w.clock.advance(SignedDuration::from_mins(2));
    insert_declines(
        &w.sample.url,
        w.clock.now() - SignedDuration::from_secs(30),
        &["acct_300"],
    )
    .await;
    let before = now();
    let broken = Poller::new(
        w.store.clone(),
        "broken",
        w.clock.clone(),
        Arc::new(|_, _| None),
    );
    let failed = broken.poll_due().await.unwrap();
    let r = report(&failed, "declined_charge");
    assert!(
        matches!(&r.status, PollStatus::Failed(why) if why.contains("SAMPLE_DATABASE_URL is not set")),
        "{r}"
    );
    let state = poll::list(&w.store, WS).await.unwrap();
    let s = state
        .iter()
        .find(|s| s.trigger == "declined_charge")
        .unwrap();
    assert_eq!(s.watermark, before, "a failed poll does not advance");
    assert!(
        s.last_error
            .as_deref()
            .unwrap()
            .contains("SAMPLE_DATABASE_URL")
    );

    w.clock.advance(poll::RETRY_AFTER_FAILURE);
    let recovered = w.poll().await;
    let r = report(&recovered, "declined_charge");
    assert_eq!((r.matched, r.status.clone()), (1, PollStatus::Ok), "{r}");
    let state = poll::list(&w.store, WS).await.unwrap();
    assert_eq!(
        state
            .iter()
            .find(|s| s.trigger == "declined_charge")
            .unwrap()
            .last_error,
        None
    );
}

#[tokio::test]
async fn a_key_column_the_query_does_not_return_fails_the_poll_loudly() {
    let cp = TestSqlite::new();
    let typo = SAMPLE_DEFINITIONS.replace(
        "    key: [account_id]\n    occurrence: [id]",
        "    key: [acount_id]\n    occurrence: [id]",
    );
    let w = World::new(&cp.url, &typo).await;
    w.rewind("declined_charge", DAYS_120).await;
    let reports = w.poll().await;
    let r = report(&reports, "declined_charge");
    assert!(
        matches!(&r.status, PollStatus::Failed(why) if why.contains("no column named acount_id")),
        "{r}"
    );
    assert_eq!(r.fired, 0);
}
