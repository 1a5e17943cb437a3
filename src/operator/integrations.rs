//! Integrations as an operator sees them: the catalogue, those in force with which credentials
//! are set (names only; no function here returns a credential's value), adding one, writing a
//! credential, and trying one action once with a sample row.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde::Serialize;
use utoipa::ToSchema;

use super::{OperatorError, in_force, listed};
use crate::definitions::{Binding, catalog, edit, versions};
use crate::secret::{self, MasterKey};
use crate::send::client::Client;
use crate::send::request::{Tried, try_action};
use crate::store::{Store, WorkspaceId};

/// One action, as data.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ActionView {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// The HTTP method.
    pub method: String,
    /// The path template under the base URL.
    pub path: String,
    /// Its parameters: name and whether a binding must give it.
    pub params: Vec<ParamView>,
    /// The body template.
    #[schema(value_type = serde_json::Value)]
    pub body: serde_json::Value,
}

/// One declared parameter of an action.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ParamView {
    /// Its name.
    pub name: String,
    /// Whether a binding must give it.
    pub required: bool,
    /// Its default, if it has one.
    #[schema(value_type = Option<serde_json::Value>)]
    pub default: Option<serde_json::Value>,
}

/// One catalogue entry.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct EntryView {
    /// The entry's name (`slack`, `zendesk`, …).
    pub name: String,
    /// What it is.
    pub description: String,
    /// Where its requests go.
    pub base_url: String,
    /// The credentials it reads (names).
    pub credentials: Vec<String>,
    /// Its actions.
    pub actions: Vec<ActionView>,
}

/// Whether a credential is set: its name, never its value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CredentialView {
    /// The credential's name (`token`, `password`, …).
    pub name: String,
    /// Whether a value is stored.
    pub set: bool,
}

/// One integration in force.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct IntegrationView {
    /// Its name in the definitions.
    pub name: String,
    /// The catalogue entry (or custom spec) name.
    pub entry: String,
    /// What it is.
    pub description: String,
    /// Where its requests go.
    pub base_url: String,
    /// `none`, `bearer`, `header` or `basic`.
    pub auth: String,
    /// The credentials it reads and whether each is set.
    pub credentials: Vec<CredentialView>,
    /// `enabled`, `disabled` or `paused`.
    pub state: String,
    /// Why it is disabled, or until when it is paused.
    pub state_note: Option<String>,
    /// Its actions.
    pub actions: Vec<ActionView>,
}

fn actions_of(spec: &catalog::Integration) -> Vec<ActionView> {
    spec.actions
        .iter()
        .map(|(name, a)| ActionView {
            name: name.clone(),
            description: a.description.clone(),
            method: a.method.clone(),
            path: a.path.clone(),
            params: a
                .params
                .iter()
                .map(|(n, p)| ParamView {
                    name: n.clone(),
                    required: p.required,
                    default: p.default.clone(),
                })
                .collect(),
            body: a.body.clone(),
        })
        .collect()
}

/// The built-in catalogue.
pub fn catalogue() -> Vec<EntryView> {
    catalog::all()
        .iter()
        .map(|e| EntryView {
            name: e.name.clone(),
            description: e.description.clone(),
            base_url: e.base_url.clone(),
            credentials: e.credentials().iter().map(|c| c.to_string()).collect(),
            actions: actions_of(e),
        })
        .collect()
}

/// Each integration in force, with which credentials are set and its state at `now`.
pub async fn list(
    store: &Store,
    ws: &WorkspaceId,
    now: Timestamp,
) -> Result<Vec<IntegrationView>, OperatorError> {
    let (_, defs) = in_force(store, ws).await?;
    let states = crate::integrations::states(store, ws).await?;
    let mut out = Vec::new();
    for i in &defs.integrations {
        let stored = secret::names(store, ws, &secret::integration_owner(&i.name)).await?;
        let credentials = i
            .spec
            .credentials()
            .into_iter()
            .map(|c| CredentialView {
                name: c.to_string(),
                set: stored.iter().any(|s| s == c),
            })
            .collect();
        let (state, state_note) = match states.iter().find(|s| s.name == i.name) {
            Some(s) if s.disabled_at.is_some() => (
                "disabled",
                Some(s.disabled_reason.clone().unwrap_or("no reason".into())),
            ),
            Some(s) if s.paused_until.is_some_and(|p| p > now) => (
                "paused",
                s.paused_until.map(|p| format!("paused until {p}")),
            ),
            _ => ("enabled", None),
        };
        let auth = match &i.spec.auth {
            catalog::Auth::None => "none",
            catalog::Auth::Bearer => "bearer",
            catalog::Auth::Header { .. } => "header",
            catalog::Auth::Basic => "basic",
        };
        out.push(IntegrationView {
            name: i.name.clone(),
            entry: i.spec.name.clone(),
            description: i.spec.description.clone(),
            base_url: i.spec.base_url.clone(),
            auth: auth.to_string(),
            credentials,
            state: state.to_string(),
            state_note,
            actions: actions_of(&i.spec),
        });
    }
    Ok(out)
}

