//! Throwaway PostgreSQL databases for tests: each test creates its own shards (unique names,
//! so tests run in parallel) and drops them when the guard goes away. The server must be up
//! at `LIKEWISE_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`); a test
//! fails, never skips, when it is not.

use super::{PgOptions, PgStore};
use likewise_engine::Stores;
use likewise_engine::group_commit::GroupCommitOptions;

/// The admin connection URL tests use.
pub fn admin_url() -> String {
    std::env::var("LIKEWISE_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn db_url(admin: &str, name: &str) -> String {
    // Replace the database part of `scheme://authority/database?params`.
    let start = admin.find("://").map_or(0, |p| p + 3);
    let (base, query) = match admin[start..].find('/') {
        Some(p) => {
            let rest = &admin[start + p..];
            (&admin[..start + p], rest.find('?').map_or("", |q| &rest[q..]))
        }
        None => (admin, ""),
    };
    format!("{base}/{name}{query}")
}

/// Test databases older than this belong to runs that died without cleaning up.
const STALE_SECS: u64 = 3 * 3600;

/// A test database's name: its creation time and its test process come first, so a later
/// run can tell the databases of processes that are gone.
fn test_db_name(born: u64, tag: u32, i: usize) -> String {
    format!("likewise_test_{born}_{}_{tag:08x}_{i}", std::process::id())
}

/// Whether a test database was left by a process that is gone (it exited before its
/// background drops finished, or died), or by a run older than [`STALE_SECS`].
fn is_left_over(name: &str, now: u64) -> bool {
    // likewise_test_<born>_<pid>_<tag>_<i>; names without a PID go by age alone.
    let parts: Vec<&str> = name.split('_').collect();
    let born = parts.get(2).and_then(|s| s.parse::<u64>().ok());
    let pid = parts.get(3).filter(|_| parts.len() == 6).and_then(|s| s.parse::<u32>().ok());
    let gone =
        pid.is_some_and(|p| p != std::process::id() && !std::path::Path::new(&format!("/proc/{p}")).exists());
    gone || born.is_some_and(|b| now.saturating_sub(b) > STALE_SECS)
}

/// Drop the test databases of processes that are gone, once per process, in the
/// background: a `DROP DATABASE` waits for a checkpoint, which no test should wait for.
fn remove_left_over(admin: &str) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let admin = admin.to_string();
        let _ = std::thread::Builder::new().name("test-db-sweep".into()).spawn(move || {
            drop_in_thread(&admin, |client| async move {
                let Ok(rows) = client
                    .query("SELECT datname FROM pg_database WHERE datname LIKE 'likewise\\_test\\_%'", &[])
                    .await
                else {
                    return Vec::new();
                };
                let now = likewise_engine::now_ms() / 1000;
                rows.iter().map(|r| r.get::<_, String>(0)).filter(|n| is_left_over(n, now)).collect()
            });
        });
    });
}

