//! The outgoing request of one delivery: its stored method, URL, headers and body, plus what is
//! added only at the moment of sending and never stored (authentication, Standard Webhooks
//! signatures, the idempotency key), and the redaction of those secrets from anything recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::catalog::{Action, Auth, Integration, Signing};
use super::client::Outbound;
use super::queue::Claimed;

/// Every string a request of `integration` carries that must never be recorded: each credential,
/// and the encoded form basic authentication sends.
pub fn secret_strings(
    integration: &Integration,
    credentials: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut secrets: Vec<String> = credentials.values().cloned().collect();
    if integration.auth == Auth::Basic {
        use base64::Engine;
        let cred = |name: &str| credentials.get(name).cloned().unwrap_or_default();
        let pair = format!("{}:{}", cred("username"), cred("password"));
        secrets.push(base64::engine::general_purpose::STANDARD.encode(pair));
    }
    secrets
}

/// `text` with every secret of four or more characters replaced.
pub fn redact(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|v| v.len() >= 4)
        .fold(text.to_string(), |t, v| t.replace(v.as_str(), "[redacted]"))
}

/// Builds the request for one delivery: its stored method, URL, headers and body, plus what is
/// added only now and never stored: authentication, signatures and the idempotency key.
pub fn outbound(
    claimed: &Claimed,
    idempotency_key: &str,
    integration: &Integration,
    action: &Action,
    credentials: &BTreeMap<String, String>,
    now: Timestamp,
) -> Result<Outbound, String> {
    let (Some(method), Some(url)) = (&claimed.method, &claimed.url) else {
        return Err("the delivery was never rendered; there is nothing to send".into());
    };
    let body = claimed.body.clone().unwrap_or_default().into_bytes();
    let mut headers: Vec<(String, String)> =
        vec![("content-type".into(), "application/json".into())];
    if let Some(stored) = &claimed.headers
        && let Ok(serde_json::Value::Object(map)) = serde_json::from_str(stored)
    {
        for (name, value) in map {
            let value = match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            };
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
            headers.push((name, value));
        }
    }
    let id = idempotency_key.to_string();
    if let Some(name) = &action.idempotency_header {
        headers.push((name.clone(), id.clone()));
    }
    let cred = |name: &str| credentials.get(name).cloned().unwrap_or_default();
    match &integration.auth {
        Auth::None => {}
        Auth::Bearer => headers.push(("authorization".into(), format!("Bearer {}", cred("token")))),
        Auth::Header { header } => headers.push((header.clone(), cred("token"))),
        Auth::Basic => {
            use base64::Engine;
            let pair = format!("{}:{}", cred("username"), cred("password"));
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            headers.push(("authorization".into(), format!("Basic {encoded}")));
        }
    }
    if let Some(Signing::StandardWebhooks) = integration.signing {
        let mut secrets = Vec::new();
        for name in ["signing_secret", "signing_secret_previous"] {
            if let Some(text) = credentials.get(name) {
                secrets.push(super::webhook::parse_secret(text).map_err(|e| e.to_string())?);
            }
        }
        for (name, value) in super::webhook::headers(&id, now.as_second(), &body, &secrets) {
            headers.push((name.to_string(), value));
        }
    }
    Ok(Outbound {
        method: method.clone(),
        url: url.clone(),
        headers,
        body,
        timeout: Duration::from_millis(integration.timeout_ms.max(1)),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_echoed_credential_is_redacted_from_what_is_recorded() {
        let slack = crate::deliver::catalog::built_in("slack").unwrap();
        let creds = [("token".to_string(), "xoxb-123-secret".to_string())].into();
        let echoed = r#"{"ok":false,"echo":"Bearer xoxb-123-secret"}"#;
        assert_eq!(
            super::redact(echoed, &super::secret_strings(&slack, &creds)),
            r#"{"ok":false,"echo":"Bearer [redacted]"}"#
        );
        let zendesk = crate::deliver::catalog::built_in("zendesk").unwrap();
        let creds = [
            ("username".to_string(), "me@example.com/token".to_string()),
            ("password".to_string(), "zd-9f8e7d".to_string()),
        ]
        .into();
        let secrets = super::secret_strings(&zendesk, &creds);
        let echoed = "Authorization: Basic bWVAZXhhbXBsZS5jb20vdG9rZW46emQtOWY4ZTdk";
        assert_eq!(
            super::redact(echoed, &secrets),
            "Authorization: Basic [redacted]"
        );
    }
}
