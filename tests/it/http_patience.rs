//! The server's patience with slow clients: headers and bodies must arrive by a deadline, idle
//! kept-alive connections are closed, and connections past the cap wait their turn. Each test
//! serves a small router with the API's own body extractor on 127.0.0.1, with short deadlines,
//! and waits on outcomes (bounded by a generous timeout), never on a sleep.

use std::time::Duration;

use axum::Router;
use rowfire::http::error::Body;
use rowfire::http::{Patience, serve_with};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// Far longer than any deadline below: a test that waits this long has failed.
const GIVE_UP: Duration = Duration::from_secs(20);

async fn echo(Body(value): Body<serde_json::Value>) -> axum::Json<serde_json::Value> {
    axum::Json(value)
}

/// Serves the echo router with `patience`; the address and a handle that stops it when dropped.
async fn serve(patience: Patience) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let app = Router::new().route("/", axum::routing::post(echo));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(serve_with(
        listener,
        app,
        async move {
            let _ = stopped.await;
        },
        patience,
    ));
    (address, stop)
}

fn quick() -> Patience {
    Patience {
        headers: Duration::from_millis(300),
        body: Duration::from_millis(300),
        connections: 16,
    }
}

/// Reads until the server closes the connection; what it sent.
async fn until_closed(socket: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let read = tokio::time::timeout(GIVE_UP, socket.read_to_end(&mut got)).await;
    assert!(
        read.is_ok(),
        "the server kept the connection open; it had sent {:?}",
        String::from_utf8_lossy(&got)
    );
    String::from_utf8_lossy(&got).into_owned()
}

const REQUEST: &str = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let (address, _stop) = serve(quick()).await;
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .unwrap();
    let answer = until_closed(&mut socket).await;
    assert!(
        !answer.contains("200 OK"),
        "a request without its end of headers was answered: {answer}"
    );
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_its_answer() {
    let (address, _stop) = serve(quick()).await;
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket.write_all(REQUEST.as_bytes()).await.unwrap();
    let answer = until_closed(&mut socket).await;
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("{\"a\":1}"),
        "the request was not answered before the idle connection closed: {answer}"
    );
}

#[tokio::test]
async fn a_body_that_trickles_is_answered_408_and_says_why() {
    let (address, _stop) = serve(quick()).await;
    let mut socket = TcpStream::connect(&address).await.unwrap();
    socket
        .write_all(b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
        .await
        .unwrap();
    let answer = until_closed(&mut socket).await;
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a body that never finished was not refused as too slow: {answer}"
    );
    assert!(
        answer.contains("\"too_slow\"") && answer.contains("did not arrive within"),
        "the refusal does not say what was wrong: {answer}"
    );
}

#[tokio::test]
async fn a_connection_past_the_cap_is_served_once_a_slot_frees() {
    let (address, _stop) = serve(Patience {
        connections: 1,
        ..quick()
    })
    .await;
    // The only slot goes to a client that says nothing.
    let mut silent = TcpStream::connect(&address).await.unwrap();
    silent.write_all(b"P").await.unwrap();
    let mut waiting = TcpStream::connect(&address).await.unwrap();
    waiting.write_all(REQUEST.as_bytes()).await.unwrap();
    let answer = until_closed(&mut waiting).await;
    assert!(
        answer.starts_with("HTTP/1.1 200 OK"),
        "the waiting connection was not served: {answer}"
    );
    // It could only be served once the silent client's slot was freed: the server had closed it.
    let mut rest = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_millis(1), silent.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the second connection was served while the first still held the only slot"
    );
}

#[tokio::test]
async fn requests_in_time_are_answered_on_one_kept_alive_connection() {
    let (address, _stop) = serve(Patience::default()).await;
    let mut socket = TcpStream::connect(&address).await.unwrap();
    for _ in 0..3 {
        socket.write_all(REQUEST.as_bytes()).await.unwrap();
        let mut got = vec![0u8; 4096];
        let n = tokio::time::timeout(GIVE_UP, socket.read(&mut got))
            .await
            .unwrap()
            .unwrap();
        let answer = String::from_utf8_lossy(&got[..n]);
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("{\"a\":1}"),
            "a request in time was not answered on the same connection: {answer}"
        );
    }
}
