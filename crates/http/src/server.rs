//! The connection loop: HTTP/1.1 on hyper with the limits a public endpoint needs against
//! slow or greedy clients, which `axum::serve` does not set.
//!
//! - **Header read timeout**: a client that opens a connection and trickles its request
//!   headers (slowloris), or idles on a keep-alive connection without sending the next
//!   request, is disconnected after `header_read_timeout`. Slow *bodies* are bounded by the
//!   per-request timeout (a 503), applied by the router's middleware.
//! - **Connection cap**: at most `max_connections` are served at once. Past the cap, up to
//!   [`REFUSE_SLOTS`] more are accepted only to be answered a short 503 `unavailable` with
//!   `Retry-After` and closed ([`refuse`]): an overloaded node answers rather than leaving
//!   clients in the kernel's queue until it drops or resets them. A `GET` of `/healthz` or
//!   `/metrics` there is served instead (one request), so probes and scrapes still work at
//!   the cap. Past both, the loop stops
//!   accepting and the listen backlog ([`LISTEN_BACKLOG`], built by [`bind`]) holds the
//!   excess, not our memory.
//! - **Header limits**: hyper parses up to [`HYPER_MAX_HEADERS`] fields in a head of up to
//!   [`HYPER_MAX_BUF`] bytes, well past the API's own limits (`middleware::limit_headers`),
//!   so an oversized request is answered by our 431 with the JSON error body. Heads past
//!   hyper's limits, or that hyper cannot parse at all, get hyper's own 400, 414 or 431,
//!   given the JSON error body too by the connection's I/O wrapper ([`error_bodies`]).
//! - **Graceful drain**: on shutdown the listener closes and every answer from then on says
//!   `connection: close`, so clients send no further request on a connection about to close.
//!   Idle connections stay open until no request has been in flight for a moment (at most
//!   [`SHUTDOWN_GRACE`]): a request a client already sent on one is read and answered, not
//!   lost (closing idle kept-alive connections at once lost one request on each of 1,000
//!   storming connections). Then idle connections are closed and in-flight requests get up to
//!   `drain_timeout` to finish; a request counts as in flight until its answer is written. A
//!   connection still reading a request head once nothing is in flight (a slow client) is not
//!   waited for.

mod error_bodies;
mod refuse;

use axum::Router;
use error_bodies::ErrorBodies;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Header fields hyper parses in one request head (the API allows
/// [`crate::middleware::MAX_HEADERS`]).
pub const HYPER_MAX_HEADERS: usize = 1024;
/// hyper's read buffer, which bounds a request head (the API allows
/// [`crate::middleware::MAX_HEADER_BYTES`] of header fields).
pub const HYPER_MAX_BUF: usize = 256 * 1024;

/// Connections accepted past `max_connections` only to be answered 503 and closed, at once.
/// Each costs a task, a 2 KiB buffer and at most two seconds ([`refuse::DEADLINE`] twice).
pub const REFUSE_SLOTS: usize = 256;

/// Longest a `/healthz` or `/metrics` request past the cap is served for (it holds a refusal
/// slot meanwhile).
pub const OPERATIONS_DEADLINE: Duration = Duration::from_secs(5);
/// Most `/healthz` and `/metrics` requests served past the cap at once: enough for probes and
/// scrapers, few enough that a flood of them cannot take the refusal slots (the rest are
/// answered 503 like any other request).
pub const OPERATIONS_PAST_CAP: usize = 8;

/// Longest idle connections stay open once shutdown begins, so that requests already sent
/// on them are read and answered (with `connection: close`); sooner when none is in flight.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// Length of the listen queue asked of the kernel (which caps it at `net.core.somaxconn`).
/// The default of 128 overflows when a few thousand clients connect at once: the kernel then
/// drops or resets connections the server never saw.
pub const LISTEN_BACKLOG: u32 = 4096;

/// Listen on `addr` (`host:port`, the first address it resolves to) with [`LISTEN_BACKLOG`].
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    let mut last = None;
    for a in tokio::net::lookup_host(addr).await? {
        let socket = if a.is_ipv4() { TcpSocket::new_v4()? } else { TcpSocket::new_v6()? };
        socket.set_reuseaddr(true)?;
        match socket.bind(a).and_then(|()| socket.listen(LISTEN_BACKLOG)) {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last
        .unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no address to listen on")))
}

/// Connection-level limits.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Longest wait for a complete set of request headers (also the keep-alive idle limit).
    pub header_read_timeout: Duration,
    /// Most connections served at once (past it, up to [`REFUSE_SLOTS`] more are answered 503).
    pub max_connections: usize,
    /// How long in-flight requests may run after shutdown begins.
    pub drain_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_read_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            drain_timeout: Duration::from_secs(30),
        }
    }
}

