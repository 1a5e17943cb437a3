//! `/inbox`: the Demo inbox drawn the way its destinations would show it: chat messages as
//! Slack-like message cards, tickets as Zendesk-like ticket cards. Shadow messages are labelled
//! "would have been sent". New messages arrive by the `/activity/stream` events.

use axum::extract::State;
use maud::{Markup, html};

use crate::http::AppState;
use crate::http::api::inbox::{InboxMessage, messages};
use crate::http::error::ApiResult;
use crate::http::guard::Caller;

/// How many messages the page shows.
const SHOWN: i64 = 100;

/// The Demo inbox page.
pub async fn page(State(state): State<AppState>, caller: Caller) -> ApiResult<Markup> {
    let found = messages(&state.store, &caller.workspace, None, SHOWN).await?;
    let content = html! {
        h1 { "Demo inbox" }
        p.lede {
            "Rowfire's built-in destination: what your rules send lands here, drawn the way Slack and Zendesk would show it. Nothing leaves the machine. New messages appear by themselves."
        }
        div #inbox .inbox data-stream="/activity/stream" data-topics="inbox"
            data-after-inbox=(found.first().map_or(0, |m| m.delivery_id)) {
            p .empty #inbox-empty hidden[!found.is_empty()] {
                "The inbox is empty. Rules that send to the Demo inbox deliver here; in shadow mode they show what would have been sent. Try "
                code { "rowfire demo" } " or " code { "rowfire fixture simulate" } "."
            }
            ol #inbox-feed aria-live="polite" {
                @for m in &found { (card(m)) }
            }
        }
    };
    Ok(super::page("Demo inbox", content))
}

/// A text field of a message's body, or "".
fn field<'a>(m: &'a InboxMessage, name: &str) -> &'a str {
    m.body.get(name).and_then(|v| v.as_str()).unwrap_or("")
}

/// One message: a chat card, a ticket card, or the raw body for any other action.
pub fn card(m: &InboxMessage) -> Markup {
    html! {
        li .message data-delivery-id=(m.delivery_id) data-mode=(m.mode) data-kind=(m.kind) {
            @if m.would_have_been_sent {
                p .shadow-label { "Shadow · would have been sent" }
            }
            @match m.kind.as_str() {
                "chat_message" => (chat(m)),
                "ticket" => (ticket(m)),
                _ => article .raw-card { header { strong { (m.kind) } } pre { (m.body.to_string()) } },
            }
        }
    }
}

/// A Slack-like message card.
fn chat(m: &InboxMessage) -> Markup {
    html! {
        article .chat-card aria-label={ "Message in " (field(m, "channel")) } {
            header .chat-head {
                span .channel { (field(m, "channel")) }
            }
            div .chat-body {
                span .avatar aria-hidden="true" { "R" }
                div {
                    p .chat-meta { strong { "Rowfire" } span .app-tag { "APP" } time { (m.at) } }
                    p .chat-text { (field(m, "text")) }
                    @let to = field(m, "to");
                    @if !to.is_empty() { p .chat-to { "to " (to) } }
                    p .chat-rule { "rule " code { (m.rule) } }
                }
            }
        }
    }
}

/// A Zendesk-like ticket card.
fn ticket(m: &InboxMessage) -> Markup {
    let priority = field(m, "priority");
    html! {
        article .ticket-card aria-label={ "Ticket: " (field(m, "subject")) } {
            header .ticket-head {
                span .ticket-status { "New" }
                h3 .ticket-subject { (field(m, "subject")) }
            }
            dl .ticket-fields {
                dt { "Requester" } dd { (field(m, "requester")) }
                dt { "Priority" } dd .priority data-priority=(priority) { (priority) }
                dt { "Created" } dd { time { (m.at) } }
                dt { "Rule" } dd { code { (m.rule) } }
            }
            p .ticket-body { (field(m, "body")) }
        }
    }
}
