//! The JSON error body on the responses hyper writes by itself.
//!
//! A request head hyper cannot parse never reaches the router: hyper answers it on its own,
//! `400 Bad Request` (a bad request line, a control byte in a header field), `414 URI Too
//! Long` or `431 Request Header Fields Too Large` (a head past [`super::HYPER_MAX_BUF`]),
//! with an empty body, and closes the connection. hyper has no hook for that response, so the
//! connection's I/O is wrapped: a write that is exactly such a head (one of those status
//! lines, `content-length: 0`, nothing after the blank line) is replaced by the same head
//! with `content-type: application/json` and the body docs/api.md defines. The router's own
//! errors of these statuses always carry a body, so they never look like this.
//!
//! After such a response the client is usually still sending (a 1 MB header, say), and so it
//! is after any answer given before the request body was read (a 413 for a declared length
//! over the limit, a 401 before a body): hyper then closes the connection. Closing a socket
//! with unread input makes the kernel send a reset, which can destroy the response before the
//! client reads it; so every shutdown the server makes drains the input for a moment (a
//! "lingering close", as nginx does) before the connection is dropped. A client that has
//! already closed ends the drain at once (end of input).

use crate::error::ErrorBody;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How long input is drained after an error response before the connection closes.
const LINGER: Duration = Duration::from_secs(2);
/// Most bytes drained after an error response.
const LINGER_BYTES: usize = 4 << 20;

/// hyper's automatic responses: the status line, and the kind and message of their body.
const AUTOMATIC: [(&[u8], &str, &str); 3] = [
    (
        b"HTTP/1.1 400 Bad Request\r\n",
        "invalid",
        "malformed HTTP request: the request line or a header field cannot be parsed",
    ),
    (b"HTTP/1.1 414 URI Too Long\r\n", "too_large", "the request target (path and query) is too long"),
    (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n",
        "too_large",
        "the request's header fields are too large",
    ),
];

const EMPTY: &[u8] = b"\r\ncontent-length: 0\r\n";

/// The response to write instead of `head`, when `head` is one of hyper's automatic ones.
fn replacement(head: &[u8]) -> Option<Vec<u8>> {
    let (status_line, kind, message) = AUTOMATIC.iter().find(|(line, ..)| head.starts_with(line))?;
    if !head.ends_with(b"\r\n\r\n") || head.len() > 1024 {
        return None;
    }
    let at = head.windows(EMPTY.len()).position(|w| w.eq_ignore_ascii_case(EMPTY))?;
    // Only one blank line: the head is all there is.
    if head.windows(4).filter(|w| *w == b"\r\n\r\n").count() != 1 {
        return None;
    }
    let body = serde_json::to_vec(&ErrorBody { error: kind, message: (*message).to_string() }).ok()?;
    let mut out = Vec::with_capacity(head.len() + body.len() + 64);
    out.extend_from_slice(&head[..at + 2]);
    out.extend_from_slice(b"content-type: application/json\r\ncontent-length: ");
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[at + EMPTY.len()..]);
    out.extend_from_slice(&body);
    debug_assert!(out.starts_with(status_line));
    Some(out)
}

/// What the wrapper is doing.
enum State {
    /// Passing bytes through.
    Plain,
    /// Writing `bytes[at..]` in place of a write of `claimed` bytes.
    Replacing { bytes: Vec<u8>, at: usize, claimed: usize },
    /// An error response is out, or the connection is closing: shutting down, then draining
    /// input until `until`.
    Closing { shut: bool, drained: usize, until: Option<Pin<Box<tokio::time::Sleep>>> },
}

/// A connection's I/O whose bare automatic hyper errors get the JSON body (module docs).
pub struct ErrorBodies<S> {
    inner: S,
    state: State,
}

impl<S> ErrorBodies<S> {
    /// Wrap `inner`.
    pub fn new(inner: S) -> Self {
        ErrorBodies { inner, state: State::Plain }
    }
}

impl<S: AsyncWrite + Unpin> ErrorBodies<S> {
    /// Write the rest of a replacement; `Ready` with the length hyper asked to write.
    fn poll_replacing(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            let State::Replacing { bytes, at, claimed } = &mut self.state else {
                return Poll::Ready(Ok(0));
            };
            if *at == bytes.len() {
                let claimed = *claimed;
                self.state = State::Closing { shut: false, drained: 0, until: None };
                return Poll::Ready(Ok(claimed));
            }
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &bytes[*at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *at += n;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ErrorBodies<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for ErrorBodies<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if let State::Plain = this.state
            && let Some(bytes) = replacement(buf)
        {
            this.state = State::Replacing { bytes, at: 0, claimed: buf.len() };
        }
        match this.state {
            State::Replacing { .. } => this.poll_replacing(cx),
            _ => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if let State::Replacing { .. } = self.state {
            return self.poll_replacing(cx);
        }
        // hyper's automatic response is one head with no body: a single non-empty slice.
        let mut full = bufs.iter().filter(|b| !b.is_empty());
        if let (State::Plain, Some(only), None) = (&self.state, full.next(), full.next())
            && replacement(only).is_some()
        {
            return self.poll_write(cx, only);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // Every close drains (see the module docs), after an error response or not.
        if !matches!(this.state, State::Closing { .. }) {
            this.state = State::Closing { shut: false, drained: 0, until: None };
        }
        let State::Closing { shut, drained, until } = &mut this.state else { return Poll::Ready(Ok(())) };
        if !*shut {
            // Ignore a failed shutdown: the client may be gone already.
            let _ = ready!(Pin::new(&mut this.inner).poll_shutdown(cx));
            *shut = true;
        }
        let until = until.get_or_insert_with(|| Box::pin(tokio::time::sleep(LINGER)));
        let mut scratch = [0u8; 8192];
        while *drained < LINGER_BYTES {
            if until.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(()));
            }
            let mut buf = ReadBuf::new(&mut scratch);
            match Pin::new(&mut this.inner).poll_read(cx, &mut buf) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) if buf.filled().is_empty() => return Poll::Ready(Ok(())),
                Poll::Ready(Ok(())) => *drained += buf.filled().len(),
                Poll::Ready(Err(_)) => return Poll::Ready(Ok(())),
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hypers_bare_error_heads_are_replaced() {
        let head = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Sun, 06 Dec 2026 01:00:00 GMT\r\n\r\n";
        let out = String::from_utf8(replacement(head).expect("replaced")).expect("utf8");
        let (top, body) = out.split_once("\r\n\r\n").expect("head and body");
        assert!(top.starts_with("HTTP/1.1 431 "), "{out}");
        assert!(top.contains("\r\ncontent-type: application/json\r\n"), "{out}");
        assert!(top.contains(&format!("\r\ncontent-length: {}\r\n", body.len())), "{out}");
        assert!(top.contains("\r\ndate: "), "{out}");
        let v: serde_json::Value = serde_json::from_str(body).expect("json");
        assert_eq!(v["error"], "too_large");
        // A response with a body, another status, or more after the head: untouched.
        for other in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1 200 OK\r\n\r\n",
        ] {
            assert!(replacement(other).is_none(), "{}", String::from_utf8_lossy(other));
        }
    }
}
