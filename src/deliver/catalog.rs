//! The integration catalogue: outside systems described as data (base URL and REST actions with
//! method, path, body and header templates, and declared parameters). Every entry, built in or
//! custom, is read by this same code.

use std::collections::BTreeMap;

use serde::Deserialize;

/// Catalogue entries shipped with Rowfire, as YAML.
const BUILT_IN: &[&str] = &[include_str!("../../catalog/demo_inbox.yaml")];

/// An outside system.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Integration {
    /// The catalogue name.
    pub name: String,
    /// What it is, for people.
    #[serde(default)]
    pub description: String,
    /// Where requests go (`inbox://demo` stays in-process).
    pub base_url: String,
    /// Its actions by name.
    pub actions: BTreeMap<String, Action>,
}

/// One REST call on an integration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
}

/// A declared parameter of an action.
#[derive(Debug, Clone, PartialEq, Deserialize)]
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
}
