//! The world the load acts on: the run's users (and their tokens), its posts with their Zipf
//! popularity and the viral one, the client's classified requests, and seeding it all through
//! the upstream API before the load.

use super::args::SoakArgs;
use super::shared::Shared;
use crate::client::HttpClient;
use bytes::Bytes;
use futures_util::StreamExt;
use hyper::{Method, StatusCode};
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The run's IDs and tokens, and the client that acts on them.
pub(super) struct World {
    pub(super) client: HttpClient,
    keys: TokenKeys,
    ttl: Duration,
    /// Tokens of the registered users, by user index.
    pub(super) tokens: Vec<String>,
    user_base: u64,
    viral_user_base: u64,
    /// Post index `i` has ID `post_base + i`; index 0 is the viral post, 1..=posts the others.
    pub(super) post_base: u64,
    zipf_cdf: Vec<f64>,
    pub(super) viral_share: f64,
    concurrency: usize,
    pub(super) write_per_mille: u32,
}

/// The answer to a like or an unlike.
#[derive(Deserialize)]
pub(super) struct LikeAnswer {
    pub(super) liked: bool,
    pub(super) changed: bool,
}

/// A post of a feed page, as much of it as the checks read.
#[derive(Deserialize)]
pub(super) struct PostIdOnly {
    pub(super) post_id: String,
}

/// A feed page.
#[derive(Deserialize)]
pub(super) struct PostsPage {
    pub(super) posts: Vec<PostIdOnly>,
}

/// A post's count as a viewer sees it.
#[derive(Deserialize)]
pub(super) struct PostCount {
    pub(super) post_id: String,
    pub(super) like_count: Option<i64>,
    #[serde(default)]
    pub(super) viewer_has_liked: bool,
}

/// A page of posts' counts.
#[derive(Deserialize)]
pub(super) struct CountsPage {
    pub(super) posts: Vec<PostCount>,
}

/// The answer to a new comment.
#[derive(Deserialize)]
pub(super) struct Created {
    pub(super) comment_id: String,
}

/// A page of comments: only its cursor is read, but a page without its items is malformed.
#[derive(Deserialize)]
pub(super) struct Page {
    #[serde(rename = "items")]
    _items: Vec<serde::de::IgnoredAny>,
    pub(super) next_cursor: Option<String>,
}

impl World {
    /// The world of a run against the server at `base`, whose tokens `keys` signs. IDs are
    /// fresh per run, so runs against one server do not collide.
    pub(super) fn new(a: &SoakArgs, base: &str, keys: TokenKeys) -> anyhow::Result<World> {
        let run_no = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 1_000_000 + 1;
        let id_base = run_no * 1_000_000_000;
        let ttl = a.duration + Duration::from_secs(7200);
        let user_base = id_base + 100_000_000;
        let tokens: Vec<String> = (0..a.users as u64)
            .map(|i| keys.mint(UserId(user_base + i), false, ttl))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(World {
            client: HttpClient::new(base, a.concurrency + 8),
            keys,
            ttl,
            tokens,
            user_base,
            viral_user_base: id_base + 200_000_000,
            post_base: id_base,
            zipf_cdf: zipf_cdf(a.posts, a.zipf),
            viral_share: a.viral_share,
            concurrency: a.concurrency,
            write_per_mille: a.write_per_mille,
        })
    }

    /// A token for `user`, a trusted service caller with `service`, valid for the run.
    pub(super) fn mint(&self, user: u64, service: bool) -> anyhow::Result<String> {
        self.keys.mint(UserId(user), service, self.ttl).map_err(|e| anyhow::anyhow!(e))
    }

    /// Ordinary posts (the viral one not counted).
    pub(super) fn posts(&self) -> usize {
        self.zipf_cdf.len()
    }

    /// The ID of post index `idx`.
    pub(super) fn post_id(&self, idx: usize) -> u64 {
        self.post_base + idx as u64
    }

    /// The ID of user index `idx`.
    pub(super) fn user_id(&self, idx: usize) -> u64 {
        self.user_base + idx as u64
    }

    /// An ordinary post, Zipf-skewed (index 1 is the most popular).
    pub(super) fn zipf(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.random();
        self.zipf_cdf.partition_point(|&c| c < u).min(self.zipf_cdf.len() - 1) + 1
    }

    /// The viral post with probability `viral`, else a Zipf-skewed one.
    pub(super) fn pick_post(&self, rng: &mut StdRng, viral: f64) -> usize {
        if rng.random_bool(viral) { 0 } else { self.zipf(rng) }
    }

