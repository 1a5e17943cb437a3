//! `/rules` and `/rules/{name}`: the rules in force with mode and fires, and one rule's cadence
//! and time zone, a backtest chart of fires per day with its numbers, sample rendered requests,
//! its bindings, promote or return to shadow, and `why` for a key.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::extract::State;
use maud::{Markup, html};

use super::{empty_state, page};
use crate::backtest::{Report, Sample};
use crate::definitions::{Definitions, Rule};
use crate::http::AppState;
use crate::http::api::rules::{RuleOut, explain, list_all, run_backtest};
use crate::http::error::{ApiError, ApiResult};
use crate::http::guard::Caller;

/// The days a rule page backtests unless `?days=` says otherwise.
const DEFAULT_DAYS: u32 = 30;

/// `/rules`: every rule in force, its mode, cadence and fires by mode.
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let rules = match list_all(&state, &caller.workspace).await {
        Ok((_, r)) => r,
        Err(e) if e.code == "not_found" => return Ok(page("Rules", empty_state())),
        Err(e) => return Err(e),
    };
    Ok(page(
        "Rules",
        html! {
            h1 { "Rules" }
            p.lede { "A rule says how often one key may fire and what happens when it does. New and changed rules start in shadow." }
            p { a.button href="/start" { "New rule" } }
            @if rules.is_empty() { p.empty { "No rules yet. " a href="/start" { "Get started" } " makes the first one." } }
            table id="rule-list" {
                thead { tr { th scope="col" { "Rule" } th scope="col" { "Mode" } th scope="col" { "Trigger" } th scope="col" { "Cadence" } th scope="col" { "Fires (shadow)" } th scope="col" { "Fires (live)" } } }
                tbody {
                    @for r in &rules {
                        tr data-rule=(r.name) data-mode=(r.mode) {
                            td { a href=(format!("/rules/{}", r.name)) { (r.name) } }
                            td { span class=(format!("mode {}", r.mode)) { (r.mode) } }
                            td { a href=(format!("/triggers/{}", r.trigger)) { (r.trigger) } }
                            td { (r.cadence) }
                            td data-fires-shadow=(r.fires.shadow) { (r.fires.shadow) }
                            td data-fires-live=(r.fires.live) { (r.fires.live) }
                        }
                    }
                }
            }
        },
    ))
}

/// The requests a sample fire would have made, rendered from its row as the outbox renders them.
fn rendered(
    defs: &Definitions,
    rule: &Rule,
    sample: &Sample,
    now: jiff::Timestamp,
) -> Vec<Result<String, String>> {
    let mut ctx = match &sample.row {
        serde_json::Value::Object(m) => m.clone(),
        _ => serde_json::Map::new(),
    };
    ctx.insert("row".into(), sample.row.clone());
    ctx.insert("rule".into(), rule.name.clone().into());
    ctx.insert("trigger".into(), rule.trigger.clone().into());
    ctx.insert(
        "entity_id".into(),
        crate::explanation::shown_key(&sample.key).into(),
    );
    ctx.insert("event_time".into(), sample.clock.clone().into());
    ctx.insert("fired_at".into(), now.to_string().into());
    let ctx = serde_json::Value::Object(ctx);
    rule.actions
        .iter()
        .map(|b| {
            crate::outbox::render(defs, b, &ctx)
                .map(|r| {
                    format!(
                        "{} {}\nrecipient: {}\n{}",
                        r.method,
                        r.url,
                        r.recipient,
                        serde_json::to_string_pretty(&r.body).unwrap_or_default()
                    )
                })
                .map_err(|e| e.to_string())
        })
        .collect()
}

fn samples(defs: &Definitions, rule: &Rule, report: &Report, now: jiff::Timestamp) -> Markup {
    html! {
        h2 { "Sample requests" }
        @if report.samples.is_empty() { p.empty { "No fire in the window, so nothing to show." } }
        ol id="backtest-samples" {
            @for s in &report.samples {
                li data-key=(s.key) {
                    p { "Key " code { (crate::explanation::shown_key(&s.key)) } " at " (s.clock) " (" (s.bucket) ")" }
                    @for r in rendered(defs, rule, s, now) {
                        @match r {
                            Ok(text) => pre.request { (text) },
                            Err(e) => p.error { "Would fail to render: " (e) },
                        }
                    }
                }
            }
        }
    }
}

