//! A Rowfire server for a test: its own SQLite control plane (or one given), listening on
//! 127.0.0.1 on a port the system picks, and a plain HTTP client that names its `Host`.

use std::net::SocketAddr;
use std::sync::Arc;

use rowfire::clock::Clock;
use rowfire::config::Config;
use rowfire::http::{self, AppState};
use rowfire::metrics::Metrics;
use rowfire::store::{Store, WorkspaceId};

/// A running server and a client for it.
pub struct Served {
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// The server's control plane.
    pub store: Store,
    /// The server's clock (fixed at the suite's now).
    pub clock: Clock,
    client: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: Option<tempfile::TempDir>,
}

/// How a test server is set up.
pub struct Setup {
    /// Act as if listening beyond loopback: every request then needs a token.
    pub beyond_loopback: bool,
    /// The workspace a request without a token acts in.
    pub workspace: WorkspaceId,
    /// The master key the server seals and opens secrets with (else the environment's).
    pub master_key: Option<rowfire::secret::MasterKey>,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            beyond_loopback: false,
            workspace: WorkspaceId::DEFAULT,
            master_key: None,
        }
    }
}

impl Served {
    /// A server on a fresh, migrated SQLite control plane.
    pub async fn sqlite(setup: Setup) -> Served {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("rowfire.db").display());
        let store = Store::open(&url).await.unwrap();
        store.migrate().await.unwrap();
        let mut served = Served::on(store, setup).await;
        served._dir = Some(dir);
        served
    }

    /// A server on `store` (migrated).
    pub async fn on(store: Store, setup: Setup) -> Served {
        Served::on_with_metrics(store, setup, Arc::new(Metrics::default())).await
    }

    /// A server on `store` showing `metrics` at `/metrics`.
    pub async fn on_with_metrics(store: Store, setup: Setup, metrics: Arc<Metrics>) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bound = listener.local_addr().unwrap();
        let shown: SocketAddr = if setup.beyond_loopback {
            "0.0.0.0:0".parse().unwrap()
        } else {
            bound
        };
        let clock = Clock::fixed(crate::support::now());
        let mut config = Config::from_env();
        if let Some(key) = setup.master_key.clone() {
            config.master_key = Ok(key);
        }
        let state = AppState::new(
            store.clone(),
            clock.clone(),
            &config,
            setup.workspace,
            shown,
            metrics,
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let ending = state.stop_when(async move {
            let _ = stopped.await;
        });
        tokio::spawn(http::serve_router(
            listener,
            rowfire::ui::app(state),
            ending,
        ));
        let _ = rustls::crypto::ring::default_provider().install_default();
        #[expect(
            clippy::disallowed_methods,
            reason = "a test's client for the server under test, on 127.0.0.1"
        )]
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Served {
            base: format!("http://{bound}"),
            store,
            clock,
            client,
            stop: Some(stop),
            _dir: None,
        }
    }

    /// A request to `path` (`/api/status`); its `Host` is `127.0.0.1:PORT` unless the test
    /// sets another.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.client.request(method, format!("{}{path}", self.base))
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::GET, path)
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::POST, path)
            .header("content-type", "application/json")
            .body(body.to_string())
    }
}

impl Served {
    /// Stops the server as a signal would: requests in flight finish, streams end.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The status and JSON body of a response.
pub async fn json(response: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = response.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (status, body)
}
