//! Certificates and TLS servers for tests (feature `testing`): a CA and a server certificate
//! for `localhost` made with the `openssl` command, and `redis-server` and `nats-server`
//! processes started on free ports with them. Each server runs in a scratch directory of its
//! own; dropping the [`TestServer`] kills the process and removes the directory. Nothing here
//! skips: a missing command or a server that does not come up panics with its log.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The password of the ACL user [`TestServer::redis`] creates.
pub const REDIS_PASSWORD: &str = "s3cret-redis";
/// The ACL user [`TestServer::redis`] creates (the `default` user is switched off).
pub const REDIS_USER: &str = "likewise";
/// The user of [`TestServer::nats_with_password`].
pub const NATS_USER: &str = "lw-user";
/// Its password.
pub const NATS_PASSWORD: &str = "s3cret-nats";

/// A scratch directory, removed on drop.
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    /// A new empty directory under the system's temporary directory.
    pub fn new(what: &str) -> ScratchDir {
        let dir = std::env::temp_dir().join(format!(
            "likewise-{what}-{}-{:016x}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        ScratchDir(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A CA and a server certificate for `localhost` (and not for `127.0.0.1`), by the openssl
/// command, in `dir`: `ca.pem`, `server.pem`, `server.key`, and `other.pem`, a second CA that
/// signed nothing.
pub fn make_certs(dir: &Path) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command");
        assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    };
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=likewise test CA"],
    ]
    .concat());
    run(&[&["req"][..], &ec, &["-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"]]
        .concat());
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost\n").expect("ext");
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    run(&[
        &["req", "-x509"][..],
        &ec,
        &["-keyout", "other.key", "-out", "other.pem", "-days", "2", "-subj", "/CN=other CA"],
    ]
    .concat());
}

/// A port nothing listens on at the moment (the server binds it right after).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr").port()
}

/// A server process started by a test, with its certificates and scratch directory.
pub struct TestServer {
    child: Child,
    /// The TLS port on 127.0.0.1 (`localhost` in URLs: the certificate's name).
    pub port: u16,
    /// The CA that signed the server's certificate (PEM).
    pub ca: PathBuf,
    /// A CA that signed nothing (PEM).
    pub other_ca: PathBuf,
    log: PathBuf,
    // Last: removed after the process is gone.
    dir: ScratchDir,
}

impl TestServer {
    /// `redis-server` with TLS only (`port 0`), the ACL user [`REDIS_USER`] with
    /// [`REDIS_PASSWORD`], and the `default` user switched off.
    pub fn redis() -> TestServer {
        let dir = ScratchDir::new("redis-tls");
        make_certs(dir.path());
        let port = free_port();
        let d = dir.path().display();
        let conf = format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ntls-cert-file {d}/server.pem\n\
             tls-key-file {d}/server.key\ntls-ca-cert-file {d}/ca.pem\ntls-auth-clients no\n\
             dir {d}\nsave \"\"\nappendonly no\nuser default off\n\
             user {REDIS_USER} on >{REDIS_PASSWORD} ~* &* +@all\n"
        );
        std::fs::write(dir.path().join("redis.conf"), conf).expect("write redis.conf");
        let mut cmd = Command::new("redis-server");
        cmd.arg(dir.path().join("redis.conf"));
        Self::spawn("redis-server", cmd, dir, port)
    }

    /// `nats-server` with TLS, JetStream and one user ([`NATS_USER`], [`NATS_PASSWORD`]).
    pub fn nats_with_password() -> TestServer {
        Self::nats(&["--user", NATS_USER, "--pass", NATS_PASSWORD])
    }

    /// `nats-server` with TLS, JetStream and the authorization token `token`.
    pub fn nats_with_token(token: &str) -> TestServer {
        Self::nats(&["--auth", token])
    }

    /// `nats-server` from a configuration file: TLS and JetStream, then `extra` (for example
    /// `operator` and `resolver` lines). `files` are written into its directory first.
    pub fn nats_configured(extra: &str, files: &[(&str, &str)]) -> TestServer {
        let dir = ScratchDir::new("nats-tls");
        make_certs(dir.path());
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write a server file");
        }
        let port = free_port();
        let d = dir.path().display();
        let conf = format!(
            "host: 127.0.0.1\nport: {port}\ntls {{\n  cert_file: \"{d}/server.pem\"\n  \
             key_file: \"{d}/server.key\"\n}}\njetstream {{\n  store_dir: \"{d}/js\"\n}}\n{extra}\n"
        );
        std::fs::write(dir.path().join("nats.conf"), conf).expect("write nats.conf");
        let mut cmd = Command::new("nats-server");
        cmd.arg("-c").arg(dir.path().join("nats.conf"));
        Self::spawn("nats-server", cmd, dir, port)
    }

    /// `nats-server` with TLS, JetStream and `auth` (its authorization flags).
    fn nats(auth: &[&str]) -> TestServer {
        let dir = ScratchDir::new("nats-tls");
        make_certs(dir.path());
        let port = free_port();
        let mut cmd = Command::new("nats-server");
        cmd.args(["--tls", "--tlscert"])
            .arg(dir.path().join("server.pem"))
            .arg("--tlskey")
            .arg(dir.path().join("server.key"))
            .args(["-js", "-sd"])
            .arg(dir.path().join("js"))
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(auth);
        Self::spawn("nats-server", cmd, dir, port)
    }

    /// Start `cmd`, its output in the scratch directory, and wait until `port` accepts.
    fn spawn(name: &str, mut cmd: Command, dir: ScratchDir, port: u16) -> TestServer {
        let log = dir.path().join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("server log");
        let err = out.try_clone().expect("server log");
        let child = cmd
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} (is it installed?): {e}"));
        let mut server = TestServer {
            child,
            port,
            ca: dir.path().join("ca.pem"),
            other_ca: dir.path().join("other.pem"),
            log,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("{name} exited with {status} before listening:\n{}", server.log_text());
            }
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            if Instant::now() > deadline {
                panic!("{name} did not listen on port {port} within 15 s:\n{}", server.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the server wrote so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its scratch directory (certificates, data, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
