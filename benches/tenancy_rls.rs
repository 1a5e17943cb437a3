//! Fires per second and deliveries per second on a PostgreSQL control plane with row-level
//! security on and off, in the same run:
//!
//! - *fires*: the real poller (`Poller::poll_due`, batched claims) polls 100,000 matching rows of a
//!   PostgreSQL source into an empty ledger for one `once_ever` rule with no actions;
//! - *deliveries*: the real sender (`Sender::drain`, 4 workers, each its own connection pool and
//!   HTTP client) drains 50,000 due deliveries to a receiver on 127.0.0.1 that answers 200 at
//!   once; the fires and deliveries are seeded with SQL and `ANALYZE`d first, not timed. Before
//!   each drain it prints whether the planner's custom plan for the delivery claim (the plan the
//!   first executions of the prepared claim get on every connection) reads the partial index over
//!   pending deliveries in order, or scans and sorts the whole backlog.
//!
//! Every round runs on a fresh control plane created, migrated and used by one role that owns the
//! database and its tables and is neither a superuser nor `BYPASSRLS`, the way production runs.
//! *On*, the tables are as the migrations leave them: row-level security enabled and forced, so
//! the policy `rowfire_admits(workspace_id)` binds every statement of that owner. *Off*, the same
//! role then runs `ALTER TABLE … NO FORCE ROW LEVEL SECURITY` on every tenant table, so as their
//! owner it skips the policies and nothing else changes: the same role, connections, privileges,
//! schema, indexes and statements, including the `set_config` that scopes every transaction.
//! (A superuser would skip the policies too, but would also change the role and its privilege
//! checks.) Each round checks which side it is on twice, by flags and by behaviour:
//! `store::tenancy::check` must say `Enforced` on and name every tenant table as not forced off,
//! and a transaction scoped to a workspace that owns nothing must count 0 of the round's fires or
//! deliveries on and all of them off.
//!
//! Rounds come in pairs, off then on, then on then off, and so on (five of each side), so the
//! machine's noise and any drift over the run fall on both sides alike. It prints every round,
//! the median of each side and the ratio on / off, and checks every round for lost and duplicate
//! fires (a distinct (rule, mode, key, bucket) per row) and deliveries (each marked sent, received
//! exactly once by `webhook-id`, one attempt recorded, nothing received that is not sent). It
//! fails if anything is lost or duplicated, a side is not what it claims, or the median ratio on /
//! off of either measure is below 0.90.
//!
//! Run: `cargo bench --bench tenancy_rls` (PostgreSQL on 127.0.0.1:5432, or set
//! ROWFIRE_BENCH_PG naming a superuser, which creates the owner role `rowfire_bench_rls_owner`).

// The pollers' and senders' futures nest deeper than the compiler's default query depth allows
// when a fresh build lays them out.
#![recursion_limit = "256"]
#![expect(
    clippy::disallowed_methods,
    reason = "the senders run on the system clock, and the deliveries they drain are due at its now"
)]

mod support;

use support::receiver::Receiver;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use base64::Engine as _;
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::poll::{self, ClaimStyle, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::secret::{self, MasterKey};
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::queue;
use rowfire::send::sender::{Config, SendReport, Sender};
use rowfire::store::tenancy::{self, Isolation};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

const ROWS: i64 = 100_000;
const DELIVERIES: i64 = 50_000;
const SENDERS: usize = 4;
const ROUNDS: usize = 5;
const OWNER: &str = "rowfire_bench_rls_owner";
const CONTROL_PLANE: &str = "rowfire_bench_rls_cp";
const SOURCE: &str = "rowfire_bench_rls_source";
/// A workspace that owns no row: a transaction scoped to it must see nothing when RLS binds.
const NOBODY: &str = "rowfire_bench_nobody";
const FLOOR: f64 = 0.90;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Off,
    On,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Off => "off",
            Side::On => "on",
        }
    }
}

/// off, on, on, off, off, on, …: `ROUNDS` of each, each pair starting with the other side.
fn order() -> Vec<Side> {
    (0..ROUNDS)
        .flat_map(|pair| {
            if pair % 2 == 0 {
                [Side::Off, Side::On]
            } else {
                [Side::On, Side::Off]
            }
        })
        .collect()
}

