//! Time-anchored rules, end to end on the injected clock: a sweep materialises a meeting's
//! reminder into the queue due at its start minus its lead, a sender delivers it to the Demo
//! inbox at that moment, and moves, cancellations, lead changes and lateness have the outcomes
//! the rule promises. No test sleeps: the clock is set and the worker driven until idle.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::outbox::{self, DeliveryStatus};
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::schedule::SweepReport;
use rowfire::secret::MasterKey;
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::sender::{self, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, SqliteConnection};

use crate::support::{TestSqlite, now};

/// The definitions, the rule's recheck set to `recheck`.
pub(crate) fn definitions(recheck: bool) -> String {
    DEFINITIONS.replace("RECHECK", &recheck.to_string())
}

const DEFINITIONS: &str = "version: 2
source: { type: sqlite, dsn_env: MEETINGS_URL }
integrations:
  inbox: { catalog: demo_inbox }
triggers:
  meetings:
    sql: SELECT id, title, starts_at, reminder_minutes FROM meeting WHERE cancelled = 0
    event_time: starts_at
    key: [id]
    poll_interval: 1m
rules:
  nudge:
    trigger: meetings
    anchor: { column: starts_at, lead_column: reminder_minutes, interval: 1m, recheck: RECHECK }
    actions:
      - action: inbox.chat_message
        recipient: team
        params: { text: \"{{ title }} starts soon\" }
";

fn mins(m: i64) -> SignedDuration {
    SignedDuration::from_mins(m)
}

/// A control plane, a meetings source, a poller and a sender on one fixed clock.
struct Calendar {
    store: Store,
    clock: Clock,
    poller: Poller,
    poller_b: Poller,
    sender: Sender,
    source: TestSqlite,
    _control_plane: Option<TestSqlite>,
}

impl Calendar {
    async fn new(control_plane: &str) -> Calendar {
        Calendar::with(control_plane, false).await
    }

    async fn with(control_plane: &str, recheck: bool) -> Calendar {
        Calendar::with_definitions(control_plane, &definitions(recheck)).await
    }

    async fn with_definitions(control_plane: &str, text: &str) -> Calendar {
        let source = TestSqlite::new();
        let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", source.url))
            .await
            .unwrap();
        sqlx::raw_sql(
            "CREATE TABLE meeting (id TEXT PRIMARY KEY, title TEXT, starts_at TEXT, reminder_minutes INTEGER, cancelled INTEGER NOT NULL DEFAULT 0)",
        )
        .execute(&mut c)
        .await
        .unwrap();
        let store = Store::open(control_plane).await.unwrap();
        store.migrate().await.unwrap();
        push::push(&store, WS, text, now()).await.unwrap();
        rules::set_mode(&store, WS, "nudge", Mode::Live, now())
            .await
            .unwrap();
        let clock = Clock::fixed(now());
        let url = source.url.clone();
        let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
        let poller = Poller::new(store.clone(), "a", clock.clone(), dsn.clone());
        let poller_b = Poller::new(store.clone(), "b", clock.clone(), dsn.clone());
        let sender = Sender::new(
            store.clone(),
            Client::new(Policy::parse("127.0.0.1", false).unwrap()),
            clock.clone(),
            Ok(MasterKey::parse(&MasterKey::generate()).unwrap()),
            sender::Config {
                refresh: Duration::ZERO,
                ..sender::Config::default()
            },
        )
        .with_recheck(dsn);
        Calendar {
            store,
            clock,
            poller,
            poller_b,
            sender,
            source,
            _control_plane: None,
        }
    }

    async fn sqlite() -> Calendar {
        let db = TestSqlite::new();
        let mut c = Calendar::new(&db.url).await;
        c._control_plane = Some(db);
        c
    }

    async fn sql(&self, sql: &str) {
        let mut c = SqliteConnection::connect(&self.source.url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut c)
            .await
            .unwrap();
    }

    /// Books meeting `id` at `at` minutes after the test's now, with its own lead or none.
    async fn book(&self, id: &str, at: i64, lead: Option<i64>) {
        let lead = lead.map_or("NULL".to_string(), |m| m.to_string());
        self.sql(&format!(
            "INSERT INTO meeting VALUES ('{id}', 'Meeting {id}', '{}', {lead}, 0)",
            now() + mins(at)
        ))
        .await;
    }

    async fn set(&self, id: &str, assignment: &str) {
        self.sql(&format!(
            "UPDATE meeting SET {assignment} WHERE id = '{id}'"
        ))
        .await;
    }

    async fn start_of(&self, id: &str, at: i64) {
        self.set(id, &format!("starts_at = '{}'", now() + mins(at)))
            .await;
    }

    /// Sets the clock `m` minutes after the test's now, sweeps what is due, then sends what is
    /// due until idle; returns the sweep's report (if one ran) and what was sent.
    async fn at(&self, m: i64) -> (Option<SweepReport>, u64) {
        self.clock.set(now() + mins(m));
        let reports = self.poller.poll_due().await.unwrap();
        let swept = reports
            .iter()
            .flat_map(|r| &r.sweeps)
            .map(|(_, s)| s.clone().expect("the sweep succeeds"))
            .next();
        let sent = self.sender.drain().await.unwrap().sent;
        (swept, sent)
    }

    async fn deliveries(&self) -> Vec<outbox::Delivery> {
        let mut tx = self.store.begin(WS).await.unwrap();
        let all = outbox::list(&mut tx, WS, &Default::default())
            .await
            .unwrap();
        tx.rollback().await.unwrap();
        all
    }

    /// The deliveries of meeting `id` (its title is in the body), oldest first.
    async fn of(&self, id: &str) -> Vec<outbox::Delivery> {
        let title = format!("Meeting {id} starts");
        let mut all: Vec<_> = self
            .deliveries()
            .await
            .into_iter()
            .filter(|d| d.body.as_deref().is_some_and(|b| b.contains(&title)))
            .collect();
        all.reverse();
        all
    }

    async fn inbox(&self) -> usize {
        let mut tx = self.store.begin(WS).await.unwrap();
        let n = outbox::inbox(&mut tx, WS, 1000).await.unwrap().len();
        tx.rollback().await.unwrap();
        n
    }
}

fn at(m: i64) -> Timestamp {
    now() + mins(m)
}

on_both_engines!(
    leads_default_row_and_changed,
    a_meeting_is_reminded_once_at_its_start_minus_the_default_lead_its_own_lead_or_its_changed_lead
);

async fn a_meeting_is_reminded_once_at_its_start_minus_the_default_lead_its_own_lead_or_its_changed_lead(
    url: &str,
) {
    let c = Calendar::new(url).await;
    c.book("plain", 60, None).await;
    c.book("own", 60, Some(30)).await;
    c.book("changed", 60, Some(30)).await;
    let (swept, sent) = c.at(0).await;
    let swept = swept.expect("a new rule is swept at once");
    assert_eq!((swept.rows, swept.queued, sent), (3, 3, 0), "{swept:?}");
    assert_eq!(c.of("plain").await[0].due_at, at(50));
    assert_eq!(c.of("own").await[0].due_at, at(30));

    // Its lead changed while pending: the next sweep moves its due time.
    c.set("changed", "reminder_minutes = 20").await;
    let (swept, _) = c.at(5).await;
    let swept = swept.unwrap();
    assert_eq!((swept.moved, swept.queued, swept.already), (1, 0, 2));
    assert_eq!(c.of("changed").await[0].due_at, at(40));

    for (minute, expect) in [
        (29, 0),
        (30, 1),
        (39, 0),
        (40, 1),
        (49, 0),
        (50, 1),
        (70, 0),
    ] {
        let (_, sent) = c.at(minute).await;
        assert_eq!(sent, expect, "sent at minute {minute}");
    }
    for (id, due) in [("own", 30), ("changed", 40), ("plain", 50)] {
        let sends = c.of(id).await;
        assert_eq!(sends.len(), 1, "{id}: {sends:?}");
        assert_eq!(sends[0].status, DeliveryStatus::Sent, "{id}");
        assert_eq!(
            sends[0].sent_at,
            Some(at(due)),
            "{id} leaves at its due time"
        );
    }
    assert_eq!(c.inbox().await, 3, "each reminder reached the inbox once");
}

on_both_engines!(
    moved_anchors,
    a_moved_meeting_is_reminded_once_for_its_new_start_and_one_moved_back_once_for_its_first
);

async fn a_moved_meeting_is_reminded_once_for_its_new_start_and_one_moved_back_once_for_its_first(
    url: &str,
) {
    let c = Calendar::new(url).await;
    c.book("moved", 60, None).await;
    c.book("back", 60, None).await;
    c.at(0).await;
    c.start_of("moved", 120).await;
    c.start_of("back", 120).await;
    let (swept, _) = c.at(5).await;
    let swept = swept.unwrap();
    assert_eq!((swept.cancelled_moved, swept.queued), (2, 2), "{swept:?}");
    c.start_of("back", 60).await;
    let (swept, _) = c.at(10).await;
    let swept = swept.unwrap();
    assert_eq!(
        (swept.reinstated, swept.cancelled_moved),
        (1, 1),
        "{swept:?}"
    );
    let mut sent_at = Vec::new();
    for minute in [50, 60, 110, 130] {
        let (_, sent) = c.at(minute).await;
        sent_at.extend(std::iter::repeat_n(minute, sent as usize));
    }
    assert_eq!(
        sent_at,
        [50, 110],
        "once each: back at 14:50, moved at 15:50"
    );
    let moved = c.of("moved").await;
    assert_eq!(
        moved.iter().map(|d| d.status).collect::<Vec<_>>(),
        [DeliveryStatus::Cancelled, DeliveryStatus::Sent]
    );
    assert_eq!(moved[0].reason.as_deref(), Some("anchor moved"));
    assert_eq!(moved[1].sent_at, Some(at(110)));
    let back = c.of("back").await;
    let sent: Vec<_> = back
        .iter()
        .filter(|d| d.status == DeliveryStatus::Sent)
        .collect();
    assert_eq!(sent.len(), 1, "{back:?}");
    assert_eq!(sent[0].sent_at, Some(at(50)));
    assert_eq!(c.inbox().await, 2);
}

on_both_engines!(
    cancellations,
    a_cancelled_meeting_sends_nothing_and_a_failed_sweep_cancels_nothing
);

async fn a_cancelled_meeting_sends_nothing_and_a_failed_sweep_cancels_nothing(url: &str) {
    let c = Calendar::new(url).await;
    c.book("cancelled", 60, None).await;
    c.book("kept", 60, None).await;
    c.at(0).await;
    // The source cannot be read: the sweep fails and changes nothing.
    c.sql("ALTER TABLE meeting RENAME TO meeting_gone").await;
    c.clock.set(at(2));
    let reports = c.poller.poll_due().await.unwrap();
    let failed: Vec<_> = reports.iter().flat_map(|r| &r.sweeps).collect();
    assert!(matches!(failed.as_slice(), [(_, Err(_))]), "{failed:?}");
    assert!(
        c.deliveries()
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Pending)
    );
    c.sql("ALTER TABLE meeting_gone RENAME TO meeting").await;
    c.set("cancelled", "cancelled = 1").await;
    let (swept, _) = c.at(5).await;
    assert_eq!(swept.unwrap().cancelled_gone, 1);
    let (_, sent) = c.at(50).await;
    assert_eq!(sent, 1);
    let gone = c.of("cancelled").await;
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].status, DeliveryStatus::Cancelled);
    assert_eq!(gone[0].reason.as_deref(), Some("no longer matches"));
    assert_eq!(c.of("kept").await[0].status, DeliveryStatus::Sent);
}

