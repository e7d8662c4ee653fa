//! The answer to a connection past the cap: read its request head, answer 503 `unavailable`
//! with `Retry-After` and the JSON error body, close.
//!
//! A client left in the kernel's accept queue gets no answer at all: once the queue is full
//! new connections are dropped or reset, and a client that gives up waiting sees a closed
//! connection with nothing on it. A short 503 tells it the node is overloaded and when to
//! retry. The cost is bounded: each refusal reads at most [`MAX_HEAD`] bytes, and the whole
//! exchange (head, answer, lingering close) takes at most twice [`DEADLINE`].

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
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

/// Answer `stream` with the 503 and close it. Errors are the client's going away: ignored.
pub async fn refuse(mut stream: TcpStream) {
    let mut buf = [0u8; 2048];
    // Read the head first, so the answer comes after the request, as clients expect.
    let _ = tokio::time::timeout(DEADLINE, read_head(&mut stream, &mut buf)).await;
    if stream.write_all(ANSWER).await.is_err() {
        return;
    }
    let _ = stream.shutdown().await;
    // Lingering close: closing with unread input would reset the connection, and a reset
    // can reach the client before it has read the answer. Wait (bounded) for its close.
    let _ = tokio::time::timeout(DEADLINE, async {
        while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
    })
    .await;
}

/// Read until the end of a request head (an empty line), end of input, or [`MAX_HEAD`].
async fn read_head(stream: &mut TcpStream, buf: &mut [u8]) {
    let mut total = 0;
    // The last three bytes of the previous read: an empty line may span two reads.
    let mut tail = [0u8; 3];
    while total < MAX_HEAD {
        let n = match stream.read(buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        total += n;
        let read = &buf[..n];
        // An empty line across the boundary: the previous tail and this read's first bytes.
        let mut seam = [0u8; 6];
        seam[..3].copy_from_slice(&tail);
        let head = read.len().min(3);
        seam[3..3 + head].copy_from_slice(&read[..head]);
        let ends = |b: &[u8]| b.windows(4).any(|w| w == b"\r\n\r\n");
        if ends(&seam[..3 + head]) || ends(read) {
            return;
        }
        if n >= 3 {
            tail.copy_from_slice(&read[n - 3..]);
        } else {
            tail.rotate_left(n);
            tail[3 - n..].copy_from_slice(read);
        }
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
}
