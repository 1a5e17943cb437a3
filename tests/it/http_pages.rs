//! The operator's pages, live: the activity stream's events, the pages' stable ids and empty
//! states, and the token login that sets the session cookie.

use std::time::Duration;

use reqwest::Method;
use rowfire::clock::Clock;
use rowfire::demo;
use rowfire::store::WorkspaceId;
use rowfire::token;
use serde_json::Value;

use crate::http_operator::{polled, text};
use crate::served::{Served, Setup, json};
use crate::support::now;

#[tokio::test]
async fn the_activity_stream_sends_the_run_a_poll_just_made_and_its_inbox_messages() {
    let dir = tempfile::tempdir().unwrap();
    let made = demo::run(dir.path(), now()).await.unwrap();
    let s = Served::on(made.store.clone(), Setup::default()).await;
    let response = s
        .get("/activity/stream?topics=run,fire,inbox")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    // The stream's cursors are fixed when it opens: only what the poll below makes is new.
    let reports = made.poller(Clock::fixed(now())).poll_due().await.unwrap();
    let trigger = reports[0].trigger.clone();
    let mut response = response;
    let mut seen = String::new();
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = response.chunk().await.unwrap() {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            let run = seen.split("\n\n").find(|e| {
                e.contains("event: run") && e.contains(&format!("\"trigger\":\"{trigger}\""))
            });
            let inbox = seen.split("\n\n").any(|e| e.contains("event: inbox"));
            if let Some(run) = run.filter(|_| inbox) {
                return run.to_string();
            }
        }
        panic!("the stream ended: {seen}");
    })
    .await
    .unwrap_or_else(|_| panic!("no run event within 20 s: {seen}"));
    let data: Value = serde_json::from_str(
        found
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .unwrap(),
    )
    .unwrap();
    assert_eq!(data["trigger"], trigger.as_str());
    assert!(
        data["html"].as_str().unwrap().contains("data-run-id"),
        "{data}"
    );
}

#[tokio::test]
async fn the_pages_draw_the_feeds_the_inbox_and_the_integrations_with_stable_ids() {
    let (s, _made, _dir) = polled().await;
    let (status, page) = text(s.get("/activity")).await;
    assert_eq!(status, 200);
    for id in [
        "id=\"activity-feed\"",
        "id=\"runs-feed\"",
        "id=\"fires-feed\"",
        "id=\"deliveries-feed\"",
        "id=\"kill-switch\"",
        "id=\"halt-reason\"",
        "data-run-id=",
        "data-fire-id=",
        "data-delivery-id=",
    ] {
        assert!(page.contains(id), "/activity lacks {id}");
    }
    let (status, page) = text(s.get("/inbox")).await;
    assert_eq!(status, 200);
    for id in [
        "id=\"inbox-feed\"",
        "data-delivery-id=",
        "class=\"chat-card\"",
        "data-mode=\"live\"",
    ] {
        assert!(page.contains(id), "/inbox lacks {id}");
    }
    // A ticket is drawn as a ticket card.
    let (_, inbox) = json(s.get("/api/inbox?limit=500")).await;
    assert!(
        inbox
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["kind"] == "ticket")
    );
    let ticket = rowfire::ui::inbox::card(
        &serde_json::from_value(
            inbox
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["kind"] == "ticket")
                .unwrap()
                .clone(),
        )
        .unwrap(),
    )
    .into_string();
    assert!(
        ticket.contains("class=\"ticket-card\"") && ticket.contains("ticket-subject"),
        "{ticket}"
    );
    // A shadow message is labelled as what would have been sent.
    let shadow = inbox
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mode"] == "shadow")
        .unwrap();
    let shadow =
        rowfire::ui::inbox::card(&serde_json::from_value(shadow.clone()).unwrap()).into_string();
    assert!(
        shadow.contains("would have been sent") && shadow.contains("data-mode=\"shadow\""),
        "{shadow}"
    );
    let (status, page) = text(s.get("/integrations")).await;
    assert_eq!(status, 200);
    for id in [
        "id=\"integrations-list\"",
        "data-integration=\"inbox\"",
        "id=\"catalogue\"",
        "data-entry=\"slack\"",
        "id=\"add-integration-form\"",
        "class=\"test-action-form\"",
    ] {
        assert!(page.contains(id), "/integrations lacks {id}");
    }
    // An empty control plane shows empty states, not errors.
    let empty = Served::sqlite(Setup::default()).await;
    for (path, id) in [
        ("/activity", "id=\"runs-empty\""),
        ("/inbox", "id=\"inbox-empty\""),
        ("/integrations", "id=\"integrations-empty\""),
    ] {
        let (status, page) = text(empty.get(path)).await;
        assert_eq!(status, 200, "{path}: {page}");
        assert!(page.contains(id), "{path} lacks {id}");
    }
    let (status, body) = json(empty.get("/api/integrations")).await;
    assert_eq!(status, 409, "nothing pushed: {body}");
}

