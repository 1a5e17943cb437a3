//! The author's side of the API and its pages: definitions, triggers and rules on the demo's
//! control plane (the sample definitions pushed, the sample database as the default source).

use rowfire::backtest::{self, Options};
use rowfire::definitions;
use rowfire::demo::{self, Demo};
use rowfire::fixture::SAMPLE_DEFINITIONS;
use rowfire::source::Source;
use rowfire::store::{WorkspaceId, workspace};
use rowfire::token;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::served::{Served, Setup, json};
use crate::support::now;

/// A server on the demo's control plane, and the demo (its directory lives as long as it).
async fn demo_server() -> (Served, Demo, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let made = demo::run(dir.path(), now()).await.unwrap();
    let served = Served::on(made.store.clone(), Setup::default()).await;
    (served, made, dir)
}

/// The page at `path`: its status and HTML.
async fn html(s: &Served, path: &str) -> (u16, String) {
    let r = s.get(path).send().await.unwrap();
    let status = r.status().as_u16();
    let ty = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    if status == 200 {
        assert!(ty.starts_with("text/html"), "{path}: {ty}");
    }
    (status, text)
}

/// The library's backtest of a sample rule, as `rowfire backtest --json` computes it.
async fn library_backtest(made: &Demo, rule: &str, days: u32, sample: usize) -> Value {
    let defs = definitions::parse(SAMPLE_DEFINITIONS).unwrap();
    let def = defs.source(definitions::DEFAULT_SOURCE).unwrap();
    let source = Source::connect(def, &made.sample_url).await.unwrap();
    let opts = Options {
        days,
        sample,
        now: now(),
    };
    let report = backtest::run(&defs, rule, &source, &opts).await.unwrap();
    serde_json::to_value(report).unwrap()
}

/// A second workspace with a token, and its own definitions pushed: one trigger, one rule,
/// named unlike the sample's.
async fn acme_bearer(s: &Served) -> String {
    let acme = WorkspaceId::parse("acme").unwrap();
    workspace::create(&s.store, &acme, "Acme", "UTC")
        .await
        .unwrap();
    let doc = "version: 2\ntriggers:\n  signup:\n    sql: SELECT id, created_at FROM accounts\n    event_time: created_at\n    key: [id]\nrules:\n  hello:\n    trigger: signup\n    policy: once_ever\n";
    rowfire::push::push(&s.store, &acme, doc, now())
        .await
        .unwrap();
    let (_, text) = token::create(&s.store, &acme, "ci", now()).await.unwrap();
    format!("Bearer {text}")
}

#[tokio::test]
async fn the_definitions_in_force_are_returned_with_their_version_checksum_and_text() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.get("/api/definitions")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["yaml"], SAMPLE_DEFINITIONS);
    insta::assert_json_snapshot!("definitions_in_force", body, { ".pushed_at" => "[time]", ".yaml" => "[sample]" });
}