/// Shutdown's state shared with every connection's service: whether answers now close their
/// connection, and how many requests are being answered.
#[derive(Default)]
struct Draining {
    on: AtomicBool,
    in_flight: AtomicUsize,
}

impl Draining {
    /// From now on every answer closes its connection. Returns once no request has been in
    /// flight for [`QUIET_CHECKS`] checks in a row, or after [`SHUTDOWN_GRACE`].
    async fn quiesce(&self) {
        self.on.store(true, Ordering::Release);
        let until = tokio::time::Instant::now() + SHUTDOWN_GRACE;
        // A request read a moment from now is in flight only then: a few checks in a row must
        // find none.
        let mut quiet = 0;
        while quiet < QUIET_CHECKS && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
            quiet = if self.in_flight.load(Ordering::Acquire) == 0 { quiet + 1 } else { 0 };
        }
    }

    /// Returns once no request has been in flight (read, being answered, or its answer being
    /// written) for [`QUIET_CHECKS`] checks in a row.
    async fn settled(&self) {
        let mut quiet = 0;
        while quiet < QUIET_CHECKS {
            tokio::time::sleep(Duration::from_millis(5)).await;
            quiet = if self.in_flight.load(Ordering::Acquire) == 0 { quiet + 1 } else { 0 };
        }
    }

    /// The hyper service of one connection: `router`, counting its requests in flight. An
    /// answer says `connection: close` once draining, and when it was given without reading the
    /// whole request body (a 413 for a declared length over the limit, a 401 or a shed 503
    /// before the body is looked at, a 503 when a trickled body runs out the request timeout):
    /// hyper drains only what it has already received, else closes the connection after the
    /// answer, and a client that did not know would send its next request on it and lose it.
    /// Even a small body may come after its head (Python's `http.client` sends them apart).
    fn service(
        self: Arc<Self>,
        router: Router,
    ) -> impl hyper::service::Service<
        hyper::Request<hyper::body::Incoming>,
        Response = axum::response::Response,
        Error = std::convert::Infallible,
        Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
    > + Clone {
        hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
            let (router, drain) = (router.clone(), self.clone());
            drain.in_flight.fetch_add(1, Ordering::AcqRel);
            // Counted out when the answer is ready or the request is dropped (client gone).
            let counted = InFlight(drain);
            // A request with a body (declared or chunked) gets its end watched.
            let read = Arc::new(AtomicBool::new(hyper::body::Body::size_hint(req.body()).upper() == Some(0)));
            let watch = read.clone();
            let req = req.map(|inner| axum::body::Body::new(ReadToEnd { inner, read: watch }));
            async move {
                use tower::ServiceExt;
                let mut resp = router.oneshot(req).await?;
                if counted.0.on.load(Ordering::Acquire) || !read.load(Ordering::Acquire) {
                    resp.headers_mut().insert(
                        axum::http::header::CONNECTION,
                        axum::http::HeaderValue::from_static("close"),
                    );
                }
                // Still in flight until its body is written (or the client is gone).
                Ok(resp.map(|body| axum::body::Body::new(Counted { body, _counted: counted })))
            }
        })
    }
}

/// A request body that records when it has been read to its end.
struct ReadToEnd {
    inner: hyper::body::Incoming,
    read: Arc<AtomicBool>,
}

impl hyper::body::Body for ReadToEnd {
    type Data = axum::body::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, std::task::Poll::Ready(None)) || hyper::body::Body::is_end_stream(&self.inner) {
            self.read.store(true, Ordering::Release);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.inner)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.inner)
    }
}

