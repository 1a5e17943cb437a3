//! Sending, end to end: fires polled from a real source, deliveries sent by the sender through
//! the egress-checked client to a local receiver on 127.0.0.1 that replies with scripted statuses.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use jiff::{SignedDuration, Timestamp};
use rowfire::clock::Clock;
use rowfire::outbox::{self, Filter};
use rowfire::poll::{self, Poller};
use rowfire::push;
use rowfire::rules::{self, Mode};
use rowfire::secret::{self, MasterKey};
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::queue;
use rowfire::send::sender::{self, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, SqliteConnection};

use crate::receiver::{Receiver, Reply};
use crate::support::{TestSqlite, now};
use rowfire::outbox::DeliveryStatus;
use rowfire::send::queue::ErrorClass;

/// The webhook signing secret every test sets.
pub fn signing_secret() -> String {
    format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"rowfire-test-signing-secret-0123")
    )
}

/// A live rule over a `signup` table, whose one action posts a signed webhook to the receiver.
pub struct Setup {
    pub store: Store,
    pub clock: Clock,
    pub receiver: Receiver,
    pub sender: Sender,
    pub poller: Poller,
    pub source: TestSqlite,
    control_plane: Option<TestSqlite>,
}

/// What a test varies: extra rule keys, extra keys of the `hooks` integration (or, at two
/// spaces, further integrations), extra binding keys (or further bindings), the egress policy.
pub struct Options {
    pub rule: &'static str,
    pub integration: String,
    pub allow: &'static str,
    /// Extra keys of the rule's binding (indented by eight spaces).
    pub binding: &'static str,
    /// Deliveries per claim (1 makes each claim see the previous send's outcome).
    pub batch: i64,
    /// Requests in flight at once.
    pub in_flight: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            rule: "",
            integration: String::new(),
            allow: "127.0.0.1",
            binding: "",
            batch: queue::DEFAULT_BATCH,
            in_flight: sender::Config::default().in_flight,
        }
    }
}

/// Inserts signups `ids` a few minutes before `at`.
pub async fn add_signups(source: &TestSqlite, ids: std::ops::Range<u32>, at: Timestamp) {
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", source.url))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE IF NOT EXISTS signup (id TEXT, email TEXT, at TEXT)")
        .execute(&mut c)
        .await
        .unwrap();
    let mut tx = c.begin().await.unwrap();
    for id in ids {
        sqlx::query("INSERT INTO signup VALUES (?1, ?2, ?3)")
            .bind(format!("u{id:05}"))
            .bind(format!("u{id}@example.com"))
            .bind((at - SignedDuration::from_mins(5)).to_string())
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
}

/// The definitions of the setup, pointing at `receiver`.
pub fn definitions(receiver: &str, opts: &Options) -> String {
    format!(
        "version: 2
source: {{ type: sqlite, dsn_env: SIGNUPS_URL }}
integrations:
  hooks:
    catalog: webhook
    base_url: {receiver}/hooks
    timeout_ms: 500
{integration}triggers:
  signups:
    sql: SELECT id, email, at FROM signup
    event_time: at
    key: [id]
rules:
  welcome:
    trigger: signups
    policy: once_ever
{rule}    actions:
      - action: hooks.send
        params: {{ event_type: user.signed_up }}
{binding}",
        integration = opts.integration,
        rule = opts.rule,
        binding = opts.binding,
    )
}

/// Pushes the definitions to `store`, makes the rule live, rewinds the trigger an hour before
/// `at` and stores the signing secret under a new master key, whose text it returns.
pub async fn prepare(store: &Store, receiver: &str, opts: &Options, at: Timestamp) -> String {
    push::push(store, WS, &definitions(receiver, opts), at)
        .await
        .unwrap();
    rules::set_mode(store, WS, "welcome", Mode::Live, at)
        .await
        .unwrap();
    poll::rewind(store, WS, "signups", SignedDuration::from_hours(1), at)
        .await
        .unwrap();
    let key_text = MasterKey::generate();
    let key = MasterKey::parse(&key_text).unwrap();
    secret::put(
        store,
        &key,
        WS,
        "integration:hooks",
        "signing_secret",
        &signing_secret(),
        at,
    )
    .await
    .unwrap();
    key_text
}