on_both_engines!(
    lateness,
    a_reminder_not_sent_by_due_plus_grace_expires_and_one_sent_within_it_goes_late_once
);

async fn a_reminder_not_sent_by_due_plus_grace_expires_and_one_sent_within_it_goes_late_once(
    url: &str,
) {
    let c = Calendar::new(url).await;
    c.book("late", 60, None).await;
    c.book("lost", 90, None).await;
    c.at(0).await;
    // Every worker was stopped: the first comes back 3 minutes after due (grace 5), the
    // second 6 minutes after.
    c.clock.set(at(53));
    assert_eq!(c.sender.drain().await.unwrap().sent, 1);
    c.clock.set(at(86));
    c.sender.drain().await.unwrap();
    let late = c.of("late").await;
    assert_eq!(
        (late[0].status, late[0].sent_at),
        (DeliveryStatus::Sent, Some(at(53)))
    );
    let lost = c.of("lost").await;
    assert_eq!(lost[0].status, DeliveryStatus::Expired, "{lost:?}");
    assert_eq!(c.inbox().await, 1);

    // Booked too close to its start: first found after due plus grace, it is never queued.
    c.book("soon", 100, Some(30)).await;
    let (swept, sent) = c.at(94).await;
    assert_eq!((swept.unwrap().too_late, sent), (1, 0));
    let soon = c.of("soon").await;
    assert_eq!(soon[0].status, DeliveryStatus::Expired);
    assert!(
        soon[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("first found after its due time")),
        "{soon:?}"
    );

    // Its own lead (5h) is longer than the look-ahead (3h): no sweep reads it in time, and the
    // reason says which setting to raise.
    c.book("far", 460, Some(300)).await;
    c.at(279).await;
    assert!(c.of("far").await.is_empty(), "not yet in the look-ahead");
    let (swept, sent) = c.at(281).await;
    assert_eq!((swept.unwrap().too_late, sent), (1, 0));
    let far = c.of("far").await;
    assert_eq!(far[0].status, DeliveryStatus::Expired);
    assert_eq!(
        far[0].reason.as_deref(),
        Some(
            "expired: its lead of 5h (from the row's reminder_minutes) is not shorter than the rule's look_ahead of 3h, so no sweep reads it before it is due; raise anchor.look_ahead to at least the longest lead plus the sweep interval"
        )
    );
}

