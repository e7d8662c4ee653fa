//! One isolated scale-out deployment for process tests: two PostgreSQL shards of its own,
//! its own Redis key prefix and stream prefix, a config file, and `likewise` processes
//! started on it. Everything is removed when it drops, also when the test failed.

use super::fault_proxy::FaultProxy;
use super::proc::{Server, start_with};
use likewise_scaleout::postgres::testing::TestShards;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;

/// The machine's NATS JetStream server, which deployments use unless a test brings its own.
const MACHINE_NATS: &str = "nats://127.0.0.1:4222";

/// One isolated deployment: its shards, prefixes and config file.
pub struct Deployment {
    pub shards: TestShards,
    pub prefix: String,
    pub redis_url: String,
    /// Every Redis server of the deployment (`cache.redis_urls` when more than one).
    pub redis_servers: Vec<String>,
    /// The NATS server its stream lives on (the proxy's upstream when behind proxies).
    pub nats_url: String,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    started: Mutex<u32>,
    /// Processes started on it, killed when it drops so none outlives its test.
    pids: Mutex<Vec<u32>>,
    /// The config's own sections.
    extra: String,
}

/// The fault proxies between a deployment's nodes and its servers.
pub struct Proxies {
    pub pg: FaultProxy,
    pub redis: FaultProxy,
    pub nats: FaultProxy,
}

impl Deployment {
    pub async fn new() -> Deployment {
        Self::with_config("").await
    }

    /// A deployment whose config file ends with `extra` (TOML sections of its own).
    pub async fn with_config(extra: &str) -> Deployment {
        Self::build(extra, None, Vec::new(), MACHINE_NATS).await
    }

    /// A deployment on the NATS server at `nats_url` instead of the machine's: a test that
    /// stops its stream server starts one of its own ([`super::nats_server::NatsServer`]),
    /// since other tests use the machine's.
    #[allow(dead_code)]
    pub async fn with_nats(nats_url: &str, extra: &str) -> Deployment {
        Self::build(extra, None, Vec::new(), nats_url).await
    }

    /// A deployment whose keys are spread over the Redis servers at 127.0.0.1:6379 and
    /// `more` (`cache.redis_urls`, client-side sharding).
    #[allow(dead_code)]
    pub async fn with_redis_servers(more: &[String], extra: &str) -> Deployment {
        Self::build(extra, None, more.to_vec(), MACHINE_NATS).await
    }

    /// A deployment whose nodes reach PostgreSQL, Redis and NATS each through a fault proxy
    /// (the test's own reads, `rows` and the like, go straight to the servers).
    pub async fn behind_proxies(extra: &str) -> (Deployment, Proxies) {
        let proxies = Proxies {
            pg: FaultProxy::start("127.0.0.1:5432").await,
            redis: FaultProxy::start("127.0.0.1:6379").await,
            nats: FaultProxy::start("127.0.0.1:4222").await,
        };
        let d = Self::build(extra, Some(&proxies), Vec::new(), MACHINE_NATS).await;
        (d, proxies)
    }

    /// The config file's text: the shards at `urls`, Redis at `redis_url`, NATS at `nats_url`.
    fn config_text(&self, urls: &[String], redis_url: &str, nats_url: &str, extra: &str) -> String {
        let urls: Vec<String> = urls.iter().map(|u| format!("{u:?}")).collect();
        let prefix = &self.prefix;
        let redis = if self.redis_servers.len() > 1 && redis_url == self.redis_url {
            let all: Vec<String> = self.redis_servers.iter().map(|u| format!("{u:?}")).collect();
            format!("redis_urls = [{}]", all.join(", "))
        } else {
            format!("redis_url = \"{redis_url}\"")
        };
        format!(
            "[store]\nbackend = \"postgres\"\npostgres_shards = [{}]\npostgres_pool_size = 8\n\
             [cache]\n{redis}\nredis_prefix = \"{prefix}\"\n\
             [stream]\nnats_url = \"{nats_url}\"\nprefix = \"{prefix}\"\n\
             [aggregator]\nwindow_ms = 50\n[notifications]\nhold_ms = 300\n{extra}",
            urls.join(", ")
        )
    }

    /// `url` with PostgreSQL's port replaced by `port`.
    fn via(url: &str, port: u16) -> String {
        let out = url.replace("127.0.0.1:5432", &format!("127.0.0.1:{port}"));
        assert_ne!(out, url, "shard URL {url} does not name 127.0.0.1:5432");
        out
    }

