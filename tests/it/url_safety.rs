//! Row data stays inside its place in the URL, and a receiver's echo of a credential is never
//! recorded: hostile row values are sent through a real poll and sender to the local receiver,
//! and what the receiver got (and what was recorded) is read back.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE_NO_PAD};
use jiff::SignedDuration;
use rowfire::clock::Clock;
use rowfire::definitions::versions;
use rowfire::outbox::{self, Delivery, Filter, RenderError};
use rowfire::poll::Poller;
use rowfire::secret::{self, MasterKey};
use rowfire::send::client::Client;
use rowfire::send::egress::Policy;
use rowfire::send::queue;
use rowfire::send::request::{TryError, try_action};
use rowfire::send::sender::{self, Sender};
use rowfire::store::{DEFAULT_WORKSPACE as WS, Store};
use sqlx::{Connection, SqliteConnection};

use crate::receiver::{Receiver, Reply};
use crate::sending::{Options, prepare};
use crate::support::{TestSqlite, now};
use rowfire::outbox::DeliveryStatus;

const TOKEN: &str = "tok/Ab+9_zQ-SECRET";

/// Besides the sending tests' signed webhook: `api` (bearer auth, base path /api) with a path
/// and query built from the row's email, and a header from it; `bare` (no base path) whose path
/// is the email alone.
fn options(receiver: &str) -> Options {
    Options {
        integration: format!(
            "  api:
    base_url: {receiver}/api
    auth: {{ kind: bearer }}
    timeout_ms: 2000
    actions:
      note:
        method: POST
        path: \"/accounts/{{{{ email }}}}/notes?tag={{{{ email }}}}&n=1\"
        body: {{ user: \"{{{{ id }}}}\" }}
      flag:
        method: POST
        path: /flags
        headers: {{ X-Note: \"{{{{ email }}}}\" }}
        body: {{ user: \"{{{{ id }}}}\" }}
  bare:
    base_url: {receiver}
    timeout_ms: 2000
    actions:
      raw: {{ method: POST, path: \"{{{{ email }}}}\", body: {{}} }}
"
        ),
        binding: "      - action: api.note\n      - action: api.flag\n      - action: bare.raw\n",
        ..Options::default()
    }
}

/// One live poll of signups whose emails are `emails` (ids r0, r1, …), and one drain of the
/// sender with the `api` token set; the receiver answers every request with `reply`.
struct Run {
    store: Store,
    receiver: Receiver,
    key: String,
    dbs: (TestSqlite, TestSqlite),
}

async fn run(emails: &[&str], reply: Reply) -> Run {
    let receiver = Receiver::start().await;
    receiver.script(std::iter::repeat_n(reply, emails.len() * 4));
    let source = TestSqlite::new();
    let mut c = SqliteConnection::connect(&format!("{}?mode=rwc", source.url))
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE signup (id TEXT, email TEXT, at TEXT)")
        .execute(&mut c)
        .await
        .unwrap();
    for (i, email) in emails.iter().enumerate() {
        sqlx::query("INSERT INTO signup VALUES (?1, ?2, ?3)")
            .bind(format!("r{i}"))
            .bind(*email)
            .bind((now() - SignedDuration::from_mins(5)).to_string())
            .execute(&mut c)
            .await
            .unwrap();
    }
    let cp = TestSqlite::new();
    let store = Store::open(&cp.url).await.unwrap();
    store.migrate().await.unwrap();
    let opts = options(&receiver.url);
    let key = prepare(&store, &receiver.url, &opts, now()).await;
    let opened = MasterKey::parse(&key).unwrap();
    secret::put(
        &store,
        &opened,
        WS,
        "integration:api",
        "token",
        TOKEN,
        now(),
    )
    .await
    .unwrap();
    let clock = Clock::fixed(now());
    let url = source.url.clone();
    let poller = Poller::new(
        store.clone(),
        "w",
        clock.clone(),
        Arc::new(move |_, _| Some(url.clone().into())),
    );
    let reports = poller.poll_due().await.unwrap();
    assert_eq!(reports[0].fired, emails.len() as u64, "{reports:?}");
    let config = sender::Config {
        refresh: Duration::ZERO,
        ..sender::Config::default()
    };
    let sender = Sender::new(
        store.clone(),
        Client::new(Policy::parse("127.0.0.1", false).unwrap()),
        clock,
        Ok(opened),
        config,
    );
    sender.drain().await.unwrap();
    Run {
        store,
        receiver,
        key,
        dbs: (source, cp),
    }
}

impl Run {
    /// Every delivery by its row's key and action. (A delivery that never rendered has no
    /// recipient: its fire's signed webhook, which always renders, names the row.)
    async fn deliveries(&self) -> BTreeMap<(String, String), Delivery> {
        let mut tx = self.store.begin(WS).await.unwrap();
        let all = outbox::list(&mut tx, WS, &Filter::default()).await.unwrap();
        let keys: BTreeMap<i64, String> = all
            .iter()
            .filter(|d| d.action == "hooks.send")
            .map(|d| (d.fire_id, d.recipient.clone().unwrap()))
            .collect();
        all.into_iter()
            .map(|d| ((keys[&d.fire_id].clone(), d.action.clone()), d))
            .collect()
    }
}

/// Percent-decodes `s` (the test's own decoder, to read back what the receiver got).
fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let h = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap(), 16).unwrap();
            out.push(h);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

const HOSTILE: &[&str] = &[
    "../../admin/delete-everything?x=",
    "@127.0.0.1:18082/stolen",
    "a#fragment",
    "a?b=c&d=e",
    "%2F..%2Fadmin",
    "line\r\nX-Injected: 1",
    "ünïcode ✓ and spaces",
    "back\\slash",
    "",
    "ok-value_1.2~",
];

#[tokio::test]
async fn row_values_never_change_the_scheme_host_port_or_path_segments_of_the_request() {
    let r = run(HOSTILE, Reply::status(200)).await;
    let seen = r.receiver.seen();
    let deliveries = r.deliveries().await;
    let mut notes = 0;
    let mut raws = 0;
    for (i, value) in HOSTILE.iter().enumerate() {
        let id = format!("r{i}");
        let note = &deliveries[&(id.clone(), "api.note".to_string())];
        if value.is_empty() {
            // An empty value would leave its segment empty (another resource): never sent.
            assert_eq!(note.status, DeliveryStatus::Failed, "{note:?}");
            assert!(
                note.reason
                    .as_deref()
                    .unwrap()
                    .contains("is empty (or NULL)")
            );
            let raw = &deliveries[&(id.clone(), "bare.raw".to_string())];
            assert_eq!(raw.status, DeliveryStatus::Failed, "{raw:?}");
            continue;
        }
        assert_eq!(note.status, DeliveryStatus::Sent, "{value:?}: {note:?}");
        // The receiver got exactly one request for the value: under /api/accounts, the value
        // one segment, the query two pairs, the value one query value.
        let (path, query) = seen
            .iter()
            .filter(|s| s.target.starts_with("/api/accounts/"))
            .map(|s| s.target.split_once('?').unwrap())
            .find(|(p, _)| decode(p.split('/').nth(3).unwrap()) == *value)
            .unwrap_or_else(|| panic!("{value:?} never arrived: {seen:#?}"));
        let segments: Vec<&str> = path.split('/').collect();
        assert_eq!(segments.len(), 5, "{path}");
        assert_eq!(
            (segments[1], segments[2], segments[4]),
            ("api", "accounts", "notes")
        );
        let pairs: Vec<(&str, &str)> = query
            .split('&')
            .map(|p| p.split_once('=').unwrap())
            .collect();
        assert_eq!(pairs.len(), 2, "{query}");
        assert_eq!((pairs[0].0, decode(pairs[0].1).as_str()), ("tag", *value));
        assert_eq!(pairs[1], ("n", "1"));
        notes += 1;
        // With the value first in the path and no base path, it still stays on this host and
        // port, as one segment.
        let raw = &deliveries[&(id.clone(), "bare.raw".to_string())];
        assert_eq!(raw.status, DeliveryStatus::Sent, "{value:?}: {raw:?}");
        let (_, url) = raw.request.clone().unwrap();
        assert!(url.starts_with(&format!("{}/", r.receiver.url)) || url == r.receiver.url);
        raws += 1;
        // A header value with a line break is refused before sending, naming the header.
        let flag = &deliveries[&(id, "api.flag".to_string())];
        if value.contains(['\r', '\n']) {
            assert_eq!(flag.status, DeliveryStatus::Failed, "{flag:?}");
            assert!(
                flag.reason.as_deref().unwrap().contains("X-Note"),
                "{flag:?}"
            );
            assert!(flag.request.is_none());
        } else {
            assert_eq!(flag.status, DeliveryStatus::Sent, "{value:?}: {flag:?}");
        }
    }
    assert_eq!(
        notes,
        HOSTILE.len() - 1,
        "every value but the empty one was sent"
    );
    let bare_targets: Vec<&str> = seen
        .iter()
        .map(|s| s.target.as_str())
        .filter(|t| !t.starts_with("/api/") && !t.starts_with("/hooks"))
        .collect();
    assert_eq!(bare_targets.len(), raws, "{bare_targets:?}");
    for t in &bare_targets {
        assert!(
            *t == "/" || !t[1..].contains('/'),
            "one segment at most: {t}"
        );
    }
    assert!(bare_targets.contains(&"/%40127.0.0.1%3A18082%2Fstolen"));
    assert!(
        seen.iter().all(|s| !s.headers.contains_key("x-injected")),
        "no row value added a header"
    );
    assert_eq!(
        seen.iter().filter(|s| s.path == "/api/flags").count(),
        HOSTILE.len() - 1
    );
}

#[tokio::test]
async fn a_dot_segment_value_fails_the_delivery_with_the_reason_and_sends_nothing() {
    let r = run(&["..", "."], Reply::status(200)).await;
    let deliveries = r.deliveries().await;
    for id in ["r0", "r1"] {
        for action in ["api.note", "bare.raw"] {
            let d = &deliveries[&(id.to_string(), action.to_string())];
            assert_eq!(d.status, DeliveryStatus::Failed, "{d:?}");
            assert!(
                d.reason.as_deref().unwrap().contains("dot segment"),
                "{d:?}"
            );
        }
    }
    let seen = r.receiver.seen();
    assert!(
        seen.iter()
            .all(|s| s.path == "/hooks" || s.path == "/api/flags"),
        "{seen:#?}"
    );
}

#[tokio::test]
async fn a_row_value_too_large_for_the_url_fails_the_delivery_with_the_limit_and_sends_nothing() {
    let huge = "a".repeat(20_000);
    let r = run(&[huge.as_str()], Reply::status(200)).await;
    let deliveries = r.deliveries().await;
    for action in ["api.note", "bare.raw"] {
        let d = &deliveries[&("r0".to_string(), action.to_string())];
        assert_eq!(d.status, DeliveryStatus::Failed, "{action}");
        let reason = d.reason.as_deref().unwrap();
        assert!(
            reason.contains("the rendered URL is") && reason.contains("more than the 8192"),
            "{reason}"
        );
    }
    let seen = r.receiver.seen();
    assert!(
        seen.iter()
            .all(|s| s.path == "/hooks" || s.path == "/api/flags"),
        "{:?}",
        seen.iter().map(|s| s.path.len()).collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn integrations_test_renders_through_the_same_checked_builder() {
    let r = run(&[], Reply::status(200)).await;
    let defs = versions::in_force(&r.store, WS).await.unwrap().unwrap().1;
    let binding = rowfire::definitions::Binding {
        integration: "api".into(),
        action: "note".into(),
        params: BTreeMap::new(),
        recipient: None,
    };
    let client = Client::new(Policy::parse("127.0.0.1", false).unwrap());
    let key = MasterKey::parse(&r.key).unwrap();
    let row = serde_json::json!({ "id": "r9", "email": "../../admin?x=" });
    let tried = try_action(
        &r.store,
        WS,
        &defs,
        &binding,
        &row,
        Some(&key),
        &client,
        now(),
    )
    .await
    .unwrap();
    assert_eq!(
        tried.request.url,
        format!(
            "{}/api/accounts/..%2F..%2Fadmin%3Fx%3D/notes?tag=..%2F..%2Fadmin%3Fx%3D&n=1",
            r.receiver.url
        )
    );
    let seen = r.receiver.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/api/accounts/..%2F..%2Fadmin%3Fx%3D/notes");
    let row = serde_json::json!({ "id": "r9", "email": ".." });
    let err = try_action(
        &r.store,
        WS,
        &defs,
        &binding,
        &row,
        Some(&key),
        &client,
        now(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, TryError::Render(RenderError::Url { .. })),
        "{err:?}"
    );
    assert_eq!(r.receiver.count(), 1, "nothing more was sent");
    // A binding's own path parameter is kept as written; only the row value inside it is encoded.
    let hook = rowfire::definitions::Binding {
        integration: "hooks".into(),
        action: "send".into(),
        params: [("path".to_string(), "/orders/{{ email }}".into())].into(),
        recipient: None,
    };
    let row = serde_json::json!({ "id": "r9", "email": "../x?y#z" });
    let tried = try_action(&r.store, WS, &defs, &hook, &row, Some(&key), &client, now())
        .await
        .unwrap();
    assert_eq!(
        tried.request.url,
        format!("{}/hooks/orders/..%2Fx%3Fy%23z", r.receiver.url)
    );
    assert_eq!(r.receiver.seen()[1].target, "/hooks/orders/..%2Fx%3Fy%23z");
}

/// Every form an echo of [`TOKEN`] takes in the test's answer.
fn echo_forms() -> Vec<String> {
    let mut forms = vec![
        TOKEN.to_string(),
        TOKEN.replace('/', "\\/"),
        TOKEN.replace('/', "\\u002f").replace('+', "\\u002B"),
        TOKEN.replace('/', "%2F").replace('+', "%2B"),
        TOKEN.replace('/', "%2f").replace('+', "%2b"),
        TOKEN.to_uppercase(),
        TOKEN.to_lowercase(),
        STANDARD.encode(TOKEN),
        STANDARD_NO_PAD.encode(TOKEN),
        URL_SAFE_NO_PAD.encode(TOKEN),
    ];
    for lead in ["", "a", "ab"] {
        forms.push(STANDARD.encode(format!("{lead}Authorization: Bearer {TOKEN}\r\n")));
    }
    forms
}

/// The part of each form that must never survive: the form itself, and for base64 inside a
/// longer string, the characters that depend on the token alone.
fn leaked(text: &str) -> Vec<String> {
    let mut needles: Vec<String> = echo_forms().into_iter().take(10).collect();
    for lead in 0..3usize {
        let mut bytes = vec![0u8; lead];
        bytes.extend_from_slice(TOKEN.as_bytes());
        let encoded = STANDARD_NO_PAD.encode(&bytes);
        needles.push(encoded[3..encoded.len() - 2].to_string());
    }
    needles.push("tok/ab".into());
    let lower = text.to_lowercase();
    needles
        .into_iter()
        .filter(|n| text.contains(n.as_str()) || lower.contains(&n.to_lowercase()))
        .collect()
}

#[tokio::test]
async fn a_receiver_echoing_the_credential_in_any_encoding_has_none_of_it_recorded() {
    let body = echo_forms()
        .iter()
        .enumerate()
        .map(|(i, f)| format!("\"e{i}\":\"{f}\""))
        .collect::<Vec<_>>()
        .join(",");
    let body = format!("{{{body}}}");
    assert!(!leaked(&body).is_empty(), "the test's leak check can fail");
    let r = run(&["someone@example.com"], Reply::status(400).body(&body)).await;
    let seen = r.receiver.seen();
    assert!(
        seen.iter()
            .any(|s| s.header("authorization") == format!("Bearer {TOKEN}")),
        "the token was sent"
    );
    let deliveries = r.deliveries().await;
    let note = &deliveries[&("r0".to_string(), "api.note".to_string())];
    assert_eq!(note.status, DeliveryStatus::Failed, "{note:?}");
    let mut recorded = String::new();
    // Only the integration that sent the token knows it; the others never had it to echo.
    for d in deliveries.values().filter(|d| d.action.starts_with("api.")) {
        recorded.push_str(&format!("{d:?}\n"));
        for a in queue::attempts(&r.store, WS, d.id).await.unwrap() {
            recorded.push_str(a.response.as_deref().unwrap_or_default());
            recorded.push('\n');
        }
    }
    assert!(recorded.contains("[redacted]"), "{recorded}");
    assert!(recorded.contains("\"e0\":\"[redacted]\""), "{recorded}");
    assert_eq!(leaked(&recorded), Vec::<String>::new(), "{recorded}");
    // What `rowfire deliveries show` prints of it holds none either.
    let cp = &r.dbs.1.url;
    let out = crate::cli::rowfire(
        &["deliveries", "show", &note.id.to_string()],
        &[("ROWFIRE_DATABASE_URL", cp.as_str())],
    );
    let (stdout, stderr) = crate::cli::text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("[redacted]"), "{stdout}");
    assert_eq!(leaked(&stdout), Vec::<String>::new(), "{stdout}");
}
