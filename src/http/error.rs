//! The one place a library error becomes an HTTP status. Every error answer is JSON,
//! `{"error": {"code": "…", "message": "…", "field": "…"}}`: `code` is stable for programs,
//! `message` says what went wrong and what to do, `field` (when there is one) names the input at
//! fault. A 5xx answer says only that the server failed and where to look (its log); the detail
//! goes to the log, never to the caller.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::store::{ErrorKind, StoreError};

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    /// The status it is sent with.
    pub status: StatusCode,
    /// Its stable machine code.
    pub code: &'static str,
    /// What went wrong and what to do, for a person.
    pub message: String,
    /// The input at fault, if one is.
    pub field: Option<String>,
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// What an error answer says.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable machine code (`not_found`, `invalid`, `unauthorized`, …).
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// The input at fault (a JSON field, a query parameter, a path part), if one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            field: None,
        }
    }

    /// The same error, naming the input at fault.
    pub fn at(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    /// 400: the input is not acceptable.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid", message)
    }

    /// 404: nothing of that name or id in the caller's workspace.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    /// 409: the request conflicts with what is stored.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "conflict", message)
    }

    /// 401: no valid token.
    pub fn unauthorized(message: &str) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: the request is understood and refused (a foreign origin).
    pub fn forbidden(message: &str) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 421: the request names a host this server does not answer for.
    pub fn misdirected(message: &str) -> ApiError {
        ApiError::new(StatusCode::MISDIRECTED_REQUEST, "wrong_host", message)
    }

    /// 500, logging `detail` (which the caller never sees).
    pub fn internal(detail: &dyn std::fmt::Display) -> ApiError {
        tracing::error!(error = %detail, "a request failed inside the server");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "the server failed to answer; its log says why",
        )
    }

    /// 503, logging `detail`: a database Rowfire depends on did not answer.
    pub fn unavailable(detail: &dyn std::fmt::Display) -> ApiError {
        tracing::warn!(error = %detail, "a request could not reach a database");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "unavailable",
            "a database Rowfire needs did not answer; try again shortly (the server's log says which)",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code.to_string(),
                message: self.message,
                field: self.field,
            },
        };
        (self.status, Json(body)).into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        match (&e, e.kind()) {
            (_, ErrorKind::ConnectionLost | ErrorKind::SerializationFailure) => {
                ApiError::unavailable(&e)
            }
            (StoreError::NotMigrated { .. }, _) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_migrated",
                "the control plane is not migrated; run `rowfire migrate`",
            ),
            _ => ApiError::internal(&e),
        }
    }
}

impl From<crate::token::TokenError> for ApiError {
    fn from(e: crate::token::TokenError) -> ApiError {
        use crate::token::TokenError as T;
        match e {
            T::Name => ApiError::invalid(e.to_string()).at("name"),
            T::Unknown(_) => ApiError::not_found(e.to_string()),
            T::Store(e) => e.into(),
        }
    }
}

impl From<crate::definitions::Problems> for ApiError {
    fn from(p: crate::definitions::Problems) -> ApiError {
        let message =
            p.0.iter()
                .map(|p| format!("{}: {}", p.path, p.message))
                .collect::<Vec<_>>()
                .join("; ");
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_definitions", message).at("yaml")
    }
}

impl From<crate::definitions::versions::InForceError> for ApiError {
    fn from(e: crate::definitions::versions::InForceError) -> ApiError {
        use crate::definitions::versions::InForceError as E;
        match e {
            E::Definitions(p) => ApiError::conflict(format!(
                "the definitions in force no longer parse; push a corrected file ({p})"
            )),
            E::Store(e) => e.into(),
        }
    }
}

impl From<crate::push::PushError> for ApiError {
    fn from(e: crate::push::PushError) -> ApiError {
        match e {
            crate::push::PushError::Definitions(p) => p.into(),
            crate::push::PushError::Store(e) => e.into(),
        }
    }
}

