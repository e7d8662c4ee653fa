//! A NATS JetStream server of a test's own: `nats-server -js` on a free port with its store in
//! a temporary directory, for a test that stops the stream server (the machine's, on 4222, is
//! shared by every other test). Killed, and its directory removed, when it drops.

use async_nats::jetstream::response::Response;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's `nats-server` package puts the server here; `PATH` is tried when it is not.
const NATS_SERVER: &str = "/usr/sbin/nats-server";

/// A running `nats-server` with JetStream.
pub struct NatsServer {
    /// `nats://127.0.0.1:<port>`.
    pub url: String,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl NatsServer {
    /// Start one and wait until JetStream answers (a node's start-up creates its stream, which
    /// needs JetStream, not only the listener).
    pub async fn start() -> NatsServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let log = std::fs::File::create(dir.path().join("nats-server.log")).expect("log file");
        let program = if std::path::Path::new(NATS_SERVER).exists() { NATS_SERVER } else { "nats-server" };
        let child = Command::new(program)
            .args(["-a", "127.0.0.1", "-p", &port.to_string(), "-js", "-sd"])
            .arg(dir.path().join("js"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting nats-server (Debian package nats-server): {e}"));
        let server = NatsServer { url: format!("nats://127.0.0.1:{port}"), child: Some(child), dir };
        server.wait_for_jetstream().await;
        server
    }

    async fn wait_for_jetstream(&self) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            // JetStream's account information, read loosely: async-nats's `Account` wants
            // fields NATS 2.9 does not send.
            if let Ok(client) = async_nats::connect(&self.url).await {
                let js = async_nats::jetstream::new(client);
                let answer: Result<Response<serde_json::Value>, _> = js.request("INFO", b"").await;
                if matches!(answer, Ok(Response::Ok(_))) {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "nats-server at {} did not start:\n{}", self.url, self.log());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("nats-server.log")).unwrap_or_default()
    }

    /// Kill it with SIGKILL (a crashed or lost server) and reap it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}
