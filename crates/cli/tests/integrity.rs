//! The integrity consumer through the API, on both engines (`LIKEWISE_TEST_BACKEND=postgres`):
//! a ring of 50 accounts liking the same 30 posts in lockstep is flagged while 5,000 ordinary
//! accounts liking on a Zipf-like popularity curve in the same minute are not; confirming the
//! ring (with `integrity.discount_flagged`) takes exactly its likes out of every displayed
//! count, and clearing it gives them back exactly. (The patterns themselves are tested with
//! their own clock in `likewise_core::integrity`.)

mod common;

use common::{TestApp, assert_error, test_config};
use futures::StreamExt;
use hyper::Method;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const POSTS: u64 = 200;
const AUTHOR: u64 = 7;
const RING: std::ops::RangeInclusive<u64> = 900_001..=900_050;
/// The ring's 30 posts: moderately popular ones, also liked by ordinary accounts.
const RING_POSTS: std::ops::RangeInclusive<u64> = 11..=40;

/// (user, post) likes of 5,000 ordinary accounts: 1 to 5 posts each, on a 1/rank curve.
fn zipf_likes() -> Vec<(u64, u64)> {
    let weights: Vec<f64> = (1..=POSTS).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::new();
    for user in 10_000..15_000u64 {
        let n = 1 + next() % 5;
        let mut liked = BTreeSet::new();
        while (liked.len() as u64) < n {
            let mut x = (next() % 1_000_000) as f64 / 1_000_000.0 * total;
            let mut post = POSTS;
            for (i, w) in weights.iter().enumerate() {
                if x < *w {
                    post = i as u64 + 1;
                    break;
                }
                x -= w;
            }
            liked.insert(post);
        }
        out.extend(liked.into_iter().map(|p| (user, p)));
    }
    out
}

async fn like_all(app: &TestApp, likes: &[(u64, u64)]) {
    futures::stream::iter(likes)
        .map(|(u, p)| app.like(*u, *p, true))
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
}

