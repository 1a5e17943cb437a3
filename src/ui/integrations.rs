//! `/integrations`: the integrations in force with their actions as data and which credentials
//! are set (never their values), a form to write a credential, a form to test an action with a
//! sample row, and the catalogue with a form to add an entry or a custom integration.

use axum::extract::State;
use maud::{Markup, html};

use crate::http::AppState;
use crate::http::error::ApiResult;
use crate::http::guard::Caller;
use crate::operator::OperatorError;
use crate::operator::integrations::{self, ActionView, EntryView, IntegrationView};

/// The Integrations page.
pub async fn page(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let now = state.clock.now();
    let in_force = match integrations::list(&state.store, &caller.workspace, now).await {
        Ok(list) => Some(list),
        Err(OperatorError::NothingPushed) => None,
        Err(e) => return Err(e.into()),
    };
    let catalogue = integrations::catalogue();
    let content = html! {
        h1 { "Integrations" }
        p.lede { "Where rules send: each integration's actions are data (a method, a path, a body template). Credentials are written here and never shown again." }
        section #integrations-list aria-labelledby="in-force-title" {
            h2 #in-force-title { "In force" }
            @match &in_force {
                None => p .empty #integrations-empty {
                    "Nothing is pushed yet. Push definitions with " code { "rowfire push -f FILE" } " (or run " code { "rowfire demo" } "), then add integrations here."
                },
                Some(list) if list.is_empty() => p .empty #integrations-empty {
                    "No integrations yet. Add one from the catalogue below."
                },
                Some(list) => @for i in list { (integration(i)) },
            }
        }
        @if in_force.is_some() { (add_form(&catalogue)) }
        section #catalogue aria-labelledby="catalogue-title" {
            h2 #catalogue-title { "Catalogue" }
            div .grid {
                @for e in &catalogue { (entry(e)) }
            }
        }
    };
    Ok(super::page("Integrations", content))
}

fn integration(i: &IntegrationView) -> Markup {
    let id = format!("integration-{}", i.name);
    html! {
        article .card .integration #(id) data-integration=(i.name) {
            header .card-head {
                h3 { (i.name) }
                span .badge data-state=(i.state) { (i.state) }
            }
            p { (i.description) }
            dl .facts {
                dt { "Entry" } dd { (i.entry) }
                dt { "Base URL" } dd { code { (i.base_url) } }
                dt { "Auth" } dd { (i.auth) }
                @if let Some(note) = &i.state_note { dt { "State" } dd { (note) } }
            }
            h4 { "Credentials" }
            @if i.credentials.is_empty() {
                p .muted { "None needed." }
            } @else {
                ul .credentials {
                    @for c in &i.credentials {
                        li data-credential=(c.name) data-set=(c.set) {
                            code { (c.name) } " "
                            @if c.set { span .badge .ok { "set" } } @else { span .badge .missing { "missing" } }
                            (credential_form(&i.name, &c.name))
                        }
                    }
                }
            }
            h4 { "Actions" }
            @for a in &i.actions { (action(Some(&i.name), a)) }
        }
    }
}

fn credential_form(integration: &str, credential: &str) -> Markup {
    let input = format!("cred-{integration}-{credential}");
    html! {
        form .inline-form .credential-form
            data-api={ "/api/integrations/" (integration) "/credentials/" (credential) }
            data-method="PUT" data-then="reload" autocomplete="off" {
            label for=(input) { "New value for " (credential) }
            input #(input) name="value" type="password" required maxlength="8192" autocomplete="new-password";
            button type="submit" { "Save" }
            p .field-error data-error-for="value" role="alert" {}
        }
    }
}

