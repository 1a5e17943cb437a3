//! `/login` and `/logout`: a form that takes an API token and sets the session cookie
//! ([`SESSION_COOKIE`]: `HttpOnly`, `SameSite=Strict`, `Path=/`), and clearing it.

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
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
pub async fn submit(
    State(state): State<AppState>,
    login: Result<Form<Login>, FormRejection>,
) -> Response {
    let login = match login {
        Ok(Form(login)) => login,
        Err(e) => return refused(&e),
    };
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

/// The form again, saying why what was sent could not be read as a login form: too slow (408),
/// too large (413), not a web form (415) or not its fields (400). Never axum's plain text.
pub fn refused(e: &FormRejection) -> Response {
    let (status, message) = match e {
        FormRejection::BytesRejection(b) if crate::http::error::slow_body(b).is_some() => (
            StatusCode::REQUEST_TIMEOUT,
            "The form took too long to arrive; send it again.",
        ),
        FormRejection::InvalidFormContentType(_) => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Send the token from this form (a web form, application/x-www-form-urlencoded).",
        ),
        FormRejection::BytesRejection(_) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => (
            StatusCode::PAYLOAD_TOO_LARGE,
            "That is far larger than a login form; paste only the API token.",
        ),
        _ => (
            StatusCode::BAD_REQUEST,
            "The form could not be read; paste the API token and send it again.",
        ),
    };
    (status, form_page(Some(message))).into_response()
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