/// A fresh control plane owned by [`OWNER`] and migrated as it, with forced row-level security
/// left on or turned off for the owner (`NO FORCE`); checks which it is by flags. Returns the
/// superuser's URL of the database (for seeding and counting, unbound) and the owner's store.
async fn control_plane(admin: &str, side: Side) -> (String, String, Store) {
    let (admin_db, owner_url) = support::fresh_owned_database(admin, CONTROL_PLANE, OWNER).await;
    let store = Store::open(&owner_url).await.unwrap();
    store.migrate().await.unwrap();
    if side == Side::Off {
        let mut c = PgConnection::connect(&owner_url).await.unwrap();
        let forced: Vec<String> = sqlx::query(
            "SELECT c.relname::text FROM pg_catalog.pg_class c
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = current_schema() AND c.relforcerowsecurity ORDER BY 1",
        )
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
        assert!(!forced.is_empty(), "migration 8 forced no table");
        for table in &forced {
            sqlx::raw_sql(AssertSqlSafe(format!(
                "ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY"
            )))
            .execute(&mut c)
            .await
            .unwrap();
        }
    }
    let isolation = tenancy::check(&store).await.unwrap();
    match (side, &isolation) {
        (Side::On, Isolation::Enforced) => {}
        (Side::Off, Isolation::Unforced { tables })
            if tables.iter().any(|t| t == "fire") && tables.iter().any(|t| t == "delivery") => {}
        _ => panic!(
            "RLS {} but the isolation check says {isolation:?}",
            side.name()
        ),
    }
    (admin_db, owner_url, store)
}

/// Rows of `table` the owner sees in a transaction scoped to a workspace that owns nothing.
async fn seen_by_nobody(owner_url: &str, table: &str) -> i64 {
    let mut c = PgConnection::connect(owner_url).await.unwrap();
    let mut tx = c.begin().await.unwrap();
    sqlx::query("SELECT set_config('app.workspace_id', $1, true), set_config('app.bypass_rls', 'off', true)")
        .bind(NOBODY)
        .execute(&mut *tx)
        .await
        .unwrap();
    let n: i64 = sqlx::query(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    tx.rollback().await.unwrap();
    n
}

/// Whether the scoped count is what `side` must show (0 on, everything off); prints it.
fn binds_as_claimed(side: Side, seen: i64, all: i64) -> bool {
    let ok = match side {
        Side::On => seen == 0,
        Side::Off => seen == all,
    };
    println!(
        "    isolation: {}; scoped to a workspace that owns nothing, the owner sees {seen} of {all}{}",
        match side {
            Side::On => "enforced (forced RLS binds the owner)",
            Side::Off => "every tenant table NO FORCE (the owner skips the policies)",
        },
        if ok { "" } else { " — WRONG SIDE" }
    );
    ok
}

async fn source_data(admin: &str, now: Timestamp) -> String {
    let url = support::fresh_database(admin, SOURCE).await;
    let mut c = PgConnection::connect(&url).await.unwrap();
    let sql = format!(
        "CREATE TABLE events (id bigint PRIMARY KEY, account_id text NOT NULL, happened_at timestamptz NOT NULL);
         INSERT INTO events SELECT g, 'acct_' || g, TIMESTAMPTZ '{now}' - (g * interval '500 milliseconds') FROM generate_series(1::bigint, {ROWS}) g;
         CREATE INDEX events_happened_at ON events (happened_at);
         ANALYZE;"
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
    url
}

const FIRE_DEFINITIONS: &str = "version: 2
source: { dsn_env: BENCH_SOURCE, max_rows: 10000 }
triggers:
  events: { sql: \"SELECT id, account_id, happened_at FROM events\", event_time: happened_at, key: [account_id] }
rules:
  events_once: { trigger: events, policy: once_ever }
";

/// One round of fires: seconds, and whether every check held.
async fn fires_round(admin: &str, side: Side, source: &str, now: Timestamp) -> (f64, bool) {
    let (admin_db, owner_url, store) = control_plane(admin, side).await;
    push::push(&store, WS, FIRE_DEFINITIONS, now).await.unwrap();
    for t in poll::list(&store, WS).await.unwrap() {
        poll::rewind(&store, WS, &t.trigger, SignedDuration::from_hours(24), now)
            .await
            .unwrap();
    }
    let source = source.to_string();
    let poller = Poller::new(
        store,
        "rls-bench",
        Clock::fixed(now),
        Arc::new(move |_, _| Some(source.clone().into())),
    )
    .with_claim_style(ClaimStyle::Batched);
    let started = Instant::now();
    let reports = poller.poll_due().await.unwrap();
    let secs = started.elapsed().as_secs_f64();
    for report in &reports {
        assert!(matches!(report.status, poll::PollStatus::Ok), "{report}");
    }
    let mut c = PgConnection::connect(&admin_db).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*), count(DISTINCT (rule_name, mode, dedup_key, dedup_bucket)) FROM fire",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let (fires, distinct): (i64, i64) = (row.get(0), row.get(1));
    let (lost, duplicates) = (ROWS - distinct, fires - distinct);
    println!(
        "{:<3} fires: {fires:>7} in {secs:>6.2} s = {:>8.0} fires/s, lost {lost}, duplicates {duplicates}",
        side.name(),
        fires as f64 / secs
    );
    let bound = binds_as_claimed(side, seen_by_nobody(&owner_url, "fire").await, fires);
    (secs, lost == 0 && duplicates == 0 && bound)
}

/// A control plane with the rule live, the signing secret stored and [`DELIVERIES`] fires with
/// one delivery each, all due now (seeded as the superuser, then `ANALYZE`).
async fn queued(
    admin: &str,
    side: Side,
    receiver: &Receiver,
    key: &str,
) -> (String, String, Store) {
    let (admin_db, owner_url, store) = control_plane(admin, side).await;
    let now = Timestamp::now();
    push::push(
        &store,
        WS,
        &support::receiver::definitions(&receiver.url),
        now,
    )
    .await
    .unwrap();
    rules::set_mode(&store, WS, "welcome", Mode::Live, now)
        .await
        .unwrap();
    let signing_secret = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"rowfire-bench-signing-secret-012")
    );
    let master = MasterKey::parse(key).unwrap();
    secret::put(
        &store,
        &master,
        WS,
        "integration:hooks",
        "signing_secret",
        &signing_secret,
        now,
    )
    .await
    .unwrap();
    let mut c = PgConnection::connect(&admin_db).await.unwrap();
    let sql = format!(
        "INSERT INTO fire (workspace_id, rule_name, mode, dedup_key, dedup_bucket, trigger_name, clock, row_json, fired_at)
         SELECT '{WS}', 'welcome', 'live', 'u' || g, 'ever', 'signups', TIMESTAMPTZ '{now}', '{{\"id\":\"u' || g || '\"}}', TIMESTAMPTZ '{now}'
         FROM generate_series(1::bigint, {DELIVERIES}) g;
         INSERT INTO delivery (workspace_id, fire_id, rule_name, mode, binding, integration, action, method, url, headers, body, status, due_at, created_at)
         SELECT workspace_id, id, rule_name, mode, 0, 'hooks', 'send', 'POST', '{}/hooks', '{{}}',
                json_build_object('type', 'user.signed_up', 'data', json_build_object('key', dedup_key, 'fire', id))::text,
                'pending', TIMESTAMPTZ '{now}', TIMESTAMPTZ '{now}'
         FROM fire ORDER BY id;
         ANALYZE;",
        receiver.url
    );
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut c)
        .await
        .unwrap();
    (admin_db, owner_url, store)
}

