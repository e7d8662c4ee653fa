//! The notifier and trending shared by several worker processes, for real: `likewise`
//! worker processes on PostgreSQL (two shards), Redis and NATS JetStream split the stream's
//! 64 post partitions of each between them (a lease per partition), a process that starts
//! takes a fair share, and a killed one's share is taken over with no notification lost or
//! doubled and no like counted twice or missed in trending. The servers must be running
//! (`.ci/run` starts them); a test fails, never skips, without them.

mod common;

use common::deployment::Deployment;
use common::proc::{Client, like_with_retry, put_post, stop};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The series of metric `name` on the node at `base`: each one's labels and value.
async fn series(c: &Client, base: &str, name: &str) -> Vec<(String, f64)> {
    use http_body_util::BodyExt;
    let Ok(resp) = c.http.get(format!("{base}/metrics").parse().expect("uri")).await else {
        return Vec::new();
    };
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    String::from_utf8_lossy(&body)
        .lines()
        .filter_map(|l| {
            let (key, value) = l.split_once(' ')?;
            let labels = key.strip_prefix(name)?;
            if !(labels.is_empty() || labels.starts_with('{')) {
                return None;
            }
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// How many partitions of `consumer` (`notifications`, `trending`) the worker at `base` holds.
async fn held(c: &Client, base: &str, consumer: &str) -> usize {
    series(c, base, "likewise_partitions_held")
        .await
        .iter()
        .find(|(l, _)| l.contains(&format!("consumer=\"{consumer}\"")))
        .map_or(0, |(_, v)| *v as usize)
}

/// Wait until the workers at `bases` hold `want` partitions each (in any order), of the
/// notifier and of trending alike.
async fn shares(c: &Client, bases: &[&str], want: &[usize], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut got = Vec::new();
        let mut settled = true;
        for consumer in ["notifications", "trending"] {
            let mut these = Vec::new();
            for b in bases {
                these.push(held(c, b, consumer).await);
            }
            let mut sorted = these.clone();
            sorted.sort();
            settled &= sorted == want;
            got.push(these);
        }
        if settled {
            eprintln!("{what}: {got:?}");
            return;
        }
        assert!(Instant::now() < deadline, "{what}: the workers hold {got:?} partitions, not {want:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One worker process runs all 64 partitions of the notifier and of trending; a second and
/// a third take a fair share of each (32/32, then at most 22 each); the likes of a storm
/// over 24 posts (24 partitions) are notified exactly although one of the three is killed
/// mid-storm (its share is taken over by the two left, 32 each): every author's item holds
/// every liker, once, and trending counts every post's likes, once. Each worker's
/// `/metrics` shows the events it read per consumer and partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_processes_share_the_partitioned_consumers_and_take_over_a_killed_ones() {
    let d = Deployment::new().await;
    let c = Arc::new(Client::new());
    let w1 = d.start("worker");
    shares(&c, &[&w1.base], &[64], "one worker").await;
    let mut w2 = d.start("worker");
    shares(&c, &[&w1.base, &w2.base], &[32, 32], "two workers").await;
    let w3 = d.start("worker");
    shares(&c, &[&w1.base, &w2.base, &w3.base], &[20, 22, 22], "three workers").await;

    let (a, b) = (d.start("api"), d.start("api"));
    let posts: Vec<u64> = (1..=24).collect();
    for &p in &posts {
        put_post(&c, &a.base, p, 1_000 + p).await;
    }
    let bases = vec![a.base.clone(), b.base.clone()];
    const LIKERS: u64 = 40;
    let storm = {
        let (c, bases, posts) = (c.clone(), bases.clone(), posts.clone());
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for w in 0..16usize {
                let (c, bases, posts) = (c.clone(), bases.clone(), posts.clone());
                tasks.push(tokio::spawn(async move {
                    let mut acked = 0;
                    let all: Vec<(u64, u64)> =
                        posts.iter().flat_map(|p| (0..LIKERS).map(move |u| (*p, 10_000 + u))).collect();
                    for (i, (p, u)) in all.iter().enumerate().skip(w).step_by(16) {
                        if like_with_retry(&c, &bases, i, *p, *u).await {
                            acked += 1;
                        }
                    }
                    acked
                }));
            }
            let mut acked = 0;
            for t in tasks {
                acked += t.await.expect("join");
            }
            acked
        })
    };
    // The second worker dies once the likes are flowing.
    let deadline = Instant::now() + Duration::from_secs(60);
    while d.rows(1).await < LIKERS as i64 / 2 {
        assert!(Instant::now() < deadline, "likes are not flowing");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    w2.child.kill().expect("SIGKILL");
    w2.child.wait().expect("wait");
    let acked = storm.await.expect("storm");
    assert_eq!(acked, posts.len() as u64 * LIKERS, "every like acknowledged");
    shares(&c, &[&w1.base, &w3.base], &[32, 32], "after the kill").await;

    // Every author's item holds every liker, each once (one item per author and post: a
    // second one would fail the read).
    let want: std::collections::HashSet<u64> = (0..LIKERS).map(|u| 10_000 + u).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    for &p in &posts {
        loop {
            let (count, actors) = d.post_liked_item(1_000 + p, p).await;
            if count == Some(LIKERS as i64) && actors == want {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "post {p}: the item counts {count:?} with {} of {LIKERS} likers",
                actors.intersection(&want).count()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    // Trending, merged from the partitions' snapshots, counts every post's likes once.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, v) = c
            .call(&a.base, hyper::Method::GET, "/v1/trending?window=1h&limit=50", 1, false, "")
            .await
            .expect("trending");
        assert_eq!(status, 200, "{v}");
        let got: std::collections::BTreeMap<u64, u64> = v["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| {
                (
                    i["post_id"].as_str().and_then(|p| p.parse().ok()).unwrap_or(0),
                    i["likes"].as_u64().unwrap_or(0),
                )
            })
            .collect();
        let want: std::collections::BTreeMap<u64, u64> = posts.iter().map(|p| (*p, LIKERS)).collect();
        if got == want {
            break;
        }
        assert!(Instant::now() < deadline, "trending counts {got:?}, not {LIKERS} likes for each post");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The events each survivor read, per consumer and partition: between them, every post's
    // partition, for both.
    for consumer in ["notifications", "trending"] {
        let mut read = std::collections::BTreeSet::new();
        for base in [&w1.base, &w3.base] {
            for (labels, v) in series(&c, base, "likewise_consumer_events_total").await {
                if labels.contains(&format!("consumer=\"{consumer}\"")) && v > 0.0 {
                    let part =
                        labels.split("partition=\"").nth(1).and_then(|s| s.split('"').next()).unwrap_or("");
                    read.insert(part.parse::<u64>().expect("a partition number"));
                }
            }
        }
        assert!(posts.iter().all(|p| read.contains(p)), "{consumer}: partitions with events read: {read:?}");
    }
    for s in [a, b, w1, w3] {
        stop(s);
    }
    d.cleanup().await;
}