#[tokio::test]
async fn a_fresh_workspace_has_no_definitions_and_says_how_to_push_them() {
    let s = Served::sqlite(Setup::default()).await;
    let (status, body) = json(s.get("/api/definitions")).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    let (status, _) = json(s.get("/api/rules")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn validating_a_draft_reports_every_problem_with_its_path_and_writes_nothing() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.post(
        "/api/definitions/validate",
        json!({"yaml": SAMPLE_DEFINITIONS}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["valid"], true);
    let draft = "version: 2\ntriggers:\n  t:\n    sql: DELETE FROM x\n    event_time: at\n    key: [id]\nrules:\n  r:\n    trigger: nope\n    policy: sometimes\n    colour: red\n";
    let (status, body) = json(s.post("/api/definitions/validate", json!({"yaml": draft}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["valid"], false);
    let paths: Vec<&str> = body["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(paths.len() >= 2, "{body}");
    assert!(
        paths
            .iter()
            .all(|p| p.starts_with("triggers.t") || p.starts_with("rules.r")),
        "{paths:?}"
    );
    insta::assert_json_snapshot!("definitions_validate_invalid", body);
    let (_, in_force) = json(s.get("/api/definitions")).await;
    assert_eq!(in_force["version"], 1, "validating wrote nothing");
}

#[tokio::test]
async fn a_push_stores_a_new_version_and_says_what_changed_and_an_invalid_one_is_refused_naming_yaml()
 {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) =
        json(s.post("/api/definitions", json!({"yaml": SAMPLE_DEFINITIONS}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["unchanged"], true);
    let fewer = SAMPLE_DEFINITIONS.replace(
        "  enterprise_announcement_naive:\n    trigger: enterprise_signup_naive\n",
        "  enterprise_announcement_renamed:\n    trigger: enterprise_signup_naive\n",
    );
    let (status, body) = json(s.post("/api/definitions", json!({"yaml": fewer}))).await;
    assert_eq!(status, 200, "{body}");
    insta::assert_json_snapshot!("definitions_push", body);

    let (status, body) = json(s.post(
        "/api/definitions",
        json!({"yaml": "version: 2\nrules: [\n"}),
    ))
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_definitions");
    assert_eq!(body["error"]["field"], "yaml");
    let (status, body) = json(s.post("/api/definitions", json!({"text": "x"}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "text", "an unknown field is named");
    let (status, body) = json(s.post("/api/definitions", json!({}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "yaml");
    let huge = "#".repeat(definitions::limits::MAX_FILE_BYTES + 1);
    let (status, body) = json(s.post("/api/definitions/validate", json!({"yaml": huge}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "yaml");
}

#[tokio::test]
async fn triggers_are_listed_with_their_state() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.get("/api/triggers")).await;
    assert_eq!(status, 200, "{body}");
    let declined = body
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "declined_charge")
        .unwrap();
    assert_eq!(declined["key"], json!(["account_id"]));
    assert!(declined["watermark"].is_string());
    insta::assert_json_snapshot!("triggers_list", body, {
        "[].watermark" => "[time]", "[].next_poll_at" => "[time]", "[].last_polled_at" => "[time]", "[].sql" => "[sql]"
    });
}

#[tokio::test]
async fn checking_a_query_as_it_is_typed_gives_the_guards_verdict_and_the_output_columns() {
    let (s, _made, _dir) = demo_server().await;
    let ok = json!({"sql": "SELECT id, account_id, attempted_at FROM payment_attempts"});
    let (status, body) = json(s.post("/api/triggers/check", ok)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], true, "{body}");
    insta::assert_json_snapshot!("triggers_check_ok", body);
    assert_eq!(
        body["planned_sql"],
        serde_json::Value::Null,
        "no clock picked, no plan"
    );

    // With a clock and a key picked, the SQL a poll would run, for the query as typed.
    let picked = json!({
        "sql": "SELECT id, account_id, attempted_at FROM payment_attempts",
        "clock": "attempted_at",
        "key": ["account_id"]
    });
    let (status, body) = json(s.post("/api/triggers/check", picked)).await;
    assert_eq!(status, 200, "{body}");
    let plan = body["planned_sql"].as_str().expect("a plan");
    assert!(
        plan.contains("payment_attempts") && plan.contains("attempted_at"),
        "{plan}"
    );
    assert!(plan.contains("one pass"), "{plan}");
    let unknown = json!({
        "sql": "SELECT id, account_id, attempted_at FROM payment_attempts",
        "clock": "no_such_column",
        "key": ["account_id"]
    });
    let (_, body) = json(s.post("/api/triggers/check", unknown)).await;
    assert_eq!(body["ok"], true);
    assert_eq!(
        body["planned_sql"],
        serde_json::Value::Null,
        "a clock not in the output: no plan"
    );

    for refused in [
        "DELETE FROM accounts",
        "SELECT 1; SELECT 2",
        "SELECT * FROM accounts FOR UPDATE",
    ] {
        let (status, body) = json(s.post(
            "/api/triggers/check",
            json!({"sql": refused, "source": "default"}),
        ))
        .await;
        assert_eq!(status, 200, "{refused}: {body}");
        assert_eq!(body["ok"], false, "{refused}: {body}");
        assert_eq!(body["field"], "sql");
        assert!(!body["reason"].as_str().unwrap().is_empty());
        assert_eq!(body["columns"], json!([]));
    }
    let (_, body) = json(s.post(
        "/api/triggers/check",
        json!({"sql": "DELETE FROM accounts"}),
    ))
    .await;
    insta::assert_json_snapshot!("triggers_check_refused", body);
    let (_, body) = json(s.post(
        "/api/triggers/check",
        json!({"sql": "SELECT no_such_column FROM accounts"}),
    ))
    .await;
    assert_eq!(
        body["ok"], false,
        "a query the source refuses is not ok: {body}"
    );
    assert_eq!(body["field"], "sql");
}

#[tokio::test]
async fn a_check_without_sql_too_long_or_on_an_unknown_source_is_refused_naming_the_field() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.post("/api/triggers/check", json!({"source": "default"}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "sql");
    let (status, body) = json(s.post("/api/triggers/check", json!({"sql": 5}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "sql");
    let long = format!("SELECT 1 {}", " ".repeat(64 * 1024));
    let (status, body) = json(s.post("/api/triggers/check", json!({"sql": long}))).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "sql");
    let (status, body) = json(s.post(
        "/api/triggers/check",
        json!({"sql": "SELECT 1", "source": "elsewhere"}),
    ))
    .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["field"], "source");
    let (status, body) = json(
        s.request(reqwest::Method::POST, "/api/triggers/check")
            .header("content-type", "application/json")
            .body("{not json"),
    )
    .await;
    assert_eq!(status, 400, "{body}");
}

#[tokio::test]
async fn run_now_polls_the_trigger_and_returns_its_report() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.post("/api/triggers/declined_charge/run", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ok", "{body}");
    let (matched, fired, already) = (
        body["matched"].as_u64().unwrap(),
        body["fired"].as_u64().unwrap(),
        body["already"].as_u64().unwrap(),
    );
    assert!(matched > 0 && fired > 0);
    assert_eq!(fired + already, matched);
    // How many rows fire depends on where the fixed clock's weeks begin: those counts are
    // compared with the library's elsewhere, and redacted here.
    insta::assert_json_snapshot!("triggers_run_now", body, {
        ".since" => "[time]", ".until" => "[time]", ".fired" => "[n]", ".already" => "[n]",
        ".rules[].fired" => "[n]", ".rules[].already" => "[n]"
    });
    // Run again: everything was already claimed.
    let (_, again) = json(s.post("/api/triggers/declined_charge/run", json!({}))).await;
    assert_eq!(again["fired"], 0, "{again}");
    // The fires show in the rules' counts.
    let (_, rules) = json(s.get("/api/rules")).await;
    let ticket = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "billing_ticket")
        .unwrap();
    assert!(ticket["fires"]["live"].as_i64().unwrap() > 0, "{ticket}");
    let (status, body) = json(s.post("/api/triggers/nope/run", json!({}))).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn rewind_moves_the_watermark_back_and_refuses_days_out_of_range() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.post("/api/triggers/detractor/rewind", json!({"days": 2}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["watermark"],
        "2026-11-27T12:00:00Z".replace(
            "2026-11-27T12:00:00Z",
            &(now() - jiff::SignedDuration::from_hours(48)).to_string()
        )
    );
    for bad in [
        json!({"days": 0}),
        json!({"days": 3651}),
        json!({"days": "two"}),
        json!({"days": -1}),
    ] {
        let (status, body) = json(s.post("/api/triggers/detractor/rewind", bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], "days", "{bad}: {body}");
    }
    let (status, _) = json(s.post("/api/triggers/nope/rewind", json!({"days": 1}))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn rules_are_listed_with_mode_cadence_and_fires_by_mode() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.get("/api/rules")).await;
    assert_eq!(status, 200, "{body}");
    insta::assert_json_snapshot!("rules_list", body);
}

#[tokio::test]
async fn a_rule_is_returned_to_shadow_and_promoted_and_an_unknown_one_answers_404() {
    let (s, _made, _dir) = demo_server().await;
    let (status, body) = json(s.post("/api/rules/billing_ticket/demote", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"rule": "billing_ticket", "before": "live", "mode": "shadow"})
    );
    let (status, body) = json(s.post("/api/rules/billing_ticket/promote", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["mode"], "live");
    for path in ["/api/rules/nope/promote", "/api/rules/nope/demote"] {
        let (status, body) = json(s.post(path, json!({}))).await;
        assert_eq!(status, 404, "{path}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
}

#[tokio::test]
async fn a_backtest_answers_the_same_report_as_the_cli_backtest() {
    let (s, made, _dir) = demo_server().await;
    let (status, body) = json(s.post(
        "/api/rules/billing_ticket/backtest",
        json!({"days": 30, "sample": 3}),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let mut cli = library_backtest(&made, "billing_ticket", 30, 3).await;
    let mut api = body.clone();
    for v in [&mut cli, &mut api] {
        v["query_ms"] = json!(0);
    }
    assert_eq!(api, cli);
    assert!(body["fires"].as_u64().unwrap() > 0);
    let total: u64 = body["per_day"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["fires"].as_u64().unwrap())
        .sum();
    assert_eq!(total, body["fires"].as_u64().unwrap());
    // The days, and how the fires fall on them, move with the fixed clock (the test above
    // compares them with the library's backtest): redacted here.
    insta::assert_json_snapshot!("rules_backtest", body, {
        ".query_ms" => 0, ".source" => "[source]", ".since" => "[time]", ".until" => "[time]",
        ".per_day" => "[per day]", ".busiest_day" => "[day]", ".quietest_day" => "[day]",
        ".longest_zero_run" => "[run]", ".samples" => "[samples]", ".fires" => "[n]",
        ".collapsed" => "[n]", ".distinct_keys" => "[n]"
    });
    for (bad, field) in [
        (json!({"days": 0}), "days"),
        (json!({"days": 9999}), "days"),
        (json!({"days": 3, "sample": 51}), "sample"),
        (json!({}), "days"),
    ] {
        let (status, body) = json(s.post("/api/rules/billing_ticket/backtest", bad.clone())).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["error"]["field"], field, "{bad}: {body}");
    }
    let (status, _) = json(s.post("/api/rules/nope/backtest", json!({"days": 3}))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn why_explains_a_key_and_refuses_a_missing_key_or_an_unknown_rule() {
    let (s, _made, _dir) = demo_server().await;
    json(s.post("/api/triggers/declined_charge/run", json!({}))).await;
    let (status, body) = json(s.get("/api/rules/billing_ticket/why?key=1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rule"], "billing_ticket");
    assert!(!body["text"].as_str().unwrap().is_empty());
    let (status, body) = json(s.get("/api/rules/billing_ticket/why")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "key");
    let (status, body) = json(s.get("/api/rules/billing_ticket/why?key=1&days=0")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "days");
    let (status, _) = json(s.get("/api/rules/nope/why?key=1")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn why_answers_a_control_plane_failure_as_a_server_error_without_the_drivers_words() {
    let (s, made, _dir) = demo_server().await;
    let mut db = sqlx::SqliteConnection::connect(&made.control_plane_url)
        .await
        .unwrap();
    sqlx::raw_sql("DROP TABLE occurrence_count")
        .execute(&mut db)
        .await
        .unwrap();
    let (status, body) = json(s.get("/api/rules/billing_ticket/why?key=1")).await;
    assert_eq!(status, 500, "{body}");
    let text = body.to_string();
    assert!(!text.contains("occurrence_count"), "{text}");
    assert!(!text.contains("no such table"), "{text}");
}

#[tokio::test]
async fn a_new_rule_is_backtested_as_a_draft_then_pushed_as_a_new_version_in_shadow_and_promoted() {
    let (s, _made, _dir) = demo_server().await;
    let rule = json!({"name": "weekly_declines", "trigger": "declined_charge", "policy": "once_per_period", "period": "week", "timezone": "UTC", "message": "Declined: {{ account_name }}"});
    let (status, report) = json(s.post(
        "/api/rules/backtest",
        json!({"rule": rule.clone(), "days": 30, "sample": 0}),
    ))
    .await;
    assert_eq!(status, 200, "{report}");
    let (_, same) = json(s.post(
        "/api/rules/billing_ticket/backtest",
        json!({"days": 30, "sample": 0}),
    ))
    .await;
    assert_eq!(
        report["per_day"], same["per_day"],
        "a weekly rule on declines fires as billing_ticket does"
    );
    let (_, in_force) = json(s.get("/api/definitions")).await;
    assert_eq!(in_force["version"], 1, "a draft backtest writes nothing");

    let (status, body) = json(s.post("/api/rules", rule.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 2);
    assert_eq!(body["new_rules"], json!(["weekly_declines"]));
    let (_, rules) = json(s.get("/api/rules")).await;
    let added = rules
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "weekly_declines")
        .unwrap();
    assert_eq!(added["mode"], "shadow");
    let (status, body) = json(s.post("/api/rules/weekly_declines/promote", json!({}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["mode"], "live");

    let (status, body) = json(s.post("/api/rules", rule)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "name");
    let bad_period = json!({"name": "x", "trigger": "declined_charge", "policy": "once_per_period", "period": "fortnight", "message": "hi"});
    let (status, body) = json(s.post("/api/rules", bad_period)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "period");
    let unknown = json!({"name": "x", "trigger": "nope", "policy": "once_ever", "message": "hi"});
    let (status, body) = json(s.post("/api/rules", unknown)).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["field"], "trigger");
    let (status, body) = json(s.post(
        "/api/rules",
        json!({"name": "x", "trigger": "declined_charge", "policy": "once_ever"}),
    ))
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["field"], "message");
}

#[tokio::test]
async fn another_workspaces_rules_and_triggers_answer_404() {
    let (s, _made, _dir) = demo_server().await;
    let bearer = acme_bearer(&s).await;
    let as_acme = |r: reqwest::RequestBuilder| r.header("authorization", bearer.as_str());
    let (status, body) = json(as_acme(s.get("/api/rules"))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body.as_array().unwrap().len(),
        1,
        "acme sees its own rule only: {body}"
    );
    for path in [
        "/api/rules/billing_ticket/promote",
        "/api/rules/billing_ticket/demote",
        "/api/triggers/declined_charge/run",
    ] {
        let (status, body) = json(as_acme(s.post(path, json!({})))).await;
        assert_eq!(status, 404, "{path}: {body}");
    }
    let (status, _) = json(as_acme(
        s.post("/api/rules/billing_ticket/backtest", json!({"days": 3})),
    ))
    .await;
    assert_eq!(status, 404);
    let (status, _) = json(as_acme(
        s.post("/api/triggers/declined_charge/rewind", json!({"days": 3})),
    ))
    .await;
    assert_eq!(status, 404);
    let (status, _) = json(as_acme(s.get("/api/rules/billing_ticket/why?key=1"))).await;
    assert_eq!(status, 404);
    // And the default workspace's rule is untouched.
    let (_, rules) = json(s.get("/api/rules")).await;
    assert!(
        rules
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["mode"] == "live")
    );
}

#[tokio::test]
async fn the_openapi_document_describes_every_author_route() {
    let s = Served::sqlite(Setup::default()).await;
    let (status, doc) = json(s.get("/api/openapi.json")).await;
    assert_eq!(status, 200);
    for (path, method) in [
        ("/api/definitions", "get"),
        ("/api/definitions", "post"),
        ("/api/definitions/validate", "post"),
        ("/api/triggers", "get"),
        ("/api/triggers/check", "post"),
        ("/api/triggers/{name}/run", "post"),
        ("/api/triggers/{name}/rewind", "post"),
        ("/api/rules", "get"),
        ("/api/rules", "post"),
        ("/api/rules/backtest", "post"),
        ("/api/rules/{name}/promote", "post"),
        ("/api/rules/{name}/demote", "post"),
        ("/api/rules/{name}/backtest", "post"),
        ("/api/rules/{name}/why", "get"),
    ] {
        assert!(
            doc["paths"][path][method].is_object(),
            "{method} {path} is not in the document"
        );
    }
}

#[tokio::test]
async fn each_author_page_answers_html_with_its_key_elements() {
    let (s, made, _dir) = demo_server().await;
    let pages: [(&str, &[&str]); 5] = [
        (
            "/start",
            &[
                "id=\"start-data\"",
                "id=\"source-status\" data-connected=\"true\"",
                "id=\"start-trigger\"",
                "id=\"start-message\"",
                "id=\"start-columns\"",
                "id=\"start-preview\"",
                "id=\"start-backtest\"",
                "id=\"start-turn-on\"",
                "href=\"/activity\"",
                "href=\"/inbox\"",
                "value=\"week\"",
            ],
        ),
        (
            "/triggers",
            &[
                "id=\"trigger-list\"",
                "data-trigger=\"declined_charge\"",
                "id=\"sql\"",
                "id=\"guard-verdict\"",
            ],
        ),
        (
            "/triggers/declined_charge",
            &[
                "id=\"sql\"",
                "id=\"guard-verdict\" role=\"status\" aria-live=\"polite\" data-state=\"ok\"",
                "id=\"output-columns\"",
                "data-column=\"attempted_at\"",
                "id=\"clock\"",
                "id=\"key\"",
                "id=\"planned-sql\"",
                "id=\"trigger-state\"",
                "id=\"run-now\"",
                "id=\"rewind-days\"",
            ],
        ),
        (
            "/rules",
            &["id=\"rule-list\"", "data-rule=\"billing_ticket\""],
        ),
        (
            "/rules/billing_ticket?days=30",
            &[
                "id=\"rule-summary\"",
                "id=\"rule-mode\" data-mode=\"live\"",
                "id=\"backtest-chart\"",
                "id=\"backtest-numbers\"",
                "id=\"backtest-samples\"",
                "id=\"bindings\"",
                "id=\"demote\"",
                "id=\"why-key\"",
            ],
        ),
    ];
    for (path, ids) in pages {
        let (status, text) = html(&s, path).await;
        assert_eq!(status, 200, "{path}: {text}");
        for id in ids {
            assert!(text.contains(id), "{path} lacks {id}");
        }
    }
    // The chart's numbers are the CLI backtest's.
    let cli = library_backtest(&made, "billing_ticket", 30, 0).await;
    let (_, text) = html(&s, "/rules/billing_ticket?days=30").await;
    assert!(
        text.contains(&format!("data-total=\"{}\"", cli["fires"])),
        "chart total"
    );
    for d in cli["per_day"].as_array().unwrap() {
        assert!(
            text.contains(&format!(
                "data-date=\"{}\" data-fires=\"{}\"",
                d["date"].as_str().unwrap(),
                d["fires"]
            )),
            "{d}"
        );
    }
    let (_, text) = html(&s, "/rules/billing_ticket?days=30&key=1").await;
    assert!(text.contains("id=\"why-result\""));
    let (_, text) = html(&s, "/rules/billing_ticket?days=0").await;
    assert!(
        text.contains("id=\"backtest-days-error\""),
        "an error next to the field"
    );
    let (status, _) = html(&s, "/rules/nope").await;
    assert_eq!(status, 404);
    let (status, _) = html(&s, "/triggers/nope").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_author_pages_show_an_empty_state_before_anything_is_pushed() {
    let s = Served::sqlite(Setup::default()).await;
    for path in ["/start", "/triggers", "/rules"] {
        let (status, text) = html(&s, path).await;
        assert_eq!(status, 200, "{path}");
        assert!(text.contains("id=\"empty-state\""), "{path}");
    }
}

#[tokio::test]
async fn the_editors_check_route_returns_the_guards_reason_for_an_invalid_query_and_saves_nothing()
{
    let (s, _made, _dir) = demo_server().await;
    let (_, page) = html(&s, "/triggers").await;
    assert!(page.contains("data-check-url=\"/api/triggers/check\""));
    let (status, body) = json(s.post(
        "/api/triggers/check",
        json!({"sql": "UPDATE accounts SET name = 'x'"}),
    ))
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["ok"], false);
    assert!(body["reason"].as_str().unwrap().len() > 10, "{body}");
    let (_, defs) = json(s.get("/api/definitions")).await;
    assert_eq!(defs["version"], 1, "checking saved nothing");
}
