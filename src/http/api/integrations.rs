//! `/api/integrations`: the catalogue, the integrations in force with which credentials are set
//! (names only: no route reads a credential back), adding one, writing a credential, and testing
//! an action with a sample row (the egress policy applies).

use std::collections::BTreeMap;

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
use crate::http::error::{ApiError, ApiResult, ErrorBody};
use crate::http::guard::Caller;
use crate::operator::integrations::{self, EntryView, IntegrationView, NewIntegration};
use crate::send::client::Client;
use crate::send::outcome::{AttemptResult, Verdict};

/// The routes of this file.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(catalogue))
        .routes(routes!(list, add))
        .routes(routes!(set_credential))
        .routes(routes!(test))
}

/// The built-in catalogue: each entry's actions as data and the credentials it reads.
#[utoipa::path(get, path = "/integrations/catalog", tag = "integrations",
    responses((status = 200, body = Vec<EntryView>)))]
async fn catalogue(_caller: Caller) -> Json<Vec<EntryView>> {
    Json(integrations::catalogue())
}

/// The integrations in force, their actions, state, and which credentials are set (never
/// their values).
#[utoipa::path(get, path = "/integrations", tag = "integrations",
    responses((status = 200, body = Vec<IntegrationView>), (status = 409, body = ErrorBody)))]
async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<IntegrationView>>> {
    let now = state.clock.now();
    Ok(Json(
        integrations::list(&state.store, &caller.workspace, now).await?,
    ))
}

/// An integration to add: a catalogue entry or a custom description.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewIntegrationBody {
    /// Its name in the definitions.
    pub name: String,
    /// A catalogue entry (`slack`, `zendesk`, …); or give `custom`.
    pub catalog: Option<String>,
    /// A custom integration as YAML (`base_url`, `auth`, `actions`); or give `catalog`.
    pub custom: Option<String>,
    /// A base URL replacing the entry's.
    pub base_url: Option<String>,
}

/// What adding an integration did.
#[derive(Debug, Serialize, ToSchema)]
pub struct IntegrationAdded {
    /// The definitions version now in force.
    pub version: i64,
    /// The credentials it reads, to set next.
    pub needs: Vec<String>,
}

/// The longest custom description accepted.
const MAX_CUSTOM_BYTES: usize = 64 * 1024;

/// Adds an integration as a new definitions version, the same code as
/// `rowfire integrations add`.
#[utoipa::path(post, path = "/integrations", tag = "integrations",
    request_body = NewIntegrationBody,
    responses((status = 201, body = IntegrationAdded), (status = 400, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
async fn add(
    State(state): State<AppState>,
    caller: Caller,
    Body(body): Body<NewIntegrationBody>,
) -> ApiResult<(StatusCode, Json<IntegrationAdded>)> {
    let from = match (&body.catalog, &body.custom) {
        (Some(entry), None) => NewIntegration::Catalog(entry),
        (None, Some(text)) if text.len() <= MAX_CUSTOM_BYTES => NewIntegration::Custom(text),
        (None, Some(_)) => {
            return Err(ApiError::invalid(format!(
                "a custom integration is at most {MAX_CUSTOM_BYTES} bytes"
            ))
            .at("custom"));
        }
        _ => {
            return Err(ApiError::invalid(
                "give either catalog (an entry's name) or custom (YAML: base_url, auth, actions)",
            )
            .at("catalog"));
        }
    };
    if body.base_url.as_ref().is_some_and(|u| u.len() > 2048) {
        return Err(ApiError::invalid("base_url is at most 2048 bytes").at("base_url"));
    }
    let added = integrations::add(
        &state.store,
        &caller.workspace,
        &body.name,
        from,
        body.base_url.as_deref(),
        state.clock.now(),
    )
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(IntegrationAdded {
            version: added.push.version,
            needs: added.needs,
        }),
    ))
}

/// A credential's value: write-only.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CredentialValue {
    /// The value; sealed under the master key and never returned.
    pub value: String,
}

/// Writes one credential of an integration, sealed under the master key. No route reads it
/// back; `GET /integrations` says only whether it is set.
#[utoipa::path(put, path = "/integrations/{name}/credentials/{credential}", tag = "integrations",
    params(("name" = String, Path, description = "the integration"),
        ("credential" = String, Path, description = "the credential (`token`, `password`, …)")),
    request_body = CredentialValue,
    responses((status = 204), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 409, body = ErrorBody)))]
