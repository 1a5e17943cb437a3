//! What an operator does to a workspace's sources and integrations, shared by the command line
//! (`rowfire sources`, `rowfire integrations`) and the HTTP API, so both take the same path:
//! listing what is in force (names and where secrets come from, never a secret), adding a source
//! or an integration, writing a credential, and trying a source or an action once.

use crate::definitions::Definitions;
use crate::definitions::versions::{self, InForceError};
use crate::store::{Store, StoreError, WorkspaceId};

pub mod integrations;
pub mod sources;

/// Why an operator's command could not be done.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No definitions were pushed to the workspace yet.
    #[error("nothing has been pushed yet; push a definitions file with `rowfire push -f FILE`")]
    NothingPushed,
    /// No integration of that name is in force.
    #[error("there is no integration {0}; `rowfire integrations list` shows them")]
    UnknownIntegration(String),
    /// No source of that name is in force.
    #[error("there is no source {0}; `rowfire sources` lists them")]
    UnknownSource(String),
    /// The integration has no such action.
    #[error("{integration} has no action {action}; it has: {known}")]
    UnknownAction {
        /// The integration.
        integration: String,
        /// The action asked for.
        action: String,
        /// The actions it has, comma-separated.
        known: String,
    },
    /// The integration reads no credential of that name.
    #[error("{integration} does not use a credential named {credential}; it uses: {known}")]
    UnknownCredential {
        /// The integration.
        integration: String,
        /// The credential asked for.
        credential: String,
        /// The credentials it reads, comma-separated (or `none`).
        known: String,
    },
    /// An input is not acceptable; `field` names it.
    #[error("{message}")]
    Invalid {
        /// The input at fault (`dsn`, `name`, `value`, …).
        field: &'static str,
        /// What is wrong with it and what to do.
        message: String,
    },
    /// The definitions in force could not be read.
    #[error(transparent)]
    InForce(#[from] InForceError),
    /// The new definitions version was refused.
    #[error(transparent)]
    Push(#[from] crate::push::PushError),
    /// A secret could not be sealed, stored or opened.
    #[error(transparent)]
    Secret(#[from] crate::secret::StoredSecretError),
    /// The action could not be tried.
    #[error(transparent)]
    Try(#[from] crate::send::request::TryError),
    /// The control plane failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OperatorError {
    /// An [`OperatorError::Invalid`] naming `field`.
    pub fn invalid(field: &'static str, message: impl Into<String>) -> OperatorError {
        OperatorError::Invalid {
            field,
            message: message.into(),
        }
    }
}

/// The definitions in force, or [`OperatorError::NothingPushed`].
pub async fn in_force(
    store: &Store,
    workspace: &WorkspaceId,
) -> Result<(i64, Definitions), OperatorError> {
    versions::in_force(store, workspace)
        .await?
        .ok_or(OperatorError::NothingPushed)
}

/// `names` joined with commas, or `none`.
fn listed<S: AsRef<str>>(names: &[S]) -> String {
    if names.is_empty() {
        return "none".to_string();
    }
    names
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ")
}
