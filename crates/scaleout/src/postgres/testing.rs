//! Throwaway PostgreSQL databases for tests: each test creates its own shards (unique names,
//! so tests run in parallel) and drops them when the guard goes away. The server must be up
//! at `LIKEWISE_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/postgres`); a test
//! fails, never skips, when it is not.

use super::{PgOptions, PgStore};
use likewise_store::Stores;
use likewise_store::group_commit::GroupCommitOptions;

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

/// Drop test databases of long-gone runs (their names carry their creation time).
async fn remove_stale(client: &tokio_postgres::Client) {
    let Ok(rows) =
        client.query("SELECT datname FROM pg_database WHERE datname LIKE 'likewise_test_%'", &[]).await
    else {
        return;
    };
    let now = likewise_store::now_ms() / 1000;
    for r in rows {
        let name: String = r.get(0);
        let born = name.split('_').nth(2).and_then(|s| s.parse::<u64>().ok());
        if born.is_some_and(|b| now.saturating_sub(b) > STALE_SECS) {
            let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
        }
    }
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
        remove_stale(&client).await;
        let tag: u32 = rand::random();
        let born = likewise_store::now_ms() / 1000;
        let mut names = Vec::new();
        let mut urls = Vec::new();
        for i in 0..n {
            let name = format!("likewise_test_{born}_{tag:08x}_{i}");
            client
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .unwrap_or_else(|e| panic!("creating test database {name}: {e}"));
            urls.push(db_url(&admin, &name));
            names.push(name);
        }
        let t = TestShards { urls, names, admin };
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
        let (tag, born): (u32, u64) = (rand::random(), likewise_store::now_ms() / 1000);
        for i in 0..n {
            let name = format!("likewise_test_{born}_{tag:08x}_{i}");
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

impl Drop for TestShards {
    fn drop(&mut self) {
        let admin = self.admin.clone();
        let names = std::mem::take(&mut self.names);
        // Drop from a thread with its own runtime: Drop may run inside (or outside) a runtime.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let Ok((client, conn)) = tokio_postgres::connect(&admin, tokio_postgres::NoTls).await else {
                    return;
                };
                tokio::spawn(conn);
                for name in names {
                    let _ =
                        client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await;
                }
            });
        })
        .join();
    }
}