    async fn build(
        extra: &str,
        proxies: Option<&Proxies>,
        more_redis: Vec<String>,
        nats_url: &str,
    ) -> Deployment {
        let shards = TestShards::create(2).await;
        let prefix = format!("t{:016x}", rand::random::<u64>());
        let redis_url = "redis://127.0.0.1:6379/0".to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("likewise.toml");
        let mut redis_servers = vec![redis_url.clone()];
        redis_servers.extend(more_redis);
        let d = Deployment {
            shards,
            prefix,
            redis_url,
            redis_servers,
            nats_url: nats_url.to_string(),
            dir,
            config,
            started: Mutex::new(0),
            pids: Mutex::new(Vec::new()),
            extra: extra.to_string(),
        };
        let text = match proxies {
            None => d.config_text(&d.shards.urls, &d.redis_url, &d.nats_url, extra),
            Some(p) => {
                let urls: Vec<String> = d.shards.urls.iter().map(|u| Self::via(u, p.pg.port)).collect();
                let redis = format!("redis://127.0.0.1:{}/0", p.redis.port);
                d.config_text(&urls, &redis, &format!("nats://127.0.0.1:{}", p.nats.port), extra)
            }
        };
        std::fs::write(&d.config, text).expect("write config");
        d
    }

    /// Start `role` on a config of its own whose PostgreSQL URLs go through `pg_port` (a
    /// proxy in front of the deployment's, so this node can be cut off alone).
    pub fn start_via_pg(&self, role: &str, pg_port: u16, proxies: &Proxies) -> Server {
        let urls: Vec<String> = self.shards.urls.iter().map(|u| Self::via(u, pg_port)).collect();
        let redis = format!("redis://127.0.0.1:{}/0", proxies.redis.port);
        let nats = format!("nats://127.0.0.1:{}", proxies.nats.port);
        let config = self.dir.path().join(format!("likewise-via-{pg_port}.toml"));
        std::fs::write(&config, self.config_text(&urls, &redis, &nats, &self.extra)).expect("write config");
        self.start_on(role, &config)
    }

    pub fn start(&self, role: &str) -> Server {
        self.start_on(role, &self.config.clone())
    }

    fn start_on(&self, role: &str, config: &std::path::Path) -> Server {
        let n = {
            let mut s = self.started.lock().expect("lock");
            *s += 1;
            *s
        };
        let data = self.dir.path().join(format!("{role}-{n}"));
        let server = start_with(
            &[
                "serve",
                "--config",
                &config.display().to_string(),
                "--role",
                role,
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                &data.display().to_string(),
            ],
            &[],
        );
        self.pids.lock().expect("lock").push(server.child.id());
        server
    }

    /// Like rows of a post, summed over the shards (read straight from PostgreSQL).
    pub async fn rows(&self, post: u64) -> i64 {
        let mut total = 0;
        for url in &self.shards.urls {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
            tokio::spawn(conn);
            let n: i64 = c
                .query_one("SELECT count(*) FROM likes WHERE kind = 1 AND target = $1", &[&(post as i64)])
                .await
                .expect("count rows")
                .get(0);
            total += n;
        }
        total
    }

    /// The users with a like row on target `id` of `kind` (1 post, 2 comment), over the shards.
    pub async fn likers_in_rows(&self, kind: i16, id: u64) -> HashSet<u64> {
        let mut out = HashSet::new();
        for url in &self.shards.urls {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
            tokio::spawn(conn);
            for r in c
                .query("SELECT user_id FROM likes WHERE kind = $1 AND target = $2", &[&kind, &(id as i64)])
                .await
                .expect("like rows")
            {
                out.insert(r.get::<_, i64>(0) as u64);
            }
        }
        out
    }