/// How the planner would run the delivery claim now (a custom plan, as each connection's first
/// executions of the prepared claim get): through the partial index over pending deliveries, or
/// not.
async fn claim_plan(store: &Store) -> String {
    let plan = queue::explain_claim(store, Timestamp::now()).await.unwrap();
    let index = ["delivery_lane", "delivery_due"].iter().all(|index| {
        plan.iter()
            .any(|l| l.contains(&format!("Index Scan using {index}")))
    });
    let sorted = plan.iter().any(|l| l.trim_start().starts_with("->  Sort"));
    match (index, sorted) {
        (true, false) => "reads the indexes delivery_lane and delivery_due in order".to_string(),
        _ => format!(
            "does not read delivery_lane and delivery_due in order: {}",
            plan.iter()
                .map(|l| l.trim().trim_start_matches("->  "))
                .filter(|l| l.starts_with("Sort  (") || l.contains("Scan on delivery delivery_1"))
                .map(|l| l.split("  (").next().unwrap_or(l))
                .collect::<Vec<_>>()
                .join(" under ")
        ),
    }
}

/// One round of deliveries: seconds, and whether every check held.
async fn deliveries_round(admin: &str, side: Side, receiver: &Receiver, key: &str) -> (f64, bool) {
    let (admin_db, owner_url, store) = queued(admin, side, receiver, key).await;
    let plan = claim_plan(&store).await;
    let mut senders = Vec::new();
    for _ in 0..SENDERS {
        senders.push(Arc::new(Sender::new(
            Store::open(&owner_url).await.unwrap(),
            Client::new(Policy::parse("127.0.0.1", false).unwrap()),
            Clock::system(),
            Ok(MasterKey::parse(key).unwrap()),
            Config::default(),
        )));
    }
    let started = Instant::now();
    let tasks: Vec<_> = senders
        .into_iter()
        .map(|s| tokio::spawn(async move { s.drain().await.unwrap() }))
        .collect();
    let mut total = SendReport::default();
    for t in tasks {
        let r = t.await.unwrap();
        total.sent += r.sent;
        total.stale += r.stale;
        total.finished_unsent += r.finished_unsent;
    }
    let secs = started.elapsed().as_secs_f64();

    let mut c = PgConnection::connect(&admin_db).await.unwrap();
    let row = sqlx::query(
        "SELECT count(*) FILTER (WHERE status = 'sent'), (SELECT count(*) FROM delivery_attempt) FROM delivery",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let (sent, attempts): (i64, i64) = (row.get(0), row.get(1));
    let ids: HashSet<i64> = sqlx::query("SELECT id FROM delivery WHERE status = 'sent'")
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let tally = receiver.take();
    let lost = DELIVERIES - tally.by_id.keys().filter(|id| ids.contains(id)).count() as i64;
    let duplicates: u64 = tally.by_id.values().map(|n| u64::from(n - 1)).sum();
    let strangers =
        tally.by_id.keys().filter(|id| !ids.contains(id)).count() as u64 + tally.without_id;
    println!(
        "{:<3} deliveries: {sent:>6} sent in {secs:>6.2} s = {:>8.0} deliveries/s, lost {lost}, duplicates {duplicates}, received but not sent {strangers}, attempts {attempts} (stale settles {}, unsent {})",
        side.name(),
        DELIVERIES as f64 / secs,
        total.stale,
        total.finished_unsent
    );
    println!("    the claim's custom plan before the drain {plan}");
    let bound = binds_as_claimed(side, seen_by_nobody(&owner_url, "delivery").await, sent);
    let ok = sent == DELIVERIES
        && attempts == DELIVERIES
        && lost == 0
        && duplicates == 0
        && strangers == 0
        && bound;
    (secs, ok)
}

/// Prints each side's median rate and the ratio on / off; whether the ratio is at least [`FLOOR`].
fn verdict(what: &str, n: i64, secs: &[(Side, f64)]) -> bool {
    let rates = |side: Side| -> Vec<f64> {
        secs.iter()
            .filter(|(s, _)| *s == side)
            .map(|(_, t)| n as f64 / t)
            .collect()
    };
    let list = |xs: &[f64]| {
        xs.iter()
            .map(|r| format!("{r:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (off, on) = (rates(Side::Off), rates(Side::On));
    let (m_off, m_on) = (support::median(&off), support::median(&on));
    let ratio = m_on / m_off;
    println!("{what}/s  off: {} (median {m_off:.0})", list(&off));
    println!("{what}/s  on:  {} (median {m_on:.0})", list(&on));
    println!(
        "{what}/s  ratio on / off of the medians: {ratio:.3} (needs >= {FLOOR:.2}): {}",
        if ratio >= FLOOR { "met" } else { "MISSED" }
    );
    ratio >= FLOOR
}

#[tokio::main]
async fn main() {
    support::init_logging();
    let admin = support::admin_url();
    let now: Timestamp = "2026-11-29T00:00:00Z".parse().unwrap();
    let key = MasterKey::generate();
    let receiver = Receiver::start();
    let source = source_data(&admin, now).await;
    let config = Config::default();
    println!(
        "method: every round on a fresh PostgreSQL control plane on this machine, created, migrated and used by the non-superuser, non-BYPASSRLS owner role {OWNER}; RLS on = tables as the migrations leave them (enabled and forced, so the policies bind the owner), RLS off = the same role after ALTER TABLE … NO FORCE ROW LEVEL SECURITY on every tenant table (the owner skips the policies); each side checked by store::tenancy::check and by a count scoped to a workspace that owns nothing; rounds alternate off/on in pairs (off on, on off, …), {ROUNDS} of each side"
    );
    println!(
        "fires: the real poller, batched claims, {ROWS} matching rows of a PostgreSQL source into an empty ledger, one once_ever rule with no actions, pages of 10,000"
    );
    println!(
        "deliveries: the real sender, {SENDERS} workers (each its own pool and HTTP client; batches of {}, {} in flight), {DELIVERIES} due deliveries (seeded with SQL, then ANALYZE, not timed) to a receiver on 127.0.0.1 answering 200 at once",
        config.batch, config.in_flight
    );
    let mut ok = true;

    let mut fires = Vec::new();
    for side in order() {
        let (secs, checked) = fires_round(&admin, side, &source, now).await;
        ok &= checked;
        fires.push((side, secs));
    }
    let mut deliveries = Vec::new();
    for side in order() {
        let (secs, checked) = deliveries_round(&admin, side, &receiver, &key).await;
        ok &= checked;
        deliveries.push((side, secs));
    }
    let fires_met = verdict("fires", ROWS, &fires);
    let deliveries_met = verdict("deliveries", DELIVERIES, &deliveries);
    if !(ok && fires_met && deliveries_met) {
        eprintln!(
            "FAIL: RLS on is more than 10% slower than off, or a fire or delivery was lost or duplicated, or a side was not what it claimed"
        );
        std::process::exit(1);
    }
}
