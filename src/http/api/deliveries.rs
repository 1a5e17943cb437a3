//! `/api/deliveries`: listing with filters (rule, status, a bounded limit), one delivery with
//! its attempts, and retrying a failed or dead one.

use std::collections::HashMap;

use crate::http::extract::{Path, Query};
use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input;
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::outbox::{self, Delivery, DeliveryStatus, Filter};
use crate::store::{Store, WorkspaceId};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(show))
        .routes(routes!(retry))
}

/// The most deliveries one answer lists.
pub const MAX_LIMIT: i64 = 500;

/// One delivery as the API shows it (its recorded request never holds credentials).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DeliveryView {
    /// Its id (the idempotency key).
    pub id: i64,
    /// The fire it belongs to.
    pub fire_id: i64,
    /// The rule.
    pub rule: String,
    /// `shadow` or `live`.
    pub mode: String,
    /// `integration.action`.
    pub action: String,
    /// Who receives it.
    pub recipient: Option<String>,
    /// Its state.
    pub status: String,
    /// Why it is in that state.
    pub reason: Option<String>,
    /// Attempts so far.
    pub attempts: i64,
    /// When it is (or was) due.
    pub due_at: String,
    /// When it was sent.
    pub sent_at: Option<String>,
    /// The recorded method, when it was rendered.
    pub method: Option<String>,
    /// The recorded URL, when it was rendered.
    pub url: Option<String>,
    /// The rendered body.
    #[schema(value_type = Option<serde_json::Value>)]
    pub body: Option<serde_json::Value>,
}

impl From<&Delivery> for DeliveryView {
    fn from(d: &Delivery) -> DeliveryView {
        DeliveryView {
            id: d.id,
            fire_id: d.fire_id,
            rule: d.rule.clone(),
            mode: d.mode.to_string(),
            action: d.action.clone(),
            recipient: d.recipient.clone(),
            status: d.status.to_string(),
            reason: d.reason.clone(),
            attempts: d.attempts,
            due_at: d.due_at.to_string(),
            sent_at: d.sent_at.map(|t| t.to_string()),
            method: d.request.as_ref().map(|(m, _)| m.clone()),
            url: d.request.as_ref().map(|(_, u)| u.clone()),
            body: d.body.as_deref().and_then(|b| serde_json::from_str(b).ok()),
        }
    }
}

/// One attempt at sending.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AttemptView {
    /// When it started.
    pub started_at: String,
    /// How long it took.
    pub latency_ms: i64,
    /// The HTTP status, when there was an answer.
    pub status_code: Option<u16>,
    /// `ok`, or the class of failure.
    pub outcome: String,
    /// The answer's beginning (secrets redacted when it was recorded).
    pub response: Option<String>,
}

/// One delivery with every attempt.
#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryDetail {
    /// The delivery.
    #[serde(flatten)]
    pub delivery: DeliveryView,
    /// Its attempts, oldest first.
    pub attempt_log: Vec<AttemptView>,
}

/// Deliveries matching `filter` in the caller's workspace.
pub async fn find(store: &Store, ws: &WorkspaceId, filter: &Filter) -> ApiResult<Vec<Delivery>> {
    let mut tx = store.begin(ws).await?;
    let found = outbox::list(&mut tx, ws, filter)
        .await
        .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(found)
}

/// Deliveries, newest first, filtered by rule and state.
#[utoipa::path(get, path = "/deliveries", tag = "deliveries",
    params(("rule" = Option<String>, Query, description = "only this rule's"),
        ("status" = Option<String>, Query, description = "only in this state (`pending`, `sent`, `failed`, …)"),
        ("limit" = Option<i64>, Query, description = "at most this many, 1 to 500 (default 50)")),
    responses((status = 200, body = Vec<DeliveryView>), (status = 400, body = ErrorBody)))]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<DeliveryView>>> {
    let limit = input::limit(query.get("limit").map(String::as_str), 50, MAX_LIMIT)?;
    let status = match query.get("status") {
        None => None,
        Some(s) => Some(s.parse::<DeliveryStatus>().map_err(|_| {
            let known: Vec<&str> = DeliveryStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::invalid(format!("status is one of: {}", known.join(", "))).at("status")
        })?),
    };
    let rule = query.get("rule").cloned();
    if rule.as_ref().is_some_and(|r| r.len() > 200) {
        return Err(ApiError::invalid("rule is at most 200 bytes").at("rule"));
    }
    let filter = Filter {
        rule,
        status,
        limit: Some(limit),
        ..Filter::default()
    };
    let found = find(&state.store, &caller.workspace, &filter).await?;
    Ok(Json(found.iter().map(DeliveryView::from).collect()))
}

/// One delivery of the caller's workspace with its attempts; another workspace's id is 404.
#[utoipa::path(get, path = "/deliveries/{id}", tag = "deliveries",
    params(("id" = i64, Path, description = "the delivery's id")),
    responses((status = 200, body = DeliveryDetail), (status = 404, body = ErrorBody)))]
async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<DeliveryDetail>> {
    let id = found_id(&id)?;
    let filter = Filter {
        id: Some(id),
        ..Filter::default()
    };
    let found = find(&state.store, &caller.workspace, &filter).await?;
    let Some(d) = found.first() else {
        return Err(ApiError::not_found(format!("there is no delivery {id}")).at("id"));
    };
    let attempts = crate::send::queue::attempts(&state.store, &caller.workspace, id).await?;
    Ok(Json(DeliveryDetail {
        delivery: d.into(),
        attempt_log: attempts
            .iter()
            .map(|a| AttemptView {
                started_at: a.started_at.to_string(),
                latency_ms: a.latency_ms,
                status_code: a.status_code,
                outcome: a.error_class.map_or("ok", |c| c.as_str()).to_string(),
                response: a.response.clone(),
            })
            .collect(),
    }))
}

/// A path's delivery id: anything but a positive whole number names no delivery (404).
fn found_id(text: &str) -> ApiResult<i64> {
    input::id(text, "id").map_err(|_| ApiError::not_found("there is no such delivery").at("id"))
}

/// What a retry did.
#[derive(Debug, Serialize, ToSchema)]
pub struct Retried {
    /// The delivery.
    pub id: i64,
    /// Its state now: `pending`, due now.
    pub status: String,
}

/// Re-queues a failed or dead delivery, due now, with the same id (its idempotency key).
#[utoipa::path(post, path = "/deliveries/{id}/retry", tag = "deliveries",
    params(("id" = i64, Path, description = "the delivery's id")),
    responses((status = 200, body = Retried), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
async fn retry(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<Retried>> {
    let id = found_id(&id)?;
    outbox::retry(&state.store, &caller.workspace, id, state.clock.now()).await?;
    Ok(Json(Retried {
        id,
        status: "pending".to_string(),
    }))
}
