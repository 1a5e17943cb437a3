//! The delivery queue: batched claims that never overlap, leases that lapse, fenced settles.

use std::collections::HashSet;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::send::queue::{self, Claimed, Settlement};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};

use crate::support::{TestSqlite, now, sample_source};
use rowfire::outbox::DeliveryStatus;
use rowfire::send::queue::ErrorClass;

/// A control plane holding the pending deliveries of three live rules whose integration points
/// outside the machine (nothing is sent: the queue is only claimed and settled here).
async fn pending_deliveries(control_plane: &str) -> (Store, usize) {
    let sample = TestSqlite::new();
    sample_source(&sample.url, 10_000).await;
    let store = Store::open(control_plane).await.unwrap();
    store.migrate().await.unwrap();
    // The queue of the three declined-charge rules: the sample's time-anchored rules (whose
    // sweeps schedule sends whatever the rewind) are left out.
    let without_reminders = SAMPLE_DEFINITIONS
        .split("\n  meeting_nudge:\n")
        .next()
        .unwrap()
        .to_string()
        + "\n";
    let doc = without_reminders.replace(
        "    catalog: demo_inbox\n",
        "    catalog: demo_inbox\n    base_url: http://127.0.0.1:9\n",
    );
    push::push(&store, WS, &doc, now()).await.unwrap();
    for rule in ["billing_ticket", "billing_heads_up", "third_failed_payment"] {
        rules::set_mode(&store, WS, rule, Mode::Live, now())
            .await
            .unwrap();
    }
    poll::rewind(
        &store,
        WS,
        "declined_charge",
        SignedDuration::from_hours(24 * 120),
        now(),
    )
    .await
    .unwrap();
    let url = sample.url.clone();
    let poller = Poller::new(
        store.clone(),
        "w",
        Clock::fixed(now()),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let reports = poller.poll_due().await.unwrap();
    let fired: u64 = reports.iter().flat_map(|r| &r.rules).map(|r| r.fired).sum();
    (store, fired as usize)
}

async fn eight_concurrent_claimers_never_exceed_the_batch_or_share_a_delivery(url: &str) {
    let (_store, pending) = pending_deliveries(url).await;
    assert!(pending > 400, "{pending}");
    const LIMIT: i64 = 25;
    let mut tasks = Vec::new();
    // One claims the whole queue oldest first; the others start in lanes, three of them in the
    // same lane (7, 23 and 7 again) and two in lane 0.
    let lanes = [
        None,
        Some(7),
        Some(7),
        Some(23),
        Some(0),
        Some(16),
        Some(3),
        Some(200),
    ];
    for lane in lanes {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            // A store of its own: its own connections, like a separate worker process.
            let store = Store::open(&url).await.unwrap();
            let mut mine = Vec::new();
            loop {
                let batch = match lane {
                    None => queue::claim_due(&store, now(), LIMIT, queue::DEFAULT_LEASE).await,
                    Some(lane) => {
                        queue::claim_spread(&store, now(), LIMIT, queue::DEFAULT_LEASE, lane).await
                    }
                }
                .unwrap();
                assert!(
                    batch.len() as i64 <= LIMIT,
                    "a claim returned {} rows",
                    batch.len()
                );
                if batch.is_empty() {
                    return mine;
                }
                mine.extend(batch.into_iter().map(|c| c.id));
            }
        }));
    }
    let mut seen = HashSet::new();
    let mut total = 0;
    for t in tasks {
        for id in t.await.unwrap() {
            total += 1;
            assert!(seen.insert(id), "delivery {id} was claimed twice");
        }
    }
    assert_eq!(total, pending, "every pending delivery was claimed once");
}
on_both_engines!(
    eight_concurrent_claimers_never_exceed_the_batch_or_share_a_delivery_,
    eight_concurrent_claimers_never_exceed_the_batch_or_share_a_delivery
);

/// Every pending delivery's (due_at, id), read apart from the claim.
async fn pending_order(store: &Store) -> Vec<(Timestamp, i64)> {
    let mut tx = store.begin(WS).await.unwrap();
    let all = rowfire::outbox::list(&mut tx, WS, &Default::default())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut pending: Vec<(Timestamp, i64)> = all
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .map(|d| (d.due_at, d.id))
        .collect();
    pending.sort();
    pending
}

