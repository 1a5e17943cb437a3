//! `/api/runs` and `/api/fires`: recent polls (matched, fired, already) and recent fires, newest
//! first, or oldest first after a cursor (`after`, an id).

use std::collections::HashMap;

use crate::http::extract::Query;
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input;
use crate::http::AppState;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::ledger::Fire;
use crate::poll::run::Run;
use crate::store::{Store, WorkspaceId};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(runs))
        .routes(routes!(fires))
}

/// The most runs or fires one answer lists.
pub const MAX_LIMIT: i64 = 500;

/// One poll.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunView {
    /// Its id.
    pub id: i64,
    /// The trigger polled.
    pub trigger: String,
    /// `running`, `ok`, `failed`, `skipped` or `stale`.
    pub status: String,
    /// Rows read.
    pub matched: i64,
    /// Rows that made at least one new fire.
    pub fired: i64,
    /// Rows that fired for no rule (`fired + already = matched`).
    pub already: i64,
    /// Rows with a NULL clock or key, counted and never fired.
    pub null_rows: i64,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// The window read, from.
    pub window_since: String,
    /// The window read, until.
    pub window_until: String,
    /// When it started.
    pub started_at: String,
    /// When it ended.
    pub finished_at: Option<String>,
}

impl From<&Run> for RunView {
    fn from(r: &Run) -> RunView {
        RunView {
            id: r.id,
            trigger: r.trigger.clone(),
            status: r.status.clone(),
            matched: r.matched,
            fired: r.fired,
            already: r.already,
            null_rows: r.null_clocks + r.null_keys,
            error: r.error.clone(),
            window_since: r.window_since.to_string(),
            window_until: r.window_until.to_string(),
            started_at: r.started_at.to_string(),
            finished_at: r.finished_at.map(|t| t.to_string()),
        }
    }
}

/// One fire from the ledger.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FireView {
    /// Its id.
    pub id: i64,
    /// Its rule.
    pub rule: String,
    /// `shadow` or `live`.
    pub mode: String,
    /// The dedup key.
    pub key: String,
    /// The dedup bucket.
    pub bucket: String,
    /// The row's clock.
    pub clock: String,
    /// The poll that claimed it.
    pub run_id: i64,
    /// When it was claimed.
    pub fired_at: String,
}

impl From<&Fire> for FireView {
    fn from(f: &Fire) -> FireView {
        FireView {
            id: f.id,
            rule: f.rule.clone(),
            mode: f.mode.to_string(),
            key: f.key.clone(),
            bucket: f.bucket.clone(),
            clock: f.clock.to_string(),
            run_id: f.run_id,
            fired_at: f.fired_at.to_string(),
        }
    }
}

/// Recent fires of the workspace, read in one transaction.
pub async fn recent_fires(
    store: &Store,
    ws: &WorkspaceId,
    after: Option<i64>,
    limit: i64,
) -> ApiResult<Vec<Fire>> {
    let mut tx = store.begin(ws).await?;
    let found = crate::ledger::recent(&mut tx, ws, after, limit)
        .await
        .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(found)
}

/// Recent polls: newest first, or oldest first after `after`.
#[utoipa::path(get, path = "/runs", tag = "activity",
    params(("limit" = Option<i64>, Query, description = "1 to 500 (default 50)"),
        ("after" = Option<i64>, Query, description = "only runs with a greater id, oldest first")),
    responses((status = 200, body = Vec<RunView>), (status = 400, body = ErrorBody)))]
async fn runs(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<RunView>>> {
    let limit = input::limit(query.get("limit").map(String::as_str), 50, MAX_LIMIT)?;
    let after = input::after(query.get("after").map(String::as_str))?;
    let found = crate::poll::run::recent(&state.store, &caller.workspace, after, limit).await?;
    Ok(Json(found.iter().map(RunView::from).collect()))
}

/// Recent fires: newest first, or oldest first after `after`.
#[utoipa::path(get, path = "/fires", tag = "activity",
    params(("limit" = Option<i64>, Query, description = "1 to 500 (default 50)"),
        ("after" = Option<i64>, Query, description = "only fires with a greater id, oldest first")),
    responses((status = 200, body = Vec<FireView>), (status = 400, body = ErrorBody)))]
async fn fires(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<FireView>>> {
    let limit = input::limit(query.get("limit").map(String::as_str), 50, MAX_LIMIT)?;
    let after = input::after(query.get("after").map(String::as_str))?;
    let found = recent_fires(&state.store, &caller.workspace, after, limit).await?;
    Ok(Json(found.iter().map(FireView::from).collect()))
}
