//! `/api/inbox`: the Demo inbox, live messages and shadow ones (what would have been sent),
//! newest first, or oldest first after a cursor.

use std::collections::HashMap;

use crate::http::extract::Query;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::input;
use crate::http::AppState;
use crate::http::error::{ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::outbox::Delivery;
use crate::rules::Mode;
use crate::store::{Store, WorkspaceId};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(inbox))
}

/// One message in the Demo inbox.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InboxMessage {
    /// The delivery it is.
    pub delivery_id: i64,
    /// The rule that sent it.
    pub rule: String,
    /// `live` (it arrived) or `shadow` (it would have been sent).
    pub mode: String,
    /// True for a shadow message: it was rendered and recorded, never sent.
    pub would_have_been_sent: bool,
    /// `chat_message`, `ticket`, …
    pub kind: String,
    /// Who receives it.
    pub recipient: Option<String>,
    /// The message as rendered.
    #[schema(value_type = serde_json::Value)]
    pub body: serde_json::Value,
    /// When it arrived (live) or was recorded (shadow).
    pub at: String,
}

impl From<&Delivery> for InboxMessage {
    fn from(d: &Delivery) -> InboxMessage {
        let kind = d
            .action
            .split_once('.')
            .map_or(d.action.as_str(), |(_, a)| a);
        InboxMessage {
            delivery_id: d.id,
            rule: d.rule.clone(),
            mode: d.mode.to_string(),
            would_have_been_sent: d.mode == Mode::Shadow,
            kind: kind.to_string(),
            recipient: d.recipient.clone(),
            body: d
                .body
                .as_deref()
                .and_then(|b| serde_json::from_str(b).ok())
                .unwrap_or(serde_json::Value::Null),
            at: d.sent_at.unwrap_or(d.due_at).to_string(),
        }
    }
}

/// The most messages one answer lists.
pub const MAX_LIMIT: i64 = 500;

/// The Demo inbox's messages, read in one transaction.
pub async fn messages(
    store: &Store,
    ws: &WorkspaceId,
    after: Option<i64>,
    limit: i64,
) -> ApiResult<Vec<InboxMessage>> {
    let mut tx = store.begin(ws).await?;
    let found = crate::outbox::inbox_feed(&mut tx, ws, after, limit)
        .await
        .map_err(|e| store.error(e))?;
    tx.rollback().await.map_err(|e| store.error(e))?;
    Ok(found.iter().map(InboxMessage::from).collect())
}

/// The Demo inbox: live messages and shadow ones, labelled.
#[utoipa::path(get, path = "/inbox", tag = "inbox",
    params(("limit" = Option<i64>, Query, description = "1 to 500 (default 50)"),
        ("after" = Option<i64>, Query, description = "only messages with a greater delivery id, oldest first")),
    responses((status = 200, body = Vec<InboxMessage>), (status = 400, body = ErrorBody)))]
async fn inbox(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult<Json<Vec<InboxMessage>>> {
    let limit = input::limit(query.get("limit").map(String::as_str), 50, MAX_LIMIT)?;
    let after = input::after(query.get("after").map(String::as_str))?;
    Ok(Json(
        messages(&state.store, &caller.workspace, after, limit).await?,
    ))
}
