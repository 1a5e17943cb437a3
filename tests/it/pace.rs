//! Pace and persistence: frequency caps, a shared rate limit, a Slack-style `"ok": false`, the
//! last retry leaving a delivery dead with every attempt kept, and idle senders woken at once.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::Poller;
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::outcome::RETRY_SCHEDULE;
use rowfire::send::queue;
use rowfire::send::sender::{self, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::receiver::{Receiver, Reply};
use crate::sending::{Options, Setup, add_signups, prepare};
use crate::support::now;
use rowfire::outbox::DeliveryStatus;
use rowfire::send::queue::ErrorClass;

#[tokio::test]
async fn a_frequency_cap_suppresses_sends_to_one_recipient_past_the_cap_with_the_reason() {
    let opts = Options {
        rule: "    frequency_cap: { max: 2, per: 24h }\n",
        binding: "        recipient: ops-team\n",
        ..Options::default()
    };
    let s = Setup::sqlite(5, opts).await;
    let all = s.deliveries().await;
    let suppressed: Vec<_> = all
        .iter()
        .filter(|d| d.status == DeliveryStatus::Suppressed)
        .collect();
    assert_eq!((all.len(), suppressed.len()), (5, 3), "{all:?}");
    assert!(
        suppressed[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("frequency cap: ops-team already had 2"),
        "{suppressed:?}"
    );
    s.sender.drain().await.unwrap();
    assert_eq!(s.receiver.count(), 2);
}

#[tokio::test]
async fn a_rate_limit_paces_an_integration_and_holds_back_what_does_not_fit() {
    let opts = Options {
        integration: "    rate_limit: 4\n".into(),
        ..Options::default()
    };
    let s = Setup::sqlite(8, opts).await;
    let first = s.at(SignedDuration::ZERO).await;
    // Slots every 250 ms: those within the next second go (after waiting for their slot), the
    // rest are released, due at their slot.
    assert_eq!((first.sent, first.waiting), (5, 3), "{first:?}");
    let held = s
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .count();
    assert_eq!(held, 3);
    let state = rowfire::integrations::states(&s.store, WS).await.unwrap();
    assert!(
        state[0].paused_until.unwrap() > now() + SignedDuration::from_secs(1),
        "the pace is shared through the control plane: {state:?}"
    );
    s.at(SignedDuration::from_secs(5)).await;
    assert_eq!(s.receiver.count(), 8);
}

#[tokio::test]
async fn a_2xx_saying_ok_false_fails_when_the_action_says_so() {
    let opts = Options {
        integration: "    actions:\n      send: { method: POST, path: /slack, ok_field: true, params: { event_type: {} }, body: {} }\n".into(),
        ..Options::default()
    };
    let s = Setup::sqlite(1, opts).await;
    s.receiver
        .script([Reply::status(200).body(r#"{"ok": false, "error": "channel_not_found"}"#)]);
    s.at(SignedDuration::ZERO).await;
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert!(
        d.reason.as_deref().unwrap().contains("channel_not_found"),
        "{d:?}"
    );
    let attempts = queue::attempts(&s.store, WS, d.id).await.unwrap();
    assert_eq!(attempts[0].error_class, Some(ErrorClass::Rejected));
}

#[tokio::test]
async fn after_the_last_retry_a_delivery_is_dead_with_every_attempt_kept_and_can_be_retried_by_hand()
 {
    let s = Setup::sqlite(1, Options::default()).await;
    s.receiver
        .script(vec![Reply::status(503); RETRY_SCHEDULE.len()]);
    let mut at = SignedDuration::ZERO;
    for _ in 0..RETRY_SCHEDULE.len() {
        s.at(at).await;
        at += SignedDuration::from_hours(27); // past the longest wait, 24 h + 10%
    }
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Dead, "{d:?}");
    assert!(
        d.reason
            .as_deref()
            .unwrap()
            .starts_with("after 10 attempts")
    );
    assert_eq!(
        queue::attempts(&s.store, WS, d.id).await.unwrap().len(),
        RETRY_SCHEDULE.len()
    );
    s.at(at + SignedDuration::from_hours(48)).await;
    assert_eq!(
        s.receiver.count(),
        RETRY_SCHEDULE.len(),
        "a dead delivery rests"
    );
    rowfire::outbox::retry(&s.store, WS, d.id, now() + at)
        .await
        .unwrap();
    s.at(at).await;
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Sent);
    let seen = s.receiver.seen();
    assert_eq!(seen.len(), RETRY_SCHEDULE.len() + 1);
    assert!(
        seen.iter()
            .all(|r| r.header("webhook-id") == d.id.to_string())
    );
}

/// An idle sender (whose next look is a minute away) sends a delivery enqueued by another
/// store (another process) within a second: woken by NOTIFY on PostgreSQL, in-process on SQLite.
async fn a_delivery_due_now_is_sent_within_a_second_by_an_idle_sender(url: &str) {
    let receiver = Receiver::start().await;
    let source = crate::support::TestSqlite::new();
    #[expect(
        clippy::disallowed_methods,
        reason = "the sender under test runs on the system clock, whose lateness is measured"
    )]
    let start = Timestamp::now();
    add_signups(&source, 0..1, start).await;
    let store = Store::open(url).await.unwrap();
    store.migrate().await.unwrap();
    let sender_store = if url.starts_with("postgres") {
        let other = Store::open(url).await.unwrap();
        other.listen_for_work().await;
        other
    } else {
        store.clone()
    };
    let key_text = prepare(&store, &receiver.url, &Options::default(), start).await;
    let key = rowfire::secret::MasterKey::parse(&key_text).unwrap();
    let config = sender::Config {
        idle: Duration::from_secs(60),
        ..sender::Config::default()
    };
    let sender = Sender::new(
        sender_store,
        Client::new(Policy::parse("127.0.0.1", false).unwrap()),
        Clock::system(),
        Ok(key),
        config,
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut passes = sender.passes();
    let running = tokio::spawn(async move { sender.run_until(stopped).await });
    // Once the sender has looked and found nothing, it settles into its minute-long wait.
    passes.wait_for(|n| *n >= 1).await.unwrap();
    let url_source = source.url.clone();
    let poller = Poller::new(
        store.clone(),
        "w",
        Clock::system(),
        Arc::new(move |_, _| Some(url_source.clone().into())),
    );
    assert_eq!(poller.poll_due().await.unwrap()[0].fired, 1);
    assert!(
        receiver.wait_for_requests(1, Duration::from_secs(1)).await,
        "the idle sender was not woken within a second"
    );
    stop.send(true).unwrap();
    running.await.unwrap();
}

on_both_engines!(
    an_idle_sender_is_woken_by_new_work,
    a_delivery_due_now_is_sent_within_a_second_by_an_idle_sender
);
