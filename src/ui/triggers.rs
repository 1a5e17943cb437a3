//! `/triggers` and `/triggers/{name}`: the triggers in force with their state, and a SQL editor
//! that checks as you type (the guard's verdict next to the editor, then the output columns),
//! with the clock and key to pick and the SQL a poll will run. Typing saves nothing.

use crate::http::extract::Path;
use axum::extract::State;
use maud::{Markup, html};

use super::{empty_state, page};
use crate::definitions::DEFAULT_SOURCE;
use crate::http::AppState;
use crate::http::api::triggers::{TriggerOut, Verdict, check_sql, list_all};
use crate::http::error::{ApiError, ApiResult};
use crate::http::guard::Caller;

/// The editor: `#sql` (checked as typed against `/api/triggers/check`), `#guard-verdict`,
/// `#output-columns`, `#clock` and `#key` pickers.
pub fn editor(
    sql: &str,
    source: &str,
    verdict: Option<&Verdict>,
    clock: &str,
    key: &[String],
) -> Markup {
    let columns = verdict.map(|v| v.columns.clone()).unwrap_or_default();
    let (state, reason) = match verdict {
        None => (
            "empty",
            "Type a SELECT; it is checked as you type.".to_string(),
        ),
        Some(v) if v.ok => (
            "ok",
            format!(
                "The guard admits this query; it returns {} column(s).",
                v.columns.len()
            ),
        ),
        Some(v) => ("refused", v.reason.clone().unwrap_or_default()),
    };
    html! {
        form.editor id="trigger-editor" data-check-url="/api/triggers/check" data-source=(source) onsubmit="return false" {
            label for="sql" { "SQL (one read-only SELECT on source " code { (source) } ")" }
            textarea id="sql" name="sql" rows="10" spellcheck="false" aria-describedby="guard-verdict" { (sql) }
            p id="guard-verdict" role="status" aria-live="polite" data-state=(state) class=(format!("verdict {state}")) { (reason) }
            h2 { "Output columns" }
            table id="output-columns" {
                thead { tr { th scope="col" { "Column" } th scope="col" { "Type" } } }
                tbody {
                    @for c in &columns { tr data-column=(c.name) { td { code { (c.name) } } td { (c.type_name) } } }
                    @if columns.is_empty() { tr.empty { td colspan="2" { "No columns yet: the query must pass the guard first." } } }
                }
            }
            div.pickers {
                label for="clock" { "Clock column (places each row in time)" }
                select id="clock" name="clock" {
                    @for c in &columns { option value=(c.name) selected[c.name == clock] { (c.name) } }
                }
                label for="key" { "Key columns (what counts as one thing)" }
                select id="key" name="key" multiple size="4" {
                    @for c in &columns { option value=(c.name) selected[key.contains(&c.name)] { (c.name) } }
                }
            }
            p.muted { "Nothing is saved by typing. To change a trigger, edit the definitions file and push it." }
        }
    }
}

fn state_table(t: &TriggerOut) -> Markup {
    html! {
        dl id="trigger-state" {
            dt { "Watermark" } dd data-watermark=[t.watermark.as_deref()] { (t.watermark.as_deref().unwrap_or("—")) }
            dt { "Next poll" } dd { (t.next_poll_at.as_deref().unwrap_or("—")) }
            dt { "Last run" } dd { (t.last_polled_at.as_deref().unwrap_or("never")) }
            dt { "Problem" } dd id="trigger-problem" { (t.problem.as_deref().or(t.last_error.as_deref()).unwrap_or("none")) }
        }
    }
}

