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

    // One worker serves both: each workspace's declined_charge reads the same rows. How many
    // fire depends on where the weeks begin, and acme's begin in Berlin, so on some dates the
    // two differ by a row whose week is another in UTC.
    // acme's definitions read this process's environment, which only the workspaces the
    // operator runs may do: the operator says acme is one of them.
    let shared_env = [env[0], env[1], ("ROWFIRE_OPERATOR_WORKSPACES", "acme")];
    let worker = rowfire(&["worker", "--once"], &shared_env);
    let (ok, (polled, stderr)) = (worker.status.success(), text(&worker));
    assert!(ok, "{polled}{stderr}");
    let lines: Vec<&str> = polled
        .lines()
        .filter(|l| l.starts_with("declined_charge: "))
        .collect();
    assert_eq!(lines.len(), 2, "{polled}");
    let matched = |l: &str| l.split(" fired=").next().unwrap_or_default().to_string();
    assert_eq!(matched(lines[0]), matched(lines[1]), "{polled}");
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
    // Its rules name no zone: they count their periods in the workspace's, until it changes.
    let (_, listed, _) = run(&["list", "--workspace", "acme"]);
    assert!(listed.contains("per week, Europe/Berlin"), "{listed}");
    let (ok, stdout, stderr) = run(&["workspaces", "rename", "acme", "--timezone", "UTC"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("its time zone is now UTC")
            && stdout.contains("changed rule(s), back in shadow")
            && stdout.contains("billing_ticket"),
        "{stdout}"
    );
    let (_, listed, _) = run(&["list", "--workspace", "acme"]);
    assert!(listed.contains("per week, UTC"), "{listed}");
    let (ok, _, stderr) = run(&["workspaces", "rename", "acme"]);
    assert!(!ok && stderr.contains("required"), "{stderr}");
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

on_both_engines!(
    rules_without_a_zone_take_the_workspaces,
    a_rule_that_names_no_time_zone_counts_its_periods_in_the_workspaces_and_a_new_zone_sends_it_back_to_shadow
);

/// The zone a version was pushed in is stored with it, so the poller, the sender and `list` read
/// the same rules the push checked; changing the workspace's zone re-reads the definitions in it.
async fn a_rule_that_names_no_time_zone_counts_its_periods_in_the_workspaces_and_a_new_zone_sends_it_back_to_shadow(
    cp: &str,
) {
    use jiff::tz::TimeZone;
    use rowfire::cadence::Period;
    use rowfire::definitions::versions;
    use rowfire::push;
    use rowfire::rules::{self, Mode};
    use rowfire::store::{Store, WorkspaceId, workspace};

    let store = Store::open(cp).await.unwrap();
    store.migrate().await.unwrap();
    let ws = WorkspaceId::parse("berlin").unwrap();
    workspace::create(&store, &ws, "Berlin", "Europe/Berlin")
        .await
        .unwrap();
    let doc = "version: 2
source: { dsn_env: SAMPLE_DATABASE_URL }
triggers:
  signups: { sql: \"SELECT id, created_at FROM accounts\", event_time: created_at, key: [id] }
rules:
  daily: { trigger: signups, policy: once_per_period, period: day }
  daily_in_tokyo: { trigger: signups, policy: once_per_period, period: day, timezone: Asia/Tokyo }
";
    let now = crate::support::now();
    push::push(&store, &ws, doc, now).await.unwrap();
    let (version, defs) = versions::in_force(&store, &ws).await.unwrap().unwrap();
    assert_eq!(version, 1);
    let zone = |defs: &rowfire::definitions::Definitions, rule: &str| {
        defs.rule(rule).unwrap().cadence.time_zone()
    };
    let berlin = TimeZone::get("Europe/Berlin").unwrap();
    assert_eq!(zone(&defs, "daily"), berlin);
    assert_eq!(
        zone(&defs, "daily_in_tokyo"),
        TimeZone::get("Asia/Tokyo").unwrap()
    );
    // 23:30 UTC on 30 November is already 1 December in Berlin: that is the day it counts in.
    let late: jiff::Timestamp = "2026-11-30T23:30:00Z".parse().unwrap();
    assert_eq!(
        Period::Day.start(&zone(&defs, "daily"), late).to_string(),
        "2026-12-01"
    );
    // The default workspace reads the same document in UTC.
    let default = WorkspaceId::parse("default").unwrap();
    push::push(&store, &default, doc, now).await.unwrap();
    let (_, in_utc) = versions::in_force(&store, &default).await.unwrap().unwrap();
    assert_eq!(zone(&in_utc, "daily"), TimeZone::UTC);

    // Pushing the same document again in the same zone changes nothing.
    assert!(push::push(&store, &ws, doc, now).await.unwrap().unchanged);

    for rule in ["daily", "daily_in_tokyo"] {
        rules::set_mode(&store, &ws, rule, Mode::Live, now)
            .await
            .unwrap();
    }
    let summary = push::set_zone(&store, &ws, "America/New_York", now)
        .await
        .unwrap()
        .expect("the definitions in force are read again");
    assert_eq!(summary.version, 2);
    assert_eq!(summary.changed_rules, ["daily"]);
    let (_, defs) = versions::in_force(&store, &ws).await.unwrap().unwrap();
    assert_eq!(
        zone(&defs, "daily"),
        TimeZone::get("America/New_York").unwrap()
    );
    let modes = rules::list(&store, &ws).await.unwrap();
    let mode = |rule: &str| modes.iter().find(|r| r.rule == rule).unwrap().mode;
    assert_eq!(mode("daily"), Mode::Shadow, "its days moved: shadow first");
    assert_eq!(mode("daily_in_tokyo"), Mode::Live, "it names its own zone");
    assert_eq!(
        workspace::get(&store, &ws).await.unwrap().timezone,
        "America/New_York"
    );

    // An unknown zone changes nothing; the default workspace never moved.
    assert!(
        push::set_zone(&store, &ws, "Mars/Olympus", now)
            .await
            .is_err()
    );
    assert_eq!(
        workspace::get(&store, &ws).await.unwrap().timezone,
        "America/New_York"
    );
    let (_, in_utc) = versions::in_force(&store, &default).await.unwrap().unwrap();
    assert_eq!(zone(&in_utc, "daily"), TimeZone::UTC);
}