impl Setup {
    /// `rows` signups, polled into live fires whose deliveries wait in the queue.
    pub async fn new(control_plane: &str, rows: u32, opts: Options) -> Setup {
        let receiver = Receiver::start().await;
        let source = TestSqlite::new();
        add_signups(&source, 0..rows, now()).await;
        let store = Store::open(control_plane).await.unwrap();
        store.migrate().await.unwrap();
        let key = MasterKey::parse(&prepare(&store, &receiver.url, &opts, now()).await).unwrap();
        let clock = Clock::fixed(now());
        let url = source.url.clone();
        let poller = Poller::new(
            store.clone(),
            "w",
            clock.clone(),
            Arc::new(move |_, _| Some(url.clone().into())),
        );
        let policy = Policy::parse(opts.allow, false).unwrap();
        let config = sender::Config {
            refresh: Duration::ZERO,
            batch: opts.batch,
            in_flight: opts.in_flight,
            ..sender::Config::default()
        };
        let sender = Sender::new(
            store.clone(),
            Client::new(policy),
            clock.clone(),
            Ok(key),
            config,
        );
        let reports = poller.poll_due().await.unwrap();
        assert_eq!(reports[0].fired, u64::from(rows), "{reports:?}");
        Setup {
            store,
            clock,
            receiver,
            sender,
            poller,
            source,
            control_plane: None,
        }
    }

    /// The same on a control plane of its own in a fresh SQLite file.
    pub async fn sqlite(rows: u32, opts: Options) -> Setup {
        let db = TestSqlite::new();
        let mut s = Setup::new(&db.url, rows, opts).await;
        s.control_plane = Some(db);
        s
    }

    /// Every delivery, newest first.
    pub async fn deliveries(&self) -> Vec<outbox::Delivery> {
        let mut tx = self.store.begin(WS).await.unwrap();
        outbox::list(&mut tx, WS, &Filter::default()).await.unwrap()
    }

    /// The one delivery of a one-row setup.
    pub async fn only(&self) -> outbox::Delivery {
        let all = self.deliveries().await;
        assert_eq!(all.len(), 1, "{all:?}");
        all.into_iter().next().unwrap()
    }

    /// Moves the clock and sends whatever is due by then.
    pub async fn at(&self, after: SignedDuration) -> sender::SendReport {
        self.clock.set(now() + after);
        self.sender.drain().await.unwrap()
    }
}

#[tokio::test]
async fn a_pass_claims_batch_after_batch_while_the_requests_go_until_a_claim_comes_back_short() {
    let opts = Options {
        batch: 2,
        in_flight: 1,
        ..Options::default()
    };
    let s = Setup::sqlite(37, opts).await;
    let first = s.sender.step().await.unwrap();
    assert_eq!(
        (first.claimed, first.sent),
        (32, 32),
        "one pass claims 16 full batches of 2, each while the last request of the one before is in flight"
    );
    let second = s.sender.step().await.unwrap();
    assert_eq!(
        (second.claimed, second.sent),
        (5, 5),
        "the next pass ends at the short claim (1 of 2)"
    );
    assert_eq!(s.sender.step().await.unwrap().claimed, 0);
    assert_eq!(s.receiver.count(), 37);
    assert!(
        s.deliveries()
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Sent && d.attempts == 1)
    );
}

#[tokio::test]
async fn a_pass_claims_no_further_batch_while_a_whole_batch_fits_in_flight() {
    let opts = Options {
        batch: 2,
        in_flight: 2,
        ..Options::default()
    };
    let s = Setup::sqlite(5, opts).await;
    let report = s.sender.step().await.unwrap();
    assert_eq!(
        (report.claimed, report.sent),
        (2, 2),
        "each claim sees the outcome of the batch before it"
    );
}

#[tokio::test]
async fn two_503s_then_a_200_is_sent_on_the_third_attempt_with_one_webhook_id() {
    let s = Setup::sqlite(1, Options::default()).await;
    s.receiver
        .script([Reply::status(503), Reply::status(503), Reply::status(200)]);
    s.at(SignedDuration::ZERO).await;
    assert_eq!(s.receiver.count(), 1);
    assert_eq!(s.only().await.status, DeliveryStatus::Pending);
    s.at(SignedDuration::from_secs(4)).await;
    assert_eq!(
        s.receiver.count(),
        1,
        "the 5 s retry (±10%) is not due at 4 s"
    );
    s.at(SignedDuration::from_secs(6)).await;
    assert_eq!(s.receiver.count(), 2);
    s.at(SignedDuration::from_mins(6)).await;
    let seen = s.receiver.seen();
    assert_eq!(seen.len(), 3);
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Sent, "{d:?}");
    let ids: std::collections::BTreeSet<&str> =
        seen.iter().map(|r| r.header("webhook-id")).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(*ids.first().unwrap(), d.id.to_string());
    let attempts = queue::attempts(&s.store, WS, d.id).await.unwrap();
    let codes: Vec<Option<u16>> = attempts.iter().map(|a| a.status_code).collect();
    assert_eq!(codes, [Some(503), Some(503), Some(200)]);
    assert_eq!(
        attempts.iter().map(|a| a.error_class).collect::<Vec<_>>(),
        [
            Some(ErrorClass::HttpStatus),
            Some(ErrorClass::HttpStatus),
            None
        ]
    );
    assert_eq!(
        (seen[0].method.as_str(), seen[0].path.as_str()),
        ("POST", "/hooks")
    );
    assert!(seen[0].body.contains("user.signed_up"), "{}", seen[0].body);
}