impl From<crate::rules::ModeError> for ApiError {
    fn from(e: crate::rules::ModeError) -> ApiError {
        match e {
            crate::rules::ModeError::UnknownRule(_) => ApiError::not_found(e.to_string()),
            crate::rules::ModeError::Store(e) => e.into(),
        }
    }
}

impl From<crate::source::SourceError> for ApiError {
    fn from(e: crate::source::SourceError) -> ApiError {
        use crate::source::SourceError as S;
        match e {
            S::Guard { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "refused_sql", e.to_string()).at("sql")
            }
            S::Query { .. } | S::Shape { .. } | S::UnsupportedType { .. } | S::Timeout { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "query_failed", e.to_string()).at("sql")
            }
            S::MissingDsn { .. }
            | S::Undeclared { .. }
            | S::BadDsn { .. }
            | S::KindMismatch { .. } => {
                ApiError::new(StatusCode::CONFLICT, "source_not_configured", e.to_string())
                    .at("source")
            }
            _ => ApiError::unavailable(&e),
        }
    }
}

impl From<crate::backtest::BacktestError> for ApiError {
    fn from(e: crate::backtest::BacktestError) -> ApiError {
        match e {
            crate::backtest::BacktestError::Definitions(p) => ApiError::not_found(p.to_string()),
            crate::backtest::BacktestError::Source(e) => e.into(),
        }
    }
}

impl From<crate::poll::PollError> for ApiError {
    fn from(e: crate::poll::PollError) -> ApiError {
        match e {
            crate::poll::PollError::Store(e) => e.into(),
        }
    }
}

impl From<crate::explanation::plan::PlanError> for ApiError {
    fn from(e: crate::explanation::plan::PlanError) -> ApiError {
        use crate::explanation::plan::PlanError as P;
        match e {
            P::Guard { .. } => {
                ApiError::new(StatusCode::BAD_REQUEST, "refused_sql", e.to_string()).at("sql")
            }
            P::TooFarBack(_) => ApiError::invalid(e.to_string()).at("days"),
            P::NoClock { .. } => ApiError::conflict(e.to_string()).at("event_time"),
        }
    }
}

impl From<crate::secret::StoredSecretError> for ApiError {
    fn from(e: crate::secret::StoredSecretError) -> ApiError {
        ApiError::internal(&e)
    }
}

/// Why a body could not be read, as the caller should hear it: too large (413), too slow (408),
/// or cut off or malformed on the way (400).
fn body_refusal(e: &axum::extract::rejection::BytesRejection) -> ApiError {
    use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
    if let Some(slow) = slow_body(e) {
        return ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "too_slow",
            format!("{slow}; send it again, all at once"),
        );
    }
    match e {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "the body is larger than this server reads ({} MiB)",
                    super::extract::MAX_BODY / (1024 * 1024)
                ),
            )
        }
        _ => ApiError::invalid(
            "the body could not be read in full (the connection broke or its encoding is malformed); send it again",
        )
        .at("body"),
    }
}

/// The deadline a body missed, if that is why it could not be read.
pub(crate) fn slow_body<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a super::serve::BodyTooSlow> {
    let mut at = Some(e);
    while let Some(e) = at {
        if let Some(slow) = e.downcast_ref::<super::serve::BodyTooSlow>() {
            return Some(slow);
        }
        at = e.source();
    }
    None
}

/// `message` with the names of Rowfire's own types (`expected struct NewRule`) said as what
/// they are to a caller: an object.
fn without_type_names(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("struct ") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "struct ".len()..];
        let name_end = after
            .find(|c: char| !c.is_ascii_alphanumeric() && c != '_')
            .unwrap_or(after.len());
        out.push_str("an object");
        rest = &after[name_end..];
    }
    out.push_str(rest);
    out
}

