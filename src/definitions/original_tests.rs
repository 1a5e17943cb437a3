//! Documents in the original Rowfire's `version: 2` shape, settings that must never echo a
//! pasted secret, the headers an action may not set, and versions stored before a check existed.

use super::*;
use crate::cadence::Period;

#[test]
fn version_may_be_left_out_and_is_otherwise_2() {
    assert!(parse("triggers: {}\n").is_ok());
    let p = parse("version: 3\n").unwrap_err().0;
    assert!(p[0].message.contains("unsupported version 3"));
    assert!(parse("version: 2\n").is_ok());
}

/// What the original Rowfire's `version: 2` reader takes: no version line, a Supabase source,
/// optional keys written as null, and a rule with no policy (once_ever).
#[test]
fn a_file_in_the_original_shape_with_nulls_and_left_out_defaults_is_accepted() {
    let doc = r#"
source: { type: supabase, statement_timeout_ms: null, max_rows: null }
triggers:
  t:
    description: null
    source: null
    sql: SELECT id, at FROM events
    event_time: at
    key: [id]
rules:
  bare: { trigger: t }
  nulls: { trigger: t, description: null, policy: once_ever, period: null, n: null }
  weekly: { trigger: t, policy: once_per_period, period: week, n: null }
"#;
    let defs = parse(doc).unwrap();
    let src = defs.source(DEFAULT_SOURCE).unwrap();
    assert_eq!(src.kind, Some(Dialect::Postgres));
    assert_eq!(src.statement_timeout, Duration::from_secs(30));
    // Every setting of a source, trigger or rule written as null is absent.
    let nulls = doc
        .replace(
            "    key: [id]\n",
            "    key: [id]\n    poll_interval: null\n    lookback: null\n    occurrence: null\n",
        )
        .replace(
            "bare: { trigger: t }",
            "bare: { trigger: t, actions: null, expire_after: null, frequency_cap: null, anchor: null, timezone: null }",
        );
    let with_nulls = parse(&nulls).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(with_nulls.rule("bare").unwrap().cadence, Cadence::OnceEver);
    // An unknown key is reported, null or not.
    let typo = parse(&nulls.replace("anchor: null", "ancor: null"))
        .unwrap_err()
        .to_string();
    assert!(typo.contains("rules.bare.ancor"), "{typo}");
    assert_eq!(defs.trigger("t").unwrap().source, DEFAULT_SOURCE);
    assert_eq!(defs.rule("bare").unwrap().cadence, Cadence::OnceEver);
    assert_eq!(defs.rule("nulls").unwrap().cadence, Cadence::OnceEver);
    assert!(matches!(
        defs.rule("weekly").unwrap().cadence,
        Cadence::OncePerPeriod {
            period: Period::Week,
            ..
        }
    ));
}

/// A DSN pasted where a policy, period, time zone, source type or action goes is not echoed.
#[test]
fn a_dsn_pasted_into_a_setting_is_refused_without_being_echoed() {
    let dsn = "postgres://admin:hunter2secret@db.internal/prod";
    let doc = format!(
        r#"
source: {{ type: "{dsn}" }}
integrations:
  inbox: {{ catalog: demo_inbox }}
triggers:
  t: {{ sql: "SELECT 1 AS a, now() AS at", event_time: at, key: [a] }}
rules:
  p: {{ trigger: t, policy: "{dsn}" }}
  q: {{ trigger: t, policy: once_per_period, period: "{dsn}" }}
  z: {{ trigger: t, timezone: "{dsn}" }}
  a:
    trigger: t
    actions: [{{ action: "{dsn}" }}]
"#
    );
    let problems = parse(&doc).unwrap_err().to_string();
    assert!(!problems.contains("hunter2"), "{problems}");
    for path in [
        "source.type",
        "rules.p.policy",
        "rules.q.period",
        "rules.z.timezone",
        "rules.a.actions[0].action",
    ] {
        assert!(problems.contains(path), "{path} in {problems}");
    }
    let zone = parse(&doc.replace(dsn, "Mars/Olympus"))
        .unwrap_err()
        .to_string();
    assert!(
        zone.contains("unknown time zone \"Mars/Olympus\""),
        "{zone}"
    );
}