    /// Where a post's like count stands at each layer, for a failure message: the like rows,
    /// the stored counter and the consumer offsets of each shard, and the Redis entries.
    #[allow(dead_code)]
    pub async fn count_layers(&self, post: u64) -> String {
        let mut out = String::new();
        for (n, url) in self.shards.urls.iter().enumerate() {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
            tokio::spawn(conn);
            let p = post as i64;
            let rows: i64 = c
                .query_one("SELECT count(*) FROM likes WHERE kind = 1 AND target = $1", &[&p])
                .await
                .expect("rows")
                .get(0);
            let counter: Option<i64> = c
                .query_opt("SELECT value FROM counters WHERE kind = 1 AND target = $1 AND field = 1", &[&p])
                .await
                .expect("counter")
                .map(|r| r.get(0));
            let offsets: Vec<String> = c
                .query("SELECT consumer, upto FROM consumer_offsets ORDER BY consumer", &[])
                .await
                .expect("offsets")
                .iter()
                .map(|r| format!("{}={}", r.get::<_, String>(0), r.get::<_, i64>(1)))
                .collect();
            out.push_str(&format!("shard {n}: rows {rows}, counter {counter:?}, offsets {offsets:?}\n"));
        }
        let client = redis::Client::open(self.redis_url.as_str()).expect("redis url");
        let mut c = client.get_multiplexed_async_connection().await.expect("redis is not reachable");
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}:c:*:{post}#r*", self.prefix))
            .query_async(&mut c)
            .await
            .expect("keys");
        for k in keys {
            let v: Vec<(String, String)> =
                redis::cmd("HGETALL").arg(&k).query_async(&mut c).await.expect("hgetall");
            out.push_str(&format!("redis {k}: {v:?}\n"));
        }
        out
    }

    /// The stored `post_liked` item of `recipient` on `post` (read straight from PostgreSQL):
    /// its `actor_count` and its actor rows, to tell a lost event from a miscounted item.
    #[allow(dead_code)]
    pub async fn post_liked_item(&self, recipient: u64, post: u64) -> (Option<i64>, HashSet<u64>) {
        let (mut count, mut actors) = (None, HashSet::new());
        for url in &self.shards.urls {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
            tokio::spawn(conn);
            let item = c
                .query_opt(
                    "SELECT id, actor_count FROM notif_items WHERE recipient = $1 AND post_id = $2 AND kind = 1",
                    &[&(recipient as i64), &(post as i64)],
                )
                .await
                .expect("item");
            if let Some(r) = item {
                count = Some(r.get::<_, i64>(1));
                for a in c
                    .query("SELECT actor FROM notif_actors WHERE item = $1", &[&r.get::<_, i64>(0)])
                    .await
                    .expect("actors")
                {
                    actors.insert(a.get::<_, i64>(0) as u64);
                }
            }
        }
        (count, actors)
    }

    /// Transactions each shard's database has counted so far (`pg_stat_database`: a
    /// backend reports its own within about a second of going idle).
    #[allow(dead_code)]
    pub async fn transactions(&self) -> Vec<i64> {
        let (c, conn) = tokio_postgres::connect(
            &likewise_scaleout::postgres::testing::admin_url(),
            tokio_postgres::NoTls,
        )
        .await
        .expect("connect admin");
        tokio::spawn(conn);
        let mut out = Vec::new();
        for url in &self.shards.urls {
            let name = url.rsplit('/').next().expect("database name").split('?').next().expect("name");
            let n: i64 = c
                .query_one(
                    "SELECT (xact_commit + xact_rollback)::bigint FROM pg_stat_database WHERE datname = $1",
                    &[&name],
                )
                .await
                .expect("stats")
                .get(0);
            out.push(n);
        }
        out
    }

    /// A plain connection to the shard holding `post`.
    async fn shard_of(&self, post: u64) -> tokio_postgres::Client {
        let url = &self.shards.urls[(post % self.shards.urls.len() as u64) as usize];
        let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
        tokio::spawn(conn);
        c
    }

    /// Add `by` to a post's stored like counter (simulated drift); returns the new value.
    pub async fn shift_counter(&self, post: u64, by: i64) -> i64 {
        self.shard_of(post)
            .await
            .query_one(
            "UPDATE counters SET value = value + $2 WHERE kind = 1 AND target = $1 AND field = 1 RETURNING value",
            &[&(post as i64), &by],
        )
        .await
        .expect("shift counter")
        .get(0)
    }

    /// Damage a post's likers list (simulated): its liker pages are lost and every like row
    /// marked paged, so the list is empty until reconcile rebuilds the pages. Returns the rows.
    pub async fn lose_liker_pages(&self, post: u64) -> u64 {
        let c = self.shard_of(post).await;
        c.execute("DELETE FROM liker_pages WHERE kind = 1 AND target = $1", &[&(post as i64)])
            .await
            .expect("delete liker pages");
        c.execute("UPDATE likes SET paged = true WHERE kind = 1 AND target = $1", &[&(post as i64)])
            .await
            .expect("mark paged")
    }

    /// Drop every key of this deployment from Redis (a FLUSHALL scoped to the test, so tests
    /// running in parallel keep their caches).
    pub async fn flush_redis(&self) -> usize {
        let client = redis::Client::open(self.redis_url.as_str()).expect("redis url");
        let mut c = client.get_multiplexed_async_connection().await.expect("redis is not reachable");
        let keys: Vec<String> =
            redis::cmd("KEYS").arg(format!("{}:*", self.prefix)).query_async(&mut c).await.expect("keys");
        if !keys.is_empty() {
            let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut c).await.expect("del");
        }
        keys.len()
    }

    /// Terminate every PostgreSQL connection to the shards (the nodes must reconnect).
    pub async fn drop_pg_connections(&self) -> i64 {
        let admin = likewise_scaleout::postgres::testing::admin_url();
        let (c, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await.expect("connect admin");
        tokio::spawn(conn);
        let names: Vec<String> =
            self.shards.urls.iter().map(|u| u.rsplit('/').next().unwrap_or_default().to_string()).collect();
        let rows = c
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE datname = ANY($1) AND pid <> pg_backend_pid()",
                &[&names],
            )
            .await
            .expect("terminate");
        rows.len() as i64
    }

    /// The reverse index (post, user) of `posts` summed over the shards, and the number of
    /// outbox rows the relay has not published yet.
    pub async fn reverse_index(&self, posts: &[u64]) -> (HashSet<(u64, u64)>, i64) {
        let posts: Vec<i64> = posts.iter().map(|p| *p as i64).collect();
        let (mut index, mut unrelayed) = (HashSet::new(), 0);
        for url in &self.shards.urls {
            let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.expect("connect shard");
            tokio::spawn(conn);
            for r in c
                .query(
                    "SELECT target, user_id FROM user_likes WHERE kind = 1 AND target = ANY($1)",
                    &[&posts],
                )
                .await
                .expect("reverse index")
            {
                index.insert((r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64));
            }
            let n: i64 = c
                .query_one("SELECT count(*) FROM outbox WHERE stream_seq IS NULL", &[])
                .await
                .expect("outbox")
                .get(0);
            unrelayed += n;
        }
        (index, unrelayed)
    }

    pub async fn cleanup(&self) {
        self.flush_redis().await;
    }
}