async fn a_spread_claim_takes_its_lanes_oldest_then_the_oldest_of_the_rest(url: &str) {
    let (store, total) = pending_deliveries(url).await;
    let pending = pending_order(&store).await;
    assert_eq!(pending.len(), total);
    let postgres = url.starts_with("postgres");
    // A small batch from lane 5 alone, then one larger than what lane 9 holds.
    let in_lane = |lane: i64| -> Vec<i64> {
        pending
            .iter()
            .filter(|(_, id)| !postgres || id % 16 == lane)
            .map(|(_, id)| *id)
            .collect()
    };
    let claimed = queue::claim_spread(&store, now(), 10, queue::DEFAULT_LEASE, 5)
        .await
        .unwrap();
    let ids: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    let mut want: Vec<i64> = in_lane(5).into_iter().take(10).collect();
    let mut got = ids.clone();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want, "lane 5's ten oldest");
    let lane9 = in_lane(9);
    let limit = lane9.len() as i64 + 7;
    let claimed = queue::claim_spread(&store, now(), limit, queue::DEFAULT_LEASE, 9 + 16)
        .await
        .unwrap();
    let mut got: Vec<i64> = claimed.iter().map(|c| c.id).collect();
    got.sort_unstable();
    let mut want: Vec<i64> = if postgres {
        let rest = pending
            .iter()
            .map(|(_, id)| *id)
            .filter(|id| id % 16 != 9 && !ids.contains(id))
            .take(7);
        lane9.into_iter().chain(rest).collect()
    } else {
        pending
            .iter()
            .map(|(_, id)| *id)
            .filter(|id| !ids.contains(id))
            .take(limit as usize)
            .collect()
    };
    want.sort_unstable();
    assert_eq!(
        got, want,
        "all of lane 9, then the seven oldest of the rest"
    );
}
on_both_engines!(
    a_spread_claim_takes_its_lanes_oldest_then_the_oldest_of_the_rest_,
    a_spread_claim_takes_its_lanes_oldest_then_the_oldest_of_the_rest
);

async fn claim(store: &Store, at: Timestamp) -> Vec<Claimed> {
    queue::claim_due(store, at, 1, queue::DEFAULT_LEASE)
        .await
        .unwrap()
}

async fn a_lapsed_lease_is_claimed_again_and_only_the_new_token_settles(url: &str) {
    let (store, _) = pending_deliveries(url).await;
    let first = claim(&store, now()).await.remove(0);
    assert_eq!(first.attempts, 1);
    // Held: the next claim takes the next delivery, not this one.
    let other = claim(&store, now() + SignedDuration::from_secs(30))
        .await
        .remove(0);
    assert_ne!(other.id, first.id);
    // The lease lapses: the oldest due delivery is first's, claimed again with a newer token.
    let again = claim(
        &store,
        now() + queue::DEFAULT_LEASE + SignedDuration::from_secs(1),
    )
    .await
    .remove(0);
    assert_eq!((again.id, again.attempts), (first.id, 2));
    assert!(again.token > first.token);
    let later = now() + SignedDuration::from_mins(2);
    assert!(
        !queue::settle(&store, &first, &Settlement::Sent, later)
            .await
            .unwrap(),
        "the stale claim settles nothing"
    );
    let retry = Settlement::Retry {
        at: later + SignedDuration::from_mins(5),
        reason: "503 from the destination".into(),
    };
    assert!(queue::settle(&store, &again, &retry, later).await.unwrap());
    // Not due before its retry time; due after.
    let before = queue::claim_due(
        &store,
        later + SignedDuration::from_mins(4),
        10_000,
        queue::DEFAULT_LEASE,
    )
    .await
    .unwrap();
    assert!(before.iter().all(|c| c.id != first.id));
    let after = queue::claim_due(
        &store,
        later + SignedDuration::from_mins(6),
        10_000,
        queue::DEFAULT_LEASE,
    )
    .await
    .unwrap()
    .into_iter()
    .find(|c| c.id == first.id)
    .expect("due again after its retry time");
    assert_eq!(after.attempts, 3);
    assert!(
        queue::settle(
            &store,
            &after,
            &Settlement::Sent,
            later + SignedDuration::from_mins(6)
        )
        .await
        .unwrap()
    );
}
on_both_engines!(
    a_lapsed_lease_is_claimed_again_and_only_the_new_token_settles_,
    a_lapsed_lease_is_claimed_again_and_only_the_new_token_settles
);

