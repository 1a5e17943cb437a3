//! The operator's side of the API and pages on the sample control plane (`rowfire demo`'s):
//! sources, integrations, deliveries, runs and fires, the Demo inbox, the kill switch, the
//! activity stream, and the token login. Secrets written through the API are never read back.

use reqwest::Method;
use rowfire::clock::Clock;
use rowfire::demo::{self, Demo};
use rowfire::rules::{self, Mode};
use rowfire::secret::MasterKey;
use rowfire::store::{WorkspaceId, workspace};
use serde_json::{Value, json};

use crate::served::{Served, Setup, json};
use crate::support::now;

/// The demo's control plane, one rule back in shadow, polled once, served with a master key.
pub async fn polled() -> (Served, Demo, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let made = demo::run(dir.path(), now()).await.unwrap();
    rules::set_mode(
        &made.store,
        &WorkspaceId::DEFAULT,
        "billing_heads_up",
        Mode::Shadow,
        now(),
    )
    .await
    .unwrap();
    made.poller(Clock::fixed(now())).poll_due().await.unwrap();
    let served = Served::on(made.store.clone(), with_key()).await;
    (served, made, dir)
}

/// A workspace `id` created beside the served one, and a bearer token that acts in it.
pub async fn tenant(s: &Served, id: &str) -> (WorkspaceId, String) {
    let ws = WorkspaceId::parse(id).unwrap();
    workspace::create(&s.store, &ws, id, "UTC").await.unwrap();
    let (_, token) = rowfire::token::create(&s.store, &ws, "ops", s.clock.now())
        .await
        .unwrap();
    (ws, format!("Bearer {token}"))
}

fn with_key() -> Setup {
    Setup {
        master_key: Some(MasterKey::parse(&MasterKey::generate()).unwrap()),
        ..Setup::default()
    }
}

/// The body of a response as text, and its status.
pub async fn text(response: reqwest::RequestBuilder) -> (u16, String) {
    let response = response.send().await.unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

fn sorted_by(mut v: Value, key: &str) -> Value {
    if let Some(items) = v.as_array_mut() {
        items.sort_by_key(|i| i[key].to_string());
    }
    v
}

#[tokio::test]
async fn the_operator_routes_show_the_sample_control_planes_polls_fires_deliveries_and_inbox() {
    let (s, _made, _dir) = polled().await;
    let (status, body) = json(s.get("/api/status")).await;
    assert_eq!(status, 200, "{body}");
    // Deliveries by state move with the fixed clock (weeks begin on other days): counted, not
    // snapshotted.
    insta::assert_json_snapshot!("status", body, { ".deliveries[].count" => "[n]" });

    let (status, body) = json(s.get("/api/sources")).await;
    assert_eq!(status, 200, "{body}");
    insta::assert_json_snapshot!("sources", body);

    let (status, body) = json(s.get("/api/integrations")).await;
    assert_eq!(status, 200, "{body}");
    insta::assert_json_snapshot!("integrations", body);

    let (status, body) = json(s.get("/api/integrations/catalog")).await;
    assert_eq!(status, 200, "{body}");
    let names: Vec<&str> = body
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"slack") && names.contains(&"zendesk"),
        "{names:?}"
    );

    let (status, runs) = json(s.get("/api/runs")).await;
    assert_eq!(status, 200, "{runs}");
    for run in runs.as_array().unwrap() {
        assert_eq!(
            run["fired"].as_i64().unwrap() + run["already"].as_i64().unwrap(),
            run["matched"].as_i64().unwrap(),
            "fired + already = matched: {run}"
        );
    }
    if crate::support::at_the_default_now() {
        insta::assert_json_snapshot!("runs", sorted_by(runs, "trigger"), {
            "[].id" => "[id]", "[].started_at" => "[time]", "[].finished_at" => "[time]",
            "[].window_since" => "[time]", "[].window_until" => "[time]",
        });
    }

    let (status, fires) = json(s.get("/api/fires?limit=3")).await;
    assert_eq!(status, 200, "{fires}");
    assert_eq!(fires.as_array().unwrap().len(), 3);
    if crate::support::at_the_default_now() {
        insta::assert_json_snapshot!("fires", fires, {
            "[].id" => "[id]", "[].run_id" => "[id]", "[].clock" => "[time]",
            "[].fired_at" => "[time]", "[].bucket" => "[bucket]",
        });
    }

    let (status, deliveries) = json(s.get("/api/deliveries?limit=2&status=sent")).await;
    assert_eq!(status, 200, "{deliveries}");
    if crate::support::at_the_default_now() {
        insta::assert_json_snapshot!("deliveries", deliveries, {
            "[].id" => "[id]", "[].fire_id" => "[id]", "[].due_at" => "[time]", "[].sent_at" => "[time]",
        });
    }
    let id = deliveries[0]["id"].as_i64().unwrap();
    let (status, one) = json(s.get(&format!("/api/deliveries/{id}"))).await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["id"], id);
    assert!(one["attempt_log"].is_array(), "{one}");

    let (status, inbox) = json(s.get("/api/inbox?limit=500")).await;
    assert_eq!(status, 200, "{inbox}");
    let items = inbox.as_array().unwrap();
    let live = items
        .iter()
        .find(|m| m["mode"] == "live")
        .expect("a live message");
    let shadow = items
        .iter()
        .find(|m| m["mode"] == "shadow")
        .expect("a shadow message");
    assert_eq!(live["would_have_been_sent"], false);
    assert_eq!(shadow["would_have_been_sent"], true);
    assert_eq!(shadow["rule"], "billing_heads_up");
    if crate::support::at_the_default_now() {
        insta::assert_json_snapshot!("inbox_shadow_message", shadow, {
            ".delivery_id" => "[id]", ".at" => "[time]",
        });
    }

    let (status, filtered) =
        json(s.get("/api/deliveries?rule=billing_heads_up&status=suppressed&limit=500")).await;
    assert_eq!(status, 200);
    assert!(
        filtered
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["rule"] == "billing_heads_up" && d["mode"] == "shadow")
    );
}

