//! The extractors handlers read their path and query with: axum's `Query` and `Path`, whose
//! refusals become [`ApiError`]s (JSON, status 400, naming what was wrong) instead of axum's
//! plain-text answers, so every error the API sends has the one documented shape. Bodies are
//! read by [`crate::http::error::Body`]; every body is bounded where it enters (`MAX_BODY`).

use axum::extract::FromRequestParts;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// The largest request body the API reads (a definitions file fits well inside it).
pub const MAX_BODY: usize = 2 * 1024 * 1024;

/// Query parameters, refused with a JSON 400 when they do not fit their type.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Query<T>, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(Query(value)),
            Err(e) => Err(query_refusal(&e)),
        }
    }
}

fn query_refusal(e: &QueryRejection) -> ApiError {
    ApiError::invalid(format!(
        "the query parameters are not what this route takes: {}",
        shorten(&e.body_text())
    ))
    .at("query")
}

/// Path parameters, refused with a JSON 400 when they do not fit their type.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Path<T>, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) => Ok(Path(value)),
            Err(e) => Err(path_refusal(&e)),
        }
    }
}

fn path_refusal(e: &PathRejection) -> ApiError {
    ApiError::invalid(format!(
        "the path is not what this route takes: {}",
        shorten(&e.body_text())
    ))
    .at("path")
}

/// At most 300 characters of a refusal's text (it may quote the caller's input).
fn shorten(text: &str) -> String {
    text.chars().take(300).collect()
}