async fn failed_deliveries_can_be_retried_and_finished_ones_pruned_without_touching_the_ledger(
    url: &str,
) {
    let (store, pending) = pending_deliveries(url).await;
    let first = claim(&store, now()).await.remove(0);
    let failed = Settlement::Terminal {
        status: DeliveryStatus::Failed,
        reason: "400: bad request".into(),
    };
    assert!(queue::settle(&store, &first, &failed, now()).await.unwrap());
    rowfire::outbox::retry(&store, WS, first.id, now())
        .await
        .unwrap();
    let again = claim(&store, now() + SignedDuration::from_secs(1))
        .await
        .remove(0);
    assert_eq!(
        (again.id, again.attempts),
        (first.id, 2),
        "the same id, due again"
    );
    let sent = queue::Settled {
        claimed: again.clone(),
        outcome: Settlement::Sent,
        attempt: Some(queue::Attempt {
            started_at: now(),
            latency_ms: 7,
            status_code: Some(200),
            error_class: None,
            response: None,
        }),
        at: now(),
    };
    assert_eq!(queue::settle_many(&store, &[sent]).await.unwrap(), [true]);
    assert_eq!(
        queue::attempts(&store, WS, first.id).await.unwrap().len(),
        1
    );
    let err = rowfire::outbox::retry(&store, WS, first.id, now())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("only failed or dead deliveries can be retried"),
        "{err}"
    );

    let fires_before = fire_count(&store).await;
    let pruned =
        rowfire::send::queue::prune(&store, WS, now() + SignedDuration::from_hours(24 * 365))
            .await
            .unwrap();
    assert_eq!(pruned, 1, "only the sent delivery was finished");
    assert!(
        queue::attempts(&store, WS, first.id)
            .await
            .unwrap()
            .is_empty(),
        "a pruned delivery's attempts go with it"
    );
    // Only declined_charge was rewound, so every delivery came from the three live rules and
    // was pending; all but the one sent are still there.
    assert_eq!(
        delivery_count(&store).await,
        pending - 1,
        "pending deliveries are kept"
    );
    assert_eq!(
        fire_count(&store).await,
        fires_before,
        "the ledger is never pruned"
    );
}
on_both_engines!(
    failed_deliveries_can_be_retried_and_finished_ones_pruned_without_touching_the_ledger_,
    failed_deliveries_can_be_retried_and_finished_ones_pruned_without_touching_the_ledger
);

async fn delivery_count(store: &Store) -> usize {
    let mut tx = store.begin(WS).await.unwrap();
    let all = rowfire::outbox::list(&mut tx, WS, &Default::default())
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    all.len()
}

async fn fire_count(store: &Store) -> usize {
    let mut tx = store.begin(WS).await.unwrap();
    let mut n = 0;
    for rule in ["billing_ticket", "billing_heads_up", "third_failed_payment"] {
        n += rowfire::ledger::fires(&mut tx, WS, rule, None)
            .await
            .unwrap()
            .len();
    }
    tx.rollback().await.unwrap();
    n
}

/// As production runs it: the control plane's non-superuser owner, bound by forced row-level
/// security, claiming under the bypass (whose policy the planner must not misjudge into a scan).
#[tokio::test]
async fn the_claim_reads_the_partial_index_however_many_deliveries_were_sent() {
    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    let (store, pending) = pending_deliveries(&pg.owner_url().await).await;
    // 200,000 finished deliveries beside a few pending ones.
    let mut c = pg.admin().await;
    sqlx::raw_sql(
        "UPDATE delivery SET status = 'sent' WHERE id NOT IN (SELECT id FROM delivery ORDER BY id LIMIT 5);
         INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, status, due_at, created_at)
         SELECT d.workspace_id, d.fire_id, d.rule_name, d.mode, 1000 + g, d.integration, d.action, 'sent', d.due_at, d.created_at
         FROM (SELECT * FROM delivery ORDER BY id LIMIT 1) d, generate_series(1, 200000) g;
         ANALYZE delivery;",
    )
    .execute(&mut c)
    .await
    .unwrap();
    assert!(pending > 5);
    let plan = queue::explain_claim(&store, now())
        .await
        .unwrap()
        .join("\n");
    assert!(plan.contains("Index Scan using delivery_due"), "{plan}");
    assert!(!plan.contains("Sort"), "{plan}");
    assert!(!plan.contains("Seq Scan on delivery"), "{plan}");
    let claimed = queue::claim_due(&store, now(), 200, queue::DEFAULT_LEASE)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 5);
}

