//! Reading a request's inputs as hostile: a JSON body whose refusal names the field at fault,
//! ids and limits parsed and bounded where they enter.

use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;

use crate::http::error::ApiError;

/// The most a JSON body may hold.
pub const MAX_BODY_BYTES: usize = 256 * 1024;

/// A JSON body; a refusal is a 400 naming the field at fault (`field`), or `body`.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<JsonBody<T>, ApiError> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|_| ApiError::invalid("the body could not be read").at("body"))?;
        if bytes.len() > MAX_BODY_BYTES {
            return Err(ApiError::invalid(format!(
                "the body is larger than {MAX_BODY_BYTES} bytes"
            ))
            .at("body"));
        }
        let value: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|_| ApiError::invalid("the body must be a JSON object").at("body"))?;
        parse(value).map(JsonBody)
    }
}

/// `value` as a `T`, or a 400 naming the field at fault.
pub fn parse<T: DeserializeOwned>(value: serde_json::Value) -> Result<T, ApiError> {
    if !value.is_object() {
        return Err(ApiError::invalid("the body must be a JSON object").at("body"));
    }
    let error = match serde_json::from_value::<T>(value.clone()) {
        Ok(t) => return Ok(t),
        Err(e) => e.to_string(),
    };
    Err(
        ApiError::invalid(format!("the body is not acceptable: {error}"))
            .at(culprit::<T>(&value, &error)),
    )
}

/// The field a deserialisation error is about: the one it quotes (`missing field `x``, `unknown
/// field `x``), else the one whose removal makes the error go away or become its absence.
fn culprit<T: DeserializeOwned>(value: &serde_json::Value, error: &str) -> String {
    for prefix in ["missing field `", "unknown field `"] {
        if let Some(rest) = error.strip_prefix(prefix)
            && let Some((name, _)) = rest.split_once('`')
        {
            return name.chars().take(64).collect();
        }
    }
    let Some(object) = value.as_object() else {
        return "body".to_string();
    };
    for key in object.keys().take(64) {
        let mut without = object.clone();
        without.remove(key);
        let missing = format!("missing field `{key}`");
        match serde_json::from_value::<T>(serde_json::Value::Object(without)) {
            Ok(_) => return key.chars().take(64).collect(),
            Err(e) if e.to_string().starts_with(&missing) => return key.chars().take(64).collect(),
            Err(_) => {}
        }
    }
    "body".to_string()
}

/// A bounded `limit`: `None` gives `default`, anything outside 1..=`max` is a 400.
pub fn limit(given: Option<&str>, default: i64, max: i64) -> Result<i64, ApiError> {
    let Some(text) = given else {
        return Ok(default);
    };
    match text.parse::<i64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(ApiError::invalid(format!("limit is a whole number from 1 to {max}")).at("limit")),
    }
}

/// An id from a path or query: a positive whole number, else `not_found` (a path) naming `field`.
pub fn id(text: &str, field: &str) -> Result<i64, ApiError> {
    match text.parse::<i64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(ApiError::invalid(format!("{field} is a positive whole number")).at(field)),
    }
}

/// A cursor (`after`): none, or an id.
pub fn after(given: Option<&str>) -> Result<Option<i64>, ApiError> {
    match given {
        None => Ok(None),
        Some(t) => match t.parse::<i64>() {
            Ok(n) if n >= 0 => Ok(Some(n)),
            _ => Err(ApiError::invalid("after is a whole number (an id)").at("after")),
        },
    }
}