fn action(integration: Option<&str>, a: &ActionView) -> Markup {
    let required: serde_json::Map<String, serde_json::Value> = a
        .params
        .iter()
        .filter(|p| p.required)
        .map(|p| {
            (
                p.name.clone(),
                format!("Hello from {{{{ id }}}} ({})", p.name).into(),
            )
        })
        .collect();
    html! {
        details .action data-action=(a.name) {
            summary { code { (a.method) " " (a.path) } " " (a.name) " — " (a.description) }
            @if !a.params.is_empty() {
                table .params {
                    thead { tr { th scope="col" { "Parameter" } th scope="col" { "Required" } th scope="col" { "Default" } } }
                    tbody {
                        @for p in &a.params {
                            tr {
                                td { code { (p.name) } }
                                td { @if p.required { "yes" } @else { "no" } }
                                td { @if let Some(d) = &p.default { code { (d.to_string()) } } }
                            }
                        }
                    }
                }
            }
            p { "Body template:" }
            pre .template { (serde_json::to_string_pretty(&a.body).unwrap_or_default()) }
            @if let Some(name) = integration {
                @let base = format!("test-{name}-{}", a.name);
                form .test-action-form data-api={ "/api/integrations/" (name) "/actions/" (a.name) "/test" }
                    data-method="POST" data-result={ (base) "-result" } {
                    h5 { "Test with a sample row" }
                    div .field {
                        label for={ (base) "-row" } { "Sample row (JSON object)" }
                        textarea #{ (base) "-row" } name="row" data-json rows="3" { "{\"id\": 1}" }
                        p .field-error data-error-for="row" role="alert" {}
                    }
                    div .field {
                        label for={ (base) "-params" } { "Parameters (JSON object of templates)" }
                        textarea #{ (base) "-params" } name="params" data-json rows="3" {
                            (serde_json::Value::Object(required).to_string())
                        }
                        p .field-error data-error-for="params" role="alert" {}
                    }
                    div .field {
                        label for={ (base) "-recipient" } { "Recipient (optional template)" }
                        input #{ (base) "-recipient" } name="recipient" type="text" maxlength="500";
                        p .field-error data-error-for="recipient" role="alert" {}
                    }
                    button type="submit" { "Render and send once" }
                    p .field-error data-error-for="body" role="alert" {}
                    pre .result #{ (base) "-result" } aria-live="polite" {}
                }
            }
        }
    }
}

fn entry(e: &EntryView) -> Markup {
    html! {
        article .card .entry data-entry=(e.name) {
            h3 { (e.name) }
            p { (e.description) }
            p .muted { code { (e.base_url) } }
            p {
                "Credentials: "
                @if e.credentials.is_empty() { "none" } @else { (e.credentials.join(", ")) }
            }
            @for a in &e.actions { (action(None, a)) }
        }
    }
}

fn add_form(catalogue: &[EntryView]) -> Markup {
    html! {
        section #add-integration .card aria-labelledby="add-title" {
            h2 #add-title { "Add an integration" }
            form #add-integration-form data-api="/api/integrations" data-method="POST" data-then="reload" {
                div .field {
                    label for="add-name" { "Name (as rules will call it)" }
                    input #add-name name="name" type="text" required maxlength="64" placeholder="slack";
                    p .field-error data-error-for="name" role="alert" {}
                }
                div .field {
                    label for="add-catalog" { "Catalogue entry" }
                    select #add-catalog name="catalog" {
                        option value="" { "— custom (describe it below) —" }
                        @for e in catalogue { option value=(e.name) { (e.name) } }
                    }
                    p .field-error data-error-for="catalog" role="alert" {}
                }
                div .field {
                    label for="add-base-url" { "Base URL (optional: replaces the entry's)" }
                    input #add-base-url name="base_url" type="url" maxlength="2048";
                    p .field-error data-error-for="base_url" role="alert" {}
                }
                div .field {
                    label for="add-custom" { "Custom integration (YAML: base_url, auth, actions)" }
                    textarea #add-custom name="custom" rows="6" placeholder="base_url: https://api.example.com\nauth: { kind: bearer }\nactions:\n  notify:\n    method: POST\n    path: /notify\n    body: { text: \"{{ params.text }}\" }" {}
                    p .field-error data-error-for="custom" role="alert" {}
                }
                p .field-error data-error-for="definitions" role="alert" {}
                p .field-error data-error-for="body" role="alert" {}
                button type="submit" { "Add integration" }
            }
        }
    }
}
