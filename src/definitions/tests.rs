use super::*;
use crate::cadence::Period;

const GOOD: &str = r#"
version: 2
source:
  type: postgres
  dsn_env: APP_DB
  statement_timeout_ms: 5000
  max_rows: 500
triggers:
  declined_charge:
    description: A card payment was declined
    sql: SELECT id, account_id, attempted_at FROM payment_attempts WHERE status = 'declined'
    event_time: attempted_at
    key: [account_id]
    lookback: 15m
rules:
  billing_ticket:
    trigger: declined_charge
    description: Open a ticket
    policy: once_per_period
    period: week
    timezone: America/New_York
  every_third:
    trigger: declined_charge
    policy: once_per_n
    n: 3
  first_ever:
    trigger: declined_charge
    policy: once_ever
"#;

#[test]
fn a_version_2_document_is_accepted_unchanged() {
    let defs = parse(GOOD).unwrap();
    let src = defs.source(DEFAULT_SOURCE).unwrap();
    assert_eq!(src.kind, Some(Dialect::Postgres));
    assert_eq!(src.dsn_env, "APP_DB");
    assert_eq!(src.page_size, 500);
    assert_eq!(src.statement_timeout, Duration::from_secs(5));
    let t = defs.trigger("declined_charge").unwrap();
    assert_eq!(t.key, vec!["account_id"]);
    assert_eq!(t.source, DEFAULT_SOURCE);
    assert_eq!(t.lookback, SignedDuration::from_mins(15));
    assert_eq!(t.poll_interval, DEFAULT_POLL_INTERVAL);
    let rule = defs.rule("billing_ticket").unwrap();
    assert_eq!(
        rule.cadence,
        Cadence::OncePerPeriod {
            period: Period::Week,
            tz: TimeZone::get("America/New_York").unwrap()
        }
    );
    assert_eq!(
        defs.rule("every_third").unwrap().cadence,
        Cadence::OncePerN { n: 3 }
    );
    assert_eq!(defs.rule("first_ever").unwrap().cadence, Cadence::OnceEver);
    let names: Vec<&str> = defs.rules.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["billing_ticket", "every_third", "first_ever"],
        "file order is kept"
    );
}

#[test]
fn three_independent_mistakes_are_all_reported_with_their_paths() {
    let doc = GOOD
        .replace("period: week", "period: fortnight")
        .replace(
            "trigger: declined_charge\n    policy: once_ever",
            "trigger: declined_charges\n    policy: once_ever",
        )
        .replace("    lookback: 15m", "    lookback: 15m\n    evnt_time: x");
    let problems = parse(&doc).unwrap_err().0;
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "triggers.declined_charge.evnt_time",
            "rules.billing_ticket.period",
            "rules.first_ever.trigger"
        ],
        "{problems:#?}"
    );
    assert!(
        problems[0].message.contains("did you mean \"event_time\""),
        "{}",
        problems[0].message
    );
    assert!(problems[1].message.contains("use day, week or month"));
    assert!(
        problems[2]
            .message
            .contains("known triggers: declined_charge"),
        "{}",
        problems[2].message
    );
}

#[test]
fn unknown_keys_are_errors_at_every_level() {
    let doc = GOOD
        .replace("version: 2", "version: 2\nrulez: {}")
        .replace("max_rows: 500", "max_rows: 500\n  password: x");
    let problems = parse(&doc).unwrap_err().0;
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["(document).rulez", "source.password"]);
}

#[test]
fn the_sql_guard_runs_as_part_of_validation() {
    let doc = GOOD.replace(
        "SELECT id, account_id, attempted_at FROM payment_attempts WHERE status = 'declined'",
        "DELETE FROM payment_attempts",
    );
    let problems = parse(&doc).unwrap_err().0;
    assert_eq!(problems[0].path, "triggers.declined_charge.sql");
    assert!(
        problems[0].message.contains("DELETE"),
        "{}",
        problems[0].message
    );
}

#[test]
fn cadence_settings_must_fit_the_policy() {
    let doc = r#"
version: 2
triggers:
  t: { sql: "SELECT 1 AS a, now() AS at", event_time: at, key: [a] }
rules:
  no_policy: { trigger: t }
  period_alone: { trigger: t, period: week }
  no_period: { trigger: t, policy: once_per_period }
  n_zero: { trigger: t, policy: once_per_n, n: 0 }
  stray_n: { trigger: t, policy: once_ever, n: 2 }
  bad_zone: { trigger: t, policy: once_ever, timezone: Mars/Olympus }
"#;
    let problems = parse(doc).unwrap_err().0;
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "rules.period_alone.period",
            "rules.no_period.period",
            "rules.n_zero.n",
            "rules.stray_n.n",
            "rules.bad_zone.timezone"
        ]
    );
}

