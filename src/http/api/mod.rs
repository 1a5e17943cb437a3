//! The JSON API under `/api`: one file per thing it serves, each route declared once with
//! `utoipa`, so the OpenAPI document at `/api/openapi.json` is generated from the routes
//! themselves and cannot drift from them.

use axum::extract::State;
use axum::{Json, Router};
use serde::Serialize;
use utoipa::openapi::OpenApi as OpenApiDoc;
use utoipa::{OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub mod activity;
pub mod deliveries;
pub mod inbox;
pub mod input;
pub mod integrations;
pub mod sources;
pub mod workspace;

use super::AppState;
use super::error::{ApiResult, ErrorBody};

pub mod author;
pub mod definitions;
pub mod rules;
pub mod triggers;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Rowfire",
        description = "Rows in your database become actions, exactly once per rule, per key, per period."
    ),
    components(schemas(ErrorBody))
)]
struct Doc;

/// Every API route under `/api`, each with its OpenAPI description (paths relative to `/api`).
fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health))
        .routes(routes!(definitions::get_in_force, definitions::push))
        .routes(routes!(definitions::validate))
        .routes(routes!(triggers::list))
        .routes(routes!(triggers::check))
        .routes(routes!(triggers::run_now))
        .routes(routes!(triggers::rewind))
        .routes(routes!(rules::list, rules::create))
        .routes(routes!(rules::promote))
        .routes(routes!(rules::demote))
        .routes(routes!(rules::backtest))
        .routes(routes!(rules::backtest_draft))
        .routes(routes!(rules::why))
        .merge(workspace::routes())
        .merge(sources::routes())
        .merge(integrations::routes())
        .merge(deliveries::routes())
        .merge(activity::routes())
        .merge(inbox::routes())
}

/// The API mounted at `/api`, with the document generated from its routes at
/// `/api/openapi.json`.
pub fn router() -> Router<AppState> {
    let (router, mut doc) = nested().split_for_parts();
    name_operations(&mut doc);
    router.route(
        "/api/openapi.json",
        axum::routing::get(move || async move { Json(doc) }),
    )
}

/// The OpenAPI document, as `/api/openapi.json` serves it.
pub fn openapi() -> OpenApiDoc {
    let mut doc = nested().split_for_parts().1;
    name_operations(&mut doc);
    doc
}

/// Names every operation by its tag and handler (`triggers_list`, `rules_list`): handlers in
/// different files share names, and a client generator needs each id once.
fn name_operations(doc: &mut OpenApiDoc) {
    for item in doc.paths.paths.values_mut() {
        for op in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        {
            let tag = op.tags.as_ref().and_then(|t| t.first()).cloned();
            if let (Some(tag), Some(id)) = (tag, op.operation_id.as_mut())
                && !id.starts_with(&format!("{tag}_"))
            {
                *id = format!("{tag}_{id}");
            }
        }
    }
}

fn nested() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(Doc::openapi()).nest("/api", routes())
}

/// The answer of `/api/health`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok` when the control plane answered.
    pub status: String,
}

/// Whether the server and its control plane answer.
#[utoipa::path(get, path = "/health", tag = "status",
    responses((status = 200, body = Health), (status = 503, body = ErrorBody)))]
async fn health(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    state.store.check_migrated().await?;
    Ok(Json(Health {
        status: "ok".to_string(),
    }))
}