/// A response body that keeps its request counted in flight until it is dropped: hyper drops
/// it once its last frame is written (or the connection ends).
struct Counted {
    body: axum::body::Body,
    _counted: InFlight,
}

impl hyper::body::Body for Counted {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        hyper::body::Body::is_end_stream(&self.body)
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::Body::size_hint(&self.body)
    }
}

/// One request counted in [`Draining::in_flight`] until dropped.
struct InFlight(Arc<Draining>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How long a drained server still waits for its connections once no request is in flight:
/// for hyper to flush the last answers it wrote.
const FLUSH_WAIT: Duration = Duration::from_millis(100);

/// Checks 5 ms apart that must all find no request in flight to end the grace early.
const QUIET_CHECKS: u32 = 6;

/// What a free slot lets the loop do with the next connection.
enum Slot {
    Serve(OwnedSemaphorePermit),
    Refuse(OwnedSemaphorePermit),
}

/// Serve `router` on `listener` until `shutdown` resolves, then drain.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(opts.max_connections.max(1)));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Some(opts.header_read_timeout))
        .keep_alive(true)
        .max_headers(HYPER_MAX_HEADERS)
        .max_buf_size(HYPER_MAX_BUF);
    tokio::pin!(shutdown);
    let refusals = Arc::new(Semaphore::new(REFUSE_SLOTS));
    let operations = Arc::new(Semaphore::new(OPERATIONS_PAST_CAP));
    let drain = Arc::new(Draining::default());
    loop {
        // Wait for a free slot first, to serve or else to refuse: with neither, new clients
        // queue in the kernel backlog.
        let slot = tokio::select! {
            biased;
            _ = &mut shutdown => break,
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => Slot::Serve(p),
                Err(_) => break,
            },
            p = refusals.clone().acquire_owned() => match p {
                Ok(p) => Slot::Refuse(p),
                Err(_) => break,
            },
        };
        let (stream, _peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning; the loop goes on.
                    metrics::counter!("likewise_http_accept_errors_total").increment(1);
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // A serving slot may have freed while this one waited in accept.
        let permit = match slot {
            Slot::Serve(p) => p,
            Slot::Refuse(r) => match slots.clone().try_acquire_owned() {
                Ok(p) => p,
                Err(_) => {
                    let (router, http, operations, drain) =
                        (router.clone(), http.clone(), operations.clone(), drain.clone());
                    tokio::spawn(async move {
                        match refuse::refuse(stream, || operations.try_acquire_owned().ok()).await {
                            // An operator's probe or scrape: served, one request, bounded, a
                            // few at once (the rest are refused like any other request).
                            Some((replay, _place)) => {
                                let mut http = http;
                                http.keep_alive(false);
                                let conn = http.serve_connection(
                                    TokioIo::new(ErrorBodies::new(replay)),
                                    drain.service(router),
                                );
                                let _ = tokio::time::timeout(OPERATIONS_DEADLINE, conn).await;
                            }
                            None => metrics::counter!("likewise_http_connections_refused_total").increment(1),
                        }
                        drop(r);
                    });
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let conn = http
            .serve_connection(TokioIo::new(ErrorBodies::new(stream)), drain.clone().service(router.clone()));
        let conn = graceful.watch(conn);
        metrics::gauge!("likewise_http_connections").increment(1.0);
        tokio::spawn(async move {
            // Errors here are clients going away or timing out: nothing to report upstream.
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
            metrics::gauge!("likewise_http_connections").decrement(1.0);
            drop(permit);
        });
    }
    drop(listener);
    drain.quiesce().await;
    tokio::select! {
        _ = graceful.shutdown() => {}
        // Every request read was answered and its answer written: a connection still open is
        // idle (being closed) or still reading a request head, which a slow client can trickle
        // for up to `header_read_timeout`. Those are not waited for (their request was never
        // received); the wait lets hyper flush what it wrote last.
        _ = async { drain.settled().await; tokio::time::sleep(FLUSH_WAIT).await } => {}
        _ = tokio::time::sleep(opts.drain_timeout) => {
            tracing::warn!("drain timeout: closing connections with requests still in flight");
        }
    }
    Ok(())
}