/// On a runtime of this thread's own: connect as admin, ask `which` for the databases to
/// drop, drop them.
fn drop_in_thread<F, Fut>(admin: &str, which: F)
where
    F: FnOnce(std::sync::Arc<tokio_postgres::Client>) -> Fut,
    Fut: std::future::Future<Output = Vec<String>>,
{
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
    rt.block_on(async move {
        let Ok((client, conn)) = tokio_postgres::connect(admin, tokio_postgres::NoTls).await else {
            return;
        };
        tokio::spawn(conn);
        let client = std::sync::Arc::new(client);
        for name in which(client.clone()).await {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    });
}

/// The prefix of this build's template database: a hash of every migration's version and
/// SQL, so a changed or added migration gets a template of its own.
fn template_prefix() -> String {
    // FNV-1a: stable across builds and toolchains, unlike `DefaultHasher`.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (version, name, sql) in super::migrate::MIGRATIONS {
        for b in version.to_le_bytes().iter().chain(name.as_bytes()).chain(sql.as_bytes()) {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("likewise_template_{h:016x}_")
}

/// A database holding every migration of this build and nothing else, which test databases
/// are copied from (`CREATE DATABASE ... TEMPLATE`: 0.13 s against 0.76 s for create and
/// migrate, and the test suites create hundreds of shards). Built once per schema under an
/// advisory lock, under a scratch name renamed when complete, so a run that dies half-way
/// leaves no template that looks finished. Templates are reused across runs (the one kind of
/// database the tests keep); a template of another schema is dropped once it is older than
/// [`STALE_SECS`] (a build with other migrations may be using it meanwhile). Its name ends
/// with its creation time.
async fn migrated_template(client: &tokio_postgres::Client, admin: &str) -> String {
    const BUILD_LOCK: i64 = 0x4c_696b_6577_7470;
    let prefix = template_prefix();
    async fn find(c: &tokio_postgres::Client, prefix: &str) -> Option<String> {
        let pattern = format!("{}%", prefix.replace('_', "\\_"));
        c.query_opt("SELECT datname FROM pg_database WHERE datname LIKE $1 LIMIT 1", &[&pattern])
            .await
            .expect("read pg_database")
            .map(|r| r.get::<_, String>(0))
    }
    if let Some(name) = find(client, &prefix).await {
        return name;
    }
    client.execute("SELECT pg_advisory_lock($1)", &[&BUILD_LOCK]).await.expect("template lock");
    let name = match find(client, &prefix).await {
        Some(name) => name,
        None => {
            let now = likewise_engine::now_ms() / 1000;
            let scratch = "likewise_template_building";
            client
                .batch_execute(&format!("DROP DATABASE IF EXISTS {scratch} WITH (FORCE)"))
                .await
                .expect("drop");
            client.batch_execute(&format!("CREATE DATABASE {scratch}")).await.expect("create template");
            {
                let (mut c, conn) = tokio_postgres::connect(&db_url(admin, scratch), tokio_postgres::NoTls)
                    .await
                    .expect("connect");
                let task = tokio::spawn(conn);
                super::migrate::apply(&mut c).await.expect("migrating the template database");
                drop(c);
                let _ = task.await;
            }
            // No session may stay on a database that is copied (the server waits a few
            // seconds for a closing one to go).
            client
                .batch_execute(&format!("ALTER DATABASE {scratch} WITH ALLOW_CONNECTIONS false"))
                .await
                .expect("close template");
            let name = format!("{prefix}{now}");
            client
                .batch_execute(&format!("ALTER DATABASE {scratch} RENAME TO {name}"))
                .await
                .expect("name template");
            let others = client
                .query("SELECT datname FROM pg_database WHERE datname LIKE 'likewise\\_template\\_%'", &[])
                .await
                .expect("list templates");
            for r in others {
                let other: String = r.get(0);
                let born = other.rsplit('_').next().and_then(|s| s.parse::<u64>().ok());
                if other != name && born.is_some_and(|b| now.saturating_sub(b) > STALE_SECS) {
                    let _ =
                        client.batch_execute(&format!("DROP DATABASE IF EXISTS {other} WITH (FORCE)")).await;
                }
            }
            name
        }
    };
    client.execute("SELECT pg_advisory_unlock($1)", &[&BUILD_LOCK]).await.expect("template unlock");
    name
}

/// Databases created for one test; dropped on drop.
pub struct TestShards {
    /// Connection URL of each shard.
    pub urls: Vec<String>,
    names: Vec<String>,
    admin: String,
}

impl TestShards {
    /// Create `n` empty, migrated databases.
    pub async fn create(n: usize) -> TestShards {
        let admin = admin_url();
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {admin}: {e}"));
        tokio::spawn(conn);
        remove_left_over(&admin);
        let tag: u32 = rand::random();
        let born = likewise_engine::now_ms() / 1000;
        let mut names = Vec::new();
        let mut urls = Vec::new();
        let template = migrated_template(&client, &admin).await;
        for i in 0..n {
            let name = test_db_name(born, tag, i);
            client
                .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
                .await
                .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
            urls.push(db_url(&admin, &name));
            names.push(name);
        }
        let t = TestShards { urls, names, admin };
        // The copies hold every migration already: this only writes the placement catalog,
        // which records the shards and so is never part of the template.
        t.connect().migrate().await.expect("migrating test shards");
        t
    }

    /// Create `n` empty databases migrated through version `last` only (an older schema,
    /// for upgrade tests).
    pub async fn create_at(n: usize, last: i32) -> TestShards {
        let mut t = TestShards { urls: Vec::new(), names: Vec::new(), admin: admin_url() };
        let (client, conn) = tokio_postgres::connect(&t.admin, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL is not reachable at {}: {e}", t.admin));
        tokio::spawn(conn);
        let (tag, born): (u32, u64) = (rand::random(), likewise_engine::now_ms() / 1000);
        for i in 0..n {
            let name = test_db_name(born, tag, i);
            client.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
            t.urls.push(db_url(&t.admin, &name));
            t.names.push(name);
        }
        for shard in 0..n {
            let mut c = t.client(shard).await;
            super::migrate::apply_through(&mut c, last).await.expect("migrate");
        }
        t
    }

    /// A store on these shards that has not read the placement catalog: it routes and
    /// issues IDs as the code before placement did (for upgrade tests, and for migrating).
    pub fn connect(&self) -> PgStore {
        PgStore::connect(&PgOptions { shards: self.urls.clone(), pool_size: 8, ..PgOptions::default() })
            .expect("connect test shards")
    }

    /// Connect a store to these shards, placed by their catalog.
    pub async fn store(&self) -> PgStore {
        let s = self.connect();
        s.load_placement().await.expect("read the placement catalog");
        s
    }

    /// A plain client of shard `shard`, outside the store's pool (another node's connection).
    pub async fn client(&self, shard: usize) -> tokio_postgres::Client {
        let (client, conn) =
            tokio_postgres::connect(&self.urls[shard], tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        client
    }

    /// Every port over these shards, with a group committer.
    pub async fn stores(&self) -> Stores {
        crate::open::from_postgres(self.store().await, GroupCommitOptions::default())
    }
}

/// A TCP proxy in front of a PostgreSQL server that counts the statements its clients run:
/// extended-protocol `Execute` and simple `Query` messages (a `BEGIN` or `COMMIT` is one).
/// Tests measure what a write costs in statements with it.
pub struct StatementCounter {
    /// The server's URL with the proxy's address in it.
    pub url: String,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StatementCounter {
    /// Proxy the server of `url` (a `postgres://user@host:port/db` URL) on a port of its own;
    /// clients connect to [`StatementCounter::url`] without TLS.
    pub async fn start(url: &str) -> StatementCounter {
        let start = url.find('@').map_or(url.find("://").map_or(0, |p| p + 3), |p| p + 1);
        let end = start + url[start..].find('/').unwrap_or(url.len() - start);
        let server = url[start..end].to_string();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let count = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = count.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(&server).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = upstream.into_split();
                tokio::spawn(count_frontend(cr, sw, counted.clone()));
                tokio::spawn(async move {
                    let (mut sr, mut cw) = (sr, cw);
                    let _ = tokio::io::copy(&mut sr, &mut cw).await;
                });
            }
        });
        // In plain text, so the messages can be read (a server with TLS would take it).
        let sep = if url[end..].contains('?') { '&' } else { '?' };
        let url = format!("{}127.0.0.1:{port}{}{sep}sslmode=disable", &url[..start], &url[end..]);
        StatementCounter { url, count }
    }

    /// Statements counted so far.
    pub fn get(&self) -> u64 {
        self.count.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// Forward a client's bytes to the server, counting `Execute` ('E') and `Query` ('Q')
/// messages. The first messages carry no type byte (an SSL or GSS request, then the startup
/// message).
async fn count_frontend(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut into: tokio::net::tcp::OwnedWriteHalf,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut buf, mut pending) = (vec![0u8; 16 * 1024], Vec::new());
    let mut started = false;
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        loop {
            let header = if started { 5 } else { 8 };
            if pending.len() < header {
                break;
            }
            let at = usize::from(started);
            let len =
                u32::from_be_bytes([pending[at], pending[at + 1], pending[at + 2], pending[at + 3]]) as usize;
            let total = at + len;
            if pending.len() < total {
                break;
            }
            if started {
                if matches!(pending[0], b'E' | b'Q') {
                    count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
            } else {
                // 80877103: SSLRequest, 80877104: GSSENCRequest; anything else is the startup.
                let code = u32::from_be_bytes([pending[4], pending[5], pending[6], pending[7]]);
                started = !matches!(code, 80_877_103 | 80_877_104);
            }
            pending.drain(..total);
        }
        if into.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for TestShards {
    /// Dropped in the background: each `DROP DATABASE` waits for a checkpoint (seconds on a
    /// busy server), and tests should not. What a process leaves undropped when it exits is
    /// dropped by the next test process ([`remove_left_over`]) or `.ci/run`'s last step.
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let names = std::mem::take(&mut self.names);
        let _ = std::thread::Builder::new()
            .name("test-db-drop".into())
            .spawn(move || drop_in_thread(&admin, |_| async move { names }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn left_over_databases_are_those_of_gone_processes_or_old_runs() {
        let now = 1_800_000_000;
        assert!(!is_left_over(&test_db_name(now, 7, 0), now), "this process's own");
        // PID 1 is alive; 4,194,304 is above Linux's largest PID.
        assert!(!is_left_over(&format!("likewise_test_{now}_1_00000007_0"), now));
        assert!(is_left_over(&format!("likewise_test_{now}_4194304_00000007_0"), now));
        assert!(is_left_over(&format!("likewise_test_{}_1_00000007_0", now - STALE_SECS - 1), now));
        // The older form without a PID goes by age only.
        assert!(!is_left_over(&format!("likewise_test_{now}_12345678_0"), now));
        assert!(is_left_over(&format!("likewise_test_{}_12345678_0", now - STALE_SECS - 1), now));
    }
}
