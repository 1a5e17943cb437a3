//! What the author's routes (definitions, triggers, rules) share: the definitions in force, a
//! connection to a source by name, and the bounds every number and text is held to where it
//! enters.

use crate::definitions::{Definitions, versions};
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult};
use crate::source::Source;
use crate::store::WorkspaceId;

/// The longest SQL text the check route reads.
pub const MAX_SQL_BYTES: usize = 64 * 1024;
/// The most days a backtest, a rewind or a `why` looks back.
pub const MAX_DAYS: u32 = 3650;
/// The most sample fires a backtest shows.
pub const MAX_SAMPLE: usize = 50;
/// The longest key `why` reads.
pub const MAX_KEY_BYTES: usize = 4096;

/// What a caller is told when nothing was pushed yet.
pub const NOTHING_PUSHED: &str = "no definitions are in force in this workspace yet; push a file first (`rowfire push -f FILE` or POST /api/definitions)";

/// The definitions in force in `workspace`; 404 when nothing was pushed.
pub async fn in_force(state: &AppState, workspace: &WorkspaceId) -> ApiResult<(i64, Definitions)> {
    versions::in_force(&state.store, workspace)
        .await?
        .ok_or_else(|| ApiError::not_found(NOTHING_PUSHED))
}

/// Connects to the source `name` of `defs`, its DSN stored in the control plane or in the
/// variable the definitions name (as the worker finds it). Never says the DSN.
pub async fn connect(
    state: &AppState,
    workspace: &WorkspaceId,
    defs: &Definitions,
    name: &str,
) -> ApiResult<Source> {
    let def = defs.source(name).ok_or_else(|| {
        ApiError::not_found(format!(
            "there is no source \"{}\" in the definitions in force",
            shorten(name)
        ))
        .at("source")
    })?;
    let dsns = state.source_dsns(workspace).await?;
    let dsn = dsns(workspace, def).ok_or_else(|| {
        let or_set = match state.reach(workspace) {
            crate::operator::sources::Reach::Operator if !def.dsn_env.is_empty() => {
                format!(" or set {}", def.dsn_env)
            }
            _ => String::new(),
        };
        ApiError::conflict(format!(
            "source {} has no DSN here: store one (POST /api/sources, or `rowfire sources add`){or_set}",
            def.name,
        ))
        .at("source")
    })?;
    Ok(Source::connect_resolved(def, &dsn).await?)
}

/// `days` when it is within 1..=[`MAX_DAYS`]; 400 naming `field` otherwise.
pub fn days(days: u32, field: &str) -> ApiResult<u32> {
    if (1..=MAX_DAYS).contains(&days) {
        Ok(days)
    } else {
        Err(ApiError::invalid(format!("days must be between 1 and {MAX_DAYS}")).at(field))
    }
}

/// At most 80 characters of a name a caller sent, for a message.
pub fn shorten(text: &str) -> String {
    text.chars().take(80).collect()
}