on_both_engines!(
    repeated_and_racing_sweeps,
    sweeping_one_window_twice_or_with_two_pollers_at_once_queues_one_send
);

async fn sweeping_one_window_twice_or_with_two_pollers_at_once_queues_one_send(url: &str) {
    let c = Calendar::new(url).await;
    for i in 0..20 {
        c.book(&format!("m{i:02}"), 30 + i, Some(i % 3)).await;
    }
    for minute in [0, 1, 2, 3] {
        c.clock.set(at(minute));
        let (a, b) = tokio::join!(c.poller.poll_due(), c.poller_b.poll_due());
        let swept: Vec<_> = a
            .unwrap()
            .into_iter()
            .chain(b.unwrap())
            .flat_map(|r| r.sweeps)
            .collect();
        assert!(swept.len() <= 1, "one sweep holds the trigger: {swept:?}");
    }
    assert_eq!(c.deliveries().await.len(), 20);
    let mut sent = 0;
    for minute in 28..=50 {
        c.clock.set(at(minute));
        sent += c.sender.drain().await.unwrap().sent;
    }
    assert_eq!(sent, 20);
    assert_eq!(c.inbox().await, 20);
}

#[tokio::test]
async fn a_sweep_in_shadow_records_what_it_would_send_and_sends_nothing() {
    let c = Calendar::sqlite().await;
    rules::set_mode(&c.store, WS, "nudge", Mode::Shadow, now())
        .await
        .unwrap();
    c.book("shadowed", 60, None).await;
    let (swept, _) = c.at(0).await;
    assert_eq!(swept.unwrap().queued, 1);
    let (_, sent) = c.at(50).await;
    assert_eq!(sent, 0);
    let d = &c.of("shadowed").await[0];
    assert_eq!((d.status, d.due_at), (DeliveryStatus::Suppressed, at(50)));
    assert_eq!(c.inbox().await, 0);
}

