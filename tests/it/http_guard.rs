//! The checks every request to `rowfire serve` passes: its Host, its Origin on writes, its
//! token, and the one workspace a token acts in.

use reqwest::Method;
use rowfire::store::{WorkspaceId, workspace};
use rowfire::token;

use crate::served::{Served, Setup, json};

#[tokio::test]
async fn a_request_naming_a_foreign_host_is_refused_with_421_and_a_loopback_name_is_answered() {
    let s = Served::sqlite(Setup::default()).await;
    let (status, body) = json(s.get("/api/status").header("host", "rebound.example.com")).await;
    assert_eq!(status, 421, "{body}");
    assert_eq!(body["error"]["code"], "wrong_host");
    let (status, body) = json(s.get("/api/status")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["workspace"], "default");
    let port = s.base.rsplit(':').next().unwrap();
    for host in [format!("localhost:{port}"), format!("[::1]:{port}")] {
        let (status, _) = json(s.get("/api/status").header("host", host.as_str())).await;
        assert_eq!(status, 200, "{host}");
    }
    // A user part, or a port that is no port, does not make a loopback name.
    for host in ["localhost:80@evil.example", "127.0.0.1:99999", "127.0.0.1:"] {
        let (status, body) = json(s.get("/api/status").header("host", host)).await;
        assert_eq!(status, 421, "{host}: {body}");
    }
    // A request target in absolute form names its host, whatever the Host header says.
    let raw = |target: &str| {
        format!("GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    };
    let address = s.base.trim_start_matches("http://").to_string();
    for (target, status) in [
        ("http://evil.example/api/status", "421"),
        (&*format!("http://127.0.0.1:{port}/api/status"), "200"),
    ] {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
        stream.write_all(raw(target).as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")),
            "{target}: {answer}"
        );
    }
}

#[tokio::test]
async fn a_write_from_a_foreign_origin_is_refused_and_one_from_this_server_passes_the_check() {
    let s = Served::sqlite(Setup::default()).await;
    let port = s.base.rsplit(':').next().unwrap();
    let foreign = s
        .request(Method::POST, "/api/status")
        .header("origin", "http://evil.example");
    let (status, body) = json(foreign).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["code"], "forbidden");
    // Ours first and a foreign one after it: refused, not judged by the first.
    let two = s
        .request(Method::POST, "/api/halt")
        .header("content-type", "application/json")
        .header("origin", format!("http://127.0.0.1:{port}"))
        .header("origin", "http://evil.example")
        .body(r#"{"reason": "x"}"#);
    let (status, body) = json(two).await;
    assert_eq!(status, 403, "{body}");
    let cross_site = s
        .request(Method::POST, "/api/status")
        .header("sec-fetch-site", "cross-site");
    assert_eq!(json(cross_site).await.0, 403);
    // Its own origin passes the check and reaches the router (which has no POST here: 405).
    let own = s
        .request(Method::POST, "/api/status")
        .header("origin", format!("http://127.0.0.1:{port}"));
    assert_eq!(own.send().await.unwrap().status().as_u16(), 405);
    // A read from a foreign origin is not a write: it is answered.
    let read = s.get("/api/status").header("origin", "http://evil.example");
    assert_eq!(json(read).await.0, 200);
    // A target in absolute form names the host both checks judge: a Host header agreeing with
    // a foreign origin does not let the write through.
    let raw = format!(
        "POST http://127.0.0.1:{port}/api/status HTTP/1.1\r\nHost: evil.example\r\nOrigin: http://evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let address = s.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
}

/// A server listening beyond loopback (so every request needs a token) and a second workspace,
/// `acme`, beside its own.
async fn beyond_loopback_with_acme() -> (Served, WorkspaceId) {
    let s = Served::sqlite(Setup {
        beyond_loopback: true,
        ..Setup::default()
    })
    .await;
    let acme = WorkspaceId::parse("acme").unwrap();
    workspace::create(&s.store, &acme, "Acme", "UTC")
        .await
        .unwrap();
    (s, acme)
}

#[tokio::test]
async fn beyond_loopback_a_request_needs_a_live_token_and_acts_in_its_workspace_only() {
    let (s, acme) = beyond_loopback_with_acme().await;
    let (status, body) = json(s.get("/api/status")).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized");
    // The health check and the login page are public.
    assert_eq!(json(s.get("/api/health")).await.0, 200);

    let (made, text) = token::create(&s.store, &acme, "ci", s.clock.now())
        .await
        .unwrap();
    let bearer = format!("Bearer {text}");
    let (status, body) = json(
        s.get("/api/status")
            .header("authorization", bearer.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["workspace"], "acme",
        "a token acts in its own workspace"
    );
    let cookie = format!("rowfire_session={text}");
    let (status, _) = json(s.get("/api/status").header("cookie", cookie.as_str())).await;
    assert_eq!(status, 200);

    let listed = token::list(&s.store, &acme).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_used_at.is_some(), "a used token says so");
    assert!(
        token::list(&s.store, &WorkspaceId::DEFAULT)
            .await
            .unwrap()
            .is_empty(),
        "another workspace does not list it"
    );
    assert!(
        token::revoke(&s.store, &WorkspaceId::DEFAULT, &made.id, s.clock.now())
            .await
            .is_err(),
        "another workspace cannot revoke it"
    );

    token::revoke(&s.store, &acme, &made.id, s.clock.now())
        .await
        .unwrap();
    let (status, body) = json(
        s.get("/api/status")
            .header("authorization", bearer.as_str()),
    )
    .await;
    assert_eq!(status, 401, "a revoked token is refused: {body}");
    let forged = format!("Bearer {}x", &text[..text.len() - 1]);
    assert_eq!(
        json(
            s.get("/api/status")
                .header("authorization", forged.as_str())
        )
        .await
        .0,
        401
    );
}

#[tokio::test]
async fn metrics_which_cover_every_workspace_are_refused_to_another_workspaces_token() {
    let (s, acme) = beyond_loopback_with_acme().await;
    let (_, tenant) = token::create(&s.store, &acme, "ci", s.clock.now())
        .await
        .unwrap();
    let (_, own) = token::create(&s.store, &WorkspaceId::DEFAULT, "ops", s.clock.now())
        .await
        .unwrap();
    let tenant = format!("Bearer {tenant}");
    let refused = s
        .get("/metrics")
        .header("authorization", tenant.as_str())
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    let body = refused.text().await.unwrap();
    assert!(!body.contains("rowfire_"), "{body}");
    let own = format!("Bearer {own}");
    let read = s.get("/metrics").header("authorization", own.as_str());
    let read = read.send().await.unwrap();
    assert_eq!(read.status().as_u16(), 200);
    assert_eq!(
        s.get("/metrics").send().await.unwrap().status().as_u16(),
        401
    );
}

#[tokio::test]
async fn a_stored_token_is_only_its_hash() {
    let s = Served::sqlite(Setup::default()).await;
    let (_, text) = token::create(&s.store, &WorkspaceId::DEFAULT, "ops", s.clock.now())
        .await
        .unwrap();
    assert!(text.starts_with("rft_"), "{text}");
    let url = s.store.shown().trim_start_matches("sqlite:").to_string();
    let raw = std::fs::read(&url).unwrap();
    let secret = text.rsplit('_').next().unwrap();
    assert!(
        !raw.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "the token's secret is not in the control plane's file"
    );
}

#[tokio::test]
async fn a_request_naming_two_hosts_is_refused() {
    let s = Served::sqlite(Setup::default()).await;
    let two = s
        .get("/api/status")
        .header("host", "localhost")
        .header("host", "evil.example");
    assert_eq!(json(two).await.0, 421);
}

/// Pages, the API, static files, 404s and refusals all tell a browser to run only this server's
/// own script and style, never to frame the page, and never to guess a content type.
#[tokio::test]
async fn every_answer_carries_the_security_headers_refusals_included() {
    let s = Served::sqlite(Setup::default()).await;
    for request in [
        s.get("/"),
        s.get("/login"),
        s.get("/api/status"),
        s.get("/assets/rowfire.js"),
        s.get("/no/such/page"),
        s.get("/api/status").header("host", "rebound.example.com"),
    ] {
        let response = request.send().await.unwrap();
        let url = response.url().clone();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let csp = header("content-security-policy");
        for needle in [
            "script-src 'self'",
            "frame-ancestors 'none'",
            "default-src 'none'",
        ] {
            assert!(csp.contains(needle), "{url}: {csp}");
        }
        assert_eq!(header("x-content-type-options"), "nosniff", "{url}");
        assert_eq!(header("x-frame-options"), "DENY", "{url}");
    }
}

/// A page elsewhere may send a `text/plain` body across sites without asking first: a write's
/// body is read only when it says it is JSON.
#[tokio::test]
async fn a_write_whose_body_is_not_declared_json_is_refused_with_415() {
    let s = Served::sqlite(Setup::default()).await;
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut halt = s
            .request(Method::POST, "/api/halt")
            .body(r#"{"reason": "csrf"}"#);
        if let Some(t) = content_type {
            halt = halt.header("content-type", t);
        }
        let (status, body) = json(halt).await;
        assert_eq!(status, 415, "{content_type:?}: {body}");
        assert_eq!(body["error"]["code"], "not_json");
    }
    let (status, body) = json(s.get("/api/status")).await;
    assert_eq!(
        (status, body["halted"].clone()),
        (200, serde_json::Value::Null)
    );
    // An array is no object, though serde would read a struct from one.
    let array = s
        .request(Method::POST, "/api/halt")
        .header("content-type", "application/json")
        .body(r#"["csrf"]"#);
    let (status, body) = json(array).await;
    assert_eq!(status, 400, "{body}");
    assert!(!body.to_string().contains("struct"), "{body}");
    let halt = s
        .request(Method::POST, "/api/halt")
        .header("content-type", "application/json; charset=utf-8")
        .body(r#"{"reason": "maintenance"}"#);
    assert_eq!(json(halt).await.0, 200);
}