#[test]
fn a_trigger_on_an_undeclared_source_is_one_problem_for_its_rules_unless_the_source_is_stored() {
    let doc = GOOD.replace(
        "    lookback: 15m",
        "    lookback: 15m\n    source: warehouse",
    );
    let defs = parse(&doc).expect("an undeclared source does not block the file");
    let warehouse = defs.source("warehouse").unwrap();
    assert!(!warehouse.declared && warehouse.dsn_env.is_empty());
    let p = defs.unresolved_sources(|_| false);
    assert_eq!(p.len(), 1, "{p:?}");
    assert_eq!(p[0].path, "triggers.declined_charge.source");
    for needle in [
        "declare it under `sources:`",
        "rowfire sources add warehouse --url-env VAR",
        "declared sources: default",
    ] {
        assert!(p[0].message.contains(needle), "{}", p[0].message);
    }
    let rules: Vec<&str> = defs
        .rules
        .iter()
        .filter(|r| r.trigger == "declined_charge")
        .map(|r| r.name.as_str())
        .collect();
    assert!(!rules.is_empty());
    assert!(
        rules.iter().all(|r| p[0].message.contains(r)),
        "{}",
        p[0].message
    );
    assert!(
        defs.unresolved_sources(|name| name == "warehouse")
            .is_empty()
    );
}

#[test]
fn a_trigger_source_that_is_not_a_name_is_refused_with_the_known_ones() {
    let doc = GOOD.replace(
        "    lookback: 15m",
        "    lookback: 15m\n    source: \"ware house\"",
    );
    let p = parse(&doc).unwrap_err().0;
    assert_eq!(p[0].path, "triggers.declined_charge.source");
    assert!(
        p[0].message.contains("known sources: default"),
        "{}",
        p[0].message
    );
}

/// A trigger on meetings and the start of a rule `reminder` on it; a test adds the rule's keys.
const MEETING_REMINDER: &str = r#"
version: 2
triggers:
  meeting: { sql: "SELECT id, starts_at, updated_at FROM meetings", event_time: updated_at, key: id }
rules:
  reminder:
    trigger: meeting
"#;

#[test]
fn anchored_rules_take_an_anchor_instead_of_a_policy() {
    let doc = format!(
        "{MEETING_REMINDER}    anchor: {{ column: starts_at, lead: 15m, lead_column: lead_minutes }}\n"
    );
    let defs = parse(&doc).unwrap();
    let Cadence::Anchored(a) = &defs.rule("reminder").unwrap().cadence else {
        panic!()
    };
    assert_eq!(a.lead, SignedDuration::from_mins(15));
    assert_eq!(a.grace, SignedDuration::from_mins(5));
    assert_eq!(a.lead_column.as_deref(), Some("lead_minutes"));
}

#[test]
fn a_version_2_max_rows_above_the_largest_page_and_an_empty_description_are_accepted() {
    let doc = GOOD
        .replace("max_rows: 500", "max_rows: 500000")
        .replace(
            "description: A card payment was declined",
            "description: \"\"",
        )
        .replace("description: Open a ticket", "description: ''");
    let defs = parse(&doc).unwrap();
    // Rowfire pages and never truncates: a larger max_rows is read as the largest page.
    let src = defs.source(DEFAULT_SOURCE).unwrap();
    assert_eq!(src.page_size as u64, limits::MAX_PAGE_ROWS);
    assert_eq!(defs.trigger("declined_charge").unwrap().description, None);
    assert_eq!(defs.rule("billing_ticket").unwrap().description, None);
    let zero = GOOD.replace("max_rows: 500", "max_rows: 0");
    assert!(parse(&zero).is_err(), "a page of no rows is refused");
}

#[test]
fn an_anchored_rule_refuses_a_cadence_beside_it_and_a_lead_its_look_ahead_cannot_reach() {
    let doc = format!(
        "{MEETING_REMINDER}    period: week\n    n: 3\n    anchor: {{ column: starts_at, lead: 1d }}\n"
    );
    let problems = parse(&doc).unwrap_err().to_string();
    for expected in [
        "rules.reminder.period: a rule with `anchor` is time-anchored; remove `period`",
        "rules.reminder.n: a rule with `anchor` is time-anchored; remove `n`",
        "rules.reminder.anchor.look_ahead: must be longer than the lead (1d)",
    ] {
        assert!(problems.contains(expected), "{expected}\n{problems}");
    }
    let reachable = doc
        .replace("    period: week\n    n: 3\n", "")
        .replace("lead: 1d", "lead: 1d, look_ahead: 25h");
    assert!(parse(&reachable).is_ok());
}

