//! Many workers racing at one row: the claim is one statement, so exactly one fires.

use std::sync::Arc;

use rowfire::definitions;
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::ledger::{self, Claim};
use rowfire::row::{Row, Value};
use rowfire::rules::Mode;
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, PgConnection, Row as _};
use tokio::sync::Barrier;

use crate::support::{TestPg, now};

const WORKERS: usize = 16;

fn one_new_row() -> Row {
    let columns: Arc<[String]> = ["id", "account_id", "attempted_at"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    Row {
        columns,
        values: vec![
            Value::Int(1),
            Value::Text("acct_race".into()),
            Value::Timestamp(now()),
        ],
        clock: Some(now()),
    }
}

#[tokio::test]
async fn sixteen_workers_racing_at_one_new_row_make_exactly_one_fire() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    // The racers connect as the database's owner, bound by row-level security, as production
    // runs; the tally below reads as the superuser, who sees every row.
    let owner = pg.owner_url().await;
    Store::open(&owner).await.unwrap().migrate().await.unwrap();
    let defs = Arc::new(definitions::parse(SAMPLE_DEFINITIONS).unwrap());
    let barrier = Arc::new(Barrier::new(WORKERS));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (url, defs, barrier) = (owner.clone(), defs.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            // A store of its own: its own connections, like a separate worker process.
            let store = Store::open(&url).await.unwrap();
            let (rule, trigger) = defs.rule_and_trigger("billing_ticket").unwrap();
            let rows = [one_new_row()];
            let mut tx = store.begin(WS).await.unwrap();
            barrier.wait().await;
            let claim = Claim {
                workspace: WS,
                rule,
                trigger,
                mode: Mode::Live,
                run_id: None,
                now: now(),
            };
            let claimed = ledger::claim(&mut tx, claim, &rows).await.unwrap();
            tx.commit().await.unwrap();
            claimed.fires.len()
        }));
    }
    let mut fired = 0;
    for t in tasks {
        fired += t.await.unwrap();
    }
    assert_eq!(fired, 1, "exactly one worker's claim inserted the fire");
    let mut c = PgConnection::connect(&pg.url).await.unwrap();
    let stored: i64 = sqlx::query("SELECT count(*) FROM fire")
        .fetch_one(&mut c)
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, 1);
}

/// The claim Rowfire does not use: look first, then insert. Every worker that looks before the
/// first commit decides to send. This is why the claim is one statement.
#[tokio::test]
async fn the_same_race_with_a_select_then_insert_claim_sends_more_than_once() {
    let Some(pg) = TestPg::new().await else {
        return;
    };
    let mut setup = PgConnection::connect(&pg.url).await.unwrap();
    sqlx::raw_sql("CREATE TABLE naive_fire (dedup_key text, dedup_bucket text)")
        .execute(&mut setup)
        .await
        .unwrap();
    let barrier = Arc::new(Barrier::new(WORKERS));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (url, barrier) = (pg.url.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = PgConnection::connect(&url).await.unwrap();
            let mut tx = c.begin().await.unwrap();
            barrier.wait().await;
            let seen: i64 = sqlx::query("SELECT count(*) FROM naive_fire WHERE dedup_key = '[\"acct_race\"]' AND dedup_bucket = '2026-11-23'")
                .fetch_one(&mut *tx)
                .await
                .unwrap()
                .get(0);
            // The time between looking and writing: rendering, a network call, a scheduler pause.
            sqlx::query("SELECT pg_sleep(0.2)").execute(&mut *tx).await.unwrap();
            if seen == 0 {
                sqlx::query("INSERT INTO naive_fire VALUES ('[\"acct_race\"]', '2026-11-23')").execute(&mut *tx).await.unwrap();
            }
            tx.commit().await.unwrap();
            usize::from(seen == 0)
        }));
    }
    let mut would_send = 0;
    for t in tasks {
        would_send += t.await.unwrap();
    }
    assert!(
        would_send > 1,
        "only {would_send} worker(s) would have sent"
    );
}