/// Where a new integration's description comes from.
#[derive(Debug, Clone)]
pub enum NewIntegration<'a> {
    /// A catalogue entry by name.
    Catalog(&'a str),
    /// A custom integration: YAML with `base_url`, `auth`, `actions`.
    Custom(&'a str),
}

/// What [`add`] did.
#[derive(Debug, Clone)]
pub struct Added {
    /// The push that stored the new version.
    pub push: crate::push::PushSummary,
    /// The credentials the new integration reads (to set next).
    pub needs: Vec<String>,
}

/// Adds integration `name` to the definitions in force as a new version (`rowfire integrations
/// add`): the rest of the document is kept as written.
pub async fn add(
    store: &Store,
    ws: &WorkspaceId,
    name: &str,
    from: NewIntegration<'_>,
    base_url: Option<&str>,
    now: Timestamp,
) -> Result<Added, OperatorError> {
    let current = versions::get(store, ws, None)
        .await?
        .ok_or(OperatorError::NothingPushed)?;
    let entry = match from {
        NewIntegration::Catalog(entry) => {
            if catalog::built_in(entry).is_none() {
                let known: Vec<String> = catalog::all().into_iter().map(|e| e.name).collect();
                return Err(OperatorError::invalid(
                    "catalog",
                    format!(
                        "there is no catalogue entry {entry}; there are: {}",
                        listed(&known)
                    ),
                ));
            }
            let mut pairs = vec![("catalog", entry)];
            pairs.extend(base_url.map(|u| ("base_url", u)));
            edit::settings(&pairs)
        }
        NewIntegration::Custom(text) => match base_url {
            Some(u) => format!("{text}\n{}", edit::settings(&[("base_url", u)])),
            None => text.to_string(),
        },
    };
    let text = edit::add_to_document(&current.document, name, &entry)
        .map_err(|e| OperatorError::invalid("name", e))?;
    let push = crate::push::push(store, ws, &text, now).await?;
    let defs = crate::definitions::parse(&text).map_err(crate::push::PushError::from)?;
    let needs = defs
        .integration(name)
        .map(|i| i.spec.credentials())
        .unwrap_or_default()
        .into_iter()
        .map(str::to_string)
        .collect();
    Ok(Added { push, needs })
}

/// The longest credential value accepted.
pub const MAX_CREDENTIAL_BYTES: usize = 8192;

/// Whether integration `name` is in force in `defs` and reads a credential named `credential`.
pub fn check_credential(
    defs: &crate::definitions::Definitions,
    name: &str,
    credential: &str,
) -> Result<(), OperatorError> {
    let Some(i) = defs.integration(name) else {
        return Err(OperatorError::UnknownIntegration(name.to_string()));
    };
    let known = i.spec.credentials();
    if credential != "signing_secret_previous" && !known.contains(&credential) {
        return Err(OperatorError::UnknownCredential {
            integration: name.to_string(),
            credential: credential.to_string(),
            known: listed(&known),
        });
    }
    Ok(())
}

/// Seals and stores credential `credential` of integration `name`. The value is never returned
/// by anything afterwards; only whether it is set.
pub async fn set_credential(
    store: &Store,
    key: &MasterKey,
    ws: &WorkspaceId,
    name: &str,
    credential: &str,
    value: &str,
    now: Timestamp,
) -> Result<(), OperatorError> {
    let (_, defs) = in_force(store, ws).await?;
    check_credential(&defs, name, credential)?;
    if value.is_empty() || value.len() > MAX_CREDENTIAL_BYTES {
        return Err(OperatorError::invalid(
            "value",
            format!("a credential's value is 1 to {MAX_CREDENTIAL_BYTES} bytes"),
        ));
    }
    if credential.starts_with("signing_secret") {
        crate::send::webhook::parse_secret(value)
            .map_err(|e| OperatorError::invalid("value", e.to_string()))?;
    }
    let owner = secret::integration_owner(name);
    secret::put(store, key, ws, &owner, credential, value, now).await?;
    Ok(())
}

/// Renders action `action` of integration `name` against a sample `row` and, unless it is the
/// Demo inbox, sends it once through `client` (whose egress policy applies), as
/// `rowfire integrations test` does.
#[expect(
    clippy::too_many_arguments,
    reason = "the control plane and workspace, then one argument per input of the test"
)]
pub async fn test(
    store: &Store,
    key: Option<&MasterKey>,
    ws: &WorkspaceId,
    name: &str,
    action: &str,
    row: &serde_json::Value,
    params: BTreeMap<String, serde_json::Value>,
    recipient: Option<String>,
    client: &Client,
    now: Timestamp,
) -> Result<Tried, OperatorError> {
    let (_, defs) = in_force(store, ws).await?;
    let Some(i) = defs.integration(name) else {
        return Err(OperatorError::UnknownIntegration(name.to_string()));
    };
    if !i.spec.actions.contains_key(action) {
        let known: Vec<&String> = i.spec.actions.keys().collect();
        return Err(OperatorError::UnknownAction {
            integration: name.to_string(),
            action: action.to_string(),
            known: listed(&known),
        });
    }
    if !row.is_object() {
        return Err(OperatorError::invalid(
            "row",
            "the sample row must be a JSON object, such as {\"id\": 1}",
        ));
    }
    let binding = Binding {
        integration: name.into(),
        action: action.into(),
        params,
        recipient,
    };
    Ok(try_action(store, ws, &defs, &binding, row, key, client, now).await?)
}