/// Framing headers and the ones carrying the credential or signature are Rowfire's to write: a
/// templated `Host` or `Content-Length` let a row value choose the virtual host or cut the body,
/// and a second `Authorization` went out beside the stored one.
#[test]
fn an_action_may_not_set_the_framing_credential_or_signature_headers() {
    let doc = r#"
integrations:
  crm:
    base_url: https://crm.example.com/api
    auth: { kind: header, header: X-Api-Key }
    actions:
      a:
        method: POST
        path: /a
        headers: { Host: "{{ h }}", content-length: "{{ n }}", x-api-key: "{{ k }}", X-Trace: "{{ t }}" }
  bearer:
    base_url: https://b.example.com
    auth: { kind: bearer }
    actions:
      a: { method: POST, path: /a, headers: { Authorization: "{{ t }}", Transfer-Encoding: chunked } }
  hook:
    catalog: webhook
    base_url: https://h.example.com/in
    actions:
      send: { method: POST, path: "", headers: { webhook-signature: "{{ s }}" } }
"#;
    let problems = parse(doc).unwrap_err().0;
    let said: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect();
    for needle in [
        "integrations.crm.actions.a.headers: \"Host\" is set by Rowfire",
        "integrations.crm.actions.a.headers: \"content-length\" is set by Rowfire",
        "integrations.crm.actions.a.headers: \"x-api-key\" is set by Rowfire (it carries the integration's credential)",
        "integrations.bearer.actions.a.headers: \"Authorization\" is set by Rowfire",
        "integrations.bearer.actions.a.headers: \"Transfer-Encoding\" is set by Rowfire",
        "integrations.hook.actions.send.headers: \"webhook-signature\" is set by Rowfire (it carries the request's signature)",
    ] {
        assert!(
            said.iter().any(|s| s.starts_with(needle)),
            "{needle} in {said:#?}"
        );
    }
    assert!(!said.iter().any(|s| s.contains("X-Trace")), "{said:#?}");

    // Nor may the headers Rowfire writes be named as framing headers or as one another.
    let doc = r#"
integrations:
  as_host:
    base_url: https://a.example.com
    auth: { kind: header, header: Host }
    actions: { a: { method: POST, path: /a } }
  keyed:
    base_url: https://k.example.com
    auth: { kind: bearer }
    actions:
      te: { method: POST, path: /a, idempotency_header: Transfer-Encoding }
      auth: { method: POST, path: /b, idempotency_header: Authorization }
      fine: { method: POST, path: /c, idempotency_header: Idempotency-Key }
"#;
    let said = parse(doc).unwrap_err().to_string();
    for needle in [
        "integrations.as_host.auth.header: \"Host\" is set by Rowfire",
        "integrations.keyed.actions.te.idempotency_header: \"Transfer-Encoding\" is set by Rowfire",
        "integrations.keyed.actions.auth.idempotency_header: \"Authorization\" is set by Rowfire",
    ] {
        assert!(said.contains(needle), "{needle} in {said}");
    }
    assert!(!said.contains("actions.fine"), "{said}");
}

/// A version pushed before a check existed still reads: the worker and `list` go on, and what
/// the check guards against is kept out where it is used.
#[test]
fn a_stored_version_is_read_without_the_checks_added_since_it_was_pushed() {
    let doc = r#"
source: { dsn_env: ROWFIRE_SOURCE_URL }
integrations:
  api:
    base_url: https://api.example.com
    auth: { kind: bearer }
    actions:
      a: { method: POST, path: /a, headers: { Authorization: "{{ t }}" }, idempotency_header: Idem }
      b: { method: POST, path: /b, headers: { idem: "{{ t }}" }, idempotency_header: Idem }
triggers:
  t: { sql: "SELECT id, at FROM x", event_time: at, key: [id] }
"#;
    let problems = parse(doc).unwrap_err().to_string();
    for needle in [
        "source.dsn_env",
        "integrations.api.actions.a.headers",
        "integrations.api.actions.b.headers: \"idem\" is set by Rowfire (it carries the delivery's idempotency key)",
    ] {
        assert!(problems.contains(needle), "{needle} in {problems}");
    }
    assert!(parse_stored(doc, &TimeZone::UTC).is_ok());
}

#[test]
fn a_period_or_n_without_the_policy_it_needs_names_that_policy() {
    let doc = "triggers:\n  t: { sql: \"SELECT id, at FROM x\", event_time: at, key: [id] }\nrules:\n  a: { trigger: t, period: week }\n  b: { trigger: t, policy: once_ever, n: 3 }\n";
    let p = parse(doc).unwrap_err().0;
    let paths: Vec<&str> = p.iter().map(|p| p.path.as_str()).collect();
    assert_eq!(paths, ["rules.a.period", "rules.b.n"], "{p:?}");
    assert!(
        p[0].message.contains("set `policy: once_per_period`"),
        "{p:?}"
    );
    assert!(p[1].message.contains("set `policy: once_per_n`"), "{p:?}");
}