async fn set_credential(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, credential)): Path<(String, String)>,
    Body(body): Body<CredentialValue>,
) -> ApiResult<StatusCode> {
    let key = state.master_key.clone().map_err(|_| {
        ApiError::new(
            StatusCode::CONFLICT,
            "master_key_missing",
            "this server has no master key (ROWFIRE_MASTER_KEY), so it cannot seal credentials; see `rowfire keygen`",
        )
    })?;
    integrations::set_credential(
        &state.store,
        &key,
        &caller.workspace,
        &name,
        &credential,
        &body.value,
        state.clock.now(),
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A sample row to try an action with.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TestAction {
    /// The sample row, a JSON object of column values.
    #[schema(value_type = Object)]
    pub row: serde_json::Value,
    /// Parameter templates by name.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, serde_json::Value>,
    /// The recipient template (defaults to `test`).
    pub recipient: Option<String>,
}

/// The request an action test rendered (never credentials).
#[derive(Debug, Serialize, ToSchema)]
pub struct RenderedRequest {
    /// The recipient.
    pub recipient: String,
    /// The method.
    pub method: String,
    /// The URL.
    pub url: String,
    /// The body.
    #[schema(value_type = serde_json::Value)]
    pub body: serde_json::Value,
}

/// What the destination answered (redacted), when the request left the machine.
#[derive(Debug, Serialize, ToSchema)]
pub struct TestAnswer {
    /// The HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// The answer's first 500 characters (secrets redacted), or why there was none.
    pub detail: String,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
    /// What it would mean for a delivery: `sent`, `retry`, `failed`, `dead`, `disable`.
    pub verdict: String,
}

/// The result of an action test.
#[derive(Debug, Serialize, ToSchema)]
pub struct ActionTested {
    /// The rendered request.
    pub request: RenderedRequest,
    /// The answer, or `null` for the Demo inbox (nothing leaves the machine).
    pub sent: Option<TestAnswer>,
}

/// The most characters of a sample row accepted.
const MAX_ROW_KEYS: usize = 200;

/// Renders an action against a sample row and, unless it is the Demo inbox, sends it once
/// (the egress policy applies), as `rowfire integrations test` does.
#[utoipa::path(post, path = "/integrations/{name}/actions/{action}/test", tag = "integrations",
    params(("name" = String, Path, description = "the integration"),
        ("action" = String, Path, description = "the action")),
    request_body = TestAction,
    responses((status = 200, body = ActionTested), (status = 400, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn test(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, action)): Path<(String, String)>,
    Body(body): Body<TestAction>,
) -> ApiResult<Json<ActionTested>> {
    if body.row.as_object().is_some_and(|o| o.len() > MAX_ROW_KEYS) {
        return Err(ApiError::invalid(format!("row has at most {MAX_ROW_KEYS} columns")).at("row"));
    }
    if body.params.len() > MAX_ROW_KEYS {
        return Err(ApiError::invalid("too many params").at("params"));
    }
    let policy = state.egress.clone().map_err(|e| {
        tracing::error!(error = %e, "the egress policy is not valid");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "egress_unset",
            "this server's egress policy (ROWFIRE_EGRESS_ALLOW) is not valid; its log says why",
        )
    })?;
    let client = Client::new(policy);
    let tried = integrations::test(
        &state.store,
        state.master_key.as_ref().ok(),
        &caller.workspace,
        &name,
        &action,
        &body.row,
        body.params,
        body.recipient,
        &client,
        state.clock.now(),
    )
    .await?;
    let sent = tried.sent.map(|(result, took, verdict)| {
        let (status, detail) = match result {
            AttemptResult::Response { status, body, .. } => {
                (Some(status), body.chars().take(500).collect())
            }
            AttemptResult::Timeout => (None, "timed out".to_string()),
            AttemptResult::Network(e) => (None, format!("network error: {e}")),
            AttemptResult::Refused(e) => (None, format!("refused by the egress check: {e}")),
            AttemptResult::Invalid(e) => {
                (None, format!("the request cannot be sent as rendered: {e}"))
            }
        };
        let verdict = match verdict {
            Verdict::Sent => "sent",
            Verdict::Retry { .. } => "retry",
            Verdict::Failed { .. } => "failed",
            Verdict::Dead { .. } => "dead",
            Verdict::DisableIntegration { .. } => "disable",
        };
        TestAnswer {
            status,
            detail,
            took_ms: u64::try_from(took.as_millis()).unwrap_or(u64::MAX),
            verdict: verdict.to_string(),
        }
    });
    Ok(Json(ActionTested {
        request: RenderedRequest {
            recipient: tried.request.recipient,
            method: tried.request.method,
            url: tried.request.url,
            body: tried.request.body,
        },
        sent,
    }))
}
