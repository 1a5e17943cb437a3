//! `rowfire workspaces` and `--workspace`: two workspaces in one control plane with the same
//! trigger names, rule names and keys fire and deliver independently, and what one shows never
//! holds the other's rows.

use crate::cli::{rowfire, text};

on_both_engines!(
    two_workspaces_fire_and_report_independently,
    two_workspaces_with_the_same_definitions_fire_and_report_independently
);

/// On PostgreSQL the control plane is the test database's non-superuser owner, so forced
/// row-level security is what keeps the two apart.
async fn two_workspaces_with_the_same_definitions_fire_and_report_independently(cp: &str) {
    let dir = tempfile::tempdir().unwrap();
    let sample = format!("sqlite://{}", dir.path().join("sample.db").display());
    let load = rowfire(
        &["fixture", "load", "--into", &format!("{sample}?mode=rwc")],
        &[],
    );
    assert!(load.status.success(), "{}", text(&load).1);
    let env = [
        ("ROWFIRE_DATABASE_URL", cp),
        ("SAMPLE_DATABASE_URL", sample.as_str()),
    ];
    let run = |args: &[&str]| {
        let out = rowfire(args, &env);
        let (stdout, stderr) = text(&out);
        (out.status.success(), stdout, stderr)
    };
    assert!(run(&["migrate"]).0);

    let (ok, stdout, stderr) = run(&[
        "workspaces",
        "create",
        "acme",
        "--timezone",
        "Europe/Berlin",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("workspace acme created (time zone Europe/Berlin)"),
        "{stdout}"
    );
    let (ok, _, stderr) = run(&["workspaces", "create", "acme"]);
    assert!(!ok && stderr.contains("exists already"), "{stderr}");
    let (ok, _, stderr) = run(&["workspaces", "create", "Not An Id"]);
    assert!(!ok && stderr.contains("is not a workspace id"), "{stderr}");
    let (ok, _, stderr) = run(&["workspaces", "create", "mars", "--timezone", "Mars/Olympus"]);
    assert!(!ok && stderr.contains("unknown time zone"), "{stderr}");
    let (_, list, _) = run(&["workspaces"]);
    assert!(
        list.contains("acme") && list.contains("Europe/Berlin") && list.contains("default"),
        "{list}"
    );
    assert_eq!(
        list.contains("isolation enforced by the database"),
        cp.starts_with("sqlite"),
        "SQLite says its isolation is the application's: {list}"
    );

    // The same definitions in both: the flag and the variable name the workspace alike.
    let file = "examples/saas/definitions.yaml";
    assert!(run(&["push", "-f", file]).0);
    let acme_env = [
        ("ROWFIRE_DATABASE_URL", cp),
        ("SAMPLE_DATABASE_URL", sample.as_str()),
        ("ROWFIRE_WORKSPACE", "acme"),
    ];
    let push = rowfire(&["push", "-f", file], &acme_env);
    assert!(push.status.success(), "{}", text(&push).1);
    for ws in ["default", "acme"] {
        assert!(run(&["promote", "billing_ticket", "--workspace", ws]).0);
        assert!(
            run(&[
                "rewind",
                "declined_charge",
                "--days",
                "120",
                "--workspace",
                ws
            ])
            .0
        );
    }

    // One worker serves both: each workspace's declined_charge fires the same rows.
    let (ok, polled, stderr) = run(&["worker", "--once"]);
    assert!(ok, "{polled}{stderr}");
    let lines: Vec<&str> = polled
        .lines()
        .filter(|l| l.starts_with("declined_charge: "))
        .collect();
    assert_eq!(lines.len(), 2, "{polled}");
    assert_eq!(lines[0], lines[1], "{polled}");
    assert!(!lines[0].contains("fired=0"), "{polled}");

    // What one workspace shows never holds the other's rows.
    let (_, mine, _) = run(&["deliveries", "--workspace", "acme", "--limit", "10000"]);
    let (_, theirs, _) = run(&["deliveries", "--limit", "10000"]);
    let ids = |listing: &str| -> std::collections::BTreeSet<String> {
        listing
            .lines()
            .filter_map(|l| l.split_whitespace().next()?.strip_prefix('#'))
            .map(str::to_string)
            .collect()
    };
    let (mine, theirs) = (ids(&mine), ids(&theirs));
    assert!(!mine.is_empty() && !theirs.is_empty());
    assert!(mine.is_disjoint(&theirs), "{mine:?} {theirs:?}");
    let (_, status, _) = run(&["status", "--workspace", "acme"]);
    assert!(status.contains("workspace acme: running"), "{status}");
    if cp.starts_with("postgres") {
        assert!(
            status.contains("isolation: enforced by PostgreSQL's row-level security"),
            "{status}"
        );
    }
    // `why` in one workspace names only its own fires.
    let (ok, mine_why, stderr) = run(&[
        "why",
        "billing_ticket",
        "acct_013",
        "--days",
        "120",
        "--workspace",
        "acme",
    ]);
    let (_, theirs_why, _) = run(&["why", "billing_ticket", "acct_013", "--days", "120"]);
    assert!(ok, "{stderr}");
    let fire_ids = |text: &str| -> std::collections::BTreeSet<String> {
        text.split("fire #")
            .skip(1)
            .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect())
            .collect()
    };
    let (mine_fires, theirs_fires) = (fire_ids(&mine_why), fire_ids(&theirs_why));
    assert!(
        !mine_fires.is_empty() && !theirs_fires.is_empty(),
        "{mine_why}{theirs_why}"
    );
    assert!(
        mine_fires.is_disjoint(&theirs_fires),
        "why names only its own workspace's fires: {mine_why}{theirs_why}"
    );
    assert!(run(&["halt", "--workspace", "acme", "maintenance"]).0);
    let (_, status, _) = run(&["status"]);
    assert!(status.contains("workspace default: running"), "{status}");

    // Renaming keeps the id; deleting asks first and then takes everything in the workspace.
    let (ok, stdout, _) = run(&["workspaces", "rename", "acme", "Acme GmbH"]);
    assert!(ok && stdout.contains("now \"Acme GmbH\""), "{stdout}");
    let (ok, _, stderr) = run(&["workspaces", "delete", "acme"]);
    assert!(
        !ok && stderr.contains("not confirmed; nothing was deleted"),
        "{stderr}"
    );
    let (ok, stdout, stderr) = run(&["workspaces", "delete", "acme", "--yes"]);
    assert!(
        ok && stdout.contains("workspace acme deleted"),
        "{stdout}{stderr}"
    );
    let (ok, _, stderr) = run(&["list", "--workspace", "acme"]);
    assert!(!ok && stderr.contains("workspaces create acme"), "{stderr}");
    let (ok, _, stderr) = run(&["workspaces", "delete", "default", "--yes"]);
    assert!(!ok && stderr.contains("cannot be deleted"), "{stderr}");
    let (_, after, _) = run(&["deliveries", "--limit", "10000"]);
    assert_eq!(
        ids(&after),
        theirs,
        "the default workspace keeps everything it had"
    );
}