#[tokio::test]
async fn a_credential_written_through_the_api_is_never_returned_by_any_route_or_page() {
    let (s, _made, _dir) = polled().await;
    const SECRET: &str = "xoxb-9876-never-shown-secret";
    let (status, body) = json(s.post(
        "/api/integrations",
        json!({"name": "slack", "catalog": "slack", "base_url": "http://127.0.0.1:9"}),
    ))
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["needs"], json!(["token"]));
    let (status, body) = json(s.get("/api/integrations")).await;
    assert_eq!(status, 200);
    let slack = body
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "slack")
        .unwrap()
        .clone();
    assert_eq!(
        slack["credentials"],
        json!([{"name": "token", "set": false}])
    );

    let put = s
        .request(Method::PUT, "/api/integrations/slack/credentials/token")
        .header("content-type", "application/json")
        .body(json!({ "value": SECRET }).to_string());
    let (status, body) = text(put).await;
    assert_eq!(status, 204, "{body}");
    assert!(!body.contains(SECRET));

    let (status, body) = json(s.get("/api/integrations")).await;
    assert_eq!(status, 200);
    let slack = body
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == "slack")
        .unwrap()
        .clone();
    assert_eq!(
        slack["credentials"],
        json!([{"name": "token", "set": true}])
    );

    let (status, tested) = json(s.post(
        "/api/integrations/slack/actions/post_message/test",
        json!({"row": {"id": 7}, "params": {"channel": "#ops", "text": "row {{ id }}"}}),
    ))
    .await;
    assert_eq!(status, 200, "{tested}");
    assert_eq!(tested["request"]["body"]["text"], "row 7");
    assert!(
        tested["sent"].is_object(),
        "a Slack action leaves the machine: {tested}"
    );

    let (status, inbox_test) = json(s.post(
        "/api/integrations/inbox/actions/ticket/test",
        json!({"row": {"id": 7}, "params": {"subject": "s {{ id }}", "body": "b"}}),
    ))
    .await;
    assert_eq!(status, 200, "{inbox_test}");
    assert_eq!(
        inbox_test["sent"],
        Value::Null,
        "the Demo inbox sends nothing"
    );

    let mut seen = vec![tested.to_string()];
    for path in [
        "/api/integrations",
        "/api/integrations/catalog",
        "/api/sources",
        "/api/status",
        "/api/deliveries?limit=500",
        "/api/runs",
        "/api/fires",
        "/api/inbox",
        "/api/openapi.json",
        "/integrations",
        "/activity",
        "/inbox",
        "/",
    ] {
        let (status, body) = text(s.get(path)).await;
        assert_eq!(status, 200, "{path}: {body}");
        seen.push(body);
    }
    for body in &seen {
        assert!(
            !body.contains(SECRET),
            "the credential was returned: {body}"
        );
        assert!(
            !body.contains("9876-never"),
            "part of the credential was returned"
        );
    }
}

