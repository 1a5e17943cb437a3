//! Accepting connections: how long a client may take to send what it promised or to read what it
//! asked for, and how many may be served at once, so a slow or idle client cannot hold the
//! server. A client that sends its headers slowly (or opens a connection and says nothing),
//! trickles a body, or stops reading an answer is cut off; past the connection limit, new
//! connections wait in the listener's backlog; a stop waits a bounded time for requests in
//! flight.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use http_body::{Body as _, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tower::ServiceExt as _;

/// How patient the server is with its clients.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// How long a client may take to send a request's headers, counted from when the server
    /// waits for them: after connecting, and after each answer on a kept-alive connection.
    pub headers: Duration,
    /// How long a request's body may take to arrive in full, counted from its headers.
    pub body: Duration,
    /// How long an answer may wait for the client to read it (a write that makes no progress).
    pub reading: Duration,
    /// Connections served at once; more wait in the listener's backlog.
    pub connections: usize,
    /// How long a stop waits for requests in flight before closing their connections.
    pub stopping: Duration,
}

/// The largest request head (start line and headers) the server reads, in bytes: far above
/// what a browser or an API client sends, far below hyper's default of about 400 KiB a
/// connection.
pub const MAX_HEAD: usize = 64 * 1024;

impl Default for Patience {
    fn default() -> Self {
        Patience {
            headers: Duration::from_secs(30),
            body: Duration::from_secs(30),
            reading: Duration::from_secs(30),
            connections: 512,
            stopping: Duration::from_secs(20),
        }
    }
}

/// Serves `app` ([`crate::ui::app`], or [`crate::http::metrics_router`]) on `listener` with the
/// default [`Patience`] until `stop` resolves; requests in flight then have
/// [`Patience::stopping`] to finish before their connections are closed.
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
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    // Every connection's task: how many are served, and what a stop that runs out of patience
    // ends.
    let mut connections = tokio::task::JoinSet::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(patience.headers)
        .max_header_size(MAX_HEAD)
        .max_buf_size(MAX_HEAD + 16 * 1024);
    tokio::pin!(stop);
    loop {
        while connections.try_join_next().is_some() {}
        if connections.len() >= patience.connections.max(1) {
            // Full: the next connection waits in the backlog until one of these ends.
            tokio::select! {
                biased;
                () = &mut stop => break,
                _ = connections.join_next() => continue,
            }
        }
        let socket = tokio::select! {
            biased;
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => socket,
                // A connection that went away before it was accepted: the next one.
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to close rather than
                    // spin, then go on accepting.
                    tracing::error!(error = %e, "could not accept a connection; trying again in a second");
                    tokio::select! {
                        () = &mut stop => break,
                        () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    }
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
        let io = Unread::new(TokioIo::new(socket), patience.reading);
        let connection = graceful.watch(http.serve_connection(io, service));
        connections.spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // Idle connections close at once; requests in flight get `stopping` to finish (a client that
    // does not read its answer must not hold the process).
    if tokio::time::timeout(patience.stopping, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            after_ms = patience.stopping.as_millis() as u64,
            "stopped with requests still in flight; closing their connections"
        );
    }
    connections.shutdown().await;
    Ok(())
}

/// An accept error that concerns one connection only (it went away before it was accepted).
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

/// A connection whose writes fail once one has made no progress for `patience`: a client that
/// stops reading its answers (or a peer that vanished) does not hold its connection for ever.
struct Unread<T> {
    io: T,
    patience: Duration,
    /// Set while a write waits for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> Unread<T> {
    fn new(io: T, patience: Duration) -> Unread<T> {
        Unread {
            io,
            patience,
            stalled: None,
        }
    }

    /// What a write that is not ready returns: still pending, or an error once it has waited
    /// `patience`.
    fn waiting<R>(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<R>> {
        let patience = self.patience;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(patience)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client stopped reading its answer",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A write's outcome: progress clears the stall.
    fn wrote<R>(
        &mut self,
        polled: Poll<std::io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<R>> {
        match polled {
            Poll::Ready(done) => {
                self.stalled = None;
                Poll::Ready(done)
            }
            Poll::Pending => self.waiting(cx),
        }
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for Unread<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for Unread<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(polled, cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_flush(cx);
        this.wrote(polled, cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.io).poll_shutdown(cx);
        this.wrote(polled, cx)
    }
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
#[error("the request's body did not arrive within {}", seconds(.0))]
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

/// A patience as a person reads it: whole seconds, or milliseconds below a second.
fn seconds(d: &Duration) -> String {
    match d.as_secs() {
        0 => format!("{} ms", d.as_millis()),
        s => format!("{s} s"),
    }
}
