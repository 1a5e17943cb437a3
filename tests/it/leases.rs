//! Leases on the control plane's clock: workers on one PostgreSQL control plane whose host clocks
//! disagree still agree on when a trigger's or a delivery's lease lapses.
//!
//! Each worker's host clock is a fixed clock (one a minute ahead of the other); syncing with the
//! control plane makes both read the database's time. Everything the test stamps (sample rows,
//! the push, the rewind) is made on that synced time, and it asserts only which lease is taken,
//! never an instant, so the database's clock and the tests' fixed clock are never compared.

use std::sync::Arc;

use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::fixture::{self, SAMPLE_DEFINITIONS};
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::send::queue;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::support::{TestPg, TestSqlite, now};

#[tokio::test]
async fn two_workers_whose_clocks_differ_by_a_minute_never_take_over_each_others_live_leases() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let store = Store::open(&pg.url).await.unwrap();
    store.migrate().await.unwrap();
    let behind = Clock::fixed(now());
    let ahead = Clock::fixed(now() + SignedDuration::from_mins(1));
    assert_eq!(
        behind.now().duration_until(ahead.now()),
        SignedDuration::from_mins(1)
    );
    store.sync_clock(&behind).await.unwrap();
    store.sync_clock(&ahead).await.unwrap();
    let skew = behind.now().duration_until(ahead.now());
    assert!(
        skew.abs() < SignedDuration::from_secs(5),
        "synced clocks still {skew:#} apart"
    );

    // Pending deliveries of three live rules, made on the synced time.
    let at = behind.now().min(ahead.now());
    let sample = TestSqlite::new();
    fixture::load(&format!("{}?mode=rwc", sample.url), at)
        .await
        .unwrap();
    let doc = SAMPLE_DEFINITIONS.replace(
        "    catalog: demo_inbox\n",
        "    catalog: demo_inbox\n    base_url: http://127.0.0.1:9\n",
    );
    push::push(&store, WS, &doc, at).await.unwrap();
    for rule in ["billing_ticket", "billing_heads_up", "third_failed_payment"] {
        rules::set_mode(&store, WS, rule, Mode::Live, at)
            .await
            .unwrap();
    }
    let ago = SignedDuration::from_hours(24 * 120);
    poll::rewind(&store, WS, "declined_charge", ago, at)
        .await
        .unwrap();
    let url = sample.url.clone();
    let dsn: poll::DsnResolver = Arc::new(move |_, _| Some(url.clone().into()));
    let setup = Poller::new(store.clone(), "setup", behind.clone(), dsn.clone());
    let fired: u64 = setup
        .poll_due()
        .await
        .unwrap()
        .iter()
        .map(|r| r.fired)
        .sum();
    assert!(fired > 10, "{fired}");

    // Trigger lease (5 minutes): the worker behind holds declined_charge; four and a half
    // minutes on, by its own clock the one ahead would be past the lease, but it is not.
    poll::rewind(&store, WS, "declined_charge", ago, at)
        .await
        .unwrap();
    let five_minutes = SignedDuration::from_mins(5);
    let behind_poller =
        Poller::new(store.clone(), "behind", behind.clone(), dsn.clone()).with_lease(five_minutes);
    let ahead_poller =
        Poller::new(store.clone(), "ahead", ahead.clone(), dsn.clone()).with_lease(five_minutes);
    let held = behind_poller.lease().await.unwrap().expect("a due trigger");
    assert_eq!(held.trigger, "declined_charge");
    for clock in [&behind, &ahead] {
        clock.advance(SignedDuration::from_secs(270));
    }
    let mut taken = Vec::new();
    while let Some(lease) = ahead_poller.lease().await.unwrap() {
        taken.push(lease.trigger);
    }
    assert!(
        !taken.contains(&held.trigger),
        "the worker ahead took over a live trigger lease: {taken:?}"
    );
    // Once the lease has lapsed on the control plane's clock, it is taken over.
    for clock in [&behind, &ahead] {
        clock.advance(SignedDuration::from_secs(60));
    }
    let again = ahead_poller
        .lease()
        .await
        .unwrap()
        .expect("the lapsed lease");
    assert_eq!(again.trigger, held.trigger);
    assert!(again.token > held.token);
    // Nor does the worker behind take over what the one ahead now holds.
    assert_eq!(behind_poller.lease().await.unwrap(), None);

    // Delivery lease (60 seconds): the same, with the one ahead trying half a lease later.
    let lease = queue::DEFAULT_LEASE;
    let mine = queue::claim_due(&store, behind.now(), 1, lease)
        .await
        .unwrap()
        .remove(0);
    for clock in [&behind, &ahead] {
        clock.advance(SignedDuration::from_secs(30));
    }
    let theirs = queue::claim_due(&store, ahead.now(), 100_000, lease)
        .await
        .unwrap();
    assert!(!theirs.is_empty());
    assert!(
        theirs.iter().all(|c| c.id != mine.id),
        "the worker ahead took over a live delivery lease"
    );
    for clock in [&behind, &ahead] {
        clock.advance(SignedDuration::from_secs(31));
    }
    let lapsed = queue::claim_due(&store, ahead.now(), 100_000, lease)
        .await
        .unwrap();
    assert!(
        lapsed
            .iter()
            .any(|c| c.id == mine.id && c.token > mine.token)
    );
    let held_ahead: Vec<i64> = theirs.iter().chain(&lapsed).map(|c| c.id).collect();
    let behind_gets = queue::claim_due(&store, behind.now(), 100_000, lease)
        .await
        .unwrap();
    assert!(
        behind_gets.iter().all(|c| !held_ahead.contains(&c.id)),
        "the worker behind took over a live delivery lease"
    );
}