on_both_engines!(
    rechecks,
    with_recheck_on_a_row_changed_between_materialising_and_sending_ends_as_skipped_with_the_reason
);

async fn with_recheck_on_a_row_changed_between_materialising_and_sending_ends_as_skipped_with_the_reason(
    url: &str,
) {
    let c = Calendar::with(url, true).await;
    c.book("kept", 60, None).await;
    c.book("cancelled", 60, None).await;
    c.book("moved", 60, None).await;
    c.at(0).await;
    // Changed after the sweep, and no sweep runs before the sends fall due: only the recheck
    // can notice.
    c.set("cancelled", "cancelled = 1").await;
    c.start_of("moved", 61).await;
    c.clock.set(at(50));
    let sent = c.sender.drain().await.unwrap();
    assert_eq!((sent.sent, sent.finished_unsent), (1, 2), "{sent:?}");
    assert_eq!(c.of("kept").await[0].status, DeliveryStatus::Sent);
    for id in ["cancelled", "moved"] {
        let d = &c.of(id).await[0];
        assert_eq!(d.status, DeliveryStatus::Skipped, "{id}");
        assert!(
            d.reason
                .as_deref()
                .is_some_and(|r| r.starts_with("nothing worth saying")),
            "{id}: {:?}",
            d.reason
        );
    }
    assert_eq!(c.inbox().await, 1);
    // Skipped is final: nothing is retried.
    c.clock.set(at(52));
    assert_eq!(c.sender.drain().await.unwrap().claimed, 0);
}