/// A large backlog, all due, claimed under the bypass by the bound owner: the policy's bypass
/// flag must not be misjudged so rare that the planner scans and sorts the whole table.
#[tokio::test]
async fn under_the_bypass_the_claim_of_a_large_due_backlog_reads_the_partial_index() {
    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    let (store, _) = pending_deliveries(&pg.owner_url().await).await;
    let mut c = pg.admin().await;
    sqlx::raw_sql(
        "INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, status, due_at, created_at)
         SELECT d.workspace_id, d.fire_id, d.rule_name, d.mode, 1000 + g, d.integration, d.action, 'pending', d.due_at, d.created_at
         FROM (SELECT * FROM delivery ORDER BY id LIMIT 1) d, generate_series(1, 50000) g;
         ANALYZE delivery;",
    )
    .execute(&mut c)
    .await
    .unwrap();
    let plan = queue::explain_claim(&store, now())
        .await
        .unwrap()
        .join("\n");
    assert!(plan.contains("Index Scan using delivery_lane"), "{plan}");
    assert!(plan.contains("Index Scan using delivery_due"), "{plan}");
    assert!(!plan.contains("Sort"), "{plan}");
    assert!(!plan.contains("Seq Scan on delivery"), "{plan}");
}

async fn a_replayed_settle_changes_nothing_and_records_the_attempt_once(url: &str) {
    let (store, _) = pending_deliveries(url).await;
    let first = claim(&store, now()).await.remove(0);
    let settled = queue::Settled {
        claimed: first.clone(),
        outcome: Settlement::Retry {
            at: now() + SignedDuration::from_secs(5),
            reason: "503".into(),
        },
        attempt: Some(queue::Attempt {
            started_at: now(),
            latency_ms: 12,
            status_code: Some(503),
            error_class: Some(ErrorClass::HttpStatus),
            response: Some("busy".into()),
        }),
        at: now(),
    };
    let batch = [settled];
    assert_eq!(queue::settle_many(&store, &batch).await.unwrap(), [true]);
    // The commit's acknowledgement was lost and the settle is replayed: nothing changes twice.
    assert_eq!(queue::settle_many(&store, &batch).await.unwrap(), [false]);
    let attempts = queue::attempts(&store, WS, first.id).await.unwrap();
    assert_eq!(attempts.len(), 1);
    let again = queue::claim_due(
        &store,
        now() + SignedDuration::from_secs(6),
        10_000,
        queue::DEFAULT_LEASE,
    )
    .await
    .unwrap()
    .into_iter()
    .find(|c| c.id == first.id);
    assert_eq!(again.map(|c| c.attempts), Some(2));
}
on_both_engines!(
    a_replayed_settle_changes_nothing_and_records_the_attempt_once_,
    a_replayed_settle_changes_nothing_and_records_the_attempt_once
);

/// A settle is held to the workspace it names: one that names another workspace for a
/// delivery, even one that exists, changes nothing and records no attempt (attempts have no
/// foreign key; the statement that records them joins the delivery in the workspace), and the
/// delivery's own settle still takes effect after it.
async fn an_attempt_cannot_be_recorded_under_another_workspace_than_its_deliverys(url: &str) {
    let (store, _) = pending_deliveries(url).await;
    let other = rowfire::store::WorkspaceId::parse("other").unwrap();
    rowfire::store::workspace::create(&store, &other, "Other", "UTC")
        .await
        .unwrap();
    let claimed = claim(&store, now()).await.remove(0);
    let settled = |workspace: &rowfire::store::WorkspaceId| queue::Settled {
        claimed: Claimed {
            workspace: workspace.clone(),
            ..claimed.clone()
        },
        outcome: Settlement::Sent,
        attempt: Some(queue::Attempt {
            started_at: now(),
            latency_ms: 3,
            status_code: Some(200),
            error_class: None,
            response: None,
        }),
        at: now(),
    };
    assert_eq!(
        queue::settle_many(&store, &[settled(&other)])
            .await
            .unwrap(),
        [false]
    );
    assert!(
        queue::attempts(&store, &other, claimed.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        queue::attempts(&store, WS, claimed.id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        queue::settle_many(&store, &[settled(WS)]).await.unwrap(),
        [true]
    );
    assert_eq!(
        queue::attempts(&store, WS, claimed.id).await.unwrap().len(),
        1
    );
}
on_both_engines!(
    an_attempt_cannot_be_recorded_under_another_workspace_than_its_deliverys_,
    an_attempt_cannot_be_recorded_under_another_workspace_than_its_deliverys
);
