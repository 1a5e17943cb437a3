//! `/api/definitions`: the version in force, a draft validated without writing, and a push (a
//! new version), the same library calls as `rowfire pull`, `validate` and `push`.

use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::definitions::{self, limits::MAX_FILE_BYTES, versions};
use crate::http::AppState;
use crate::http::error::{ApiError, ApiResult, Body, ErrorBody};
use crate::http::guard::Caller;

/// The definitions in force.
#[derive(Debug, Serialize, ToSchema)]
pub struct InForce {
    /// Its version number.
    pub version: i64,
    /// The document's checksum.
    pub checksum: String,
    /// When it was pushed.
    pub pushed_at: String,
    /// The workspace's time zone when it was pushed (rules naming none use it).
    pub zone: String,
    /// The document, byte for byte.
    pub yaml: String,
}

/// A definitions document sent to validate or push.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// The YAML text (at most 1 MiB).
    pub yaml: String,
}

/// One problem in a draft.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProblemOut {
    /// Where, as a dotted path (`rules.billing_ticket.period`).
    pub path: String,
    /// What is wrong and what would fix it.
    pub message: String,
}

/// What validating a draft found; nothing is written.
#[derive(Debug, Serialize, ToSchema)]
pub struct Validation {
    /// True when the draft has no problem.
    pub valid: bool,
    /// Triggers in the draft (0 when it is invalid).
    pub triggers: usize,
    /// Rules in the draft (0 when it is invalid).
    pub rules: usize,
    /// Every problem, with its path.
    pub problems: Vec<ProblemOut>,
}

/// What a push did, as `rowfire push` prints it: the library's own summary.
pub use crate::push::PushSummary as Pushed;

/// The document's size, refused past the definitions limit.
fn bounded(doc: &Document) -> ApiResult<&str> {
    if doc.yaml.len() > MAX_FILE_BYTES {
        return Err(ApiError::invalid(format!(
            "the document is {} bytes; definitions are at most {MAX_FILE_BYTES}",
            doc.yaml.len()
        ))
        .at("yaml"));
    }
    Ok(&doc.yaml)
}

/// The definitions in force: version, checksum and the YAML text.
#[utoipa::path(get, path = "/definitions", tag = "definitions",
    responses((status = 200, body = InForce), (status = 404, body = ErrorBody)))]
pub async fn get_in_force(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<InForce>> {
    let v = versions::get(&state.store, &caller.workspace, None)
        .await?
        .ok_or_else(|| ApiError::not_found(super::author::NOTHING_PUSHED))?;
    Ok(Json(InForce {
        version: v.version,
        checksum: definitions::document_checksum(&v.document),
        pushed_at: v.pushed_at.to_string(),
        zone: v.zone,
        yaml: v.document,
    }))
}

/// Validates a draft: every problem with its path; nothing is written.
#[utoipa::path(post, path = "/definitions/validate", tag = "definitions", request_body = Document,
    responses((status = 200, body = Validation), (status = 400, body = ErrorBody)))]
pub async fn validate(Body(doc): Body<Document>) -> ApiResult<Json<Validation>> {
    let text = bounded(&doc)?;
    Ok(Json(match definitions::parse(text) {
        Ok(defs) => Validation {
            valid: true,
            triggers: defs.triggers.len(),
            rules: defs.rules.len(),
            problems: Vec::new(),
        },
        Err(problems) => Validation {
            valid: false,
            triggers: 0,
            rules: 0,
            problems: problems
                .0
                .into_iter()
                .map(|p| ProblemOut {
                    path: p.path,
                    message: p.message,
                })
                .collect(),
        },
    }))
}

/// Pushes a document as the next version (new and changed rules start in shadow) and says what
/// changed.
#[utoipa::path(post, path = "/definitions", tag = "definitions", request_body = Document,
    responses((status = 200, body = Pushed), (status = 400, body = ErrorBody)))]
pub async fn push(
    State(state): State<AppState>,
    caller: Caller,
    Body(doc): Body<Document>,
) -> ApiResult<Json<Pushed>> {
    let text = bounded(&doc)?;
    let summary =
        crate::push::push(&state.store, &caller.workspace, text, state.clock.now()).await?;
    Ok(Json(summary))
}