#[tokio::test]
async fn a_token_login_sets_the_session_cookie_and_logout_clears_it() {
    let s = Served::sqlite(Setup {
        beyond_loopback: true,
        ..Setup::default()
    })
    .await;
    let (status, page) = text(s.get("/login")).await;
    assert_eq!(status, 200);
    assert!(page.contains("id=\"login-token\""));
    let form = |token: &str| {
        s.request(Method::POST, "/login")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={token}"))
    };
    let (status, page) = text(form("rft_wrong")).await;
    assert_eq!(status, 401);
    assert!(
        page.contains("unknown or revoked"),
        "the error is next to the field"
    );

    // What is not a login form is refused with the form again, never a bare error.
    for (content_type, body, status, says) in [
        (
            "application/json",
            "{\"token\":\"x\"}".to_string(),
            415,
            "a web form",
        ),
        (
            "application/x-www-form-urlencoded",
            "token=a&token=b".to_string(),
            400,
            "could not be read",
        ),
        (
            "application/x-www-form-urlencoded",
            format!("token={}", "a".repeat(rowfire::http::extract::MAX_BODY)),
            413,
            "far larger than a login form",
        ),
    ] {
        let response = s
            .request(Method::POST, "/login")
            .header("content-type", content_type)
            .body(body);
        let (got, page) = text(response).await;
        assert_eq!(got, status, "{content_type}: {page}");
        assert!(
            page.contains("id=\"login-token\"") && page.contains(says),
            "{content_type}: the form does not say what was wrong: {page}"
        );
    }

    let (_, token) = rowfire::token::create(&s.store, &WorkspaceId::DEFAULT, "me", s.clock.now())
        .await
        .unwrap();
    let response = form(&token).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 303);
    assert_eq!(response.headers()["location"], "/");
    let cookie = response.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.starts_with(&format!("rowfire_session={token};")),
        "{cookie}"
    );
    for part in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(part), "{cookie}");
    }
    let session = format!("rowfire_session={token}");
    let (status, _) = json(s.get("/api/status").header("cookie", session.as_str())).await;
    assert_eq!(status, 200);

    let out = s
        .request(Method::POST, "/logout")
        .header("cookie", session.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(out.status().as_u16(), 303);
    let cleared = out.headers()["set-cookie"].to_str().unwrap();
    assert!(
        cleared.starts_with("rowfire_session=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
}

#[test]
fn the_openapi_document_names_every_operator_route_with_its_method() {
    let doc = serde_json::to_value(rowfire::http::api::openapi()).unwrap();
    let paths = &doc["paths"];
    for (path, method) in [
        ("/api/status", "get"),
        ("/api/halt", "post"),
        ("/api/resume", "post"),
        ("/api/sources", "get"),
        ("/api/sources", "post"),
        ("/api/sources/{name}/test", "post"),
        ("/api/integrations/catalog", "get"),
        ("/api/integrations", "get"),
        ("/api/integrations", "post"),
        ("/api/integrations/{name}/credentials/{credential}", "put"),
        ("/api/integrations/{name}/actions/{action}/test", "post"),
        ("/api/deliveries", "get"),
        ("/api/deliveries/{id}", "get"),
        ("/api/deliveries/{id}/retry", "post"),
        ("/api/runs", "get"),
        ("/api/fires", "get"),
        ("/api/inbox", "get"),
    ] {
        assert!(
            paths[path][method].is_object(),
            "{method} {path} is not in the document"
        );
    }
    assert!(
        paths["/api/integrations/{name}/credentials/{credential}"]["get"].is_null(),
        "no route reads a credential back"
    );
}

#[tokio::test]
async fn the_activity_stream_ends_when_its_token_is_revoked_and_when_the_server_stops() {
    let s = Served::sqlite(Setup {
        beyond_loopback: true,
        ..Setup::default()
    })
    .await;
    let (made, text) = token::create(&s.store, &WorkspaceId::DEFAULT, "ops", s.clock.now())
        .await
        .unwrap();
    let bearer = format!("Bearer {text}");
    let mut response = s
        .get("/activity/stream")
        .header("authorization", bearer.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    token::revoke(&s.store, &WorkspaceId::DEFAULT, &made.id, s.clock.now())
        .await
        .unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = response.chunk().await {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the stream goes on after its token was revoked"
    );

    let mut s = Served::sqlite(Setup::default()).await;
    let mut response = s.get("/activity/stream").send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    s.stop();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = response.chunk().await {}
    })
    .await;
    assert!(ended.is_ok(), "the stream holds a stopping server open");
}
