//! The pages: server-rendered HTML (`maud`) with a small script of Rowfire's own for the live
//! parts, every file a page loads served from the binary under `/assets/` (no CDN, no build
//! step). Each page has its own URL, so it can be bookmarked and shared.

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use maud::{DOCTYPE, Markup, html};

use crate::http::AppState;
use crate::http::error::ApiResult;
use crate::http::guard::Caller;

pub mod activity;
mod chart;
pub mod inbox;
pub mod integrations;
pub mod login;
mod rules;
mod start;
mod triggers;

/// The stylesheet every page uses.
const STYLE: &str = include_str!("../../assets/rowfire.css");
/// The script every page loads (live updates, checks as you type).
const SCRIPT: &str = include_str!("../../assets/rowfire.js");

/// The whole application for `state`: these pages beside the API and `/metrics`, behind the
/// request checks ([`crate::http::router`]).
pub fn app(state: AppState) -> Router {
    crate::http::router(state, routes())
}

/// The pages and their assets.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(home))
        .route("/start", get(start::start))
        .route("/triggers", get(triggers::list))
        .route("/triggers/{name}", get(triggers::show))
        .route("/rules", get(rules::list))
        .route("/rules/{name}", get(rules::show))
        .route("/integrations", get(integrations::page))
        .route("/activity", get(activity::page))
        .route("/activity/stream", get(activity::stream))
        .route("/inbox", get(inbox::page))
        .route("/login", get(login::page).post(login::submit))
        .route("/logout", axum::routing::post(login::logout))
        .route(
            "/assets/rowfire.css",
            get(|| async { ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], STYLE) }),
        )
        .route(
            "/assets/rowfire.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    SCRIPT,
                )
            }),
        )
}

/// The main navigation: every page's own URL.
pub const NAV: &[(&str, &str)] = &[
    ("/start", "Get started"),
    ("/triggers", "Triggers"),
    ("/rules", "Rules"),
    ("/integrations", "Integrations"),
    ("/activity", "Activity"),
    ("/inbox", "Demo inbox"),
];

/// The frame every page shares: its title, the navigation, the content.
pub fn page(title: &str, content: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Rowfire" }
                link rel="stylesheet" href="/assets/rowfire.css";
                script src="/assets/rowfire.js" defer {}
            }
            body {
                header.top {
                    a.brand href="/" { "Rowfire" }
                    nav aria-label="Main" {
                        @for (href, label) in NAV {
                            a href=(href) { (label) }
                        }
                    }
                }
                main { (content) }
            }
        }
    }
}

/// What a page about definitions shows before anything was pushed.
pub fn empty_state() -> Markup {
    html! {
        section.empty id="empty-state" {
            h1 { "Nothing here yet" }
            p { "No definitions are in force in this workspace. Push a file with " code { "rowfire push -f definitions.yaml" } ", or run " code { "rowfire demo" } " to start from the sample." }
        }
    }
}

async fn home(State(state): State<AppState>, caller: Caller) -> ApiResult<impl IntoResponse> {
    let ws = crate::store::workspace::get(&state.store, &caller.workspace).await?;
    Ok(page(
        "Home",
        html! {
            h1 { (ws.name) }
            p { "Workspace " code { (ws.id.to_string()) } }
        },
    ))
}
