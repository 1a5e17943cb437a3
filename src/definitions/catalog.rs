//! The integration catalogue: outside systems described as data (base URL and REST actions with
//! method, path, body and header templates, and declared parameters). Every entry, built in or
//! custom, is read by this same code.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The base URL of the built-in Demo inbox.
pub const INBOX_URL: &str = "inbox://demo";

/// Catalogue entries shipped with Rowfire, as YAML.
const BUILT_IN: &[&str] = &[
    include_str!("../../catalog/demo_inbox.yaml"),
    include_str!("../../catalog/slack.yaml"),
    include_str!("../../catalog/zendesk.yaml"),
    include_str!("../../catalog/braze.yaml"),
    include_str!("../../catalog/webhook.yaml"),
];

/// How long a request may take when an integration does not say.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;

/// An outside system.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Integration {
    /// The catalogue name.
    pub name: String,
    /// What it is, for people.
    #[serde(default)]
    pub description: String,
    /// Where requests go (`inbox://demo` stays in-process).
    pub base_url: String,
    /// How requests authenticate; the credentials themselves are stored encrypted, never here.
    #[serde(default)]
    pub auth: Auth,
    /// `standard_webhooks` signs every request with the `signing_secret` credential.
    #[serde(default)]
    pub signing: Option<Signing>,
    /// How long one request may take, in milliseconds.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Requests per second shared by every worker, if the outside system limits them.
    #[serde(default)]
    pub rate_limit: Option<f64>,
    /// Its actions by name.
    pub actions: BTreeMap<String, Action>,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

/// How an integration's requests authenticate. Each kind names the credentials it reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, tag = "kind", rename_all = "snake_case")]
pub enum Auth {
    /// No authentication.
    #[default]
    None,
    /// `Authorization: Bearer` with the `token` credential.
    Bearer,
    /// A header of the integration's choosing carrying the `token` credential.
    Header {
        /// The header's name, for example `X-Api-Key`.
        header: String,
    },
    /// HTTP basic authentication with the `username` and `password` credentials.
    Basic,
}

impl Auth {
    /// The credentials this kind of authentication needs.
    pub fn credentials(&self) -> &'static [&'static str] {
        match self {
            Auth::None => &[],
            Auth::Bearer | Auth::Header { .. } => &["token"],
            Auth::Basic => &["username", "password"],
        }
    }
}

/// Request signing schemes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signing {
    /// Standard Webhooks: `webhook-id`, `webhook-timestamp`, `webhook-signature`, with the
    /// `signing_secret` credential (and `signing_secret_previous` while rotating).
    StandardWebhooks,
}

impl Integration {
    /// Every credential this integration reads at the moment of sending (the optional previous
    /// signing secret aside).
    pub fn credentials(&self) -> Vec<&'static str> {
        let mut names = self.auth.credentials().to_vec();
        if self.signing.is_some() {
            names.push("signing_secret");
        }
        names
    }
}

/// One REST call on an integration.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Action {
    /// What it does, for people.
    #[serde(default)]
    pub description: String,
    /// The HTTP method.
    pub method: String,
    /// The path under the base URL (a template).
    pub path: String,
    /// Declared parameters.
    #[serde(default)]
    pub params: BTreeMap<String, Param>,
    /// The body (a JSON template).
    #[serde(default)]
    pub body: serde_json::Value,
    /// Headers (templates).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A 2xx answer whose JSON body has `"ok": false` is a failure (Slack's convention).
    #[serde(default)]
    pub ok_field: bool,
    /// The header carrying the delivery id as an idempotency key, for APIs that honour one.
    #[serde(default)]
    pub idempotency_header: Option<String>,
}

/// A declared parameter of an action.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// Whether a binding must give it.
    #[serde(default)]
    pub required: bool,
    /// The value when a binding gives none.
    #[serde(default)]
    pub default: Option<serde_json::Value>,
}

/// A built-in catalogue entry by name.
pub fn built_in(name: &str) -> Option<Integration> {
    all().into_iter().find(|i| i.name == name)
}

/// Every built-in catalogue entry.
pub fn all() -> Vec<Integration> {
    BUILT_IN
        .iter()
        .map(|text| serde_yaml_ng::from_str(text).expect("built-in catalogue entries are valid"))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_built_in_catalogue_parses_and_has_the_demo_inbox() {
        let inbox = super::built_in("demo_inbox").unwrap();
        assert_eq!(inbox.base_url, "inbox://demo");
        assert!(inbox.actions.contains_key("chat_message") && inbox.actions.contains_key("ticket"));
        assert!(inbox.actions["ticket"].params["subject"].required);
    }

    #[test]
    fn every_built_in_entry_parses_with_the_credentials_it_needs() {
        let names: Vec<String> = super::all().into_iter().map(|i| i.name).collect();
        assert_eq!(
            names,
            ["demo_inbox", "slack", "zendesk", "braze", "webhook"].map(String::from)
        );
        assert_eq!(super::built_in("slack").unwrap().credentials(), ["token"]);
        assert!(super::built_in("slack").unwrap().actions["post_message"].ok_field);
        assert_eq!(
            super::built_in("zendesk").unwrap().credentials(),
            ["username", "password"]
        );
        assert_eq!(super::built_in("braze").unwrap().credentials(), ["token"]);
        assert_eq!(
            super::built_in("webhook").unwrap().credentials(),
            ["signing_secret"]
        );
    }
}