fn bindings(r: &RuleOut) -> Markup {
    html! {
        h2 { "Bindings" }
        @if r.bindings.is_empty() { p.empty { "No action: fires are recorded only." } }
        table id="bindings" {
            thead { tr { th scope="col" { "Action" } th scope="col" { "Recipient" } th scope="col" { "Parameters" } } }
            tbody {
                @for b in &r.bindings {
                    tr data-action=(b.action) {
                        td { code { (b.action) } }
                        td { (b.recipient.as_deref().unwrap_or("(the key)")) }
                        td { pre { (serde_json::to_string_pretty(&b.params).unwrap_or_default()) } }
                    }
                }
            }
        }
    }
}

/// `/rules/{name}?days=N&key=K`: one rule, its backtest over N days, and `why` for K.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> ApiResult<Markup> {
    let (defs, rules) = list_all(&state, &caller.workspace).await?;
    let (Some(r), Some(rule)) = (rules.iter().find(|r| r.name == name), defs.rule(&name)) else {
        return Err(ApiError::not_found(format!(
            "there is no rule \"{}\" in force",
            crate::http::api::author::shorten(&name)
        ))
        .at("name"));
    };
    let days_text = q
        .get("days")
        .cloned()
        .unwrap_or_else(|| DEFAULT_DAYS.to_string());
    let days: Result<u32, String> = days_text
        .parse::<u32>()
        .ok()
        .filter(|d| (1..=crate::http::api::author::MAX_DAYS).contains(d))
        .ok_or_else(|| {
            format!(
                "days must be a whole number from 1 to {}",
                crate::http::api::author::MAX_DAYS
            )
        });
    let report = match &days {
        Ok(d) => Some(
            run_backtest(&state, &caller.workspace, &name, *d, 5)
                .await
                .map_err(|e| e.message),
        ),
        Err(_) => None,
    };
    let key = q.get("key").filter(|k| !k.is_empty());
    let why = match key {
        Some(k) => Some(
            explain(&state, &caller.workspace, &name, k, 30)
                .await
                .map_err(|e| e.message),
        ),
        None => None,
    };
    let now = state.clock.now();
    Ok(page(
        &format!("Rule {name}"),
        html! {
            p.crumbs { a href="/rules" { "Rules" } " / " (name) }
            h1 { (name) }
            @if let Some(d) = &r.description { p.lede { (d) } }
            dl id="rule-summary" {
                dt { "Trigger" } dd { a href=(format!("/triggers/{}", r.trigger)) { (r.trigger) } }
                dt { "Cadence" } dd id="rule-cadence" { (r.cadence) }
                dt { "Time zone" } dd id="rule-timezone" { (r.time_zone) }
                dt { "Mode" } dd { span id="rule-mode" data-mode=(r.mode) class=(format!("mode {}", r.mode)) { (r.mode) } }
                dt { "Fires so far" } dd { (r.fires.shadow) " in shadow, " (r.fires.live) " live" }
            }
            div.actions {
                @if r.mode == "live" {
                    button type="button" id="demote" data-url=(format!("/api/rules/{name}/demote")) { "Return to shadow" }
                } @else {
                    button type="button" id="promote" data-url=(format!("/api/rules/{name}/promote")) { "Promote to live" }
                }
                p id="action-result" role="status" aria-live="polite" {}
            }
            h2 { "Backtest" }
            form.inline method="get" action=(format!("/rules/{name}")) {
                label for="backtest-days" { "Days back" }
                input id="backtest-days" name="days" type="number" min="1" max="3650" value=(days_text)
                    aria-invalid=[days.is_err().then_some("true")] aria-describedby="backtest-days-error";
                button type="submit" { "Backtest" }
                @if let Err(e) = &days { span.error id="backtest-days-error" role="alert" { (e) } }
            }
            @match &report {
                Some(Ok(report)) => {
                    (super::chart::backtest(report))
                    (samples(&defs, rule, report, now))
                }
                Some(Err(e)) => p.error id="backtest-error" role="alert" { (e) },
                None => {}
            }
            (bindings(r))
            h2 { "Why did a key fire, or not?" }
            form.inline method="get" action=(format!("/rules/{name}")) {
                input type="hidden" name="days" value=(days_text);
                label for="why-key" { "Key" }
                input id="why-key" name="key" type="text" maxlength="4096" value=[key] placeholder="42";
                button type="submit" { "Explain" }
            }
            @match &why {
                Some(Ok(w)) => pre id="why-result" data-fires=(w.fires) { (w.text) },
                Some(Err(e)) => p.error id="why-result" role="alert" { (e) },
                None => {}
            }
        },
    ))
}