    /// A user that only loop `w` acts as, so each user's actions are sequential and the
    /// read-your-writes probes are exact.
    pub(super) fn my_user(&self, w: usize, rng: &mut StdRng) -> usize {
        let per = (self.tokens.len() - w).div_ceil(self.concurrency);
        w + self.concurrency * rng.random_range(0..per)
    }

    /// The token of the viral post's `i`-th new liker.
    pub(super) fn viral_token(&self, i: u64) -> Option<String> {
        self.mint(self.viral_user_base + i, false).ok()
    }

    /// One request, classified and timed; the body of a 2xx answer, else `None`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn request(
        &self,
        sh: &Shared,
        class: usize,
        method: Method,
        path: &str,
        token: &str,
        body: Option<String>,
        allow_404: bool,
    ) -> Option<Bytes> {
        let t0 = Instant::now();
        let what = format!("{method} {path}");
        let r = self.client.call(method, path, Some(token), body).await;
        let us = t0.elapsed().as_micros() as u64;
        let c = &sh.counters[class];
        match r {
            Err(e) => {
                sh.error(class, &sh.kinds.transport, format!("{what}: transport error: {e:#}"));
                None
            }
            Ok((st, b)) => {
                sh.latency[class].lock().unwrap_or_else(|e| e.into_inner()).add(us);
                c.answered.fetch_add(1, Ordering::Relaxed);
                c.latency_us.fetch_add(us, Ordering::Relaxed);
                if st.is_success() {
                    c.ok.fetch_add(1, Ordering::Relaxed);
                    Some(b)
                } else if st == StatusCode::TOO_MANY_REQUESTS {
                    c.limited.fetch_add(1, Ordering::Relaxed);
                    None
                } else if st == StatusCode::NOT_FOUND && allow_404 {
                    c.expected_404.fetch_add(1, Ordering::Relaxed);
                    None
                } else {
                    let kind = if st.is_server_error() { &sh.kinds.server } else { &sh.kinds.client };
                    let text = String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
                    sh.error(class, kind, format!("{what}: {st} {text}"));
                    None
                }
            }
        }
    }

    /// Decode a 2xx body; a malformed one is an error of `class`.
    pub(super) fn parse<'a, T: Deserialize<'a>>(
        &self,
        sh: &Shared,
        class: usize,
        what: &str,
        b: &'a [u8],
    ) -> Option<T> {
        match serde_json::from_slice(b) {
            Ok(v) => Some(v),
            Err(e) => {
                let text = String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
                sh.error(class, &sh.kinds.bad_body, format!("{what}: malformed body ({e}): {text}"));
                None
            }
        }
    }
}

/// The cumulative popularity of `posts` posts whose weights fall as rank^-`exponent`.
fn zipf_cdf(posts: usize, exponent: f64) -> Vec<f64> {
    let weights: Vec<f64> = (1..=posts).map(|r| 1.0 / (r as f64).powf(exponent)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect()
}

/// Register the world upstream as a trusted `service` caller: every user, every post (by
/// the first `authors` users) and a follow graph, `concurrency` requests at a time.
pub(super) async fn seed(
    world: &World,
    service: &str,
    authors: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    let mut reqs: Vec<(String, Option<String>)> = Vec::new();
    for u in 0..world.tokens.len() {
        let body = format!(r#"{{"username":"soak{u}","verified":{}}}"#, u < 50);
        reqs.push((format!("/v1/users/{}", world.user_id(u)), Some(body)));
    }
    for p in 0..=world.posts() {
        let author = world.user_id(p % authors);
        let body = format!(r#"{{"author_id":"{author}","hide_like_count":false,"comments":"everyone"}}"#);
        reqs.push((format!("/v1/posts/{}", world.post_id(p)), Some(body)));
    }
    // A follow graph: the first 2,000 users each follow 5 of the authors (liked-by ordering).
    let mut rng = StdRng::seed_from_u64(1);
    for u in 0..world.tokens.len().min(2_000) {
        for _ in 0..5 {
            let other = rng.random_range(0..authors);
            reqs.push((format!("/v1/users/{}/follows/{}", world.user_id(u), world.user_id(other)), None));
        }
    }
    let n = reqs.len();
    let results: Vec<anyhow::Result<()>> = futures_util::stream::iter(reqs)
        .map(|(path, body)| async move {
            let (st, b) = world.client.call(Method::PUT, &path, Some(service), body).await?;
            anyhow::ensure!(st.is_success(), "seeding PUT {path}: {st} {}", String::from_utf8_lossy(&b));
            Ok(())
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    for r in results {
        r?;
    }
    println!(
        "seeded {n} upstream records ({} users, {} posts, follows)",
        world.tokens.len(),
        world.posts() + 1
    );
    Ok(())
}
