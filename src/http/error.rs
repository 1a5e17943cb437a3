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