#[test]
fn a_huge_once_per_n_is_described_without_overflow() {
    let c = Cadence::OncePerN { n: u32::MAX };
    assert_eq!(
        c.describe(&["id".to_string()]),
        "occurrences 1, 4294967296, 8589934591 … per id"
    );
}

#[test]
fn invalid_yaml_is_one_problem_not_a_panic() {
    let p = parse("version: [2\n").unwrap_err().0;
    assert_eq!(p.len(), 1);
    assert!(p[0].message.starts_with("not valid YAML"));
}

#[test]
fn a_dsn_pasted_into_dsn_env_is_refused_without_being_echoed() {
    let doc = GOOD.replace("dsn_env: APP_DB", "dsn_env: postgres://app:hunter2@db/prod");
    let p = parse(&doc).unwrap_err();
    assert_eq!(p.0[0].path, "source.dsn_env");
    assert!(!p.to_string().contains("hunter2"), "{p}");
}

const WITH_INTEGRATIONS: &str = r#"
version: 2
integrations:
  alerts:
    catalog: slack
    timeout_ms: 2000
    rate_limit: 5
  crm:
    base_url: https://crm.example.com/api
    auth: { kind: header, header: X-Api-Key }
    actions:
      note:
        method: POST
        path: "/accounts/{{ recipient }}/notes"
        idempotency_header: Idempotency-Key
        params:
          text: { required: true }
        body: { text: "{{ params.text }}" }
triggers:
  t:
    sql: SELECT id, at FROM x
    event_time: at
    key: [id]
rules:
  r:
    trigger: t
    policy: once_ever
    expire_after: 30m
    frequency_cap: { max: 3, per: 24h }
    actions:
      - action: crm.note
        params: { text: "hello" }
"#;

#[test]
fn catalogue_overrides_and_custom_integrations_are_read_by_the_same_code() {
    let defs = parse(WITH_INTEGRATIONS).unwrap();
    let alerts = &defs.integration("alerts").unwrap().spec;
    assert_eq!((alerts.timeout_ms, alerts.rate_limit), (2000, Some(5.0)));
    assert_eq!(
        alerts.base_url, "https://slack.com/api",
        "the entry's own keys stay"
    );
    let crm = &defs.integration("crm").unwrap().spec;
    assert_eq!(crm.name, "crm");
    assert_eq!(crm.credentials(), ["token"]);
    assert_eq!(
        crm.actions["note"].idempotency_header.as_deref(),
        Some("Idempotency-Key")
    );
    let rule = defs.rule("r").unwrap();
    assert_eq!(rule.expire_after, Some(jiff::SignedDuration::from_mins(30)));
    assert_eq!(
        rule.frequency_cap,
        Some(FrequencyCap {
            max: 3,
            per: jiff::SignedDuration::from_hours(24)
        })
    );
}

#[test]
fn a_broken_integration_or_cap_is_reported_with_its_path() {
    let doc = WITH_INTEGRATIONS
        .replace("    base_url: https://crm.example.com/api\n", "")
        .replace("{ max: 3, per: 24h }", "{ max: 0, per: soon }")
        .replace("kind: header,", "kind: oauth9,")
        .replace(
            "    rate_limit: 5\n",
            "    rate_limit: 5\n    token: xoxb-123\n",
        );
    let problems = parse(&doc).unwrap_err().0;
    let paths: Vec<&str> = problems.iter().map(|p| p.path.as_str()).collect();
    assert!(
        paths.contains(&"integrations.crm.auth.kind"),
        "{problems:?}"
    );
    assert!(paths.contains(&"rules.r.frequency_cap.max"), "{problems:?}");
    assert!(paths.contains(&"rules.r.frequency_cap.per"), "{problems:?}");
    let token = problems
        .iter()
        .find(|p| p.path == "integrations.alerts.token")
        .expect("a credential in the file is reported");
    assert!(
        token.message.contains("set-credential alerts token") && !token.message.contains("xoxb"),
        "{token:?}"
    );
}

