//! A local HTTP receiver on 127.0.0.1 that records every request and answers with scripted
//! replies (then a default), standing in for Slack, Zendesk or a customer's webhook endpoint.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    /// Wait this long before answering: longer than the integration's timeout, this is how a
    /// timeout is made (the wait is the thing under test).
    pub delay: Duration,
}

impl Reply {
    pub fn status(status: u16) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Reply {
        self.headers.push((name, value.to_string()));
        self
    }

    pub fn body(mut self, body: &str) -> Reply {
        self.body = body.to_string();
        self
    }

    pub fn after(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path: String,
    /// The path and query as they arrived, still percent-encoded.
    pub target: String,
    pub headers: HashMap<String, String>,
    pub body: String,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Seen {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).map_or("", String::as_str)
    }
}

#[derive(Default)]
struct Inner {
    script: VecDeque<Reply>,
    seen: Vec<Seen>,
    /// How long unscripted 200s take.
    pace: Duration,
}

/// The receiver; it stops when the test's runtime ends.
#[derive(Clone)]
pub struct Receiver {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    /// How many requests have arrived.
    arrivals: Arc<tokio::sync::watch::Sender<usize>>,
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1, answering 200 unless scripted otherwise.
    pub async fn start() -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let inner = Arc::new(Mutex::new(Inner::default()));
        let arrivals = Arc::new(tokio::sync::watch::Sender::new(0));
        let (state, counts) = (inner.clone(), arrivals.clone());
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let (state, counts) = (state.clone(), counts.clone());
                async move { answer(&state, &counts, method, uri, headers, body).await }
            },
        );
        tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url,
            inner,
            arrivals,
        }
    }

    /// Waits (without sleeping) until `n` requests have arrived; false if `within` passes first.
    pub async fn wait_for_requests(&self, n: usize, within: Duration) -> bool {
        let mut seen = self.arrivals.subscribe();
        tokio::time::timeout(within, seen.wait_for(|all| *all >= n))
            .await
            .is_ok()
    }

    /// Queues replies for the next requests, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.inner.lock().unwrap().script.extend(replies);
    }

    /// Makes every unscripted 200 take `pace`, so that requests are in flight when a worker is
    /// killed (the chaos test's subject).
    pub fn pace(&self, pace: Duration) {
        self.inner.lock().unwrap().pace = pace;
    }

    /// Every request so far, in arrival order.
    pub fn seen(&self) -> Vec<Seen> {
        self.inner.lock().unwrap().seen.clone()
    }

    /// How many requests arrived.
    pub fn count(&self) -> usize {
        self.inner.lock().unwrap().seen.len()
    }
}

async fn answer(
    state: &Mutex<Inner>,
    counts: &tokio::sync::watch::Sender<usize>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = {
        let mut inner = state.lock().unwrap();
        inner.seen.push(Seen {
            method: method.to_string(),
            path: uri.path().to_string(),
            target: uri
                .path_and_query()
                .map_or_else(|| uri.path().to_string(), |t| t.as_str().to_string()),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        v.to_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            body: String::from_utf8_lossy(&body).into_owned(),
            at: std::time::Instant::now(),
        });
        counts.send_replace(inner.seen.len());
        let pace = inner.pace;
        inner
            .script
            .pop_front()
            .unwrap_or_else(|| Reply::status(200).after(pace))
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut response = (
        StatusCode::from_u16(reply.status).unwrap(),
        reply.body.clone(),
    )
        .into_response();
    for (name, value) in &reply.headers {
        response.headers_mut().insert(*name, value.parse().unwrap());
    }
    response
}
