//! The outgoing request of one delivery: its stored method, URL, headers and body, plus what is
//! added only at the moment of sending and never stored (authentication, Standard Webhooks
//! signatures, the idempotency key), and the redaction of those secrets from anything recorded.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;

use super::client::Outbound;
use super::queue::Claimed;
use crate::definitions::catalog::{Action, Auth, Integration, Signing};
use crate::store::WorkspaceId;

/// Every string a request of `integration` carries that must never be recorded: each credential,
/// and the encoded form basic authentication sends.
pub fn secret_strings(
    integration: &Integration,
    credentials: &BTreeMap<String, String>,
) -> Vec<String> {
    use base64::Engine;
    let mut secrets: Vec<String> = credentials.values().cloned().collect();
    // A Standard Webhooks secret is `whsec_` and the base64 of the key that signs: the part after
    // the prefix, and the key itself (as hex), are the secret too.
    for value in credentials.values() {
        if let Some(key) = value.strip_prefix("whsec_") {
            secrets.push(key.to_string());
        }
        if let Ok(bytes) = super::webhook::parse_secret(value) {
            secrets.push(bytes.iter().map(|b| format!("{b:02x}")).collect());
        }
    }
    if integration.auth == Auth::Basic {
        let cred = |name: &str| credentials.get(name).cloned().unwrap_or_default();
        let pair = format!("{}:{}", cred("username"), cred("password"));
        secrets.push(base64::engine::general_purpose::STANDARD.encode(pair));
    }
    secrets
}