#[tokio::test]
async fn a_429_with_retry_after_2_is_not_retried_sooner_and_slows_the_whole_integration() {
    let opts = Options {
        batch: 1,
        ..Options::default()
    };
    let s = Setup::sqlite(3, opts).await;
    s.receiver
        .script([Reply::status(429).header("retry-after", "2")]);
    s.at(SignedDuration::ZERO).await;
    assert_eq!(
        s.receiver.count(),
        1,
        "after the 429 the other two deliveries are held back as well"
    );
    s.at(SignedDuration::from_millis(1_900)).await;
    assert_eq!(
        s.receiver.count(),
        1,
        "nothing goes to the integration before Retry-After"
    );
    s.at(SignedDuration::from_millis(2_100)).await;
    assert_eq!(
        s.receiver.count(),
        3,
        "after 2 s the two held back go; the one that met the 429 waits for its own retry"
    );
    s.at(SignedDuration::from_millis(4_400)).await;
    assert_eq!(
        s.receiver.count(),
        3,
        "a shorter Retry-After never cuts the schedule's 5 s (±10%)"
    );
    s.at(SignedDuration::from_secs(6)).await;
    assert_eq!(s.receiver.count(), 4);
    assert!(
        s.deliveries()
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Sent)
    );
    let seen = s.receiver.seen();
    let first = seen[0].header("webhook-id");
    assert_eq!(
        seen.iter()
            .filter(|r| r.header("webhook-id") == first)
            .count(),
        2,
        "the retry carries the first attempt's webhook-id"
    );
}

#[tokio::test]
async fn a_429_holds_back_the_deliveries_the_sender_already_claimed_for_that_integration() {
    let opts = Options {
        batch: 3,
        in_flight: 1,
        ..Options::default()
    };
    let s = Setup::sqlite(3, opts).await;
    s.receiver
        .script([Reply::status(429).header("retry-after", "2")]);
    let report = s.at(SignedDuration::ZERO).await;
    assert_eq!(
        (s.receiver.count(), report.claimed),
        (1, 3),
        "all three were claimed together, and after the 429 the two still to go waited"
    );
    let waiting: Vec<_> = s
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.attempts == 0)
        .collect();
    assert_eq!(waiting.len(), 2, "{waiting:?}");
    assert!(
        waiting.iter().all(|d| d.status == DeliveryStatus::Pending
            && d.reason
                .as_deref()
                .is_some_and(|r| r.contains("answered 429"))),
        "{waiting:?}"
    );
    s.at(SignedDuration::from_millis(2_100)).await;
    assert_eq!(s.receiver.count(), 3, "after Retry-After the two go");
}

#[tokio::test]
async fn a_400_fails_at_once_without_a_retry() {
    let s = Setup::sqlite(1, Options::default()).await;
    s.receiver
        .script([Reply::status(400).body("{\"error\":\"bad field\"}")]);
    s.at(SignedDuration::ZERO).await;
    s.at(SignedDuration::from_hours(30)).await;
    assert_eq!(s.receiver.count(), 1);
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert!(d.reason.as_deref().unwrap().starts_with("400"), "{d:?}");
}

