//! The checks every request passes before a handler runs, in order:
//!
//! 1. **Host.** A `Host` that is not a loopback name (`localhost`, `127.0.0.1`, `[::1]`) or one
//!    listed in `ROWFIRE_ALLOWED_HOSTS` is refused with 421, so a web page on another origin
//!    cannot reach a local Rowfire by pointing its own DNS name at 127.0.0.1 (DNS rebinding).
//! 2. **Origin.** A write (any method but GET, HEAD, OPTIONS) whose `Origin` is not this server's
//!    own, or which a browser marks `Sec-Fetch-Site: cross-site`, is refused with 403: another
//!    site's form or script cannot act through the user's browser.
//! 3. **Caller.** A bearer token (`Authorization: Bearer rft_…`) or the session cookie a token
//!    login set names the workspace the request acts in. Without either, a loopback-only server
//!    acts in its own workspace; a server listening beyond loopback refuses with 401. A token that
//!    is unknown or revoked is refused with 401 everywhere.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::error::ApiError;
use crate::store::WorkspaceId;

/// The cookie a token login sets: the token itself, `HttpOnly` and `SameSite=Strict`.
pub const SESSION_COOKIE: &str = "rowfire_session";

/// Who is asking: the workspace the request acts in, and the token that said so, if any.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The workspace every read and write of this request is scoped to.
    pub workspace: WorkspaceId,
    /// The id of the token the request carried (`None`: a loopback request without one).
    pub token: Option<String>,
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, ApiError> {
        parts
            .extensions
            .get::<Caller>()
            .cloned()
            .ok_or_else(|| ApiError::unauthorized("this request names no workspace"))
    }
}

/// Paths a caller may reach without a token on a server that requires one: the login page, the
/// static files the pages load, and the health check.
fn public(path: &str) -> bool {
    path == "/login" || path.starts_with("/assets/") || path == "/api/health"
}

/// Runs the three checks (module docs) and passes the request on with its [`Caller`]; every
/// answer, refusals too, carries [`SECURITY_HEADERS`].
pub async fn check(state: State<AppState>, request: Request, next: Next) -> Response {
    let mut response = admit(state, request, next).await;
    with_security_headers(response.headers_mut());
    response
}

/// The checks of [`check`], and the request when it passes them.
async fn admit(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let headers = request.headers();
    let Some((host, authority)) = host_of(request.uri(), headers) else {
        return ApiError::misdirected("the request must name exactly one Host").into_response();
    };
    if !host_allowed(&host, &state.allowed_hosts) {
        return ApiError::misdirected(&format!(
            "this server does not answer for the host \"{}\"; add it to ROWFIRE_ALLOWED_HOSTS if it is yours",
            shorten(&host)
        ))
        .into_response();
    }
    let safe = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if !safe && let Err(refusal) = same_origin(headers, &authority) {
        return refusal.into_response();
    }
    let path = request.uri().path().to_string();
    match credential(headers) {
        Some(text) => match crate::token::resolve(&state.store, &text, state.clock.now()).await {
            Ok(Some(token)) => {
                request.extensions_mut().insert(Caller {
                    workspace: token.workspace,
                    token: Some(token.id),
                });
            }
            Ok(None) if public(&path) => {}
            Ok(None) => {
                return ApiError::unauthorized(
                    "the token is unknown or revoked; create one with `rowfire tokens create NAME`",
                )
                .into_response();
            }
            Err(e) => return ApiError::from(e).into_response(),
        },
        None if state.tokens_required => {
            if !public(&path) {
                return ApiError::unauthorized(
                    "this server listens beyond loopback, so every request needs a token: send `Authorization: Bearer rft_…` or log in at /login",
                )
                .into_response();
            }
        }
        None => {
            request.extensions_mut().insert(Caller {
                workspace: state.workspace.clone(),
                token: None,
            });
        }
    }
    next.run(request).await
}

/// What every answer tells a browser: run and load nothing but this server's own files (the
/// pages' one script and one stylesheet), never be framed, never guess a content type, and send
/// no address of ours elsewhere. Escaping already keeps row values inert; this is the second wall.
const SECURITY_HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
];

fn with_security_headers(headers: &mut HeaderMap) {
    for (name, value) in SECURITY_HEADERS {
        headers
            .entry(*name)
            .or_insert(axum::http::HeaderValue::from_static(value));
    }
}

