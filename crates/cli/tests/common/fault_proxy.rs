//! A TCP proxy of the test harness that injects network faults between the `likewise`
//! processes and one server (PostgreSQL, Redis or NATS): every node connects to the proxy's
//! port instead of the server's, and the test switches the proxy's [`Fault`] while traffic
//! flows.
//!
//! - `Blackhole`: nothing is forwarded in either direction and new connections get no answer
//!   (bytes wait in the kernel's buffers, as in a partition that TCP retransmits across; they
//!   arrive once it heals, unless a side gave up first);
//! - `Delay`: every chunk is forwarded 500 ms late (order kept);
//! - `Drop`: every open connection is reset and new ones are refused while it lasts;
//! - `HalfOpen`: the server's side of every connection is closed while the client's stays
//!   open and silent; new connections are accepted and never reach the server;
//! - `Throttle`: each direction of each connection passes at most 16 KiB a second.

use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A fault the proxy applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    None,
    /// Forward nothing; answer nothing.
    Blackhole,
    /// Forward everything 500 ms late.
    Delay,
    /// Reset every connection; refuse new ones.
    Drop,
    /// Close the server's side; leave the client's open and silent.
    HalfOpen,
    /// 16 KiB/s per direction and connection.
    Throttle,
}

impl Fault {
    /// Every fault (not `None`), in the order the partition test applies them.
    pub const ALL: [Fault; 5] =
        [Fault::Blackhole, Fault::Delay, Fault::Drop, Fault::HalfOpen, Fault::Throttle];
}

/// A running proxy; it stops when dropped.
pub struct FaultProxy {
    /// The address nodes connect to.
    pub port: u16,
    fault: watch::Sender<(Fault, u64)>,
    task: tokio::task::JoinHandle<()>,
}

const DELAY: Duration = Duration::from_millis(500);
const THROTTLE_BYTES_PER_SEC: usize = 16 * 1024;

impl FaultProxy {
    /// Listen on a free local port and forward to `upstream` (`host:port`).
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        // The fault and a generation that `Drop` bumps, so connections opened before it end.
        let (fault, rx) = watch::channel((Fault::None, 0u64));
        let upstream = Arc::new(upstream.to_string());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (rx, upstream) = (rx.clone(), upstream.clone());
                tokio::spawn(async move { connection(client, &upstream, rx).await });
            }
        });
        FaultProxy { port, fault, task }
    }

    /// Apply `f` (`Fault::None` heals).
    pub fn set(&self, f: Fault) {
        self.fault.send_modify(|(cur, generation)| {
            if f == Fault::Drop || f == Fault::HalfOpen {
                *generation += 1;
            }
            *cur = f;
        });
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Wait while `rx` says `Blackhole` (or, for a new connection, any fault that withholds
/// the server); the fault and generation then.
async fn wait_while(rx: &mut watch::Receiver<(Fault, u64)>, stall: impl Fn(Fault) -> bool) -> (Fault, u64) {
    loop {
        let now = *rx.borrow_and_update();
        if !stall(now.0) {
            return now;
        }
        if rx.changed().await.is_err() {
            return now;
        }
    }
}

async fn connection(client: TcpStream, upstream: &str, mut rx: watch::Receiver<(Fault, u64)>) {
    if rx.borrow().0 == Fault::Drop {
        drop(client); // refused: closed at once
        return;
    }
    // A new connection during a blackhole or half-open gets no answer until it heals.
    let (_, generation) = wait_while(&mut rx, |f| matches!(f, Fault::Blackhole | Fault::HalfOpen)).await;
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    let up = tokio::spawn(pump(cr, sw, rx.clone(), generation, true));
    let down = tokio::spawn(pump(sr, cw, rx, generation, false));
    let _ = tokio::join!(up, down);
}

/// Forward `from` to `to` under the current fault, until either side closes or a `Drop` or
/// `HalfOpen` of a later generation ends the connection.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<(Fault, u64)>,
    generation: u64,
    to_server: bool,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let (fault, g) = wait_while(&mut rx, |f| f == Fault::Blackhole).await;
        if g != generation {
            match fault {
                // Reset both directions.
                Fault::Drop => {
                    let _ = to.shutdown().await;
                    return;
                }
                // The server's side closes; the client's stays open, silent, until it gives up.
                Fault::HalfOpen if to_server => {
                    let _ = to.shutdown().await;
                    return;
                }
                Fault::HalfOpen => {
                    // Silent until the fault heals; then the client finally sees the close.
                    wait_while(&mut rx, |f| f == Fault::HalfOpen).await;
                    return;
                }
                _ => {}
            }
        }
        let limit = if fault == Fault::Throttle { THROTTLE_BYTES_PER_SEC / 4 } else { buf.len() };
        let n = tokio::select! {
            r = from.read(&mut buf[..limit]) => match r {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return;
                }
                Ok(n) => n,
            },
            // A fault changed while waiting for bytes: apply it first.
            _ = rx.changed() => continue,
        };
        match fault {
            Fault::Delay => tokio::time::sleep(DELAY).await,
            Fault::Throttle => tokio::time::sleep(Duration::from_millis(250)).await,
            _ => {}
        }
        // Bytes read before a blackhole began are held until it ends.
        let (_, g) = wait_while(&mut rx, |f| f == Fault::Blackhole).await;
        if g != generation {
            let _ = to.shutdown().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
