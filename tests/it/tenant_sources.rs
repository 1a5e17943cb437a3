//! A tenant (a workspace other than the server's own, acting through a token) reaches only the
//! sources it stored: never this process's environment, a file on this host, a Unix socket, or a
//! loopback or private address; and a worker resolves each workspace's sources from that
//! workspace's stored DSNs alone.

use rowfire::push;
use rowfire::secret::{self, MasterKey};
use rowfire::send::egress::Policy;
use rowfire::store::{WorkspaceId, workspace};
use serde_json::json;

use crate::http_operator::{polled, tenant};
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
    let (acme, bearer) = tenant(&s, "acme").await;
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

    let unreachable = "does not resolve to an address this server may reach";
    for (dsn, says) in [
        ("sqlite:///etc/passwd", "SQLite file"),
        ("sqlite://rowfire.db", "SQLite file"),
        ("postgres://postgres@127.0.0.1:5432/postgres", unreachable),
        ("postgres://postgres@localhost/postgres", unreachable),
        ("mysql://root@[::1]:3306/mysql", unreachable),
        ("postgres://u@10.1.2.3/db", unreachable),
        ("postgres://u@169.254.169.254/db", unreachable),
        (
            "postgres:///db?host=/var/run/postgresql",
            "parameter \"host\"",
        ),
        (
            "postgres://u@example.com/db?host=/tmp",
            "parameter \"host\"",
        ),
        (
            "postgres://u@example.com/db?sslrootcert=/etc/passwd",
            "parameter \"sslrootcert\"",
        ),
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
        Ok(&Policy::default()),
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

    let acmes = dsns(&acme, warehouse).expect("acme's stored DSN");
    assert_eq!(acmes.url, secret_db);
    assert!(acmes.tenant.is_some(), "acme's DSN connects as a tenant's");
    assert!(
        dsns(&beta, warehouse).is_none(),
        "beta reads neither acme's DSN nor $HOME"
    );
    let own_dsn = dsns(&own, warehouse).expect("the operator's workspace reads $HOME");
    assert!(own_dsn.tenant.is_none());
    let mut settings = warehouse.clone();
    settings.dsn_env = "ROWFIRE_DATABASE_URL".into();
    assert!(dsns(&own, &settings).is_none());

    // Checked again where it connects, whenever it was stored: a tenant's DSN naming this host
    // (as if its name had been pointed here since) is refused before any connection is made.
    let local = rowfire::source::Dsn {
        url: "postgres://postgres@127.0.0.1:5432/postgres".into(),
        tenant: acmes.tenant.clone(),
    };
    let Err(e) = rowfire::source::Source::connect_resolved(warehouse, &local).await else {
        panic!("a tenant's DSN reached this host");
    };
    let e = e.to_string();
    assert!(
        e.contains("does not resolve to an address this server may reach"),
        "{e}"
    );
}

/// The PostgreSQL driver fills what a DSN leaves out from the process's environment
/// (`PGPASSWORD`, `~/.pgpass`): a tenant's server must never receive the operator's password.
/// The test runs itself again in a child process whose environment holds one.
#[tokio::test]
async fn a_tenants_postgres_source_is_sent_no_password_from_this_processs_environment() {
    const NAME: &str = "tenant_sources::a_tenants_postgres_source_is_sent_no_password_from_this_processs_environment";
    const SECRET: &str = "operator-pg-password";
    #[expect(
        clippy::disallowed_methods,
        reason = "the test tells the child process it runs itself in by a variable"
    )]
    let child = std::env::var_os("ROWFIRE_TEST_PGPASSWORD_CHILD").is_some();
    if !child {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture"])
            .env("ROWFIRE_TEST_PGPASSWORD_CHILD", "1")
            .env("PGPASSWORD", SECRET)
            .output()
            .unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{stdout}{stderr}");
        assert!(
            stdout.contains("1 passed"),
            "the child ran the test: {stdout}"
        );
        return;
    }
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A server that asks for a cleartext password and keeps what it is sent.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = tokio::spawn(async move {
        let (mut c, _) = listener.accept().await.unwrap();
        loop {
            let len = c.read_i32().await.unwrap() as usize;
            let mut body = vec![0u8; len - 4];
            c.read_exact(&mut body).await.unwrap();
            if len == 8 && body == [4, 210, 22, 47] {
                c.write_all(b"N").await.unwrap(); // no TLS
                continue;
            }
            break;
        }
        c.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await.unwrap();
        let kind = c.read_u8().await.unwrap();
        let len = c.read_i32().await.unwrap() as usize;
        let mut body = vec![0u8; len - 4];
        c.read_exact(&mut body).await.unwrap();
        (
            kind,
            String::from_utf8_lossy(&body)
                .trim_end_matches('\0')
                .to_string(),
        )
    });
    let defs = rowfire::definitions::parse("source: { type: postgres }\n").unwrap();
    let def = defs.source(rowfire::definitions::DEFAULT_SOURCE).unwrap();
    let dsn = rowfire::source::Dsn {
        url: format!("postgres://tenant@127.0.0.1:{port}/db?sslmode=disable"),
        tenant: Some(std::sync::Arc::new(|_| Ok(()))),
    };
    let _ = rowfire::source::Source::connect_resolved(def, &dsn).await;
    let (kind, password) = received.await.unwrap();
    assert_eq!(kind, b'p');
    assert_eq!(
        password, "",
        "the tenant's server was sent a password it did not give"
    );
}

/// A running worker reads the stored DSNs again every minute: its resolver answers from what was
/// read last, so a DSN stored (or a workspace created) since it started resolves.
#[test]
fn a_dsn_stored_after_the_resolver_was_built_resolves_once_read_again() {
    let shared = std::sync::Arc::new(std::sync::RwLock::new(rowfire::poll::StoredDsns::new()));
    let acme = WorkspaceId::parse("acme").unwrap();
    let dsns = rowfire::poll::shared_or_env_dsn(
        shared.clone(),
        &[WorkspaceId::DEFAULT],
        std::sync::Arc::new(|_| Ok(())),
    );
    let defs = rowfire::definitions::parse("sources:\n  warehouse: { dsn_env: HOME }\n").unwrap();
    let warehouse = defs.source("warehouse").unwrap();
    assert!(dsns(&acme, warehouse).is_none());
    shared.write().unwrap().insert(
        (acme.clone(), "warehouse".into()),
        "postgres://acme@db.acme.example/app".into(),
    );
    let resolved = dsns(&acme, warehouse).expect("read again");
    assert!(resolved.tenant.is_some());
}
