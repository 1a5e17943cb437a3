//! Integration readiness: what would hold an integration's deliveries back, checked by `worker`
//! at start and by `integrations list`, with the same lease arithmetic the sender uses.

use jiff::SignedDuration;

use crate::store::WorkspaceId;
use crate::store::{Store, StoreError};

/// What would hold an integration's deliveries back, as sentences for an operator: requests
/// that cannot finish inside the delivery `lease`, credentials with no master key to open them
/// (`key` is the master key or why there is none), or credentials never set.
pub async fn check(
    store: &Store,
    workspace: &WorkspaceId,
    defs: &crate::definitions::Definitions,
    key: Result<&crate::secret::MasterKey, &crate::secret::SecretError>,
    lease: SignedDuration,
) -> Result<Vec<String>, StoreError> {
    let mut warnings = Vec::new();
    for i in &defs.integrations {
        if !super::lease::fits_in_lease(&i.spec, lease) {
            warnings.push(format!(
                "{}'s requests (timeout {} ms) do not fit in the {lease:#} delivery lease and will wait; raise --delivery-lease",
                i.name, i.spec.timeout_ms
            ));
        }
        let needed = i.spec.credentials();
        if needed.is_empty() {
            continue;
        }
        if let Err(e) = &key {
            warnings.push(format!("{}'s deliveries will wait: {e}", i.name));
            continue;
        }
        let stored =
            crate::secret::names(store, workspace, &crate::secret::integration_owner(&i.name))
                .await?;
        for c in needed.iter().filter(|c| !stored.iter().any(|s| s == *c)) {
            warnings.push(format!(
                "{}'s deliveries will wait: no credential {c}; `rowfire integrations set-credential {} {c}`",
                i.name, i.name
            ));
        }
    }
    Ok(warnings)
}
