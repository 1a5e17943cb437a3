//! The HTTP server behind `rowfire serve` and `rowfire demo`: the JSON API under `/api`
//! ([`api`]), the pages (handed in by [`crate::ui::app`], which imports this module, not the
//! other way round), `/metrics` ([`crate::metrics`]), and the checks every
//! request passes first ([`guard`]: its `Host`, its `Origin` on writes, its token). Handlers call
//! the same library functions as the command line; [`error::ApiError`] is the one place a
//! library error becomes a status code.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::secret::{MasterKey, SecretError};
use crate::send::egress::Policy;
use crate::store::{Store, WorkspaceId};

pub mod api;
pub mod error;
pub mod extract;
pub mod guard;
pub mod serve;

pub use serve::{Patience, serve_router, serve_with};

/// The address `rowfire serve` listens on unless told otherwise: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8000";

/// What the server shares with every request.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The parts of [`AppState`].
pub struct Shared {
    /// The control plane.
    pub store: Store,
    /// The one clock.
    pub clock: Clock,
    /// The workspace a request without a token acts in (allowed only on a loopback listener).
    pub workspace: WorkspaceId,
    /// The workspaces the operator runs (this one, and those `ROWFIRE_OPERATOR_WORKSPACES`
    /// lists): their sources read this process's environment and reach files and addresses on
    /// this host; every other workspace is a tenant's. A list that cannot be read adds none.
    pub operators: Vec<WorkspaceId>,
    /// Whether every request must carry a token (the listener is not loopback-only).
    pub tokens_required: bool,
    /// Host names, besides loopback ones, that requests may name (`ROWFIRE_ALLOWED_HOSTS`).
    pub allowed_hosts: Vec<String>,
    /// Opens credentials and stored DSNs, or why it cannot.
    pub master_key: Result<MasterKey, SecretError>,
    /// Which addresses test sends may reach.
    pub egress: Result<Policy, String>,
    /// The counters and histograms `/metrics` shows.
    pub metrics: Arc<Metrics>,
    /// Turns true when the server stops: long-lived responses (the activity stream) then end,
    /// so a graceful stop does not wait on them.
    pub stopping: tokio::sync::watch::Sender<bool>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    /// The state for a server listening on `listen`, from the environment's settings.
    pub fn new(
        store: Store,
        clock: Clock,
        config: &Config,
        workspace: WorkspaceId,
        listen: SocketAddr,
        metrics: Arc<Metrics>,
    ) -> AppState {
        let operators = config
            .operator_workspaces(&workspace)
            .unwrap_or_else(|_| vec![workspace.clone()]);
        AppState(Arc::new(Shared {
            store,
            clock,
            operators,
            workspace,
            tokens_required: !listen.ip().is_loopback(),
            allowed_hosts: config.allowed_hosts.clone(),
            master_key: config.master_key.clone(),
            egress: config.egress.clone(),
            metrics,
            stopping: tokio::sync::watch::Sender::new(false),
        }))
    }

    /// The DSNs `workspace`'s sources resolve to when a request reads them: what it stored,
    /// and the environment's variables only for the workspaces the operator runs (a tenant
    /// never reads this process's environment).
    pub async fn source_dsns(
        &self,
        workspace: &WorkspaceId,
    ) -> Result<crate::source::DsnResolver, crate::secret::StoredSecretError> {
        let key = self.master_key.as_ref();
        let one = std::slice::from_ref(workspace);
        let egress = self.egress.as_ref();
        crate::worker::source_dsns(&self.store, one, &self.operators, key, egress).await
    }

    /// What `workspace`'s sources may reach: the server's own workspace is the operator's (this
    /// process's environment, files and addresses on this host); any other is a tenant's.
    pub fn reach(&self, workspace: &WorkspaceId) -> crate::operator::sources::Reach<'_> {
        if self.operators.contains(workspace) {
            crate::operator::sources::Reach::Operator
        } else {
            crate::operator::sources::Reach::Tenant(&self.egress)
        }
    }

    /// `stop`, after which the state's long-lived responses end: the future to give
    /// [`serve_router`] for a router built on this state.
    pub fn stop_when(
        &self,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> + Send + 'static {
        let state = self.clone();
        async move {
            stop.await;
            state.stopping.send_replace(true);
        }
    }
}

/// The whole application: `pages` (the UI's routes, which stand above this module), the API
/// and `/metrics`, behind the request checks. [`crate::ui::app`] passes its pages in.
pub fn router(state: AppState, pages: Router<AppState>) -> Router {
    Router::new()
        .merge(pages)
        .merge(api::router())
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .route("/metrics", axum::routing::get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
        .layer(axum::extract::DefaultBodyLimit::max(extract::MAX_BODY))
        .with_state(state)
}

/// A method a route does not serve: a JSON 405, like every other error (axum's was empty).
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not served at {}; the API is described at /api/openapi.json",
            uri.path().chars().take(200).collect::<String>()
        ),
    )
}

/// Any path no route serves: a JSON 404, like every other error.
async fn not_found(uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::not_found(format!(
        "nothing is served at {}; the API is described at /api/openapi.json",
        uri.path().chars().take(200).collect::<String>()
    ))
}

/// Only `/metrics`, behind the same checks: what `rowfire worker --metrics ADDR` serves.
pub fn metrics_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check,
        ))
        .with_state(state)
}

/// `GET /metrics`: the queue depth read now, and what this process counted. Both cover every
/// workspace this process serves, so only a caller acting in the server's own workspace may
/// read them: a tenant's token sees no other tenant's rules, triggers or counts.
async fn metrics(
    axum::extract::State(state): axum::extract::State<AppState>,
    caller: guard::Caller,
) -> error::ApiResult<impl axum::response::IntoResponse> {
    if caller.workspace != state.workspace {
        return Err(error::ApiError::forbidden(
            "/metrics covers every workspace this process serves; read it without a token on loopback, or with a token of the server's own workspace",
        ));
    }
    let depth = crate::send::queue::depth(&state.store, state.clock.now()).await?;
    state.metrics.set_queue_depth(depth);
    Ok((
        [(
            axum::http::header::CONTENT_TYPE,
            crate::metrics::CONTENT_TYPE,
        )],
        state.metrics.encode(),
    ))
}