on_both_engines!(
    lease_takeover,
    a_reminder_claimed_by_a_worker_that_dies_is_taken_over_after_its_lease_and_sent_once
);

async fn a_reminder_claimed_by_a_worker_that_dies_is_taken_over_after_its_lease_and_sent_once(
    url: &str,
) {
    use rowfire::send::queue;
    let c = Calendar::new(url).await;
    c.book("m", 60, None).await;
    c.at(0).await;
    c.clock.set(at(50));
    // A worker claims it with a 30-second lease and dies before sending.
    let claimed = queue::claim_due(&c.store, at(50), 10, SignedDuration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(claimed[0].scheduled.is_some(), "it knows it is scheduled");
    assert_eq!(c.sender.drain().await.unwrap().claimed, 0, "leased");
    c.clock.set(at(50) + SignedDuration::from_secs(31));
    assert_eq!(c.sender.drain().await.unwrap().sent, 1);
    let sends = c.of("m").await;
    assert_eq!(sends.len(), 1);
    assert_eq!(sends[0].id, claimed[0].id, "the same delivery id");
    assert_eq!(
        sends[0].attempts, 2,
        "the dead worker's claim counts as an attempt"
    );
    assert_eq!(c.inbox().await, 1);
}

/// The definitions with the reminder sent to a REST endpoint at `receiver` instead of the Demo
/// inbox.
fn http_definitions(receiver: &str) -> String {
    definitions(false)
        .replace(
            "  inbox: { catalog: demo_inbox }\n",
            &format!(
                "  inbox: {{ catalog: demo_inbox }}
  api:
    base_url: {receiver}/api
    timeout_ms: 500
    actions:
      remind:
        method: POST
        path: /remind
        idempotency_header: Idempotency-Key
        body: {{ text: \"{{{{ title }}}} starts soon\" }}
"
            ),
        )
        .replace(
            "      - action: inbox.chat_message\n        recipient: team\n        params: { text: \"{{ title }} starts soon\" }\n",
            "      - action: api.remind\n",
        )
}

on_both_engines!(
    failed_send_retried,
    a_reminder_whose_send_fails_is_retried_and_sent_once_under_one_delivery_id
);

async fn a_reminder_whose_send_fails_is_retried_and_sent_once_under_one_delivery_id(url: &str) {
    use crate::receiver::{Receiver, Reply};
    let receiver = Receiver::start().await;
    receiver.script([Reply::status(503), Reply::status(200)]);
    let text = http_definitions(&receiver.url);
    assert!(text.contains("api.remind"), "{text}");
    let c = Calendar::with_definitions(url, &text).await;
    c.book("m", 60, None).await;
    c.at(0).await;
    assert_eq!(c.at(49).await.1, 0, "not due yet");
    assert_eq!(receiver.count(), 0);
    assert_eq!(c.at(50).await.1, 0, "the first attempt fails");
    assert_eq!(receiver.count(), 1);
    let first = c.of("m").await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].status, DeliveryStatus::Pending, "{first:?}");
    // Its retry falls due within the grace and goes.
    c.clock.set(at(51));
    assert_eq!(c.sender.drain().await.unwrap().sent, 1);
    let seen = receiver.seen();
    assert_eq!(seen.len(), 2);
    let sends = c.of("m").await;
    assert_eq!(sends.len(), 1, "one delivery, retried: {sends:?}");
    assert_eq!(sends[0].status, DeliveryStatus::Sent);
    assert_eq!(sends[0].attempts, 2);
    let id = sends[0].id.to_string();
    assert!(
        seen.iter().all(|s| s.header("idempotency-key") == id),
        "both attempts carry the delivery's id as their idempotency key"
    );
    // Nothing more goes, however long the clock runs.
    c.clock.set(at(120));
    assert_eq!(c.sender.drain().await.unwrap().claimed, 0);
    assert_eq!(receiver.count(), 2);
}

on_both_engines!(
    backtest_agrees_on_expiry,
    a_backtest_counts_as_expired_the_sends_whose_own_lead_outruns_the_look_ahead_as_live_does
);

/// Live and a backtest over the same rows agree on which sends go and which expire: a lead from
/// the row of at least the look-ahead (3h) plus the grace (5m) is never read in time.
async fn a_backtest_counts_as_expired_the_sends_whose_own_lead_outruns_the_look_ahead_as_live_does(
    url: &str,
) {
    let c = Calendar::new(url).await;
    c.book("on_time", 120, Some(60)).await;
    // Due 70 minutes before the first sweep, which finds it.
    c.book("found_late", 170, Some(240)).await;
    // Due at 160; the first sweep whose look-ahead reaches 400 runs at 221.
    c.book("read_late", 400, Some(240)).await;
    // At the edge: the first sweep to reach 300 runs at 121, when a lead of 183 minutes (due
    // 117, grace until 122) still goes, late, and one of 185 (the look-ahead plus the grace:
    // grace until 120) has expired.
    c.book("just_in_time", 300, Some(183)).await;
    c.book("just_too_late", 300, Some(185)).await;
    for m in [0, 60, 121, 221, 400] {
        c.at(m).await;
    }
    let mut live = Vec::new();
    for id in [
        "on_time",
        "found_late",
        "read_late",
        "just_in_time",
        "just_too_late",
    ] {
        live.push(c.of(id).await.iter().map(|d| d.status).collect::<Vec<_>>());
    }
    assert_eq!(
        live,
        [
            vec![DeliveryStatus::Sent],
            vec![DeliveryStatus::Expired],
            vec![DeliveryStatus::Expired],
            vec![DeliveryStatus::Sent],
            vec![DeliveryStatus::Expired]
        ]
    );

    let defs = rowfire::definitions::parse(&definitions(false)).unwrap();
    let source =
        rowfire::source::Source::connect(&crate::support::source_def(&defs, 2), &c.source.url)
            .await
            .unwrap();
    let opts = rowfire::backtest::Options {
        days: 1,
        sample: 0,
        now: at(600),
    };
    let r = rowfire::backtest::run(&defs, "nudge", &source, &opts)
        .await
        .unwrap();
    assert_eq!((r.fires, r.expired_sends, r.rows_matched), (2, 3, 5), "{r}");
    assert!(r.to_string().contains("sends found too late"), "{r}");
}
