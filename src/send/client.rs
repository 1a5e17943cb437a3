//! The one outbound HTTP client. rustls, no redirects, no proxies, http and https only, a timeout
//! per request; names are resolved through the egress check, so the connection goes to an address
//! that was checked (and an address written in the URL is checked before any connection).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::egress::{Policy, Refused};
use super::outcome::AttemptResult;

/// How much of an answer's body is kept with the attempt (characters).
pub const RESPONSE_KEEP: usize = 1024;

/// How much of an answer's body is judged and redacted (bytes), at most.
pub const RESPONSE_READ: usize = RESPONSE_KEEP * 4;

/// How much more than [`RESPONSE_READ`] is read, so that a secret echoed across that cut is
/// redacted whole before the body is cut (see [`super::request::redact_result`]).
pub const READ_BEYOND: usize = 4096;

/// A request ready to go: method, URL, headers (credentials and signatures included) and body.
/// Its `Debug` form leaves header values out.
#[derive(Clone)]
pub struct Outbound {
    /// HTTP method.
    pub method: String,
    /// Full URL.
    pub url: String,
    /// Every header to send.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Vec<u8>,
    /// How long it may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for Outbound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Outbound")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &names)
            .field("body_bytes", &self.body.len())
            .finish()
    }
}

/// The outbound client, cheap to clone (one connection pool).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    policy: Arc<Policy>,
}

/// Resolves names and keeps only the addresses the egress policy allows.
struct CheckedResolver {
    policy: Arc<Policy>,
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy.clone();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            let mut refused = None;
            let allowed: Vec<SocketAddr> = found
                .into_iter()
                .filter(|a| match policy.check(a.ip()) {
                    Ok(()) => true,
                    Err(e) => {
                        refused.get_or_insert(e);
                        false
                    }
                })
                .collect();
            if allowed.is_empty() {
                let err: Box<dyn std::error::Error + Send + Sync> = match refused {
                    Some(r) => Box::new(r),
                    None => format!("{} resolved to no address", name.as_str()).into(),
                };
                return Err(err);
            }
            Ok(Box::new(allowed.into_iter()) as Addrs)
        })
    }
}

/// Makes ring the process's TLS crypto provider (reqwest is built without one). Idempotent.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Client {
    /// The client for a policy.
    pub fn new(policy: Policy) -> Client {
        install_crypto_provider();
        let policy = Arc::new(policy);
        #[expect(
            clippy::disallowed_methods,
            reason = "this is the one outbound client: no redirects, no proxy, the egress resolver"
        )]
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .user_agent(concat!("rowfire/", env!("CARGO_PKG_VERSION")))
            .dns_resolver(Arc::new(CheckedResolver {
                policy: policy.clone(),
            }))
            .build()
            .expect("the outbound client's settings are valid");
        Client { http, policy }
    }

    /// Sends one request and reports what came back, and how long it took. Never panics and
    /// never returns an error: every failure is an [`AttemptResult`].
    pub async fn send(&self, req: &Outbound) -> (AttemptResult, Duration) {
        let started = Instant::now();
        let result = self.try_send(req).await;
        (result, started.elapsed())
    }

    async fn try_send(&self, req: &Outbound) -> AttemptResult {
        let url = match reqwest::Url::parse(&req.url) {
            Ok(u) => u,
            Err(e) => return AttemptResult::Invalid(format!("the URL does not parse: {e}")),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return AttemptResult::Refused(format!(
                "the scheme {}: is not allowed; only http and https leave the machine",
                url.scheme()
            ));
        }
        // An address written in the URL is never resolved, so it is checked here.
        let literal = url.host_str().and_then(|h| {
            h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .ok()
        });
        if let Some(addr) = literal
            && let Err(e) = self.policy.check(addr)
        {
            return AttemptResult::Refused(e.to_string());
        }
        let method = match reqwest::Method::from_bytes(req.method.as_bytes()) {
            Ok(m) => m,
            Err(_) => {
                return AttemptResult::Invalid(format!("{} is not an HTTP method", req.method));
            }
        };
        let mut builder = self
            .http
            .request(method, url)
            .timeout(req.timeout)
            .body(req.body.clone());
        for (name, value) in &req.headers {
            builder = builder.header(name, value);
        }
        match builder.send().await {
            Ok(mut resp) => {
                let status = resp.status().as_u16();
                let retry_after = resp
                    .headers()
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                // Read a bounded part of the answer (what is judged, and a little more so that redaction
                // sees whole a secret the cut would split): a huge body costs nothing.
                let mut kept = Vec::new();
                while kept.len() < RESPONSE_READ + READ_BEYOND {
                    match resp.chunk().await {
                        Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
                        Ok(None) => break,
                        Err(e) if e.is_timeout() => return AttemptResult::Timeout,
                        Err(_) => break,
                    }
                }
                kept.truncate(RESPONSE_READ + READ_BEYOND);
                // PostgreSQL text holds no NUL; a body with one must still be recordable.
                let body = String::from_utf8_lossy(&kept).replace('\0', "");
                AttemptResult::Response {
                    status,
                    retry_after,
                    body,
                }
            }
            Err(e) => classify(&e),
        }
    }
}

/// Sorts a failed request into timeout, refused (the egress check) or network error, with a
/// message that names the cause but never the request's headers.
fn classify(e: &reqwest::Error) -> AttemptResult {
    if e.is_timeout() {
        return AttemptResult::Timeout;
    }
    if e.is_builder() {
        // Never the value itself: a header value may hold a credential.
        return AttemptResult::Invalid("a header name or value is not allowed in HTTP".into());
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    let mut innermost = e.to_string();
    while let Some(err) = source {
        if let Some(refused) = err.downcast_ref::<Refused>() {
            return AttemptResult::Refused(refused.to_string());
        }
        innermost = err.to_string();
        source = err.source();
    }
    AttemptResult::Network(innermost.replace('\0', ""))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_debug_form_names_headers_but_never_their_values() {
        let out = super::Outbound {
            method: "POST".into(),
            url: "https://api.example.com/x".into(),
            headers: vec![("authorization".into(), "Bearer s3cr3t-token".into())],
            body: b"{}".to_vec(),
            timeout: std::time::Duration::from_secs(1),
        };
        let shown = format!("{out:?}");
        assert!(
            shown.contains("authorization") && !shown.contains("s3cr3t"),
            "{shown}"
        );
    }
}