/// `text` with every secret of four or more characters replaced, in every common encoding an
/// echo takes (see [`super::redact`]).
pub fn redact(text: &str, secrets: &[String]) -> String {
    super::redact::redact(text, secrets)
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
    // Credentials go only under the base URL in force, whatever was stored (a URL rendered by
    // an older version, or a base_url changed since), and no stored header may add lines.
    crate::outbox::target::check_under(&integration.base_url, url).map_err(|e| e.to_string())?;
    let body = claimed.body.clone().unwrap_or_default().into_bytes();
    let mut headers: Vec<(String, String)> =
        vec![("content-type".into(), "application/json".into())];
    if let Some(stored) = &claimed.headers
        && let Ok(stored) = serde_json::from_str::<serde_json::Value>(stored)
        && let serde_json::Value::Object(map) = &stored
    {
        crate::outbox::target::check_headers(&stored).map_err(|e| e.to_string())?;
        for (name, value) in map {
            let value = match value {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            // A header Rowfire sets is never taken from what was stored (a version pushed
            // before such headers were refused may have rendered one).
            if crate::definitions::reserved_action_header(name, integration, action).is_some() {
                continue;
            }
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
            headers.push((name.clone(), value));
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

/// Why an action could not be tried.
#[derive(Debug, thiserror::Error)]
pub enum TryError {
    /// The binding does not render against the sample row into a request safe to send.
    #[error(transparent)]
    Render(#[from] crate::outbox::RenderError),
    /// The credentials could not be opened.
    #[error(transparent)]
    Secret(#[from] crate::secret::StoredSecretError),
    /// The request cannot be built (a signing secret that is not `whsec_…`, say).
    #[error("{0}")]
    Build(String),
}

/// What trying an action once did: the rendered request and, unless it stays in-process (the
/// Demo inbox), the redacted answer, how long it took, and what it would mean for a delivery.
#[derive(Debug)]
pub struct Tried {
    /// The rendered request (never credentials).
    pub request: crate::outbox::Request,
    /// The answer (redacted), the time it took, and the verdict a delivery would get.
    pub sent: Option<(
        super::outcome::AttemptResult,
        Duration,
        super::outcome::Verdict,
    )>,
}

/// Tries one action of an integration in force, as `rowfire integrations test` does: renders
/// `binding` against a sample `row` (the recipient, or `test`, stands for the key), adds
/// credentials, signatures and a fresh idempotency key (so an API that honours keys never
/// replays an old answer), sends it once through `client`, redacts the answer and judges it as a
/// delivery's first attempt. `key` opens credentials when the integration needs them.
#[allow(
    clippy::too_many_arguments,
    reason = "what `integrations test` gathers from the command line"
)]
pub async fn try_action(
    store: &crate::store::Store,
    workspace: &WorkspaceId,
    defs: &crate::definitions::Definitions,
    binding: &crate::definitions::Binding,
    row: &serde_json::Value,
    key: Option<&crate::secret::MasterKey>,
    client: &super::client::Client,
    now: Timestamp,
) -> Result<Tried, TryError> {
    let integration = &defs
        .integration(&binding.integration)
        .ok_or_else(|| TryError::Build(format!("there is no integration {}", binding.integration)))?
        .spec;
    let action = integration
        .actions
        .get(&binding.action)
        .ok_or_else(|| TryError::Build(format!("there is no action {}", binding.action)))?;
    let mut ctx = row.as_object().cloned().unwrap_or_default();
    let key_value = binding.recipient.clone().unwrap_or_else(|| "test".into());
    for (name, value) in [
        ("row", row.clone()),
        ("rule", "test".into()),
        ("trigger", "test".into()),
        ("entity_id", key_value.into()),
        ("event_time", now.to_string().into()),
        ("fired_at", now.to_string().into()),
    ] {
        ctx.insert(name.into(), value);
    }
    let request = crate::outbox::render(defs, binding, &serde_json::Value::Object(ctx))?;
    if integration.base_url == crate::outbox::INBOX_URL {
        return Ok(Tried {
            request,
            sent: None,
        });
    }
    let credentials = match (integration.credentials().is_empty(), key) {
        (true, _) => BTreeMap::new(),
        (false, None) => {
            let missing = crate::secret::SecretError::MissingMasterKey;
            return Err(crate::secret::StoredSecretError::from(missing).into());
        }
        (false, Some(key)) => {
            let owner = crate::secret::integration_owner(&binding.integration);
            crate::secret::open_all(store, key, workspace, &owner).await?
        }
    };
    let claimed = Claimed {
        id: 0,
        workspace: workspace.clone(),
        token: 0,
        integration: binding.integration.clone(),
        action: format!("{}.{}", binding.integration, binding.action),
        method: Some(request.method.clone()),
        url: Some(request.url.clone()),
        headers: Some(request.headers.to_string()),
        body: Some(request.body.to_string()),
        attempts: 1,
        due_at: now,
        expires_at: None,
        lease_expires_at: now,
        scheduled: None,
    };
    let idempotency_key = format!("test-{:016x}", fastrand::u64(..));
    let out = outbound(
        &claimed,
        &idempotency_key,
        integration,
        action,
        &credentials,
        now,
    )
    .map_err(TryError::Build)?;
    let (result, took) = client.send(&out).await;
    let result = redact_result(
        result,
        &super::redact::Secrets::new(secret_strings(integration, &credentials)),
    );
    let verdict = super::outcome::judge(&result, 1, now, action.ok_field, 0.5);
    Ok(Tried {
        request,
        sent: Some((result, took, verdict)),
    })
}

/// An answer with every secret redacted, before anything reads, records or prints it; then its
/// body is cut to [`super::client::RESPONSE_READ`] bytes (the client reads a little more, so that
/// a secret the cut would split is seen whole), and a secret's beginning left at the cut is
/// hidden too.
pub fn redact_result(
    result: super::outcome::AttemptResult,
    secrets: &super::redact::Secrets,
) -> super::outcome::AttemptResult {
    use super::outcome::AttemptResult;
    match result {
        AttemptResult::Response {
            status,
            retry_after,
            body,
        } => AttemptResult::Response {
            status,
            retry_after,
            body: secrets.redact_and_cut(&body, super::client::RESPONSE_READ),
        },
        AttemptResult::Network(e) => AttemptResult::Network(secrets.redact(&e)),
        AttemptResult::Invalid(e) => AttemptResult::Invalid(secrets.redact(&e)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    /// The key after `whsec_` signs the requests: echoed bare, or decoded as hex, it is hidden.
    #[test]
    fn a_webhook_signing_key_is_redacted_without_its_prefix_and_as_the_key_it_encodes() {
        let hook = crate::definitions::catalog::built_in("webhook").unwrap();
        let key = "S0tLS0tLS0sBAgN6enp6cXFxcXd3d3dl";
        let creds = [("signing_secret".to_string(), format!("whsec_{key}"))].into();
        let secrets = super::secret_strings(&hook, &creds);
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(key)
            .unwrap();
        let hex: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
        for echoed in [format!("leak: {key}"), format!("leak: {hex}")] {
            let shown = super::redact(&echoed, &secrets);
            assert_eq!(shown, "leak: [redacted]", "{echoed}");
        }
    }

    #[test]
    fn an_echoed_credential_is_redacted_from_what_is_recorded() {
        let slack = crate::definitions::catalog::built_in("slack").unwrap();
        let creds = [("token".to_string(), "xoxb-123-secret".to_string())].into();
        let echoed = r#"{"ok":false,"echo":"Bearer xoxb-123-secret"}"#;
        assert_eq!(
            super::redact(echoed, &super::secret_strings(&slack, &creds)),
            r#"{"ok":false,"echo":"Bearer [redacted]"}"#
        );
        let zendesk = crate::definitions::catalog::built_in("zendesk").unwrap();
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

    #[test]
    fn a_stored_url_outside_the_base_in_force_or_a_stored_header_line_break_is_never_sent() {
        let slack = crate::definitions::catalog::built_in("slack").unwrap();
        let action = &slack.actions["post_message"];
        let creds = [("token".to_string(), "xoxb-123-secret".to_string())].into();
        let at: jiff::Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let claimed = |url: &str, headers: &str| super::Claimed {
            id: 1,
            workspace: crate::store::WorkspaceId::DEFAULT,
            token: 1,
            integration: "slack".into(),
            action: "slack.post_message".into(),
            method: Some("POST".into()),
            url: Some(url.into()),
            headers: Some(headers.into()),
            body: Some("{}".into()),
            attempts: 1,
            due_at: at,
            expires_at: None,
            lease_expires_at: at,
            scheduled: None,
        };
        let send = |url: &str, headers: &str| {
            super::outbound(&claimed(url, headers), "1", &slack, action, &creds, at)
        };
        let sent = send(
            "https://slack.com/api/chat.postMessage",
            r#"{"X-Note":"a b"}"#,
        )
        .unwrap();
        assert!(sent.headers.contains(&("X-Note".into(), "a b".into())));
        let err = send("https://slack.com.evil.example/api/x", "{}").unwrap_err();
        assert!(err.contains("changed the host"), "{err}");
        let err = send("https://slack.com/admin", "{}").unwrap_err();
        assert!(err.contains("left the base URL's path"), "{err}");
        let err = send("https://slack.com/api/x", r#"{"X-Note":"a\r\nX-Evil: 1"}"#).unwrap_err();
        assert!(err.contains("X-Note") && !err.contains("xoxb"), "{err}");

        // Headers Rowfire sets, stored by a version pushed before they were refused, are
        // dropped: one Authorization (the credential's), no Host or Content-Length from a row.
        let sent = send(
            "https://slack.com/api/chat.postMessage",
            r#"{"Host":"evil.example","content-length":"0","Authorization":"Bearer attacker","X-Note":"kept"}"#,
        )
        .unwrap();
        let named = |n: &str| {
            sent.headers
                .iter()
                .filter(|(h, _)| h.eq_ignore_ascii_case(n))
                .map(|(_, v)| v.as_str())
                .collect::<Vec<_>>()
        };
        assert_eq!(named("authorization"), ["Bearer xoxb-123-secret"]);
        assert!(named("host").is_empty() && named("content-length").is_empty());
        assert_eq!(named("x-note"), ["kept"]);
    }
}
