//! `/api/status`, `/api/halt` and `/api/resume`: the workspace's state and its kill switch.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::error::Body;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::store::{Store, WorkspaceId, workspace};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(status))
        .routes(routes!(halt))
        .routes(routes!(resume))
}

/// How many deliveries are in one state.
#[derive(Debug, Serialize, ToSchema)]
pub struct StateCount {
    /// The state (`pending`, `sent`, …).
    pub status: String,
    /// How many.
    pub count: i64,
}

/// The answer of `/api/status`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Status {
    /// The workspace the caller acts in.
    pub workspace: String,
    /// Its name.
    pub name: String,
    /// Why it is halted, if it is.
    pub halted: Option<String>,
    /// Since when it is halted, if it is.
    pub halted_at: Option<String>,
    /// Deliveries by state.
    pub deliveries: Vec<StateCount>,
}

/// The workspace's state, as `/api/status` and the kill switch answer it.
pub async fn status_of(store: &Store, ws: &WorkspaceId) -> ApiResult<Status> {
    let found = workspace::get(store, ws).await?;
    let mut tx = store.begin(ws).await?;
    let counts = crate::outbox::counts(&mut tx, ws)
        .await
        .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(Status {
        workspace: found.id.to_string(),
        name: found.name,
        halted_at: found.halted.as_ref().map(|(_, at)| at.to_string()),
        halted: found.halted.map(|(reason, _)| reason),
        deliveries: counts
            .into_iter()
            .map(|(s, n, _)| StateCount {
                status: s.to_string(),
                count: n,
            })
            .collect(),
    })
}

/// The caller's workspace, whether it is halted, and its deliveries by state.
#[utoipa::path(get, path = "/status", tag = "status",
    responses((status = 200, body = Status), (status = 401, body = ErrorBody)))]
async fn status(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Status>> {
    Ok(Json(status_of(&state.store, &caller.workspace).await?))
}

/// Why the workspace is halted.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Halt {
    /// The reason, for whoever resumes it (1 to 500 characters).
    pub reason: String,
}

/// The longest halt reason accepted, in characters.
pub const MAX_REASON_CHARS: usize = crate::store::workspace::MAX_HALT_REASON_CHARS;

/// Halts the workspace (the kill switch): nothing is sent and no watermark moves until resume.
#[utoipa::path(post, path = "/halt", tag = "status", request_body = Halt,
    responses((status = 200, body = Status), (status = 400, body = ErrorBody)))]
async fn halt(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<Halt>,
) -> ApiResult<Json<Status>> {
    let reason = body.reason.trim();
    if reason.is_empty() || reason.chars().count() > MAX_REASON_CHARS {
        return Err(ApiError::invalid(format!(
            "give a reason of 1 to {MAX_REASON_CHARS} characters"
        ))
        .at("reason"));
    }
    workspace::halt(&state.store, &caller.workspace, reason, state.clock.now()).await?;
    Ok(Json(status_of(&state.store, &caller.workspace).await?))
}

/// Resumes a halted workspace; rows that arrived meanwhile are evaluated on the next polls.
#[utoipa::path(post, path = "/resume", tag = "status",
    responses((status = 200, body = Status)))]
async fn resume(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Status>> {
    workspace::resume(&state.store, &caller.workspace).await?;
    Ok(Json(status_of(&state.store, &caller.workspace).await?))
}
