//! Signed webhooks, the Standard Webhooks way: `webhook-id` (the delivery's id, the same on every
//! attempt), `webhook-timestamp`, and `webhook-signature` carrying `v1,` and the base64
//! HMAC-SHA256 of `id.timestamp.body` under each `whsec_` secret, so a receiver keeps verifying
//! while secrets rotate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};

/// A signing secret that is not `whsec_` and base64.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a webhook secret must be whsec_ followed by base64 (the secret itself is not shown)")]
pub struct BadSecret;

/// Decodes a `whsec_…` secret.
pub fn parse_secret(text: &str) -> Result<Vec<u8>, BadSecret> {
    let encoded = text.trim().strip_prefix("whsec_").ok_or(BadSecret)?;
    B64.decode(encoded)
        .ok()
        .filter(|k| !k.is_empty())
        .ok_or(BadSecret)
}

/// The three signature headers for one request, signed with every secret given (current first).
pub fn headers(
    id: &str,
    timestamp: i64,
    body: &[u8],
    secrets: &[Vec<u8>],
) -> Vec<(&'static str, String)> {
    let signatures: Vec<String> = secrets
        .iter()
        .map(|secret| {
            let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret)
                .expect("HMAC takes keys of any length");
            mac.update(format!("{id}.{timestamp}.").as_bytes());
            mac.update(body);
            format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
        })
        .collect();
    vec![
        ("webhook-id", id.to_string()),
        ("webhook-timestamp", timestamp.to_string()),
        ("webhook-signature", signatures.join(" ")),
    ]
}
