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

/// An answer far larger than the sockets' buffers: its writes wait until the client reads.
async fn big() -> Vec<u8> {
    vec![b'x'; 64 * 1024 * 1024]
}

/// The login form's answer to what it could not read, on any form.
async fn form(
    form: Result<
        axum::Form<std::collections::HashMap<String, String>>,
        axum::extract::rejection::FormRejection,
    >,
) -> axum::response::Response {
    match form {
        Ok(_) => axum::response::IntoResponse::into_response("read"),
        Err(e) => rowfire::ui::login::refused(&e),
    }
}

/// A server under test: its address, what stops it (also when dropped), and its task.
struct Server {
    address: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

/// Serves the echo router (and `/big`) with `patience`.
async fn serve_task(patience: Patience) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let app = Router::new()
        .route("/", axum::routing::post(echo))
        .route("/big", axum::routing::get(big))
        .route("/form", axum::routing::post(form));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve_with(
        listener,
        app,
        async move {
            let _ = stopped.await;
        },
        patience,
    ));
    Server {
        address,
        stop,
        task,
    }
}

async fn serve(patience: Patience) -> (String, tokio::sync::oneshot::Sender<()>) {
    let server = serve_task(patience).await;
    (server.address, server.stop)
}

/// Asks for `/big` and reads only the start of the answer, so the server is writing it.
async fn asked_for_big(address: &str) -> TcpStream {
    let mut socket = TcpStream::connect(address).await.unwrap();
    socket
        .write_all(b"GET /big HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut start = [0u8; 12];
    tokio::time::timeout(GIVE_UP, socket.read_exact(&mut start))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&start, b"HTTP/1.1 200");
    socket
}

fn quick() -> Patience {
    Patience {
        headers: Duration::from_millis(300),
        body: Duration::from_millis(300),
        reading: Duration::from_millis(300),
        connections: 16,
        stopping: Duration::from_millis(300),
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

/// Sends `bytes` on a new connection and reads until the server closes it; what it answered. A
/// write the server cut short (it may refuse before reading all) is not an error here: the
/// answer says what happened.
async fn answer_to(address: &str, bytes: &[u8]) -> String {
    let mut socket = TcpStream::connect(address).await.unwrap();
    let _ = socket.write_all(bytes).await;
    until_closed(&mut socket).await
}

const REQUEST: &str = "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}";

#[tokio::test]
async fn a_client_that_never_finishes_its_headers_is_disconnected() {
    let (address, _stop) = serve(quick()).await;
    let answer = answer_to(&address, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\n").await;
    assert!(
        !answer.contains("200 OK"),
        "a request without its end of headers was answered: {answer}"
    );
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_its_answer() {
    let (address, _stop) = serve(quick()).await;
    let answer = answer_to(&address, REQUEST.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("{\"a\":1}"),
        "the request was not answered before the idle connection closed: {answer}"
    );
}

/// Posts to `path` the start of a 100-byte body of `content_type` and no more; the answer, which
/// must be a 408.
async fn trickled(path: &str, content_type: &str, start: &str) -> String {
    let (address, _stop) = serve(quick()).await;
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: 100\r\n\r\n{start}"
    );
    let answer = answer_to(&address, request.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a body that never finished was not refused as too slow: {answer}"
    );
    answer
}

#[tokio::test]
async fn a_body_that_trickles_is_answered_408_and_says_why() {
    let answer = trickled("/", "application/json", "{\"a\":").await;
    assert!(
        answer.contains("\"too_slow\"") && answer.contains("did not arrive within 300 ms"),
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
    // The moment its answer begins, not when its connection ends (by then the silent one would
    // have been cut off whatever the cap).
    let mut start = [0u8; 12];
    tokio::time::timeout(GIVE_UP, waiting.read_exact(&mut start))
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    assert_eq!(
        &start, b"HTTP/1.1 200",
        "the waiting connection was not served"
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
        // Read until the answer's body has come (it may come in more than one read).
        let mut got = Vec::new();
        while !got.ends_with(b"{\"a\":1}") {
            let mut chunk = [0u8; 4096];
            let n = tokio::time::timeout(GIVE_UP, socket.read(&mut chunk))
                .await
                .unwrap()
                .unwrap();
            assert!(
                n > 0,
                "the connection closed: {}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&chunk[..n]);
        }
        let answer = String::from_utf8_lossy(&got);
        assert!(
            answer.starts_with("HTTP/1.1 200 OK") && answer.ends_with("{\"a\":1}"),
            "a request in time was not answered on the same connection: {answer}"
        );
    }
}

#[tokio::test]
async fn a_client_that_stops_reading_its_answer_does_not_hold_a_stop() {
    // Only the stalled write can end this connection: the stop itself would wait far longer.
    let server = serve_task(Patience {
        stopping: GIVE_UP * 10,
        ..quick()
    })
    .await;
    let _unread = asked_for_big(&server.address).await;
    let _ = server.stop.send(());
    let stopped = tokio::time::timeout(GIVE_UP, server.task).await;
    assert!(
        stopped.is_ok(),
        "the server's stop waited on a client that does not read"
    );
}

#[tokio::test]
async fn a_stop_waits_only_so_long_for_requests_in_flight() {
    // The answer's writes may wait for ever; the stop gives up after its own patience.
    let server = serve_task(Patience {
        reading: GIVE_UP * 10,
        ..quick()
    })
    .await;
    let mut unread = asked_for_big(&server.address).await;
    let _ = server.stop.send(());
    let stopped = tokio::time::timeout(GIVE_UP, server.task).await;
    assert!(
        stopped.is_ok(),
        "the server's stop waited on a request in flight beyond its patience"
    );
    // And the connection it gave up on is closed, not left running.
    let rest = until_closed(&mut unread).await;
    assert!(
        rest.len() < 64 * 1024 * 1024,
        "the whole answer was sent after the stop gave up"
    );
}

#[tokio::test]
async fn headers_larger_than_the_server_reads_are_refused_431() {
    let (address, _stop) = serve(Patience::default()).await;
    let huge = "a".repeat(rowfire::http::serve::MAX_HEAD + 1024);
    let request = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Huge: {huge}\r\nContent-Length: 2\r\n\r\n{{}}"
    );
    let answer = answer_to(&address, request.as_bytes()).await;
    assert!(
        answer.starts_with("HTTP/1.1 431"),
        "oversized headers were not refused: {}",
        answer.chars().take(200).collect::<String>()
    );
}

#[tokio::test]
async fn a_body_cut_off_or_malformed_is_a_400_not_413() {
    let (address, _stop) = serve(quick()).await;
    let answer = answer_to(&address, b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n").await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("could not be read in full"),
        "a malformed chunked body was not refused as unreadable: {answer}"
    );
}

#[tokio::test]
async fn a_login_form_that_trickles_is_answered_408_with_the_form_again() {
    let answer = trickled("/form", "application/x-www-form-urlencoded", "token=rft_").await;
    assert!(
        answer.contains("id=\"login-token\"") && answer.contains("took too long to arrive"),
        "the refusal is not the form with its reason: {answer}"
    );
}
