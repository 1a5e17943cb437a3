//! `/api/sources`: where each source's DSN comes from (a DSN is never returned, not even
//! masked), storing one sealed under the master key, and trying a read-only connection.

use crate::http::extract::Path;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::http::AppState;
use crate::http::error::Body;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::operator::sources::{self, SourceView, Stored, Tested};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, add))
        .routes(routes!(test))
}

/// Each source in force and where its DSN comes from, never the DSN.
#[utoipa::path(get, path = "/sources", tag = "sources",
    responses((status = 200, body = Vec<SourceView>), (status = 409, body = ErrorBody)))]
async fn list(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<Vec<SourceView>>> {
    let reach = state.reach(&caller.workspace);
    Ok(Json(
        sources::list(&state.store, &caller.workspace, reach).await?,
    ))
}

/// A source to store.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewSource {
    /// The source's name, as the definitions name it.
    pub name: String,
    /// Its DSN (`postgres://…`, `mysql://…`, `sqlite:…`); write-only, sealed under the master key.
    pub dsn: String,
}

/// What storing a source did.
#[derive(Debug, Serialize, ToSchema)]
pub struct SourceStored {
    /// The source.
    pub name: String,
    /// `sealed` (under the master key) or `file_url` (a SQLite path, in the clear).
    pub stored: String,
}

/// Stores a source's DSN sealed under the master key (like `rowfire sources add`); without a
/// master key only a SQLite file's URL is accepted.
#[utoipa::path(post, path = "/sources", tag = "sources", request_body = NewSource,
    responses((status = 201, body = SourceStored), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
async fn add(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<NewSource>,
) -> ApiResult<(StatusCode, Json<SourceStored>)> {
    let now = state.clock.now();
    let stored = sources::add(
        &state.store,
        &state.master_key,
        &caller.workspace,
        &body.name,
        &body.dsn,
        now,
        state.reach(&caller.workspace),
    )
    .await?;
    let stored = match stored {
        Stored::Sealed { .. } => "sealed",
        Stored::FileUrl => "file_url",
    };
    Ok((
        StatusCode::CREATED,
        Json(SourceStored {
            name: body.name,
            stored: stored.to_string(),
        }),
    ))
}

/// Opens a read-only session on the source and reports `ok`, or the error with advice (never
/// the password).
#[utoipa::path(post, path = "/sources/{name}/test", tag = "sources",
    params(("name" = String, Path, description = "the source's name")),
    responses((status = 200, body = Tested), (status = 404, body = ErrorBody)))]
async fn test(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> ApiResult<Json<Tested>> {
    let reach = state.reach(&caller.workspace);
    let tested = sources::test(
        &state.store,
        &state.master_key,
        &caller.workspace,
        &name,
        reach,
    )
    .await?;
    Ok(Json(tested))
}
