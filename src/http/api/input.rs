//! Reading a request's inputs as hostile: ids and limits parsed and bounded where they enter
//! (bodies are read by `http::error::Body`).

use crate::http::error::ApiError;

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