impl Drop for Deployment {
    /// Also when the test failed: delete the stream and the Redis keys (they carry TTLs
    /// anyway); the shards drop themselves.
    fn drop(&mut self) {
        // Processes a test left running (a test that failed, or one that let its servers
        // go): a PID already gone was reaped by its test and is not reused this quickly.
        for pid in self.pids.lock().map(|p| p.clone()).unwrap_or_default() {
            let _ = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
        super::delete_stream_at(&self.nats_url, &self.prefix);
        super::delete_redis_keys(&self.prefix);
    }
}

/// A Redis server of a test's own (`redis-server` on a free port, nothing saved), stopped
/// when dropped: a second server for client-side sharding, which a test can stop and start.
#[allow(dead_code)]
pub struct RedisProcess {
    pub port: u16,
    pub url: String,
    child: Option<std::process::Child>,
}

#[allow(dead_code)]
impl RedisProcess {
    /// Start one on a free port and wait until it answers.
    pub async fn start() -> RedisProcess {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").expect("free port").local_addr().expect("addr").port();
        let mut p = RedisProcess { port, url: format!("redis://127.0.0.1:{port}/0"), child: None };
        p.restart().await;
        p
    }

    /// Start it again on the same port, empty (after `kill`).
    pub async fn restart(&mut self) {
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is not installed (Debian package redis-server)");
        self.child = Some(child);
        let client = redis::Client::open(self.url.as_str()).expect("url");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING").query_async::<String>(&mut c).await.is_ok()
            {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "redis-server on {} did not start", self.port);
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    /// Kill it (a lost server: its keys are gone).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The keys with `prefix` it holds.
    pub async fn keys(url: &str, prefix: &str) -> Vec<String> {
        let client = redis::Client::open(url).expect("url");
        let mut c = client.get_multiplexed_async_connection().await.expect("redis is not reachable");
        redis::cmd("KEYS").arg(format!("{prefix}:*")).query_async(&mut c).await.expect("keys")
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        self.kill();
    }
}
