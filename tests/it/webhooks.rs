//! Signatures verify with an independent Standard Webhooks verifier (the published
//! `standardwebhooks` crate), including while two secrets are in rotation.

use base64::Engine;
use rowfire::send::webhook;

fn header_map(headers: &[(&'static str, String)]) -> http::HeaderMap {
    let mut map = http::HeaderMap::new();
    for (k, v) in headers {
        map.insert(*k, v.parse().unwrap());
    }
    map
}

#[test]
fn signatures_verify_with_an_independent_standard_webhooks_verifier() {
    let old = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"the-old-secret-key-0123456789abc")
    );
    let new = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"the-new-secret-key-abcdef0123456")
    );
    let secrets = vec![
        webhook::parse_secret(&new).unwrap(),
        webhook::parse_secret(&old).unwrap(),
    ];
    let body = br#"{"subject":"Card declined","amount":"1.10"}"#;
    #[expect(
        clippy::disallowed_methods,
        reason = "the verifying library checks the signature's timestamp against the system clock"
    )]
    let now = jiff::Timestamp::now().as_second();
    let headers = header_map(&webhook::headers("4711", now, body, &secrets));
    for secret in [&new, &old] {
        let verifier = standardwebhooks::Webhook::new(secret).unwrap();
        verifier
            .verify(body, &headers)
            .unwrap_or_else(|e| panic!("{secret}: {e:?}"));
    }
    let tampered = br#"{"subject":"Card declined","amount":"9.99"}"#;
    assert!(
        standardwebhooks::Webhook::new(&new)
            .unwrap()
            .verify(tampered, &headers)
            .is_err()
    );
    let stranger = format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(b"someone-else-entirely-0000000000")
    );
    assert!(
        standardwebhooks::Webhook::new(&stranger)
            .unwrap()
            .verify(body, &headers)
            .is_err()
    );
    assert!(webhook::parse_secret("sk_live_123").is_err());
}
