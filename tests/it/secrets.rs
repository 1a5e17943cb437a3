//! Secrets stay secret: credentials and a source DSN are set through the command line, used to
//! send, and then searched for in the control-plane database, the logs and every command's
//! output. They are found only where they belong: in the request the receiver got.

use jiff::Timestamp;

use crate::cli::{rowfire, text};
use crate::receiver::Receiver;
use crate::sending::{Options, add_signups, signing_secret};
use crate::support::TestSqlite;

const TOKEN: &str = "tok-7Hq2-NEVER-PRINT-ME-91xk";

/// The sending tests' definitions plus an `api` integration with bearer auth and an
/// idempotency header, bound to the same rule.
fn definitions(receiver: &str) -> String {
    let opts = Options {
        integration: format!(
            "  api:
    base_url: {receiver}/api
    auth: {{ kind: bearer }}
    actions:
      notify:
        method: POST
        path: /notify
        idempotency_header: Idempotency-Key
        body: {{ user: \"{{{{ id }}}}\" }}
"
        ),
        binding: "      - action: api.notify\n",
        ..Options::default()
    };
    crate::sending::definitions(receiver, &opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_or_dsn_appears_in_the_database_the_logs_or_any_output() {
    let receiver = Receiver::start().await;
    let source = TestSqlite::new();
    #[expect(
        clippy::disallowed_methods,
        reason = "the worker under test is a child process on the system clock"
    )]
    let at = Timestamp::now();
    add_signups(&source, 0..2, at).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("definitions.yaml");
    std::fs::write(&file, definitions(&receiver.url)).unwrap();
    let cp = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let key = rowfire::secret::MasterKey::generate();
    let hook_secret = signing_secret();
    let dsn_path = source.url.trim_start_matches("sqlite://").to_string();
    let env = [
        ("ROWFIRE_DATABASE_URL", cp.as_str()),
        ("ROWFIRE_MASTER_KEY", key.as_str()),
        ("ROWFIRE_EGRESS_ALLOW", "127.0.0.1"),
        ("ROWFIRE_LOG", "debug"),
        ("API_TOKEN", TOKEN),
        ("HOOK_SECRET", hook_secret.as_str()),
        ("SIGNUPS_URL", source.url.as_str()),
    ];
    let steps: &[&[&str]] = &[
        &["push", "-f", file.to_str().unwrap()],
        &["promote", "welcome"],
        &["rewind", "signups", "--days", "1"],
        &[
            "integrations",
            "set-credential",
            "api",
            "token",
            "--from-env",
            "API_TOKEN",
        ],
        &[
            "integrations",
            "set-credential",
            "hooks",
            "signing_secret",
            "--from-env",
            "HOOK_SECRET",
        ],
        &["sources", "add", "default", "--url-env", "SIGNUPS_URL"],
        &["integrations", "list"],
        &["sources", "list"],
    ];
    let mut output = String::new();
    for args in steps {
        let out = rowfire(args, &env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        output.push_str(&stdout);
        output.push_str(&stderr);
    }
    // The worker finds the source through the stored DSN alone.
    let without_dsn: Vec<(&str, &str)> = env
        .iter()
        .copied()
        .filter(|(k, _)| *k != "SIGNUPS_URL")
        .collect();
    let worker = rowfire(&["worker", "--once"], &without_dsn);
    let (stdout, stderr) = text(&worker);
    assert!(worker.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("sent=4"), "{stdout}{stderr}");
    output.push_str(&stdout);
    output.push_str(&stderr);
    for args in [
        &["status"][..],
        &["deliveries"][..],
        &["deliveries", "show", "2"],
        &[
            "integrations",
            "test",
            "api",
            "notify",
            "--row",
            "{\"id\": \"u9\"}",
        ],
    ] {
        let out = rowfire(args, &env);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        output.push_str(&stdout);
        output.push_str(&stderr);
    }
    assert!(output.contains("deliveries: sent 4"), "{output}");
    assert!(output.contains("attempts   1"), "{output}");

    // The credential was applied at the moment of sending…
    let api: Vec<_> = receiver
        .seen()
        .into_iter()
        .filter(|r| r.path == "/api/notify")
        .collect();
    assert_eq!(api.len(), 3, "two deliveries and one test");
    assert!(
        api.iter()
            .all(|r| r.header("authorization") == format!("Bearer {TOKEN}"))
    );
    assert!(
        api[..2]
            .iter()
            .all(|r| !r.header("idempotency-key").is_empty())
    );
    // …and is nowhere else.
    let wrapped_secret = hook_secret.trim_start_matches("whsec_");
    for needle in [TOKEN, wrapped_secret, dsn_path.as_str()] {
        assert!(!output.contains(needle), "a secret was printed: {output}");
    }
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        for needle in [TOKEN, wrapped_secret, dsn_path.as_str()] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{} holds a secret in the clear",
                path.display()
            );
        }
    }

    // A wrong master key fails loudly, says so, and still shows nothing secret.
    let other = rowfire::secret::MasterKey::generate();
    let wrong: Vec<(&str, &str)> = env
        .iter()
        .map(|(k, v)| {
            if *k == "ROWFIRE_MASTER_KEY" {
                (*k, other.as_str())
            } else {
                (*k, *v)
            }
        })
        .collect();
    let out = rowfire(
        &[
            "integrations",
            "test",
            "api",
            "notify",
            "--row",
            "{\"id\": 1}",
        ],
        &wrong,
    );
    let (stdout, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(stderr.contains("sealed under master key"), "{stderr}");
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN));
}

