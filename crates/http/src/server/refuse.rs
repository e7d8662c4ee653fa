//! The answer to a connection past the cap: read its request head, answer 503 `unavailable`
//! with `Retry-After` and the JSON error body, close.
//!
//! A client left in the kernel's accept queue gets no answer at all: once the queue is full
//! new connections are dropped or reset, and a client that gives up waiting sees a closed
//! connection with nothing on it. A short 503 tells it the node is overloaded and when to
//! retry. The cost is bounded: each refusal reads at most [`MAX_HEAD`] bytes, and the whole
//! exchange (head, answer, lingering close) takes at most twice [`DEADLINE`].
//!
//! Operators' requests are the exception: a `GET` or `HEAD` of `/healthz` or `/metrics` is
//! handed back to be served (one request, then close), so a node at its cap can still be
//! probed and scraped, and its refusals counted, when operators need that most.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Longest wait for the request head, and then for the client to close after the answer.
pub const DEADLINE: Duration = Duration::from_secs(1);
/// Most bytes of a request head read before answering anyway.
const MAX_HEAD: usize = 16 * 1024;

/// The whole answer: the error contract's body for `unavailable`, with `Retry-After`.
const ANSWER: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\n\
retry-after: 1\r\n\
connection: close\r\n\
content-length: 74\r\n\
\r\n\
{\"error\":\"unavailable\",\"message\":\"too many connections open; retry later\"}";

/// Answer `stream` with the 503 and close it; or, for an operator's request
/// ([`is_operations`]) while `operations` grants a place, the connection back with its head
/// replayed, to be served. Errors are the client's going away: ignored.
pub async fn refuse<P>(mut stream: TcpStream, operations: impl FnOnce() -> Option<P>) -> Option<(Replay, P)> {
    let mut head = Vec::new();
    // Read the head first, so the answer comes after the request, as clients expect.
    let complete = tokio::time::timeout(DEADLINE, read_head(&mut stream, &mut head)).await.unwrap_or(false);
    if complete
        && is_operations(&head)
        && let Some(place) = operations()
    {
        return Some((Replay { head, at: 0, inner: stream }, place));
    }
    if stream.write_all(ANSWER).await.is_err() {
        return None;
    }
    let _ = stream.shutdown().await;
    // Lingering close: closing with unread input would reset the connection, and a reset
    // can reach the client before it has read the answer. Wait (bounded) for its close.
    let mut buf = [0u8; 2048];
    let _ = tokio::time::timeout(DEADLINE, async {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
    None
}

/// Whether a request head asks for `/healthz` or `/metrics` with `GET` or `HEAD` (empty lines
/// before the request line are skipped, as HTTP/1.1 servers do).
pub fn is_operations(head: &[u8]) -> bool {
    let start = request_start(head).unwrap_or(head.len());
    let line = head[start..].split(|b| *b == b'\r' || *b == b'\n').next().unwrap_or_default();
    let mut parts = line.split(|b| *b == b' ');
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else { return false };
    let path = target.split(|b| *b == b'?').next().unwrap_or_default();
    matches!(method, b"GET" | b"HEAD") && matches!(path, b"/healthz" | b"/metrics")
}

/// Read into `head` until the end of a request head (an empty line, CRLF or bare LF: `true`),
/// end of input, or [`MAX_HEAD`] bytes. Empty lines before the request line do not end it.
async fn read_head(stream: &mut TcpStream, head: &mut Vec<u8>) -> bool {
    let mut buf = [0u8; 2048];
    while head.len() < MAX_HEAD {
        let n = match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => n,
        };
        // An empty line may span two reads: look from three bytes before this read's start.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&buf[..n]);
        if ends_head(head, from) {
            return true;
        }
    }
    false
}

/// Where the request line begins: past any empty lines before it (`None`: none yet).
fn request_start(head: &[u8]) -> Option<usize> {
    head.iter().position(|b| *b != b'\r' && *b != b'\n')
}

/// Whether `head` holds the end of a request head at or after `from`.
fn ends_head(head: &[u8], from: usize) -> bool {
    let Some(start) = request_start(head) else { return false };
    let from = from.max(start);
    let rest = &head[from..];
    rest.windows(4).any(|w| w == b"\r\n\r\n") || rest.windows(2).any(|w| w == b"\n\n")
}

/// A connection whose first bytes (the head [`refuse`] read) are read again before the
/// socket's.
pub struct Replay {
    head: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Replay {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.head.len() {
            let n = (self.head.len() - self.at).min(buf.remaining());
            let at = self.at;
            buf.put_slice(&self.head[at..at + n]);
            self.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Replay {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_follows_the_error_contract() {
        let text = std::str::from_utf8(ANSWER).expect("ascii");
        let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
        assert!(head.contains(&format!("content-length: {}", body.len())), "{head}");
        let v: serde_json::Value = serde_json::from_str(body).expect("JSON");
        assert_eq!(v["error"], "unavailable");
        assert!(v["message"].is_string());
        assert_eq!(v.as_object().map(|o| o.len()), Some(2));
    }

    #[test]
    fn a_head_ends_at_its_first_empty_line_crlf_or_bare_lf() {
        assert!(ends_head(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 0));
        assert!(ends_head(b"GET /healthz HTTP/1.1\nHost: x\n\n", 0));
        assert!(!ends_head(b"GET /healthz HTTP/1.1\r\nHost: x\r\n", 0));
        assert!(!ends_head(b"\r\n\r\n", 0), "empty lines before the request line");
        assert!(ends_head(b"\r\nGET /healthz HTTP/1.1\r\n\r\n", 0));
        assert!(is_operations(b"\r\nGET /healthz HTTP/1.1\r\n\r\n"), "after an empty line");
        assert!(is_operations(b"GET /metrics HTTP/1.1\nHost: x\n\n"), "bare LF");
    }

    #[test]
    fn only_operators_gets_of_health_and_metrics_pass() {
        for ok in
            ["GET /healthz HTTP/1.1\r\n\r\n", "HEAD /metrics HTTP/1.1\r\n", "GET /metrics?x=1 HTTP/1.0\r\n"]
        {
            assert!(is_operations(ok.as_bytes()), "{ok}");
        }
        for no in [
            "POST /healthz HTTP/1.1\r\n",
            "GET /healthzz HTTP/1.1\r\n",
            "GET /v1/posts/1/likes HTTP/1.1\r\n",
            "GET /metrics/../v1 HTTP/1.1\r\n",
            "get /healthz HTTP/1.1\r\n",
            "GET",
            "",
        ] {
            assert!(!is_operations(no.as_bytes()), "{no}");
        }
    }
}