#[tokio::test]
async fn a_410_disables_the_integration_and_its_other_deliveries_wait_until_enabled() {
    let opts = Options {
        batch: 1,
        ..Options::default()
    };
    let s = Setup::sqlite(5, opts).await;
    s.receiver.script([Reply::status(410)]);
    s.at(SignedDuration::ZERO).await;
    s.at(SignedDuration::from_hours(48)).await;
    assert_eq!(
        s.receiver.count(),
        1,
        "nothing more goes to a disabled integration"
    );
    let states = rowfire::integrations::states(&s.store, WS).await.unwrap();
    assert!(states[0].disabled_at.is_some(), "{states:?}");
    let all = s.deliveries().await;
    assert_eq!(all.len(), 5);
    assert!(
        all.iter().all(|d| d.status == DeliveryStatus::Pending),
        "every delivery waits, unlost: {all:?}"
    );
    assert!(
        rowfire::integrations::enable(&s.store, WS, "hooks")
            .await
            .unwrap()
    );
    s.at(SignedDuration::from_hours(48)).await;
    assert_eq!(s.receiver.count(), 6);
    assert!(
        s.deliveries()
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Sent),
        "{:?}",
        s.deliveries().await
    );
}

#[tokio::test]
async fn an_integration_enabled_again_after_a_410_sends_at_once_what_is_claimed_afterwards() {
    let opts = Options {
        batch: 1,
        ..Options::default()
    };
    let s = Setup::sqlite(2, opts).await;
    s.receiver.script([Reply::status(410)]);
    s.at(SignedDuration::ZERO).await;
    assert_eq!(s.receiver.count(), 1);
    assert!(
        rowfire::integrations::enable(&s.store, WS, "hooks")
            .await
            .unwrap()
    );
    // Ten seconds on: the sender's own hold after the 410 (a minute) covers only what it had
    // claimed before the answer, not what it claims now.
    s.at(SignedDuration::from_secs(10)).await;
    assert_eq!(s.receiver.count(), 2, "{:?}", s.deliveries().await);
}

#[tokio::test]
async fn a_timeout_is_retried_with_the_same_idempotency_key() {
    let s = Setup::sqlite(1, Options::default()).await;
    s.receiver
        .script([Reply::status(200).after(Duration::from_secs(2))]);
    s.at(SignedDuration::ZERO).await;
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Pending);
    assert_eq!(d.reason.as_deref(), Some("timed out"));
    s.at(SignedDuration::from_secs(6)).await;
    let seen = s.receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].header("webhook-id"), seen[1].header("webhook-id"));
    assert_eq!(s.only().await.status, DeliveryStatus::Sent);
    let attempts = queue::attempts(&s.store, WS, d.id).await.unwrap();
    assert_eq!(attempts[0].error_class, Some(ErrorClass::Timeout));
}

#[tokio::test]
async fn an_expired_delivery_is_never_sent() {
    let opts = Options {
        rule: "    expire_after: 10m\n",
        ..Options::default()
    };
    let s = Setup::sqlite(1, opts).await;
    s.receiver.script([Reply::status(503)]);
    s.at(SignedDuration::ZERO).await;
    // The 5 s retry is missed (the workers were down); at 11 minutes it has expired.
    s.at(SignedDuration::from_mins(11)).await;
    assert_eq!(s.receiver.count(), 1);
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Expired, "{d:?}");
    s.at(SignedDuration::from_hours(30)).await;
    assert_eq!(s.receiver.count(), 1);
}

#[tokio::test]
async fn a_delivery_to_127_0_0_1_is_refused_by_default_and_delivered_when_allowed() {
    let refused = Setup::sqlite(
        1,
        Options {
            allow: "",
            ..Options::default()
        },
    )
    .await;
    refused.at(SignedDuration::ZERO).await;
    assert_eq!(refused.receiver.count(), 0);
    let d = refused.only().await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert!(d.reason.as_deref().unwrap().contains("loopback"), "{d:?}");
    let allowed = Setup::sqlite(1, Options::default()).await;
    allowed.at(SignedDuration::ZERO).await;
    assert_eq!(allowed.receiver.count(), 1);
    assert_eq!(allowed.only().await.status, DeliveryStatus::Sent);
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_after_resolution() {
    let s = Setup::sqlite(
        1,
        Options {
            allow: "",
            ..Options::default()
        },
    )
    .await;
    // Point the integration at `localhost` (the same receiver): the name is checked after DNS.
    let doc = definitions(
        &s.receiver.url.replace("127.0.0.1", "localhost"),
        &Options::default(),
    );
    push::push(&s.store, WS, &doc, now()).await.unwrap();
    rules::set_mode(&s.store, WS, "welcome", Mode::Live, now())
        .await
        .unwrap();
    add_signups(&s.source, 1..2, now()).await;
    s.clock.set(now() + SignedDuration::from_mins(2));
    s.poller.poll_due().await.unwrap();
    s.sender.drain().await.unwrap();
    assert_eq!(s.receiver.count(), 0);
    let to_localhost = s
        .deliveries()
        .await
        .into_iter()
        .find(|d| d.status == DeliveryStatus::Failed)
        .expect("the delivery to localhost failed");
    assert!(
        to_localhost.reason.as_deref().unwrap().contains("loopback"),
        "{to_localhost:?}"
    );
}

async fn signed_requests_verify_and_carry_no_stored_credential(url: &str) {
    let s = Setup::new(url, 3, Options::default()).await;
    let report = s.sender.drain().await.unwrap();
    assert_eq!((report.claimed, report.sent), (3, 3));
    let verifier = standardwebhooks::Webhook::new(&signing_secret()).unwrap();
    for seen in s.receiver.seen() {
        let mut headers = http::HeaderMap::new();
        for name in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            headers.insert(name, seen.header(name).parse().unwrap());
        }
        // The verifier checks the timestamp against the real clock; the test clock is fixed.
        let timestamp: i64 = seen.header("webhook-timestamp").parse().unwrap();
        assert_eq!(timestamp, now().as_second());
        let signed = verifier.sign(seen.header("webhook-id"), timestamp, seen.body.as_bytes());
        assert_eq!(signed.unwrap(), seen.header("webhook-signature"));
    }
}

