//! On the scale-out engines (PostgreSQL shards and Redis; no worker running, as on an API
//! node between aggregator commits), warm feed pages are served from the caches: read for
//! longer than the count refresh interval, so every cached count goes stale at least once,
//! they cost at most 0.2 PostgreSQL round trips and 3 Redis round trips a page.

mod common;

use likewise_core::ids::{PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta};
use likewise_scaleout::postgres::testing::TestShards;
use likewise_scaleout::postgres::{PgOptions, PgStore};
use likewise_scaleout::shared_cache::{Redis, RedisOptions};
use likewise_service::{Engagement, ServiceOptions};
use std::time::{Duration, Instant};

const POSTS: u64 = 200;
const VIEWERS: u64 = 60;
const PAGES: u64 = 600;
const REFRESH: Duration = Duration::from_millis(250);
/// A Redis that has just started keeping own-likes records is not trusted for a viewer's
/// liked set until two clock skews (2 x 5 s with the default bucket width) have passed
/// (`shared_cache/likes.rs`, `restart_guard`): "liked?" is answered from PostgreSQL meanwhile.
const RESTART_GUARD: Duration = Duration::from_secs(10);

/// A deterministic generator (no seed-dependent flakiness between runs).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
}

/// 20 distinct posts, Zipf-popular (weight 1/rank) among the 200.
fn page(rng: &mut Lcg, cumulative: &[f64]) -> Vec<PostId> {
    let total = *cumulative.last().expect("weights");
    let mut out: Vec<PostId> = Vec::with_capacity(20);
    while out.len() < 20 {
        let x = (rng.next() % 1_000_000) as f64 / 1_000_000.0 * total;
        let i = cumulative.partition_point(|c| *c < x) as u64;
        let p = PostId(i.min(POSTS - 1) + 1);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_feed_page_reads_redis_not_postgres() {
    let shards = TestShards::create(2).await;
    let pg =
        PgStore::connect(&PgOptions { shards: shards.urls.clone(), pool_size: 8, ..PgOptions::default() })
            .expect("postgres");
    pg.check_schema().await.expect("schema");
    let prefix = format!("twarm{:016x}", rand::random::<u64>());
    let redis = Redis::connect(&RedisOptions { prefix: prefix.clone(), ..RedisOptions::default() })
        .await
        .expect("Redis must be up at 127.0.0.1:6379");
    let stores = likewise_scaleout::open::with_shared_cache(
        likewise_scaleout::from_postgres(pg.clone(), Default::default()),
        redis.clone(),
    );
    let opts =
        ServiceOptions { count_refresh: REFRESH, local_viewer_cache: false, ..ServiceOptions::default() };
    let svc = Engagement::new(stores, opts);

    // 200 posts by ten authors, comments on some; each viewer follows two people and likes
    // five posts (some among the popular ones).
    for p in 1..=POSTS {
        let meta = PostMeta {
            author: UserId(1 + p % 10),
            hide_like_count: false,
            comments: CommentsPolicy::Everyone,
        };
        svc.upstream.put_post(PostId(p), meta).await.expect("post");
        if p <= 20 {
            for (c, text) in
                ["a fine morning for a walk", "the bakery opens at seven"].into_iter().enumerate()
            {
                let user = UserId(5_000 + p * 10 + c as u64);
                svc.comments.create(user, PostId(p), text, None, None).await.expect("comment");
            }
        }
    }
    for v in 0..VIEWERS {
        let viewer = UserId(1_001 + v);
        svc.upstream.set_follow(viewer, UserId(1_001 + (v + 1) % VIEWERS), true).await.expect("follow");
        svc.upstream.set_follow(viewer, UserId(1 + v % 10), true).await.expect("follow");
        for k in 0..5 {
            let post = PostId(1 + (v * 7 + k * 3) % 40);
            svc.likes.set_post_like(viewer, post, LikeAction::Like).await.expect("like");
        }
    }

    let cumulative: Vec<f64> = (1..=POSTS)
        .scan(0.0, |acc, r| {
            *acc += 1.0 / r as f64;
            Some(*acc)
        })
        .collect();
    let mut rng = Lcg(42);
    // Warm: every viewer reads a few pages (cold loads fill Redis and this node's caches),
    // and the background work they start (refreshes, liked-set builds) finishes. The first
    // read marks when Redis started keeping own-likes records; liked sets are built and
    // trusted only `RESTART_GUARD` later, so the last round comes after that, as on a
    // deployment that has run for a while.
    let first_read = Instant::now();
    for round in 0..4 {
        if round == 3 {
            tokio::time::sleep(
                (RESTART_GUARD + Duration::from_millis(500)).saturating_sub(first_read.elapsed()),
            )
            .await;
        }
        for v in 0..VIEWERS {
            let ids = page(&mut rng, &cumulative);
            svc.posts.post_views(UserId(1_001 + v), &ids).await.expect("warm page");
        }
        tokio::time::sleep(REFRESH + Duration::from_millis(100 * round)).await;
    }

    // Measure: 600 pages over more than eight refresh intervals.
    let (pg0, redis0) = (pg.checkouts(), redis.servers.round_trips());
    let started = Instant::now();
    for i in 0..PAGES {
        let ids = page(&mut rng, &cumulative);
        let views = svc.posts.post_views(UserId(1_001 + i % VIEWERS), &ids).await.expect("page");
        assert_eq!(views.len(), 20);
        tokio::time::sleep(Duration::from_millis(4)).await;
    }
    let took = started.elapsed();
    // The background refreshes the last pages started.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (pg1, redis1) = (pg.checkouts(), redis.servers.round_trips());
    assert!(took > REFRESH * 4, "pages read over {took:?}: every cached count went stale");
    let pg_per_page = (pg1 - pg0) as f64 / PAGES as f64;
    let redis_per_page = (redis1 - redis0) as f64 / PAGES as f64;
    eprintln!(
        "{PAGES} warm pages in {took:?}: {pg_per_page:.3} PostgreSQL and {redis_per_page:.2} Redis round trips a page"
    );
    assert!(
        pg_per_page <= 0.2,
        "{pg_per_page:.3} PostgreSQL round trips per warm page ({} in all)",
        pg1 - pg0
    );
    assert!(redis_per_page <= 3.0, "{redis_per_page:.2} Redis round trips per warm page");

    // Hearts are right: each viewer's own likes, on the page or not.
    let v = UserId(1_001);
    let liked: Vec<PostId> = (0..5).map(|k| PostId(1 + (k * 3) % 40)).collect();
    let views = svc.posts.post_views(v, &[liked[0], liked[1], PostId(150)]).await.expect("page");
    assert_eq!(views.iter().map(|x| x.viewer_has_liked).collect::<Vec<_>>(), [true, true, false]);

    svc.stores().close().expect("close");
    common::delete_redis_keys(&prefix);
}