#[tokio::test]
async fn a_dsn_stored_through_the_api_is_never_returned_and_a_source_test_says_ok_or_why() {
    let (s, _made, _dir) = polled().await;
    const PASSWORD: &str = "hunter2-in-the-dsn";
    let dsn = format!("postgres://reader:{PASSWORD}@127.0.0.1:1/billing");
    let (status, body) = json(s.post("/api/sources", json!({"name": "billing", "dsn": dsn}))).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body, json!({"name": "billing", "stored": "sealed"}));

    let (status, body) = json(s.post("/api/sources/default/test", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], true, "{body}");

    let (status, body) = json(s.post("/api/sources/nope/test", json!({}))).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");

    let (status, body) =
        json(s.post("/api/sources", json!({"name": "x", "dsn": "ftp://h/x"}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "dsn");
    assert!(
        !body.to_string().contains("ftp://h"),
        "the refusal does not echo the DSN"
    );

    for path in [
        "/api/sources",
        "/api/status",
        "/api/openapi.json",
        "/activity",
        "/integrations",
    ] {
        let (_, body) = text(s.get(path)).await;
        assert!(
            !body.contains(PASSWORD),
            "{path} returned the DSN's password"
        );
        assert!(!body.contains("reader:"), "{path} returned the DSN");
    }
}

#[tokio::test]
async fn an_unknown_delivery_and_another_workspaces_delivery_both_answer_404() {
    let (s, _made, _dir) = polled().await;
    let (_, deliveries) = json(s.get("/api/deliveries?limit=1")).await;
    let id = deliveries[0]["id"].as_i64().unwrap();

    for path in [
        "/api/deliveries/999999",
        "/api/deliveries/abc",
        "/api/deliveries/-1",
    ] {
        let (status, body) = json(s.get(path)).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let (status, body) = json(s.post("/api/deliveries/999999/retry", json!({}))).await;
    assert_eq!(status, 404, "{body}");

    let (_, bearer) = tenant(&s, "acme").await;
    let theirs = s
        .get(&format!("/api/deliveries/{id}"))
        .header("authorization", bearer.as_str());
    let (status, body) = json(theirs).await;
    assert_eq!(
        status, 404,
        "another workspace's delivery is not found: {body}"
    );
    let retry = s
        .post(&format!("/api/deliveries/{id}/retry"), json!({}))
        .header("authorization", bearer.as_str());
    assert_eq!(json(retry).await.0, 404);
    let (status, body) = json(
        s.get("/api/deliveries")
            .header("authorization", bearer.as_str()),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body, json!([]), "another workspace lists none of them");
    let (status, body) = json(s.get("/api/inbox").header("authorization", bearer.as_str())).await;
    assert_eq!((status, body), (200, json!([])));

    let (status, body) = json(s.post(&format!("/api/deliveries/{id}/retry"), json!({}))).await;
    assert_eq!(status, 409, "a sent delivery is not retried: {body}");
    insta::assert_json_snapshot!("retry_refused", body, { ".error.message" => "[message]" });
}

#[tokio::test]
async fn an_invalid_body_or_query_is_refused_with_400_naming_the_field() {
    let (s, _made, _dir) = polled().await;
    let cases = [
        (s.post("/api/halt", json!({})), "reason"),
        (s.post("/api/halt", json!({"reason": 5})), "reason"),
        (s.post("/api/halt", json!({"reason": "   "})), "reason"),
        (
            s.post("/api/halt", json!({"reason": "x".repeat(501)})),
            "reason",
        ),
        (
            s.post("/api/halt", json!({"reason": "ok", "extra": 1})),
            "extra",
        ),
        (
            s.post("/api/sources", json!({"name": "ok", "dsn": 7})),
            "dsn",
        ),
        (
            s.post("/api/sources", json!({"name": "a b", "dsn": "sqlite:x.db"})),
            "name",
        ),
        (s.post("/api/integrations", json!({"name": "x"})), "catalog"),
        (
            s.post("/api/integrations", json!({"name": "x", "catalog": "nope"})),
            "catalog",
        ),
        (
            s.post(
                "/api/integrations/inbox/actions/ticket/test",
                json!({"row": [1]}),
            ),
            "row",
        ),
        (s.get("/api/deliveries?limit=0"), "limit"),
        (s.get("/api/deliveries?limit=100000"), "limit"),
        (s.get("/api/deliveries?status=bogus"), "status"),
        (s.get("/api/runs?after=x"), "after"),
    ];
    for (request, field) in cases {
        let (status, body) = json(request).await;
        assert_eq!(status, 400, "{field}: {body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        assert_eq!(body["error"]["code"], "invalid");
    }
    let not_json = s
        .request(Method::POST, "/api/halt")
        .header("content-type", "application/json")
        .body("{not json");
    let (status, body) = json(not_json).await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (400, json!("body"))
    );
    let (status, body) =
        json(s.post("/api/integrations/nope/actions/x/test", json!({"row": {}}))).await;
    assert_eq!(status, 404, "{body}");
    let put = s
        .request(Method::PUT, "/api/integrations/inbox/credentials/token")
        .header("content-type", "application/json")
        .body(json!({"value": "v"}).to_string());
    let (status, body) = json(put).await;
    assert_eq!(
        (status, body["error"]["field"].clone()),
        (404, json!("credential")),
        "{body}"
    );
}

#[tokio::test]
async fn halt_and_resume_switch_the_workspace_and_status_says_so() {
    let (s, _made, _dir) = polled().await;
    let (status, body) =
        json(s.post("/api/halt", json!({"reason": "a wrong message went out"}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["halted"], "a wrong message went out");
    let (_, body) = json(s.get("/api/status")).await;
    assert_eq!(body["halted"], "a wrong message went out");
    let (_, page) = text(s.get("/activity")).await;
    assert!(page.contains("data-halted=\"true\"") && page.contains("id=\"resume-button\""));
    let (status, body) = json(s.post("/api/resume", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["halted"], Value::Null);
    let (_, page) = text(s.get("/activity")).await;
    assert!(page.contains("data-halted=\"false\"") && page.contains("id=\"halt-form\""));
}
