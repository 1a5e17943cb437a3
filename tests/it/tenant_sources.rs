//! A tenant (a workspace other than the server's own, acting through a token) reaches only the
//! sources it stored: never this process's environment, a file on this host, a Unix socket, or a
//! loopback or private address; and a worker resolves each workspace's sources from that
//! workspace's stored DSNs alone.

use rowfire::push;
use rowfire::secret::{self, MasterKey};
use rowfire::store::{WorkspaceId, workspace};
use serde_json::json;

use crate::http_operator::polled;
use crate::served::json;
use crate::support::now;

const TENANT_DEFINITIONS: &str = "
sources:
  home: { dsn_env: HOME }
  control: { dsn_env: PATH }
triggers:
  t: { source: home, sql: 'SELECT id, at FROM x', event_time: at, key: [id] }
rules:
  r: { trigger: t }
";

#[tokio::test]
async fn a_tenant_reads_no_server_environment_and_stores_no_dsn_that_reaches_this_host() {
    let (s, _made, _dir) = polled().await;
    let acme = WorkspaceId::parse("acme").unwrap();
    workspace::create(&s.store, &acme, "Acme", "UTC")
        .await
        .unwrap();
    let (_, token) = rowfire::token::create(&s.store, &acme, "ops", s.clock.now())
        .await
        .unwrap();
    let bearer = format!("Bearer {token}");
    push::push(&s.store, &acme, TENANT_DEFINITIONS, now())
        .await
        .unwrap();

    // $HOME is set on this machine, and is not the tenant's to read or to learn about.
    let (status, body) = json(
        s.get("/api/sources")
            .header("authorization", bearer.as_str()),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    for source in body.as_array().unwrap() {
        assert_eq!(source["dsn_from"], "missing", "{source}");
        assert!(
            !source["note"].as_str().unwrap().contains("(set)"),
            "{source}"
        );
    }
    let test = s
        .post("/api/sources/home/test", json!({}))
        .header("authorization", bearer.as_str());
    let (status, body) = json(test).await;
    assert_eq!((status, &body["ok"]), (200, &json!(false)), "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("no DSN is stored"),
        "{body}"
    );

    for (dsn, says) in [
        ("sqlite:///etc/passwd", "SQLite file"),
        ("sqlite://rowfire.db", "SQLite file"),
        ("postgres://postgres@127.0.0.1:5432/postgres", "loopback"),
        ("postgres://postgres@localhost/postgres", "loopback"),
        ("mysql://root@[::1]:3306/mysql", "loopback"),
        ("postgres://u@10.1.2.3/db", "private"),
        ("postgres://u@169.254.169.254/db", "link-local"),
        ("postgres:///db?host=/var/run/postgresql", "Unix socket"),
        ("postgres://u@example.com/db?host=/tmp", "Unix socket"),
    ] {
        let add = s
            .post("/api/sources", json!({ "name": "home", "dsn": dsn }))
            .header("authorization", bearer.as_str());
        let (status, body) = json(add).await;
        assert_eq!(status, 400, "{dsn}: {body}");
        assert_eq!(body["error"]["field"], "dsn", "{dsn}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{dsn}: {message}");
        assert!(!message.contains("postgres@"), "{dsn}: {message}");
    }

    // The server's own workspace is the operator's: a file on this host is its to name.
    let (status, body) = json(s.post(
        "/api/sources",
        json!({ "name": "default", "dsn": "sqlite:///tmp/rowfire-operator-source.db" }),
    ))
    .await;
    assert_eq!(status, 201, "{body}");
}

#[tokio::test]
async fn a_worker_resolves_each_workspaces_sources_from_its_own_stored_dsns_and_the_environment_for_its_own_workspace_only()
 {
    let (s, _made, _dir) = polled().await;
    let key = MasterKey::parse(&MasterKey::generate()).unwrap();
    let (own, acme, beta) = (
        WorkspaceId::DEFAULT,
        WorkspaceId::parse("acme").unwrap(),
        WorkspaceId::parse("beta").unwrap(),
    );
    for ws in [&acme, &beta] {
        workspace::create(&s.store, ws, ws, "UTC").await.unwrap();
    }
    let secret_db = "postgres://acme@db.acme.example/app";
    secret::put(
        &s.store,
        &key,
        &acme,
        "source:warehouse",
        "dsn",
        secret_db,
        now(),
    )
    .await
    .unwrap();
    let dsns = rowfire::worker::source_dsns(
        &s.store,
        &[own.clone(), acme.clone(), beta.clone()],
        std::slice::from_ref(&own),
        Ok(&key),
    )
    .await
    .unwrap();
    let defs = rowfire::definitions::parse(
        "
sources:
  warehouse: { dsn_env: HOME }
  settings: { dsn_env: ROWFIRE_MASTER_KEY }
",
    );
    // A document naming ROWFIRE_… is refused; the resolver refuses it too.
    let problems = defs.unwrap_err().to_string();
    assert!(problems.contains("sources.settings.dsn_env"), "{problems}");
    let defs = rowfire::definitions::parse("sources:\n  warehouse: { dsn_env: HOME }\n").unwrap();
    let warehouse = defs.source("warehouse").unwrap();

    assert_eq!(dsns(&acme, warehouse).as_deref(), Some(secret_db));
    assert_eq!(
        dsns(&beta, warehouse),
        None,
        "beta reads neither acme's DSN nor $HOME"
    );
    assert!(
        dsns(&own, warehouse).is_some(),
        "the operator's workspace reads $HOME"
    );
    let mut settings = warehouse.clone();
    settings.dsn_env = "ROWFIRE_DATABASE_URL".into();
    assert_eq!(dsns(&own, &settings), None);
}