#[test]
fn a_credential_inside_auth_or_pasted_where_a_setting_goes_is_refused_without_being_echoed() {
    let secret = "xoxb-S3cretTokenValue";
    let inside = WITH_INTEGRATIONS.replace(
        "auth: { kind: header, header: X-Api-Key }",
        &format!("auth: {{ kind: header, header: X-Api-Key, token: {secret} }}"),
    );
    let problems = parse(&inside).unwrap_err().to_string();
    assert!(
        problems
            .contains("integrations.crm.auth.token: credentials never go in the definitions file"),
        "{problems}"
    );
    let pasted = [
        WITH_INTEGRATIONS.replace(
            "auth: { kind: header, header: X-Api-Key }",
            &format!("auth: \"Bearer {secret}\""),
        ),
        WITH_INTEGRATIONS.replace(
            "    event_time: at\n",
            &format!("    event_time: at\n    source: \"postgres://app:{secret}@db/prod\"\n"),
        ),
        WITH_INTEGRATIONS.replace("timeout_ms: 2000", &format!("timeout_ms: \"{secret}\"")),
    ];
    for doc in pasted {
        let problems = parse(&doc).unwrap_err().to_string();
        assert!(!problems.contains("S3cret"), "{problems}");
        assert!(problems.contains("not shown"), "{problems}");
    }
}

#[test]
fn an_overlong_name_or_column_and_a_name_yaml_reads_as_a_value_are_refused_with_what_to_do() {
    let long = "a".repeat(limits::MAX_NAME + 1);
    let doc = GOOD.replace("  first_ever:", &format!("  {long}:"));
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("names may be at most 100 characters"),
        "{problems}"
    );
    let column = "c".repeat(limits::MAX_COLUMN_NAME + 1);
    let doc = GOOD.replace("key: [account_id]", &format!("key: [{column}]"));
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("a column name may be at most 128 bytes"),
        "{problems}"
    );
    let doc = GOOD.replace("  first_ever:", "  true:");
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(problems.contains("quote it"), "{problems}");
    let at_most = GOOD.replace("  first_ever:", &format!("  {}:", &long[1..]));
    assert!(parse(&at_most).is_ok());
}

#[test]
fn a_base_url_that_is_not_http_or_holds_a_password_and_a_method_that_is_not_one_are_refused() {
    for (base, expected) in [
        ("not a url", "expected an http or https URL"),
        ("ftp://crm.example.com", "expected an http or https URL"),
        (
            "https://bob:pw@crm.example.com/api",
            "a user name or password in the URL",
        ),
    ] {
        let doc = WITH_INTEGRATIONS.replace(
            "base_url: https://crm.example.com/api",
            &format!("base_url: \"{base}\""),
        );
        let problems = parse(&doc).unwrap_err().to_string();
        assert!(
            problems.contains(&format!("integrations.crm.base_url: {expected}")),
            "{base}: {problems}"
        );
        assert!(!problems.contains("pw@"), "{problems}");
    }
    let doc = WITH_INTEGRATIONS.replace("method: POST", "method: \"POST\\r\\nX-Evil: 1\"");
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("integrations.crm.actions.note.method: expected an HTTP method"),
        "{problems}"
    );
}

#[test]
fn a_wrongly_typed_setting_inside_an_integration_is_reported_at_its_key() {
    let doc = WITH_INTEGRATIONS.replace(
        "base_url: https://crm.example.com/api",
        "base_url: https://crm.example.com/api\n    timeout_ms: \"soon-ish\"",
    );
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("integrations.crm.timeout_ms: invalid type"),
        "{problems}"
    );
    assert!(!problems.contains("soon-ish"), "{problems}");
    assert!(
        !problems.contains("a custom integration needs"),
        "{problems}"
    );
    let doc = WITH_INTEGRATIONS.replace("method: POST", "method: [POST]");
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("integrations.crm.actions.note.method: invalid type"),
        "{problems}"
    );
    // A missing field is named in the path, with the hint for a custom integration.
    let doc = WITH_INTEGRATIONS.replace("    base_url: https://crm.example.com/api\n", "");
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("integrations.crm.base_url: missing field `base_url` (a custom integration needs base_url"),
        "{problems}"
    );
    // A key that is not a plain name (a token pasted as a key, say) is not echoed in the path.
    let pasted = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0";
    let doc = WITH_INTEGRATIONS.replace(
        "text: { required: true }",
        &format!("\"{pasted}\": {{ required: maybe }}"),
    );
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(
        problems.contains("integrations.crm: invalid type"),
        "{problems}"
    );
    assert!(!problems.contains("eyJ"), "{problems}");
}
