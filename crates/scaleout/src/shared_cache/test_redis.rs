//! A `redis-server` of a test's own, on a free port, killed and started again on that port
//! as the test needs: a test that takes Redis away never disturbs the machine's Redis, which
//! other tests use at the same time.

use super::{Redis, RedisOptions};
use std::time::Duration;

/// A free local port.
pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port()
}

/// Start a `redis-server` that keeps nothing on disk, on `port`.
pub(super) fn start(port: u16) -> std::process::Child {
    std::process::Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server is not installed (Debian package redis-server)")
}

/// Connect with `opts` once the server just started answers (within 5 s).
pub(super) async fn connect(opts: &RedisOptions) -> Redis {
    for _ in 0..100 {
        if let Ok(r) = Redis::connect(opts).await {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the test's redis-server did not start")
}