#[test]
fn integrations_add_extends_the_definitions_in_force_and_list_shows_the_missing_credential() {
    let dir = tempfile::tempdir().unwrap();
    let cp = format!("sqlite://{}", dir.path().join("rowfire.db").display());
    let env = [("ROWFIRE_DATABASE_URL", cp.as_str())];
    let push = rowfire(&["push", "-f", "examples/saas/definitions.yaml"], &env);
    assert!(push.status.success(), "{}", text(&push).1);
    let add = rowfire(
        &["integrations", "add", "alerts", "--catalog", "slack"],
        &env,
    );
    let (stdout, stderr) = text(&add);
    assert!(add.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("set-credential alerts token"), "{stdout}");
    let pulled = text(&rowfire(&["pull"], &env)).0;
    let original = std::fs::read_to_string("examples/saas/definitions.yaml").unwrap();
    assert!(
        pulled.contains("  alerts:\n    catalog: \"slack\""),
        "{pulled}"
    );
    assert_eq!(
        pulled.replace("  alerts:\n    catalog: \"slack\"\n", ""),
        original,
        "the rest of the document is kept as written"
    );
    let list = text(&rowfire(&["integrations", "list"], &env)).0;
    assert!(
        list.contains("alerts  (slack)  https://slack.com/api"),
        "{list}"
    );
    assert!(list.contains("token MISSING"), "{list}");
    let custom = dir.path().join("crm.yaml");
    std::fs::write(
        &custom,
        "base_url: https://crm.example.com/api\nauth: { kind: bearer }\nactions:\n  note: { method: POST, path: /notes, body: { text: hi } }\n",
    )
    .unwrap();
    let from = [
        "integrations",
        "add",
        "crm",
        "--from",
        custom.to_str().unwrap(),
    ];
    let added = rowfire(&from, &env);
    assert!(added.status.success(), "{}", text(&added).1);
    let list = text(&rowfire(&["integrations", "list"], &env)).0;
    assert!(
        list.contains("crm  (crm)  https://crm.example.com/api"),
        "{list}"
    );
    let worker = rowfire(&["worker", "--once"], &env);
    let (_, stderr) = text(&worker);
    assert!(
        stderr.contains("warning: alerts's deliveries will wait: ROWFIRE_MASTER_KEY is not set"),
        "{stderr}"
    );
    let off = rowfire(&["integrations", "disable", "alerts", "maintenance"], &env);
    assert!(off.status.success(), "{}", text(&off).1);
    let list = text(&rowfire(&["integrations", "list"], &env)).0;
    assert!(
        list.contains("DISABLED (disabled by hand: maintenance)"),
        "{list}"
    );
    let on = text(&rowfire(&["integrations", "enable", "alerts"], &env)).0;
    assert!(on.contains("alerts is enabled"), "{on}");
    let again = rowfire(
        &["integrations", "add", "alerts", "--catalog", "slack"],
        &env,
    );
    assert!(!again.status.success());
    assert!(text(&again).1.contains("already defined"));
    let no_key = rowfire(
        &[
            "integrations",
            "set-credential",
            "alerts",
            "token",
            "--from-env",
            "HOME",
        ],
        &env,
    );
    assert!(
        text(&no_key).1.contains("ROWFIRE_MASTER_KEY is not set"),
        "{}",
        text(&no_key).1
    );
}