/// A JSON body, refused with 400 naming the field at fault (its path) when it does not parse
/// or has the wrong shape.
pub struct Body<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Body<T>, ApiError> {
        // Only a body that says it is JSON: a page elsewhere can send `text/plain` across sites
        // without asking first, never `application/json`.
        let json = req
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.split(';').next())
            .map(|essence| essence.trim().to_ascii_lowercase())
            .is_some_and(|e| {
                e == "application/json" || (e.starts_with("application/") && e.ends_with("+json"))
            });
        if !json {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "not_json",
                "the body must be JSON sent with `Content-Type: application/json`",
            )
            .at("body"));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| body_refusal(&e))?;
        // Every body the API reads is an object (serde would also read one from an array).
        if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
            return Err(ApiError::invalid("the body must be a JSON object").at("body"));
        }
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        match serde_path_to_error::deserialize::<_, T>(&mut de) {
            Ok(value) => Ok(Body(value)),
            Err(e) => {
                let message = without_type_names(&e.inner().to_string());
                // The key at fault (a missing field named in full); a body that is not JSON at
                // all has no place in it: the body is at fault.
                let field = crate::definitions::serde_path("", e.path(), &message, |_| true)
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "body".to_string());
                Err(
                    ApiError::invalid(format!("the body is not what this route reads: {message}"))
                        .at(field),
                )
            }
        }
    }
}

impl From<crate::operator::OperatorError> for ApiError {
    fn from(e: crate::operator::OperatorError) -> ApiError {
        use crate::operator::OperatorError as O;
        use crate::push::PushError;
        use crate::secret::{SecretError, StoredSecretError};
        match e {
            O::NothingPushed => ApiError::conflict(e.to_string()),
            O::UnknownIntegration(_) | O::UnknownSource(_) | O::UnknownAction { .. } => {
                ApiError::not_found(e.to_string())
            }
            O::UnknownCredential { .. } => ApiError::not_found(e.to_string()).at("credential"),
            O::Invalid { field, message } => ApiError::invalid(message).at(field),
            O::Push(PushError::Definitions(problems)) => {
                ApiError::invalid(problems.to_string()).at("definitions")
            }
            O::Push(PushError::Store(e)) | O::Store(e) => e.into(),
            O::InForce(crate::definitions::versions::InForceError::Store(e)) => e.into(),
            O::InForce(e) => ApiError::conflict(e.to_string()),
            O::Secret(StoredSecretError::Store(e)) => e.into(),
            O::Secret(StoredSecretError::NotAFileUrl) => ApiError::new(
                StatusCode::CONFLICT,
                "master_key_missing",
                StoredSecretError::NotAFileUrl.to_string(),
            )
            .at("dsn"),
            O::Secret(StoredSecretError::Secret(SecretError::MissingMasterKey))
            | O::Try(crate::send::request::TryError::Secret(StoredSecretError::Secret(
                SecretError::MissingMasterKey,
            ))) => ApiError::new(
                StatusCode::CONFLICT,
                "master_key_missing",
                "this server has no master key (ROWFIRE_MASTER_KEY), so it cannot seal or open secrets; see `rowfire keygen`",
            ),
            O::Secret(e) => ApiError::internal(&e),
            O::Try(crate::send::request::TryError::Render(e)) => {
                ApiError::invalid(e.to_string()).at("params")
            }
            O::Try(crate::send::request::TryError::Build(m)) => ApiError::invalid(m),
            O::Try(crate::send::request::TryError::Secret(StoredSecretError::Store(e))) => e.into(),
            O::Try(e) => ApiError::internal(&e),
        }
    }
}

impl From<crate::outbox::RetryError> for ApiError {
    fn from(e: crate::outbox::RetryError) -> ApiError {
        use crate::outbox::RetryError as R;
        match e {
            R::Unknown(_) => ApiError::not_found(e.to_string()).at("id"),
            R::NotRetryable { .. } | R::NeverRendered(_) => ApiError::conflict(e.to_string()),
            R::Store(e) => e.into(),
        }
    }
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
