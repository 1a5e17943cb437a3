//! Accepting connections: how long a client may take to send what it promised, and how many may
//! be served at once, so a slow or idle client cannot hold the server. A client that sends its
//! headers slowly (or opens a connection and says nothing), or trickles a body, is cut off; past
//! the connection limit, new connections wait in the listener's backlog.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt as _;

/// How patient the server is with its clients.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// How long a client may take to send a request's headers, counted from when the server
    /// waits for them: after connecting, and after each answer on a kept-alive connection.
    pub headers: Duration,
    /// How long a request's body may take to arrive in full, counted from its headers.
    pub body: Duration,
    /// Connections served at once; more wait in the listener's backlog.
    pub connections: usize,
}

impl Default for Patience {
    fn default() -> Self {
        Patience {
            headers: Duration::from_secs(30),
            body: Duration::from_secs(30),
            connections: 512,
        }
    }
}

/// Serves `app` ([`crate::ui::app`], or [`crate::http::metrics_router`]) on `listener` with the
/// default [`Patience`] until `stop` resolves; requests in flight then finish.
pub async fn serve_router(
    listener: TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, app, stop, Patience::default()).await
}

/// [`serve_router`] with the given patience.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
    patience: Patience,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(patience.connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(patience.headers);
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut stop => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let socket = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted:
                    // wait a moment rather than spin, then go on accepting.
                    tracing::warn!(error = %e, "could not accept a connection; trying again shortly");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = socket.set_nodelay(true);
        let app = app.clone();
        let body_patience = patience.body;
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            app.clone().oneshot(
                request.map(|body| axum::body::Body::new(Deadline::new(body, body_patience))),
            )
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(socket), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A request body that must arrive in full by a deadline.
struct Deadline {
    body: Incoming,
    /// Set when the body is not already complete.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    patience: Duration,
}

impl Deadline {
    fn new(body: Incoming, patience: Duration) -> Deadline {
        let deadline = (!body.is_end_stream()).then(|| Box::pin(tokio::time::sleep(patience)));
        Deadline {
            body,
            deadline,
            patience,
        }
    }
}

/// A request body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the request's body did not arrive within {} s", .0.as_secs())]
pub struct BodyTooSlow(Duration);

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::BoxError>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(axum::BoxError::from)));
        }
        if let Some(deadline) = &mut this.deadline
            && deadline.as_mut().poll(cx).is_ready()
        {
            return Poll::Ready(Some(Err(BodyTooSlow(this.patience).into())));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