/// Every flag: user → (reason, likes_discounted, decision).
async fn flags(app: &TestApp) -> BTreeMap<u64, (String, bool, Value)> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let q = cursor.as_ref().map_or(String::new(), |c| format!("&cursor={c}"));
        let (st, v) = app
            .call(Method::GET, &format!("/v1/moderation/integrity?limit=7{q}"), Some(&app.service()), None)
            .await;
        assert_eq!(st, 200, "{v}");
        for f in v["items"].as_array().expect("items") {
            let user: u64 = f["user_id"].as_str().expect("decimal string").parse().expect("ID");
            assert!(f["flagged_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{f}");
            let prev = out.insert(
                user,
                (
                    f["reason"].as_str().expect("reason").to_string(),
                    f["likes_discounted"].as_bool().expect("bool"),
                    f["decision"].clone(),
                ),
            );
            assert!(prev.is_none(), "pages repeat {user}");
            if f["reason"] == "lockstep_ring" {
                assert_eq!(f["evidence"]["partners"], 49, "{f}");
                // Flagged as soon as the pattern shows (10 shared posts), then brought up to date.
                let shared = f["evidence"]["shared_targets"].as_u64().expect("shared");
                assert!((10..=30).contains(&shared), "{f}");
                assert!(f["evidence"]["sample_partner_ids"][0].is_string(), "{f}");
            }
        }
        match v["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// Each post's like count as its author sees it.
async fn counts(app: &TestApp) -> BTreeMap<u64, i64> {
    let mut out = BTreeMap::new();
    for chunk in (1..=POSTS).collect::<Vec<_>>().chunks(100) {
        let ids: Vec<String> = chunk.iter().map(u64::to_string).collect();
        let path = format!("/v1/posts?ids={}", ids.join(","));
        let (st, v) = app.call(Method::GET, &path, Some(&app.user(AUTHOR)), None).await;
        assert_eq!(st, 200, "{v}");
        for p in v["posts"].as_array().expect("posts") {
            let id: u64 = p["post_id"].as_str().expect("id").parse().expect("ID");
            out.insert(id, p["like_count"].as_i64().expect("count"));
        }
    }
    out
}

async fn wait_for<T: PartialEq + std::fmt::Debug, F: std::future::Future<Output = T>>(
    what: &str,
    want: &T,
    get: impl Fn() -> F,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = get().await;
        if &got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: got {got:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn decide_all(app: &TestApp, action: &str) {
    for u in RING {
        let body = format!(r#"{{"action":"{action}"}}"#);
        let (st, v) = app
            .call(Method::POST, &format!("/v1/moderation/integrity/{u}"), Some(&app.service()), Some(&body))
            .await;
        assert_eq!(st, 200, "{v}");
        assert_eq!(v["user_id"], u.to_string());
        assert_eq!(v["decision"], action);
        assert_eq!(v["likes_discounted"], action == "confirm");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lockstep_ring_is_flagged_a_zipf_crowd_is_not_and_discounts_are_exact() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut cfg = test_config(dir.path());
    cfg.limits.likes_per_minute = 0;
    cfg.integrity.discount_flagged = true;
    let app = TestApp::start_with(cfg).await;
    for post in 1..=POSTS {
        app.post(post, AUTHOR, false).await;
    }
    let crowd = zipf_likes();
    let mut rows: BTreeMap<u64, i64> = (1..=POSTS).map(|p| (p, 0)).collect();
    for (_, p) in &crowd {
        *rows.entry(*p).or_default() += 1;
    }
    let without_ring = rows.clone();
    // The crowd and the ring act in the same seconds: the ring likes each of its posts
    // together, one post after the other.
    let (half, rest) = crowd.split_at(crowd.len() / 2);
    like_all(&app, half).await;
    for p in RING_POSTS {
        let ring: Vec<(u64, u64)> = RING.map(|u| (u, p)).collect();
        like_all(&app, &ring).await;
        *rows.entry(p).or_default() += 50;
    }
    like_all(&app, rest).await;
    wait_for("counts", &rows, || counts(&app)).await;

    let ring_flags: BTreeMap<u64, (String, bool, Value)> =
        RING.map(|u| (u, ("lockstep_ring".to_string(), false, Value::Null))).collect();
    wait_for("the ring's flags (and no one else's)", &ring_flags, || flags(&app)).await;

    // Errors: non-service callers, unknown accounts, bad verdicts.
    let (st, v) = app.call(Method::GET, "/v1/moderation/integrity", Some(&app.user(10_000)), None).await;
    assert_error(st, &v, 403, "forbidden");
    let confirm = Some(r#"{"action":"confirm"}"#);
    let (st, v) =
        app.call(Method::POST, "/v1/moderation/integrity/900001", Some(&app.user(1)), confirm).await;
    assert_error(st, &v, 403, "forbidden");
    let (st, v) =
        app.call(Method::POST, "/v1/moderation/integrity/10000", Some(&app.service()), confirm).await;
    assert_error(st, &v, 404, "not_found");
    for bad in [r#"{"action":"ban"}"#, r#"{}"#, r#"{"action":"clear","why":"x"}"#] {
        let (st, v) =
            app.call(Method::POST, "/v1/moderation/integrity/900001", Some(&app.service()), Some(bad)).await;
        assert_error(st, &v, 422, "invalid");
    }
    let (st, v) =
        app.call(Method::GET, "/v1/moderation/integrity?cursor=forged", Some(&app.service()), None).await;
    assert_error(st, &v, 400, "invalid");

    // Confirmed: every post shows its rows less the ring's likes, exactly.
    decide_all(&app, "confirm").await;
    wait_for("counts without the ring", &without_ring, || counts(&app)).await;
    let confirmed: BTreeMap<u64, (String, bool, Value)> =
        RING.map(|u| (u, ("lockstep_ring".to_string(), true, Value::from("confirm")))).collect();
    assert_eq!(flags(&app).await, confirmed);
    // A confirmed account's new like is discounted too; its unlike gives nothing back twice.
    app.like(900_001, 150, true).await;
    app.like(900_002, 11, false).await;
    *rows.entry(150).or_default() += 1;
    *rows.entry(11).or_default() -= 1;
    // (Each lands in the counter at once and in the discount with the consumer's next round:
    // wait past both.)
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_for("counts without the ring after its new likes", &without_ring, || counts(&app)).await;

    // Cleared: the rows again, exactly (the stored counters never moved).
    decide_all(&app, "clear").await;
    wait_for("counts with the ring", &rows, || counts(&app)).await;
    app.stop().await;
}
