//! A PostgreSQL primary and its streaming replica, started for one test: `initdb` into a
//! temporary directory, a free port, `wal_level = replica`, replication from 127.0.0.1
//! trusted; `pg_basebackup -R` makes the replica, started on another free port. Dropping the
//! [`Cluster`] stops both (`pg_ctl stop -m immediate`), also when the test panics, and
//! removes the directory.
//!
//! The server binaries come from `LIKEWISE_TEST_PG_BIN`, else `pg_config --bindir`, else the
//! newest `/usr/lib/postgresql/*/bin`; a test fails, never skips, without them. As root (the
//! servers refuse to run as root) they run as the `postgres` user through `runuser`.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One server of the cluster.
pub struct Server {
    /// Its port on 127.0.0.1.
    pub port: u16,
    data: PathBuf,
    log: PathBuf,
}

/// A primary and its streaming replica.
pub struct Cluster {
    /// The primary.
    pub primary: Server,
    /// The replica (hot standby, streaming from the primary).
    pub replica: Server,
    bin: PathBuf,
    as_postgres: bool,
    // Last: removed after the servers are stopped.
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Start a primary and a replica of it (blocking: a second or two).
    pub fn start() -> Cluster {
        let bin = binaries();
        let dir =
            tempfile::Builder::new().prefix("likewise-replicas-").tempdir().expect("temporary directory");
        let as_postgres = running_as_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()), "chown the cluster directory");
        }
        let server = |name: &str| Server {
            port: free_port(),
            data: dir.path().join(name),
            log: dir.path().join(format!("{name}.log")),
        };
        let (primary, replica) = (server("primary"), server("replica"));
        let cluster = Cluster { primary, replica, bin, as_postgres, dir };
        let p = &cluster.primary;
        cluster.pg(
            "initdb",
            &[
                "-D",
                path(&p.data),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
        );
        append(
            &p.data.join("postgresql.conf"),
            &format!(
                "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\n\
                 wal_level = replica\nmax_wal_senders = 4\nhot_standby = on\nfsync = off\n\
                 shared_buffers = 16MB\nmax_connections = 100\n\
                 shared_preload_libraries = 'pg_stat_statements'\n",
                p.port
            ),
        );
        append(&p.data.join("pg_hba.conf"), "host replication all 127.0.0.1/32 trust\n");
        cluster.start_server(p);
        let r = &cluster.replica;
        let port = p.port.to_string();
        cluster.pg(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-D",
                path(&r.data),
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ],
        );
        append(&r.data.join("postgresql.conf"), &format!("port = {}\n", r.port));
        cluster.start_server(r);
        cluster
    }

    /// A connection URL of `db` on `server`.
    pub fn url(&self, server: &Server, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable", server.port)
    }

    /// Start `server` and wait until it accepts connections (blocking).
    pub fn start_server(&self, server: &Server) {
        self.pg("pg_ctl", &["-D", path(&server.data), "-l", path(&server.log), "-w", "-t", "60", "start"]);
    }

    /// Stop `server` at once, as a crash would (blocking until it is gone).
    pub fn stop_server(&self, server: &Server) {
        self.pg("pg_ctl", &["-D", path(&server.data), "-m", "immediate", "-w", "stop"]);
    }

    /// Run a server binary; panics with its output and the servers' logs when it fails.
    fn pg(&self, program: &str, args: &[&str]) {
        let exe = self.bin.join(program);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        cmd.args(args).current_dir(self.dir.path());
        let out = cmd.output().unwrap_or_else(|e| panic!("running {}: {e}", exe.display()));
        if !out.status.success() {
            let logs: String = [&self.primary.log, &self.replica.log]
                .iter()
                .map(|l| format!("--- {}\n{}", l.display(), std::fs::read_to_string(l).unwrap_or_default()))
                .collect();
            panic!(
                "{program} {args:?} failed ({}):\n{}{}\n{logs}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for s in [&self.replica, &self.primary] {
            if s.data.join("postmaster.pid").exists() {
                let exe = self.bin.join("pg_ctl");
                let args = ["-D", path(&s.data), "-m", "immediate", "-w", "stop"];
                let _ = if self.as_postgres {
                    Command::new("runuser").args(["-u", "postgres", "--"]).arg(&exe).args(args).output()
                } else {
                    Command::new(&exe).args(args).output()
                };
            }
        }
    }
}

/// The directory holding `initdb`, `pg_ctl` and `pg_basebackup`.
fn binaries() -> PathBuf {
    let has_all = |d: &Path| ["initdb", "pg_ctl", "pg_basebackup"].iter().all(|b| d.join(b).is_file());
    let mut tried = Vec::new();
    if let Ok(d) = std::env::var("LIKEWISE_TEST_PG_BIN") {
        tried.push(PathBuf::from(d));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output()
        && out.status.success()
    {
        tried.push(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()));
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path().join("bin")).collect())
        .unwrap_or_default();
    versions.sort_by_key(|p| {
        p.parent().and_then(|v| v.file_name()).and_then(|v| v.to_str()).and_then(|v| v.parse::<u32>().ok())
    });
    tried.extend(versions.into_iter().rev());
    tried.iter().find(|d| has_all(d)).cloned().unwrap_or_else(|| {
        panic!(
            "the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) were not found in {tried:?}: \
             install the server or set LIKEWISE_TEST_PG_BIN"
        )
    })
}

fn running_as_root() -> bool {
    let out = Command::new("id").arg("-u").output().expect("running id -u");
    String::from_utf8_lossy(&out.stdout).trim() == "0"
}

/// A port nothing listens on now (the OS's pick).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address").port()
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temporary path")
}

fn append(file: &Path, text: &str) {
    let mut f = OpenOptions::new()
        .append(true)
        .open(file)
        .unwrap_or_else(|e| panic!("opening {}: {e}", file.display()));
    f.write_all(text.as_bytes()).unwrap_or_else(|e| panic!("writing {}: {e}", file.display()));
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(out.status.success(), "{what}: {}", String::from_utf8_lossy(&out.stderr));
}
