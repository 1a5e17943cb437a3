//! `/start`, Get started: the sample database connected, an event (trigger) picked, how often,
//! the message written with columns clicked in and previewed on real sample rows, a backtest,
//! then "turn it on": a new definitions version with the rule added (the push path the CLI
//! uses), then promote; and links to watch the first message arrive.

use axum::extract::State;
use jiff::SignedDuration;
use maud::{Markup, PreEscaped, html};

use super::{empty_state, page};
use crate::definitions::{Definitions, Trigger};
use crate::http::AppState;
use crate::http::api::author::{connect, in_force};
use crate::http::error::ApiResult;
use crate::http::guard::Caller;
use crate::sql_guard::Window;

/// Sample rows shown per trigger.
const SAMPLE_ROWS: usize = 3;
/// How far back sample rows are looked for.
const SAMPLE_DAYS: i64 = 90;

/// Up to [`SAMPLE_ROWS`] recent rows of `trigger` (their columns, from the first page read), or
/// why none could be read.
async fn sample_rows(
    state: &AppState,
    caller: &Caller,
    defs: &Definitions,
    trigger: &Trigger,
) -> Result<Vec<serde_json::Value>, String> {
    let source = connect(state, &caller.workspace, defs, &trigger.source)
        .await
        .map_err(|e| e.message)?;
    let now = state.clock.now();
    let window = Window {
        since: crate::store::earlier(now, SignedDuration::from_hours(24 * SAMPLE_DAYS)),
        until: now,
    };
    let query = source
        .prepare(defs, trigger, window)
        .await
        .map_err(|e| e.to_string())?;
    let mut reader = source
        .read_window(&query, trigger.shape(), window)
        .await
        .map_err(|e| e.to_string())?;
    let page = reader.next_page().await.map_err(|e| e.to_string())?;
    reader.finish().await;
    Ok(page
        .unwrap_or_default()
        .iter()
        .rev()
        .take(SAMPLE_ROWS)
        .map(|r| r.to_json())
        .collect())
}

/// JSON to embed in a `<script type="application/json">`: no `<` can close the element.
fn embedded(value: &serde_json::Value) -> PreEscaped<String> {
    PreEscaped(value.to_string().replace('<', "\\u003c"))
}

/// `/start`.
pub async fn start(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let defs = match in_force(&state, &caller.workspace).await {
        Ok((_, defs)) => defs,
        Err(e) if e.code == "not_found" => return Ok(page("Get started", empty_state())),
        Err(e) => return Err(e),
    };
    let zone = crate::store::workspace::get(&state.store, &caller.workspace)
        .await?
        .timezone;
    let default = defs.source(crate::definitions::DEFAULT_SOURCE);
    let connected = match default {
        Some(_) => connect(
            &state,
            &caller.workspace,
            &defs,
            crate::definitions::DEFAULT_SOURCE,
        )
        .await
        .map(|s| format!("{} ({})", s.name(), s.dialect()))
        .map_err(|e| e.message),
        None => Err("the definitions in force have no default source".to_string()),
    };
    let mut data = serde_json::Map::new();
    for t in &defs.triggers {
        let rows = sample_rows(&state, &caller, &defs, t).await;
        let columns: Vec<String> = match rows.as_ref().ok().and_then(|r| r.first()) {
            Some(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => Vec::new(),
        };
        data.insert(
            t.name.clone(),
            serde_json::json!({
                "description": t.description,
                "columns": columns,
                "rows": rows.as_ref().ok(),
                "error": rows.as_ref().err(),
            }),
        );
    }
    let data = serde_json::Value::Object(data);
    Ok(page(
        "Get started",
        html! {
            h1 { "Get started" }
            p.lede { "Pick an event, choose how often, write the message, see what it would have done, then turn it on." }
            script type="application/json" id="start-data" { (embedded(&data)) }
            form id="start-form" onsubmit="return false" novalidate {
            ol.steps {
                li id="step-source" {
                    h2 { "Connect the sample database" }
                    @match &connected {
                        Ok(shown) => p id="source-status" data-connected="true" { "Connected: " (shown) ". In the demo the sample database is the default source." },
                        Err(e) => p.error id="source-status" data-connected="false" role="alert" { (e) },
                    }
                }
                li id="step-trigger" {
                    h2 { "Pick an event" }
                    label for="start-trigger" { "Event (trigger)" }
                    select id="start-trigger" name="trigger" aria-describedby="start-trigger-description" {
                        @for t in &defs.triggers {
                            option value=(t.name) selected[t.name == "declined_charge"] { (t.name) }
                        }
                    }
                    p.muted id="start-trigger-description" {}
                }
                li id="step-cadence" {
                    h2 { "Choose how often" }
                    fieldset {
                        legend { "At most, per key" }
                        @for (value, label) in [("once_ever", "Once ever"), ("day", "Once a day"), ("week", "Once a week"), ("month", "Once a month"), ("nth", "Every nth occurrence")] {
                            label.choice { input type="radio" name="cadence" value=(value) checked[value == "week"]; " " (label) }
                        }
                        label for="start-n" { "n (for every nth)" }
                        input id="start-n" name="n" type="number" min="1" max="1000000" value="3";
                        span.error id="start-n-error" role="alert" {}
                    }
                    label for="start-timezone" { "Time zone (periods are counted in it)" }
                    input id="start-timezone" name="timezone" type="text" value=(zone) maxlength="64";
                    span.error id="start-timezone-error" role="alert" {}
                }
                li id="step-message" {
                    h2 { "Write the message" }
                    label for="start-name" { "Rule name" }
                    input id="start-name" name="name" type="text" value="my_first_rule" maxlength="100" pattern="[A-Za-z0-9_-]+" required;
                    span.error id="start-name-error" role="alert" {}
                    label for="start-message" { "Message (click a column to put it in)" }
                    textarea id="start-message" name="message" rows="3" maxlength="8192" { "Card declined for {{ account_name }} ({{ decline_code }})" }
                    span.error id="start-message-error" role="alert" {}
                    div id="start-columns" role="group" aria-label="Columns" {}
                    h3 { "Preview, from real sample rows" }
                    div id="start-preview" aria-live="polite" {}
                }
                li id="step-backtest" {
                    h2 { "Backtest" }
                    label for="start-days" { "Days back" }
                    input id="start-days" name="days" type="number" min="1" max="3650" value="30";
                    span.error id="start-days-error" role="alert" {}
                    button type="button" id="start-backtest" { "Backtest" }
                    div id="start-backtest-result" aria-live="polite" {}
                }
                li id="step-on" {
                    h2 { "Turn it on" }
                    p.muted { "This adds the rule to your definitions as a new version, then promotes it to live. Its messages go to the Demo inbox." }
                    button type="button" id="start-turn-on" { "Turn it on" }
                    p id="start-result" role="status" aria-live="polite" {}
                    p id="start-watch" hidden { "Now watch the first message arrive: " a href="/activity" { "Activity" } " · " a href="/inbox" { "Demo inbox" } }
                }
            }
            }
        },
    ))
}