on_both_engines!(
    signed_requests_verify_with_an_independent_library,
    signed_requests_verify_and_carry_no_stored_credential
);

#[tokio::test]
async fn a_redirect_is_never_followed_and_fails_the_delivery_with_its_status() {
    let s = Setup::sqlite(1, Options::default()).await;
    let elsewhere = format!("{}/elsewhere", s.receiver.url);
    s.receiver
        .script([Reply::status(302).header("location", &elsewhere)]);
    s.at(SignedDuration::ZERO).await;
    assert_eq!(s.receiver.count(), 1, "the Location was not followed");
    let d = s.only().await;
    assert_eq!(d.status, DeliveryStatus::Failed);
    assert!(d.reason.as_deref().unwrap().starts_with("302"), "{d:?}");
}

#[tokio::test]
async fn only_http_and_https_leave_the_machine() {
    let client = Client::new(Policy::parse("127.0.0.1", false).unwrap());
    for url in [
        "ftp://127.0.0.1/x",
        "file:///etc/passwd",
        "gopher://127.0.0.1/",
    ] {
        let request = rowfire::send::client::Outbound {
            method: "POST".into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout: Duration::from_secs(1),
        };
        let (result, _) = client.send(&request).await;
        assert!(
            matches!(&result, rowfire::send::outcome::AttemptResult::Refused(e) if e.contains("only http and https")),
            "{url}: {result:?}"
        );
    }
}

#[tokio::test]
async fn a_send_that_cannot_be_recorded_does_not_hold_back_the_others_settled_with_it() {
    let Some(pg) = crate::support::TestPg::new().await else {
        return;
    };
    let s = Setup::new(&pg.url, 3, Options::default()).await;
    let bad = s.deliveries().await[0].id;
    // The control plane refuses to record one delivery as sent (say, a failing disk page).
    let mut c = pg.admin().await;
    let refuse = format!(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN IF NEW.id = {bad} AND NEW.status = 'sent' THEN RAISE EXCEPTION 'disk full'; END IF; RETURN NEW; END $$;
         CREATE TRIGGER refuse BEFORE UPDATE ON delivery FOR EACH ROW EXECUTE FUNCTION refuse();"
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(refuse))
        .execute(&mut c)
        .await
        .unwrap();
    let report = s.sender.step().await.unwrap();
    assert_eq!((report.sent, report.stale), (2, 1), "{report:?}");
    let pending: Vec<i64> = s
        .deliveries()
        .await
        .into_iter()
        .filter(|d| d.status == DeliveryStatus::Pending)
        .map(|d| d.id)
        .collect();
    assert_eq!(pending, [bad], "the other two were recorded as sent");
    // Once the control plane recovers and the lease lapses, it goes again under the same id.
    sqlx::raw_sql("DROP TRIGGER refuse ON delivery")
        .execute(&mut c)
        .await
        .unwrap();
    s.at(SignedDuration::from_mins(2)).await;
    assert!(
        s.deliveries()
            .await
            .iter()
            .all(|d| d.status == DeliveryStatus::Sent)
    );
    let bad_id = bad.to_string();
    let again = s
        .receiver
        .seen()
        .iter()
        .filter(|r| r.header("webhook-id") == bad_id)
        .count();
    assert_eq!(again, 2);
}