/// The host a request names, lower-cased and without its port, and the authority it was named
/// by (host and port, as sent); `None` when it names none, or more than one.
fn host_of(uri: &axum::http::Uri, headers: &HeaderMap) -> Option<(String, String)> {
    let mut all = headers.get_all(header::HOST).iter();
    let value = all.next()?.to_str().ok()?;
    if all.next().is_some() {
        return None;
    }
    // A request target in absolute form (`GET http://host/path`) names the host itself, and
    // a server takes it over the `Host` header (RFC 9112, 3.2.2).
    let value = uri.authority().map_or(value, |a| a.as_str());
    // An authority is a host and an optional port: no user part (`localhost:80@evil.com`), and a
    // port that is a port.
    let authority: axum::http::uri::Authority = value.parse().ok()?;
    let text = authority.as_str();
    let has_port = match text.strip_prefix('[') {
        Some(rest) => rest.contains("]:"),
        None => text.contains(':'),
    };
    if text.contains('@') || (has_port && authority.port_u16().is_none()) {
        return None;
    }
    Some((strip_port(text).to_ascii_lowercase(), text.to_string()))
}

fn strip_port(authority: &str) -> &str {
    if let Some(rest) = authority.strip_prefix('[') {
        // [::1]:8000 → [::1]; anything else after the bracket (`[::1]evil.com`) is kept, so the
        // host is not one this server answers for.
        return match rest.find(']') {
            Some(end) if rest[end + 1..].is_empty() || rest[end + 1..].starts_with(':') => {
                &authority[..end + 2]
            }
            _ => authority,
        };
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

/// Whether `host` is a loopback name or one of `allowed` (compared without case).
pub fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let loopback = host == "localhost"
        || host.ends_with(".localhost")
        || host == "[::1]"
        || host
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    loopback || allowed.iter().any(|a| a.eq_ignore_ascii_case(host))
}

/// A write's origin check: the `Origin` header, when present, must name `authority`, the one
/// the host check read (so both judge the same host); a browser's `Sec-Fetch-Site: cross-site`
/// is refused outright.
fn same_origin(headers: &HeaderMap, authority: &str) -> Result<(), ApiError> {
    let fetch_site = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok());
    if fetch_site == Some("cross-site") {
        return Err(ApiError::forbidden(
            "a write from another site is refused; use this server's own pages or an API client",
        ));
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let Some(origin) = origins.next() else {
        return Ok(());
    };
    // A browser sends one origin: a second could hide a foreign one behind ours.
    if origins.next().is_some() {
        return Err(ApiError::forbidden(
            "a write naming more than one Origin is refused",
        ));
    }
    let origin_authority = origin
        .to_str()
        .ok()
        .and_then(|o| o.split_once("://"))
        .map(|(_, rest)| rest);
    match origin_authority {
        Some(a) if a.eq_ignore_ascii_case(authority) => Ok(()),
        _ => Err(ApiError::forbidden(&format!(
            "a write from the origin \"{}\" is refused: it is not this server's",
            shorten(origin.to_str().unwrap_or("?"))
        ))),
    }
}

/// The token a request carries: a bearer token, else the session cookie.
fn credential(headers: &HeaderMap) -> Option<String> {
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let text = value.to_str().ok()?;
        let (scheme, token) = text.split_once(' ')?;
        return scheme
            .eq_ignore_ascii_case("bearer")
            .then(|| token.trim().to_string());
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.to_string())
}

/// At most 80 characters of text a caller sent, for a message.
fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names_and_listed_hosts_are_allowed_and_others_are_not() {
        let listed = vec!["rowfire.example.com".to_string()];
        for ok in [
            "localhost",
            "127.0.0.1",
            "127.8.9.1",
            "[::1]",
            "app.localhost",
            "rowfire.example.com",
        ] {
            assert!(host_allowed(ok, &listed), "{ok}");
        }
        for bad in [
            "evil.com",
            "localhost.evil.com",
            "127.0.0.1.nip.io",
            "0.0.0.0",
            "[::2]",
            "",
        ] {
            assert!(!host_allowed(bad, &listed), "{bad}");
        }
    }

    #[test]
    fn ports_are_stripped_from_hosts() {
        assert_eq!(strip_port("localhost:8000"), "localhost");
        assert_eq!(strip_port("[::1]:8000"), "[::1]");
        assert_eq!(strip_port("[::1]"), "[::1]");
        assert_eq!(strip_port("example.com"), "example.com");
        assert_eq!(strip_port("[::1]evil.com"), "[::1]evil.com");
        assert_eq!(strip_port("[::1]evil.com:80"), "[::1]evil.com:80");
        assert!(!host_allowed(strip_port("[::1]evil.com"), &[]));
    }
}
