//! The headers Rowfire writes itself, which no action may set and no setting may name: the
//! framing headers of the HTTP client, and the credential's, the signature's and the idempotency
//! key's.

/// Why an action may not set `header` itself, if it may not: the framing headers the HTTP client
/// writes (a templated `Content-Length` or `Host` would let a row value cut the body or pick the
/// virtual host), and the headers that carry the integration's credential, signature or
/// idempotency key, which Rowfire writes at the moment of sending.
pub(crate) fn reserved_header(
    header: &str,
    spec: &crate::definitions::catalog::Integration,
) -> Option<&'static str> {
    use crate::definitions::catalog::Auth;
    let lower = header.trim().to_ascii_lowercase();
    if let Some(why) = framing_header(&lower) {
        return Some(why);
    }
    let credential = match &spec.auth {
        Auth::Bearer | Auth::Basic => lower == "authorization",
        Auth::Header { header } => header.trim().eq_ignore_ascii_case(&lower),
        Auth::None => false,
    };
    if credential {
        return Some("it carries the integration's credential");
    }
    if spec.signing.is_some() && lower.starts_with("webhook-") {
        return Some("it carries the request's signature");
    }
    None
}

/// Why an action may not set `header` among its own headers, if it may not: the reasons of
/// [`reserved_header`], and the action's idempotency header, which carries the delivery's key.
pub(crate) fn reserved_action_header(
    header: &str,
    spec: &crate::definitions::catalog::Integration,
    action: &crate::definitions::catalog::Action,
) -> Option<&'static str> {
    reserved_header(header, spec).or_else(|| {
        action
            .idempotency_header
            .as_deref()
            .is_some_and(|h| h.trim().eq_ignore_ascii_case(header.trim()))
            .then_some("it carries the delivery's idempotency key")
    })
}

/// Why no header Rowfire writes (the credential's, the idempotency key's) may be named
/// `lower`, if it may not: the framing headers the HTTP client writes itself.
pub(super) fn framing_header(lower: &str) -> Option<&'static str> {
    const FRAMING: &[&str] = &[
        "connection",
        "content-length",
        "expect",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    ];
    FRAMING
        .contains(&lower)
        .then_some("the HTTP client frames every request")
}
