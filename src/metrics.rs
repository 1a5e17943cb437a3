//! Metrics in the Prometheus text format (`prometheus-client`), served at `/metrics` by
//! `rowfire serve` and by `rowfire worker --metrics ADDR`.

use std::sync::Mutex;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use prometheus_client::registry::Registry;

use crate::http::AppState;

/// The registry and every metric in it.
pub struct Metrics {
    registry: Mutex<Registry>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        Metrics {
            registry: Mutex::new(Registry::with_prefix("rowfire")),
        }
    }
}

impl Metrics {
    /// The registry's text form.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

/// `GET /metrics`.
pub async fn scrape(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}
