//! A local receiver for the delivery benchmarks, and definitions that send to it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};

/// Requests seen by the receiver, by the delivery id in `webhook-id`.
#[derive(Default)]
pub struct Tally {
    pub by_id: HashMap<i64, u32>,
    pub without_id: u64,
    /// Every request, with a `webhook-id` or without.
    pub received: u64,
}

/// The name of the receiver's thread, to tell its CPU time from the senders'.
pub const THREAD: &str = "receiver";

/// An HTTP endpoint on 127.0.0.1, on a thread and runtime of its own as a separate process would
/// be, that counts each request by its `webhook-id` and answers 200 at once.
pub struct Receiver {
    pub url: String,
    tally: Arc<Mutex<Tally>>,
}

impl Receiver {
    pub fn start() -> Receiver {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let tally = Arc::new(Mutex::new(Tally::default()));
        let counted = tally.clone();
        std::thread::Builder::new()
            .name(THREAD.into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let app =
                        axum::Router::new().fallback(move |headers: HeaderMap, _body: Bytes| {
                            let counted = counted.clone();
                            async move {
                                let id = headers
                                    .get("webhook-id")
                                    .and_then(|v| v.to_str().ok())
                                    .and_then(|v| v.parse::<i64>().ok());
                                let mut t = counted.lock().unwrap();
                                t.received += 1;
                                match id {
                                    Some(id) => *t.by_id.entry(id).or_default() += 1,
                                    None => t.without_id += 1,
                                }
                                StatusCode::OK
                            }
                        });
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    axum::serve(listener, app).await.unwrap();
                });
            })
            .unwrap();
        Receiver { url, tally }
    }

    /// Requests arrived since the last [`Receiver::take`].
    pub fn received(&self) -> u64 {
        self.tally.lock().unwrap().received
    }

    /// What arrived since the last call.
    pub fn take(&self) -> Tally {
        std::mem::take(&mut *self.tally.lock().unwrap())
    }
}

/// Definitions with one rule, `welcome`, that sends each signup to the receiver's `/hooks`
/// (source `BENCH_SOURCE`).
pub fn definitions(receiver: &str) -> String {
    format!(
        "version: 2
source: {{ dsn_env: BENCH_SOURCE }}
integrations:
  hooks:
    catalog: webhook
    base_url: {receiver}/hooks
    timeout_ms: 5000
triggers:
  signups:
    sql: SELECT id, at FROM signup
    event_time: at
    key: [id]
rules:
  welcome:
    trigger: signups
    policy: once_ever
    actions:
      - action: hooks.send
        params: {{ event_type: user.signed_up }}
"
    )
}