/// `/triggers`: every trigger in force with its state, and an editor to try a query.
pub async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let triggers = match list_all(&state, &caller.workspace).await {
        Ok((_, t)) => t,
        Err(e) if e.code == "not_found" => return Ok(page("Triggers", empty_state())),
        Err(e) => return Err(e),
    };
    Ok(page(
        "Triggers",
        html! {
            h1 { "Triggers" }
            p.lede { "Each trigger is one read-only SELECT, a clock column and a key. Rules subscribe to them." }
            table id="trigger-list" {
                thead { tr { th scope="col" { "Trigger" } th scope="col" { "Source" } th scope="col" { "Key" } th scope="col" { "Rules" } th scope="col" { "Watermark" } th scope="col" { "Next poll" } th scope="col" { "Problem" } } }
                tbody {
                    @for t in &triggers {
                        tr data-trigger=(t.name) {
                            td { a href=(format!("/triggers/{}", t.name)) { (t.name) } }
                            td { (t.source) }
                            td { (t.key.join(", ")) }
                            td { (t.rules.len()) }
                            td { (t.watermark.as_deref().unwrap_or("—")) }
                            td { (t.next_poll_at.as_deref().unwrap_or("—")) }
                            td { (t.problem.as_deref().or(t.last_error.as_deref()).unwrap_or("")) }
                        }
                    }
                }
            }
            h2 { "Try a query" }
            (editor("", DEFAULT_SOURCE, None, "", &[]))
        },
    ))
}

/// `/triggers/{name}`: the trigger's editor, state, the SQL a poll runs, run now and rewind.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Markup> {
    let (defs, triggers) = list_all(&state, &caller.workspace).await?;
    let (Some(t), Some(def)) = (
        triggers.iter().find(|t| t.name == name),
        defs.trigger(&name),
    ) else {
        return Err(ApiError::not_found(format!(
            "there is no trigger \"{}\" in force",
            crate::http::api::author::shorten(&name)
        ))
        .at("name"));
    };
    let verdict = check_sql(&state, &caller.workspace, &t.sql, &t.source, None)
        .await
        .ok();
    let source = defs.source(&t.source);
    let dialect = verdict
        .as_ref()
        .and_then(|v| dialect_named(&v.dialect))
        .or(source.and_then(|s| s.kind));
    let planned = match (source, dialect) {
        (Some(s), Some(d)) => {
            crate::explanation::plan::planned_sql(def, s, d, state.clock.now(), 1)
                .unwrap_or_else(|e| e.to_string())
        }
        _ => "The source's dialect is unknown until it is connected.".to_string(),
    };
    Ok(page(
        &format!("Trigger {name}"),
        html! {
            p.crumbs { a href="/triggers" { "Triggers" } " / " (name) }
            h1 { (name) }
            @if let Some(d) = &t.description { p.lede { (d) } }
            (state_table(t))
            div.actions {
                button type="button" id="run-now" data-url=(format!("/api/triggers/{name}/run")) { "Run now" }
                form id="rewind-form" data-url=(format!("/api/triggers/{name}/rewind")) onsubmit="return false" {
                    label for="rewind-days" { "Rewind by (days)" }
                    input id="rewind-days" name="days" type="number" min="1" max="3650" value="1" required;
                    button type="submit" id="rewind" { "Rewind" }
                }
                p id="action-result" role="status" aria-live="polite" {}
            }
            h2 { "Query" }
            (editor(&t.sql, &t.source, verdict.as_ref(), &t.event_time, &t.key))
            h2 { "The SQL a poll runs" }
            p.muted { "As " code { "rowfire explain " (name) } " shows it, for a window of one day; it follows the query, clock and key as you change them." }
            pre id="planned-sql" { (planned) }
            h2 { "Rules on it" }
            @if t.rules.is_empty() { p.empty { "No rule subscribes to this trigger yet. " a href="/start" { "Get started" } " makes one." } }
            ul id="trigger-rules" { @for r in &t.rules { li { a href=(format!("/rules/{r}")) { (r) } } } }
        },
    ))
}

fn dialect_named(name: &str) -> Option<crate::sql_guard::Dialect> {
    use crate::sql_guard::Dialect;
    [Dialect::Postgres, Dialect::Sqlite, Dialect::Mysql]
        .into_iter()
        .find(|d| d.to_string() == name)
}
