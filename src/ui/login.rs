//! `/login` and `/logout`: a form that takes an API token and sets the session cookie
//! ([`SESSION_COOKIE`]: `HttpOnly`, `SameSite=Strict`, `Path=/`), and clearing it.

use axum::Form;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

use crate::http::AppState;
use crate::http::guard::SESSION_COOKIE;

/// The login page.
pub async fn page() -> Markup {
    form_page(None)
}

fn form_page(error: Option<&str>) -> Markup {
    super::page(
        "Log in",
        html! {
            h1 { "Log in" }
            p.lede { "Paste an API token. Create one with " code { "rowfire tokens create NAME" } "; it acts in its own workspace." }
            form #login-form .card method="post" action="/login" {
                div .field {
                    label for="login-token" { "API token" }
                    input #login-token name="token" type="password" required maxlength="200"
                        autocomplete="current-password" placeholder="rft_…"
                        aria-invalid=[error.map(|_| "true")] aria-describedby="login-token-error";
                    p #login-token-error .field-error data-error-for="token" role="alert" { @if let Some(e) = error { (e) } }
                }
                button #login-button type="submit" { "Log in" }
            }
        },
    )
}

/// The login form's fields.
#[derive(Debug, Deserialize)]
pub struct Login {
    /// The API token.
    #[serde(default)]
    pub token: String,
}

/// Checks the token; on success sets the session cookie and goes to `/`, else shows the form
/// again with the error next to the field.
pub async fn submit(State(state): State<AppState>, Form(login): Form<Login>) -> Response {
    let token = login.token.trim();
    if token.is_empty() || token.len() > 200 {
        let page = form_page(Some("Paste an API token (it starts with rft_)."));
        return (StatusCode::BAD_REQUEST, page).into_response();
    }
    match crate::token::resolve(&state.store, token, state.clock.now()).await {
        Ok(Some(_)) => {
            let cookie = format!("{SESSION_COOKIE}={token}; HttpOnly; SameSite=Strict; Path=/");
            let mut response = (StatusCode::SEE_OTHER, [(header::LOCATION, "/")]).into_response();
            if let Ok(value) = HeaderValue::from_str(&cookie) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            response
        }
        Ok(None) => {
            let page = form_page(Some("This token is unknown or revoked."));
            (StatusCode::UNAUTHORIZED, page).into_response()
        }
        Err(e) => crate::http::error::ApiError::from(e).into_response(),
    }
}

/// Clears the session cookie and goes to `/login`.
pub async fn logout() -> Response {
    let cookie = format!("{SESSION_COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0");
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/login".to_string()),
            (header::SET_COOKIE, cookie),
        ],
    )
        .into_response()
}
