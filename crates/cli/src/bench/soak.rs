//! `bench soak`: the whole service under a realistic mix for a long time, watching memory.
//!
//! The service runs in this process (a fresh temporary embedded store, HTTP on a random local
//! port, wired exactly as `serve` wires it) or is a running server (`--url`). A fixed number
//! of client loops drive it over HTTP with the design's ratios: about 20 reads per write
//! (feed pages of 20 posts, single posts, comment pages, likers pages, replies), writes being
//! likes and unlikes spread over many posts with a Zipf skew plus ONE viral post that takes a
//! large share of the likes from a stream of new likers, periodic comment bursts on one post
//! (replies too), and comment likes. Users and posts are seeded through the upstream API
//! first. Every second it samples throughput per operation class, errors and the RSS; at the
//! end it prints the totals and latency percentiles, checks that every post's count converged
//! to the likes the client made (and, for the viral post, to its likers list), applies the
//! memory-growth rule, and draws RSS and throughput over time as an SVG.
//!
//! `--scrape-every N` scrapes `/metrics` as Prometheus would (which also drains the exporter's
//! pending histogram samples); `--write-per-mille 0 --burst-comments 0` is a read-only soak.
//! Together they separate memory that follows requests from memory that follows written data.

use super::stats;
use crate::app::Application;
use crate::config::{Config, Overrides};
use anyhow::Context;
use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use likewise_core::ids::UserId;
use likewise_http::auth::TokenKeys;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type HttpClient = Client<HttpConnector, Full<Bytes>>;

const RULES: &str = "\
Outcome of each request: 2xx is a success; 429 (rate limited) is counted separately and is not \
an error; 404 on an operation that names a comment (liking it, replying to it, reading its \
replies) is expected, because moderation may hold a comment back from other viewers; any other \
status (every 5xx, any other 4xx), a transport error, a malformed 2xx body, or a read that does \
not show the viewer's own like or unlike (read-your-writes) is an ERROR.

Memory-growth rule (RSS sampled every second during the load): the rule judges the server's \
UNACCOUNTED memory, RSS minus what its configuration bounds and /metrics reports (polled every \
5 s): the store's block cache (likewise_store_block_cache_bytes, at most store.cache_mb), its \
memtables (likewise_store_write_buffer_bytes), the filter and index blocks it keeps pinned \
(likewise_store_pinned_bytes: a few bytes per stored key, so they grow with the data; at most \
the data on disk) and every in-process cache's estimated bytes \
(likewise_cache_bytes{cache}, each cache at most likewise_cache_capacity{cache} entries). \
Those fill for as long as there is new data to hold, which with the default capacities takes \
far longer than 10 minutes at soak rates, so raw RSS looks linear while nothing leaks; they \
are checked against their own caps instead (a part above its cap FAILS). When the server also \
reports its live heap (likewise_heap_allocated_bytes: bytes allocated and not freed, counted \
by its global allocator), the rule judges the UNEXPLAINED HEAP instead, live heap minus the \
bounded parts: a leak in our code or a dependency shows there, while the allocator's own \
overhead (headers, size-class rounding, pages kept for reuse), which grows with the heap, \
does not; that overhead is checked separately: over the last 20% of the run, RSS minus the \
live heap must stay below the live heap plus 64 MiB (else FAILS). Without those gauges the \
rule judges raw RSS. The first 20% of the run is warm-up; B = mean over 20-40% of the \
run, F = mean over the last 20% (80-100%). The run FAILS when F - B > --max-growth-mib AND \
F - B > --max-growth-pct of B AND the growth is still linear: the least-squares slope over \
the last 40% of the run is at least half of the average slope between the two windows \
((F - B) / time between their centres). Memory that climbs during warm-up, or climbs and \
then levels off, passes; memory still climbing at its average rate at the end fails. Needs \
at least 10 samples (a shorter run is not judged).

Exit status is non-zero on any error, on a count that did not converge to the likes the client \
made (every post, within --converge-seconds), on the viral post's count differing from its \
likers list, or on unbounded memory growth.";

/// `bench soak` options.
#[derive(Debug, clap::Args)]
#[command(after_long_help = RULES)]
pub struct SoakArgs {
    /// How long to drive the load: 600, 600s, 10m or 1h (alias --seconds).
    #[arg(long, alias = "seconds", value_parser = parse_duration, default_value = "60")]
    pub duration: Duration,
    /// Client loops, each with one request in flight.
    #[arg(long, default_value_t = 32)]
    pub concurrency: usize,
    /// Target total requests/s, spread over the loops (default: as fast as they go).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Base URL of a running server (default: start the service in this process).
    #[arg(long)]
    pub url: Option<String>,
    /// With --url: the server's process ID, whose RSS is sampled (/proc/PID/status).
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,
    /// With --url: the server's token secret (default: read from --data-dir or the config).
    #[arg(long, env = "LIKEWISE__AUTH__SECRET")]
    pub secret: Option<String>,
    /// TOML configuration (in process: the service's; with --url: where the secret is).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Data directory (in process: keep the store there instead of a fresh temporary one).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Registered users (each acts from one client loop only).
    #[arg(long, default_value_t = 20_000)]
    pub users: usize,
    /// Ordinary posts, chosen with a Zipf skew; the viral post comes on top.
    #[arg(long, default_value_t = 5_000)]
    pub posts: usize,
    /// Zipf exponent of the post popularity.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Share of the post likes that go to the viral post (mostly new likers).
    #[arg(long, default_value_t = 0.4)]
    pub viral_share: f64,
    /// Seconds between comment bursts.
    #[arg(long, default_value_t = 20)]
    pub burst_every: u64,
    /// Comments in each burst (on one post, from different users, a quarter of them replies).
    #[arg(long, default_value_t = 400)]
    pub burst_comments: u64,
    /// Where to write the RSS and throughput chart.
    #[arg(long, default_value = "docs/img/soak-rss.svg")]
    pub svg: PathBuf,
    /// Memory rule: growth (MiB) that may be exceeded only together with --max-growth-pct.
    #[arg(long, default_value_t = 32.0)]
    pub max_growth_mib: f64,
    /// Memory rule: growth (% of the 20-40% window's mean) allowed.
    #[arg(long, default_value_t = 10.0)]
    pub max_growth_pct: f64,
    /// How long the counts may take to converge after the load stops.
    #[arg(long, default_value_t = 30)]
    pub converge_seconds: u64,
    /// Seed of the client's random choices.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Scrape GET /metrics every this many seconds, as Prometheus would (0: never). Scraping
    /// also drains the exporter's pending histogram samples.
    #[arg(long, default_value_t = 0)]
    pub scrape_every: u64,
    /// Writes per 1,000 operations outside the bursts (post likes 30, comments 8, comment
    /// likes 10 of every 48); 0 with --burst-comments 0 is a read-only soak.
    #[arg(long, default_value_t = 48, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub write_per_mille: u32,
}

/// Parse `600`, `600s`, `10m` or `1h`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let n: u64 =
        s[..split].parse().map_err(|_| format!("invalid duration {s:?}: expected e.g. 600s or 10m"))?;
    let secs = match &s[split..] {
        "" | "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        unit => return Err(format!("invalid duration unit {unit:?}: use s, m or h")),
    };
    if secs == 0 {
        return Err("the duration must be positive".into());
    }
    Ok(Duration::from_secs(secs))
}

// ---------------------------------------------------------------------------------------------
// Operation classes and their counters.

const FEED: usize = 0;
const POST: usize = 1;
const COMMENTS: usize = 2;
const LIKERS: usize = 3;
const REPLIES: usize = 4;
const LIKE: usize = 5;
const COMMENT: usize = 6;
const COMMENT_LIKE: usize = 7;
const CLASSES: usize = 8;
const READ_CLASSES: std::ops::Range<usize> = 0..5;
const WRITE_CLASSES: std::ops::Range<usize> = 5..8;
const NAMES: [&str; CLASSES] = [
    "feed page (20 posts)",
    "post",
    "comment page",
    "likers page",
    "replies page",
    "post like/unlike",
    "comment",
    "comment like/unlike",
];

/// Latency samples kept per class: a uniform sample of the whole run (reservoir sampling), so
/// the client's memory does not grow with the run's length and pollute the RSS it measures.
const RESERVOIR: usize = 200_000;

struct Reservoir {
    samples: Vec<u64>,
    len: usize,
    seen: u64,
    rng: StdRng,
}

impl Reservoir {
    fn new(seed: u64) -> Self {
        // Filled with a non-zero value so the pages are resident before the load starts.
        Reservoir { samples: vec![u64::MAX; RESERVOIR], len: 0, seen: 0, rng: StdRng::seed_from_u64(seed) }
    }

    fn add(&mut self, v: u64) {
        self.seen += 1;
        if self.len < self.samples.len() {
            self.samples[self.len] = v;
            self.len += 1;
        } else {
            let j = self.rng.random_range(0..self.seen) as usize;
            if j < self.samples.len() {
                self.samples[j] = v;
            }
        }
    }
}

#[derive(Default)]
struct Counters {
    ok: AtomicU64,
    expected_404: AtomicU64,
    limited: AtomicU64,
    errors: AtomicU64,
    /// Answered requests and the sum of their latencies (mean latency over time).
    answered: AtomicU64,
    latency_us: AtomicU64,
}

#[derive(Default)]
struct ErrorKinds {
    server: AtomicU64,
    client: AtomicU64,
    transport: AtomicU64,
    bad_body: AtomicU64,
    ryw: AtomicU64,
}

/// Recent comments (ID, post index), bounded.
struct Ring {
    items: VecDeque<(u64, usize)>,
}

const RING: usize = 4096;

impl Ring {
    fn push(&mut self, item: (u64, usize)) {
        if self.items.len() == RING {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    fn pick(&self, rng: &mut StdRng) -> Option<(u64, usize)> {
        if self.items.is_empty() {
            return None;
        }
        self.items.get(rng.random_range(0..self.items.len())).copied()
    }
}

/// State shared by the client loops.
struct Shared {
    counters: [Counters; CLASSES],
    latency: [Mutex<Reservoir>; CLASSES],
    kinds: ErrorKinds,
    error_log: Mutex<Vec<String>>,
    /// Net likes per post index (0 = the viral post), from the `changed` flag of every answer:
    /// +1 for a like that created a row, -1 for an unlike that removed one.
    expected: Vec<AtomicI64>,
    comments: Mutex<Ring>,
    top_level: Mutex<Ring>,
    burst_left: AtomicU64,
    burst_post: AtomicU64,
    burst_parent: AtomicU64,
    bursts: AtomicU64,
    viral_next: AtomicU64,
    scrapes: AtomicU64,
    scrape_errors: AtomicU64,
    /// The server's bounded memory from its last /metrics (see `RULES`), bytes.
    gauges: Mutex<Option<ServerMemory>>,
    stop: AtomicBool,
}

/// The memory parts a server reports in /metrics whose sizes its configuration bounds.
#[derive(Debug, Clone, Default)]
struct ServerMemory {
    block_cache: f64,
    block_cache_cap: f64,
    write_buffer: f64,
    write_buffer_cap: f64,
    /// Filter and index blocks the store keeps pinned: proportional to the data on disk.
    pinned: f64,
    disk: f64,
    /// Live heap bytes (allocated and not freed), when the server counts them.
    heap: f64,
    /// Per in-process cache: [entries, capacity, estimated bytes].
    caches: std::collections::BTreeMap<String, [f64; 3]>,
}

impl ServerMemory {
    /// Parse the gauges out of a Prometheus text exposition; `None` when the server reports
    /// neither its store's block cache nor any cache's bytes (then raw RSS is judged).
    fn parse(text: &str) -> Option<ServerMemory> {
        let mut m = ServerMemory::default();
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let Ok(v) = value.trim().parse::<f64>() else { continue };
            let name = name.trim();
            if let Some((metric, labels)) = name.split_once('{') {
                let cache = labels.strip_prefix("cache=\"").and_then(|l| l.strip_suffix("\"}"));
                let slot = match metric {
                    "likewise_cache_entries" => 0,
                    "likewise_cache_capacity" => 1,
                    "likewise_cache_bytes" => 2,
                    _ => continue,
                };
                if let Some(cache) = cache {
                    m.caches.entry(cache.to_string()).or_default()[slot] = v;
                    seen |= slot == 2;
                }
                continue;
            }
            match name {
                "likewise_store_block_cache_bytes" => (m.block_cache, seen) = (v, true),
                "likewise_store_block_cache_capacity_bytes" => m.block_cache_cap = v,
                "likewise_store_write_buffer_bytes" => m.write_buffer = v,
                "likewise_store_write_buffer_limit_bytes" => m.write_buffer_cap = v,
                "likewise_store_pinned_bytes" => m.pinned = v,
                "likewise_store_disk_bytes" => m.disk = v,
                "likewise_heap_allocated_bytes" => m.heap = v,
                _ => {}
            }
        }
        seen.then_some(m)
    }

    /// Estimated bytes of the in-process caches.
    fn cache_bytes(&self) -> f64 {
        self.caches.values().map(|c| c[2]).sum()
    }

    /// Bytes the bounded parts hold.
    fn bounded(&self) -> f64 {
        self.block_cache + self.write_buffer + self.pinned + self.cache_bytes()
    }

    /// Parts above their caps. Memtables may briefly exceed the active caps by the sealed
    /// ones waiting for a flush, so they get twice theirs.
    fn over_caps(&self) -> Vec<String> {
        let mut over = Vec::new();
        if self.block_cache_cap > 0.0 && self.block_cache > self.block_cache_cap {
            over.push(format!(
                "block cache {:.0} MiB > cap {:.0} MiB",
                mib(self.block_cache),
                mib(self.block_cache_cap)
            ));
        }
        if self.write_buffer_cap > 0.0 && self.write_buffer > 2.0 * self.write_buffer_cap {
            over.push(format!(
                "memtables {:.0} MiB > 2 x their caps {:.0} MiB",
                mib(self.write_buffer),
                mib(self.write_buffer_cap)
            ));
        }
        if self.disk > 0.0 && self.pinned > self.disk {
            over.push(format!(
                "pinned filters and indexes {:.0} MiB > the data on disk {:.0} MiB",
                mib(self.pinned),
                mib(self.disk)
            ));
        }
        for (name, [entries, cap, _]) in &self.caches {
            if *cap > 0.0 && entries > cap {
                over.push(format!("cache {name}: {entries} entries > capacity {cap}"));
            }
        }
        over
    }
}

/// `GET /metrics`: the body of a 2xx answer.
async fn get_metrics(world: &World) -> Option<Bytes> {
    let req = Request::get(format!("{}/metrics", world.base)).body(Full::new(Bytes::new())).ok()?;
    let resp = world.client.request(req).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    Some(resp.into_body().collect().await.ok()?.to_bytes())
}

fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

impl Shared {
    fn error(&self, class: usize, kind: &AtomicU64, msg: String) {
        self.counters[class].errors.fetch_add(1, Ordering::Relaxed);
        kind.fetch_add(1, Ordering::Relaxed);
        let mut log = self.error_log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() < 20 {
            log.push(msg);
        }
    }

    fn totals(&self) -> ([u64; CLASSES], u64, u64) {
        let ok = std::array::from_fn(|c| self.counters[c].ok.load(Ordering::Relaxed));
        let errors = self.counters.iter().map(|c| c.errors.load(Ordering::Relaxed)).sum();
        let limited = self.counters.iter().map(|c| c.limited.load(Ordering::Relaxed)).sum();
        (ok, errors, limited)
    }
}

// ---------------------------------------------------------------------------------------------
// The world the load acts on.

struct World {
    base: String,
    client: HttpClient,
    keys: TokenKeys,
    ttl: Duration,
    /// Tokens of the registered users, by user index.
    tokens: Vec<String>,
    user_base: u64,
    viral_user_base: u64,
    /// Post index `i` has ID `post_base + i`; index 0 is the viral post, 1..=posts the others.
    post_base: u64,
    zipf_cdf: Vec<f64>,
    viral_share: f64,
    concurrency: usize,
    write_per_mille: u32,
}

const WORDS: [&str; 48] = [
    "what",
    "a",
    "view",
    "love",
    "this",
    "light",
    "colours",
    "morning",
    "trip",
    "again",
    "never",
    "seen",
    "such",
    "calm",
    "water",
    "city",
    "lovely",
    "shot",
    "where",
    "is",
    "that",
    "place",
    "great",
    "friends",
    "summer",
    "evening",
    "coffee",
    "garden",
    "mountain",
    "walk",
    "happy",
    "weekend",
    "photo",
    "sky",
    "dinner",
    "old",
    "town",
    "street",
    "music",
    "night",
    "river",
    "bridge",
    "quiet",
    "today",
    "forest",
    "beach",
    "sunset",
    "wonderful",
];

#[derive(Deserialize)]
struct LikeAnswer {
    liked: bool,
    changed: bool,
}

#[derive(Deserialize)]
struct PostIdOnly {
    post_id: String,
}

#[derive(Deserialize)]
struct PostsPage {
    posts: Vec<PostIdOnly>,
}

#[derive(Deserialize)]
struct PostCount {
    post_id: String,
    like_count: Option<i64>,
    #[serde(default)]
    viewer_has_liked: bool,
}

#[derive(Deserialize)]
struct CountsPage {
    posts: Vec<PostCount>,
}

#[derive(Deserialize)]
struct Created {
    comment_id: String,
}

#[derive(Deserialize)]
struct Page {
    items: Vec<serde_json::Value>,
    next_cursor: Option<String>,
}

/// One request with a bearer token (the HTTP bench's request helper).
async fn call(
    client: &HttpClient,
    method: Method,
    url: &str,
    token: &str,
    body: Option<String>,
) -> anyhow::Result<(StatusCode, Bytes)> {
    super::http::call(client, method, url, Some(token), body).await
}

impl World {
    fn post_id(&self, idx: usize) -> u64 {
        self.post_base + idx as u64
    }

    fn user_id(&self, idx: usize) -> u64 {
        self.user_base + idx as u64
    }

    /// An ordinary post, Zipf-skewed (index 1 is the most popular).
    fn zipf(&self, rng: &mut StdRng) -> usize {
        let u: f64 = rng.random();
        self.zipf_cdf.partition_point(|&c| c < u).min(self.zipf_cdf.len() - 1) + 1
    }

    /// The viral post with probability `viral`, else a Zipf-skewed one.
    fn pick_post(&self, rng: &mut StdRng, viral: f64) -> usize {
        if rng.random_bool(viral) { 0 } else { self.zipf(rng) }
    }

    /// A user that only loop `w` acts as, so each user's actions are sequential and the
    /// read-your-writes probes are exact.
    fn my_user(&self, w: usize, rng: &mut StdRng) -> usize {
        let per = (self.tokens.len() - w).div_ceil(self.concurrency);
        w + self.concurrency * rng.random_range(0..per)
    }

    fn viral_token(&self, i: u64) -> Option<String> {
        self.keys.mint(UserId(self.viral_user_base + i), false, self.ttl).ok()
    }

    /// One request, classified and timed; the body of a 2xx answer, else `None`.
    #[allow(clippy::too_many_arguments)]
    async fn request(
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
        let r = call(&self.client, method, &format!("{}{path}", self.base), token, body).await;
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

    fn parse<'a, T: Deserialize<'a>>(&self, sh: &Shared, class: usize, what: &str, b: &'a [u8]) -> Option<T> {
        match serde_json::from_slice(b) {
            Ok(v) => Some(v),
            Err(e) => {
                let text = String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
                sh.error(class, &sh.kinds.bad_body, format!("{what}: malformed body ({e}): {text}"));
                None
            }
        }
    }

    fn text(rng: &mut StdRng) -> String {
        let n = rng.random_range(4..14);
        let mut s = String::new();
        for i in 0..n {
            if i > 0 {
                s.push(' ');
            }
            s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
        }
        s
    }
}

// ---------------------------------------------------------------------------------------------
// The client loops.

struct Loop {
    w: usize,
    world: Arc<World>,
    sh: Arc<Shared>,
    rng: StdRng,
    /// (user index, post index) this loop liked recently: unlikes undo real likes.
    likes: VecDeque<(usize, usize)>,
    feeds: u64,
}

impl Loop {
    async fn run(mut self, interval: Option<Duration>) {
        let mut next = Instant::now();
        while !self.sh.stop.load(Ordering::Relaxed) {
            if let Some(iv) = interval {
                next += iv;
                let now = Instant::now();
                if next > now {
                    tokio::time::sleep_until(next.into()).await;
                } else if now - next > Duration::from_secs(1) {
                    next = now;
                }
            }
            if self.sh.burst_left.load(Ordering::Relaxed) > 0
                && self.rng.random_bool(0.5)
                && self
                    .sh
                    .burst_left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                self.burst_comment().await;
                continue;
            }
            // Per 1,000 operations, by default 952 reads and 48 writes (about 20:1, before the
            // bursts); --write-per-mille moves the split, keeping the mix within each side.
            let writes = self.world.write_per_mille;
            let x = self.rng.random_range(0..1000u32);
            if x < 1000 - writes {
                match x * 952 / (1000 - writes) {
                    0..560 => self.feed().await,
                    560..740 => {
                        let p = self.world.pick_post(&mut self.rng, 0.2);
                        self.read_post(p).await;
                    }
                    740..880 => self.comment_page().await,
                    880..930 => self.likers_page().await,
                    _ => self.replies_page().await,
                }
            } else {
                match (x - (1000 - writes)) * 48 / writes {
                    0..30 => self.like().await,
                    30..38 => self.comment().await,
                    _ => self.comment_like().await,
                }
            }
        }
    }

    async fn feed(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let mut ids: Vec<usize> = Vec::with_capacity(20);
        if self.rng.random_bool(0.5) {
            ids.push(0);
        }
        while ids.len() < 20 {
            let p = world.zipf(&mut self.rng);
            if !ids.contains(&p) {
                ids.push(p);
            }
        }
        let swap = self.rng.random_range(0..ids.len());
        ids.swap(0, swap);
        let list = ids.iter().map(|&i| world.post_id(i).to_string()).collect::<Vec<_>>().join(",");
        let path = format!("/v1/posts?ids={list}");
        let Some(b) = world.request(&sh, FEED, Method::GET, &path, &world.tokens[viewer], None, false).await
        else {
            return;
        };
        self.feeds += 1;
        // Every 16th page is checked: all 20 posts, in the order asked.
        if self.feeds & 15 == 0
            && let Some(page) = world.parse::<PostsPage>(&sh, FEED, "feed page", &b)
        {
            let got: Vec<&str> = page.posts.iter().map(|p| p.post_id.as_str()).collect();
            let want: Vec<String> = ids.iter().map(|&i| world.post_id(i).to_string()).collect();
            if got != want {
                sh.error(
                    FEED,
                    &sh.kinds.bad_body,
                    format!("feed page: asked {} posts, got {} (or out of order)", want.len(), got.len()),
                );
            }
        }
    }

    async fn read_post(&mut self, p: usize) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let path = format!("/v1/posts/{}", world.post_id(p));
        world.request(&sh, POST, Method::GET, &path, &world.tokens[viewer], None, false).await;
    }

    async fn comment_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let p = world.pick_post(&mut self.rng, 0.3);
        let id = world.post_id(p);
        let token = &world.tokens[viewer];
        if self.rng.random_bool(0.85) {
            let path = format!("/v1/posts/{id}/comments?order=top");
            world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await;
            return;
        }
        // Newest first, then the next page.
        let path = format!("/v1/posts/{id}/comments?order=newest");
        let Some(b) = world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await else {
            return;
        };
        if let Some(Page { next_cursor: Some(c), .. }) =
            world.parse::<Page>(&sh, COMMENTS, "comment page", &b)
        {
            let path = format!("/v1/posts/{id}/comments?order=newest&cursor={c}");
            world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await;
        }
    }

    async fn likers_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let p = world.pick_post(&mut self.rng, 0.3);
        let path = format!("/v1/posts/{}/likers?limit=20", world.post_id(p));
        world.request(&sh, LIKERS, Method::GET, &path, &world.tokens[viewer], None, false).await;
    }

    async fn replies_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let parent = sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng);
        let Some((parent, _)) = parent else {
            let p = world.pick_post(&mut self.rng, 0.2);
            self.read_post(p).await;
            return;
        };
        let viewer = world.my_user(self.w, &mut self.rng);
        let path = format!("/v1/comments/{parent}/replies");
        world.request(&sh, REPLIES, Method::GET, &path, &world.tokens[viewer], None, true).await;
    }

    async fn like(&mut self) {
        if self.rng.random_bool(self.world.viral_share) {
            self.viral_like().await
        } else {
            self.ordinary_like().await
        }
    }

    /// The viral post: mostly new likers (a stream of fresh user IDs, unregistered, which the
    /// API accepts), some unlikes and some double-taps by earlier ones.
    async fn viral_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let seen = sh.viral_next.load(Ordering::Relaxed);
        let r: f64 = self.rng.random();
        let (i, method) = if r < 0.9 || seen == 0 {
            (sh.viral_next.fetch_add(1, Ordering::Relaxed), Method::PUT)
        } else if r < 0.97 {
            (self.rng.random_range(0..seen), Method::DELETE)
        } else {
            (self.rng.random_range(0..seen), Method::PUT)
        };
        let Some(token) = world.viral_token(i) else {
            sh.error(LIKE, &sh.kinds.bad_body, "minting a token failed".into());
            return;
        };
        let path = format!("/v1/posts/{}/like", world.post_id(0));
        let Some(b) = world.request(&sh, LIKE, method.clone(), &path, &token, None, false).await else {
            return;
        };
        if let Some(a) = world.parse::<LikeAnswer>(&sh, LIKE, "like", &b) {
            let like = method == Method::PUT;
            if a.liked != like {
                sh.error(LIKE, &sh.kinds.bad_body, format!("{method} {path}: answered liked={}", a.liked));
            }
            if a.changed {
                sh.expected[0].fetch_add(if like { 1 } else { -1 }, Ordering::Relaxed);
            }
        }
    }

    /// An ordinary post: a like (Zipf-skewed) or an unlike of one this loop made; every 8th is
    /// followed by a read of the post as the same user, which must show the new state.
    async fn ordinary_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let (user, post, like) = if !self.likes.is_empty() && self.rng.random_bool(0.3) {
            let k = self.rng.random_range(0..self.likes.len());
            let (u, p) = self.likes.swap_remove_back(k).unwrap_or((0, 1));
            (u, p, false)
        } else {
            (world.my_user(self.w, &mut self.rng), world.zipf(&mut self.rng), true)
        };
        let method = if like { Method::PUT } else { Method::DELETE };
        let path = format!("/v1/posts/{}/like", world.post_id(post));
        let token = &world.tokens[user];
        let Some(b) = world.request(&sh, LIKE, method.clone(), &path, token, None, false).await else {
            return;
        };
        let Some(a) = world.parse::<LikeAnswer>(&sh, LIKE, "like", &b) else {
            return;
        };
        if a.liked != like {
            sh.error(LIKE, &sh.kinds.bad_body, format!("{method} {path}: answered liked={}", a.liked));
        }
        if a.changed {
            sh.expected[post].fetch_add(if like { 1 } else { -1 }, Ordering::Relaxed);
        }
        if like {
            if self.likes.len() == 512 {
                self.likes.pop_front();
            }
            self.likes.push_back((user, post));
        }
        if self.rng.random_range(0..8) == 0 {
            let path = format!("/v1/posts/{}", world.post_id(post));
            let Some(b) = world.request(&sh, POST, Method::GET, &path, token, None, false).await else {
                return;
            };
            if let Some(v) = world.parse::<PostCount>(&sh, POST, "post", &b)
                && v.viewer_has_liked != a.liked
            {
                sh.error(
                    POST,
                    &sh.kinds.ryw,
                    format!(
                        "read-your-writes: user {} got liked={} from {method} {path}, then viewer_has_liked={}",
                        world.user_id(user),
                        a.liked,
                        v.viewer_has_liked
                    ),
                );
            }
        }
    }

    async fn post_comment(&mut self, user: usize, post: usize, parent: Option<u64>) -> Option<u64> {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let text = World::text(&mut self.rng);
        let body = match parent {
            Some(p) => format!(r#"{{"text":"{text}","parent_id":"{p}"}}"#),
            None => format!(r#"{{"text":"{text}"}}"#),
        };
        let path = format!("/v1/posts/{}/comments", world.post_id(post));
        let b = world
            .request(&sh, COMMENT, Method::POST, &path, &world.tokens[user], Some(body), parent.is_some())
            .await?;
        let c = world.parse::<Created>(&sh, COMMENT, "comment", &b)?;
        let Ok(id) = c.comment_id.parse::<u64>() else {
            sh.error(
                COMMENT,
                &sh.kinds.bad_body,
                format!("comment_id {:?} is not a decimal ID", c.comment_id),
            );
            return None;
        };
        sh.comments.lock().unwrap_or_else(|e| e.into_inner()).push((id, post));
        if parent.is_none() {
            sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).push((id, post));
        }
        Some(id)
    }

    async fn comment(&mut self) {
        let user = self.world.my_user(self.w, &mut self.rng);
        let parent = if self.rng.random_bool(0.3) {
            self.sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng)
        } else {
            None
        };
        match parent {
            Some((parent, post)) => {
                self.post_comment(user, post, Some(parent)).await;
            }
            None => {
                let post = self.world.pick_post(&mut self.rng, 0.2);
                self.post_comment(user, post, None).await;
            }
        }
    }

    async fn burst_comment(&mut self) {
        let user = self.world.my_user(self.w, &mut self.rng);
        let post = self.sh.burst_post.load(Ordering::Relaxed) as usize;
        let parent = self.sh.burst_parent.load(Ordering::Relaxed);
        if parent != 0 && self.rng.random_bool(0.25) {
            self.post_comment(user, post, Some(parent)).await;
        } else if let Some(id) = self.post_comment(user, post, None).await
            && self.rng.random_bool(0.1)
        {
            self.sh.burst_parent.store(id, Ordering::Relaxed);
        }
    }

    async fn comment_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let target = sh.comments.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng);
        let Some((id, _)) = target else {
            return self.feed().await;
        };
        let user = world.my_user(self.w, &mut self.rng);
        let method = if self.rng.random_bool(0.8) { Method::PUT } else { Method::DELETE };
        let path = format!("/v1/comments/{id}/like");
        let token = &world.tokens[user];
        if let Some(b) = world.request(&sh, COMMENT_LIKE, method.clone(), &path, token, None, true).await
            && let Some(a) = world.parse::<LikeAnswer>(&sh, COMMENT_LIKE, "comment like", &b)
            && a.liked != (method == Method::PUT)
        {
            sh.error(
                COMMENT_LIKE,
                &sh.kinds.bad_body,
                format!("{method} {path}: answered liked={}", a.liked),
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Memory.

/// Where the RSS comes from.
#[derive(Clone, Copy)]
enum RssSource {
    This,
    Pid(u32),
    None,
}

fn status_kib(path: &str, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(path).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl RssSource {
    fn path(self) -> Option<String> {
        match self {
            RssSource::This => Some("/proc/self/status".into()),
            RssSource::Pid(p) => Some(format!("/proc/{p}/status")),
            RssSource::None => None,
        }
    }

    /// Resident memory now, MiB.
    fn rss_mib(self) -> Option<f64> {
        status_kib(&self.path()?, "VmRSS:").map(|k| k as f64 / 1024.0)
    }

    /// Peak resident memory of the process's life, MiB.
    fn hwm_mib(self) -> Option<f64> {
        status_kib(&self.path()?, "VmHWM:").map(|k| k as f64 / 1024.0)
    }
}

/// The memory-growth rule's numbers (see `RULES`).
#[derive(Debug, Clone)]
struct Growth {
    baseline_mib: f64,
    final_mib: f64,
    growth_mib: f64,
    growth_pct: f64,
    /// (F - B) / time between the window centres, MiB per minute.
    window_slope: f64,
    /// Least-squares slope over the last 40% of the run, MiB per minute.
    late_slope: f64,
    unbounded: bool,
}

fn mean(v: &[(f64, f64)], f: impl Fn(&(f64, f64)) -> f64) -> f64 {
    v.iter().map(f).sum::<f64>() / v.len() as f64
}

/// Least-squares slope of y over t (per second).
fn slope(v: &[(f64, f64)]) -> f64 {
    let (mt, my) = (mean(v, |p| p.0), mean(v, |p| p.1));
    let num: f64 = v.iter().map(|&(t, y)| (t - mt) * (y - my)).sum();
    let den: f64 = v.iter().map(|&(t, _)| (t - mt) * (t - mt)).sum();
    if den > 0.0 { num / den } else { 0.0 }
}

/// (seconds, MiB) of the samples where `f` has a value.
fn series(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    samples.iter().filter_map(|s| Some((s.t, f(s)?))).collect()
}

/// RSS minus the bounded parts.
fn unaccounted(s: &Sample) -> Option<f64> {
    Some(s.rss_mib? - s.bounded_mib?)
}

/// Live heap minus the bounded parts: what the memory rule judges when the server reports it.
fn unexplained(s: &Sample) -> Option<f64> {
    Some(s.heap_mib? - s.bounded_mib?)
}

/// Allocator overhead guard: over the last 20% of the run, RSS minus the live heap (allocator
/// headers, rounding and kept pages, plus code and stacks) must stay below the live heap
/// itself plus 64 MiB. Pathological fragmentation fails here; ordinary overhead, which grows
/// with the heap, does not.
fn overhead_guard(samples: &[Sample], failures: &mut Vec<String>) -> Option<String> {
    let pairs: Vec<(f64, f64, f64)> =
        samples.iter().filter_map(|s| Some((s.t, s.rss_mib?, s.heap_mib?))).collect();
    let end = pairs.last()?.0;
    let last: Vec<&(f64, f64, f64)> = pairs.iter().filter(|p| p.0 >= end * 0.8).collect();
    if last.is_empty() {
        return None;
    }
    let n = last.len() as f64;
    let rss = last.iter().map(|p| p.1).sum::<f64>() / n;
    let heap = last.iter().map(|p| p.2).sum::<f64>() / n;
    let over = rss - heap;
    let ok = over <= heap + 64.0;
    if !ok {
        failures
            .push(format!("allocator overhead {over:.0} MiB exceeds the live heap {heap:.0} MiB + 64 MiB"));
    }
    Some(format!(
        "live heap {heap:.0} MiB, RSS {rss:.0} MiB over 80-100%: allocator overhead, code and stacks {over:.0} MiB ({:.0}% of the heap) -> {}",
        100.0 * over / heap.max(1e-9),
        if ok { "OK (limit: the heap + 64 MiB)" } else { "TOO HIGH (limit: the heap + 64 MiB)" }
    ))
}

/// Apply the memory-growth rule to (seconds, MiB) samples taken at a steady interval over the
/// load; `None` when there are too few samples to judge.
fn judge_growth(rss: &[(f64, f64)], max_pct: f64, max_mib: f64) -> Option<Growth> {
    let n = rss.len();
    if n < 10 {
        return None;
    }
    let at = |q: usize| n * q / 10;
    let (base, last, late) = (&rss[at(2)..at(4)], &rss[at(8)..], &rss[at(6)..]);
    let (b, f) = (mean(base, |p| p.1), mean(last, |p| p.1));
    let dt = mean(last, |p| p.0) - mean(base, |p| p.0);
    let growth = f - b;
    let window_slope = if dt > 0.0 { growth / dt * 60.0 } else { 0.0 };
    let late_slope = slope(late) * 60.0;
    let growth_pct = if b > 0.0 { growth / b * 100.0 } else { 0.0 };
    let still_linear = window_slope > 0.0 && late_slope >= 0.5 * window_slope;
    Some(Growth {
        baseline_mib: b,
        final_mib: f,
        growth_mib: growth,
        growth_pct,
        window_slope,
        late_slope,
        unbounded: growth > max_mib && growth_pct > max_pct && still_linear,
    })
}

// ---------------------------------------------------------------------------------------------
// Sampling.

/// One sample, taken every second during the load: cumulative successes per class.
#[derive(Clone)]
struct Sample {
    t: f64,
    rss_mib: Option<f64>,
    /// The server's bounded memory (see `RULES`) at its last poll, MiB.
    bounded_mib: Option<f64>,
    /// The server's live heap (`likewise_heap_allocated_bytes`) at its last poll, MiB.
    heap_mib: Option<f64>,
    ok: [u64; CLASSES],
    answered: [u64; CLASSES],
    latency_us: [u64; CLASSES],
    errors: u64,
    limited: u64,
    /// CPU seconds used by the measured process so far.
    cpu_s: Option<f64>,
    /// The machine's 1-minute load average.
    load1: Option<f64>,
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat (clock ticks of 1/100 s).
fn cpu_seconds(rss: RssSource) -> Option<f64> {
    let path = match rss {
        RssSource::This => "/proc/self/stat".to_string(),
        RssSource::Pid(p) => format!("/proc/{p}/stat"),
        RssSource::None => return None,
    };
    let stat = std::fs::read_to_string(path).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg").ok()?.split_whitespace().next()?.parse().ok()
}

/// Throughput, mean latency, CPU and load in the baseline window (20-40% of the run) against
/// the final window (80-100%): whether the service slowed down as its data grew.
fn over_time(samples: &[Sample]) -> Option<String> {
    let n = samples.len();
    if n < 10 {
        return None;
    }
    let windows = [&samples[n * 2 / 10..n * 4 / 10], &samples[n * 8 / 10..]];
    let span = |w: &[Sample]| (w[0].clone(), w[w.len() - 1].clone());
    let [(a0, a1), (b0, b1)] = windows.map(span);
    let rate = |x: &Sample, y: &Sample, r: std::ops::Range<usize>| {
        r.map(|c| y.ok[c] - x.ok[c]).sum::<u64>() as f64 / (y.t - x.t).max(1e-9)
    };
    let lat = |x: &Sample, y: &Sample, c: usize| {
        (y.latency_us[c] - x.latency_us[c]) as f64 / (y.answered[c] - x.answered[c]).max(1) as f64 / 1000.0
    };
    let cpu = |x: &Sample, y: &Sample| match (x.cpu_s, y.cpu_s) {
        (Some(p), Some(q)) => format!("{:.0}%", (q - p) / (y.t - x.t).max(1e-9) * 100.0),
        _ => "-".into(),
    };
    let load = |w: &[Sample]| {
        let v: Vec<f64> = w.iter().filter_map(|s| s.load1).collect();
        if v.is_empty() { "-".into() } else { format!("{:.1}", v.iter().sum::<f64>() / v.len() as f64) }
    };
    let pct = |a: f64, b: f64| if a > 0.0 { format!("{:+.0}%", (b - a) / a * 100.0) } else { "-".into() };
    let (ra, rb) = (rate(&a0, &a1, READ_CLASSES), rate(&b0, &b1, READ_CLASSES));
    let (wa, wb) = (rate(&a0, &a1, WRITE_CLASSES), rate(&b0, &b1, WRITE_CLASSES));
    let mut line = format!(
        "over time (20-40% window -> 80-100% window): reads {ra:.0}/s -> {rb:.0}/s ({}), writes {wa:.0}/s -> {wb:.0}/s ({}); mean latency",
        pct(ra, rb),
        pct(wa, wb)
    );
    for c in [FEED, POST, COMMENTS, LIKERS, LIKE, COMMENT] {
        let _ = write!(line, " {} {:.1} -> {:.1} ms,", NAMES[c], lat(&a0, &a1, c), lat(&b0, &b1, c));
    }
    let _ = write!(
        line,
        " process CPU {} -> {}, load average {} -> {}",
        cpu(&a0, &a1),
        cpu(&b0, &b1),
        load(windows[0]),
        load(windows[1])
    );
    Some(line)
}

/// Mean latency (ms) per second of the given class, between consecutive samples.
fn mean_latency(samples: &[Sample], class: usize) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .filter_map(|w| {
            let n = w[1].answered[class] - w[0].answered[class];
            (n > 0).then(|| {
                (w[1].t, (w[1].latency_us[class] - w[0].latency_us[class]) as f64 / n as f64 / 1000.0)
            })
        })
        .collect()
}

async fn sampler(sh: Arc<Shared>, rss: RssSource, started: Instant, report_every: u64) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(4096);
    let mut since_report = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let stopping = sh.stop.load(Ordering::Relaxed);
        let (ok, errors, limited) = sh.totals();
        // One lock for both (a guard held across the struct literal would self-deadlock).
        let (bounded_mib, heap_mib) = {
            let g = sh.gauges.lock().unwrap_or_else(|e| e.into_inner());
            let g = g.as_ref();
            (g.map(|g| mib(g.bounded())), g.filter(|g| g.heap > 0.0).map(|g| mib(g.heap)))
        };
        let s = Sample {
            t: started.elapsed().as_secs_f64(),
            rss_mib: rss.rss_mib(),
            bounded_mib,
            heap_mib,
            ok,
            answered: std::array::from_fn(|c| sh.counters[c].answered.load(Ordering::Relaxed)),
            latency_us: std::array::from_fn(|c| sh.counters[c].latency_us.load(Ordering::Relaxed)),
            errors,
            limited,
            cpu_s: cpu_seconds(rss),
            load1: load_average(),
        };
        since_report += 1;
        if let Some(prev) = samples.last().filter(|_| since_report >= report_every) {
            since_report = 0;
            let prev: &Sample = prev;
            let dt = (s.t - prev.t).max(1e-9);
            let rate = |r: std::ops::Range<usize>| r.map(|c| s.ok[c] - prev.ok[c]).sum::<u64>() as f64 / dt;
            let mem = s.rss_mib.map(|m| format!("RSS {m:.0} MiB")).unwrap_or_else(|| "RSS -".into());
            let lat = |c: usize| {
                let n = s.answered[c] - prev.answered[c];
                if n == 0 { 0.0 } else { (s.latency_us[c] - prev.latency_us[c]) as f64 / n as f64 / 1000.0 }
            };
            let cpu = match (s.cpu_s, prev.cpu_s) {
                (Some(a), Some(b)) => format!("cpu {:.0}%", (a - b) / dt * 100.0),
                _ => "cpu -".into(),
            };
            eprintln!(
                "  t={:>4.0}s  reads {:>6.0}/s  writes {:>5.0}/s  mean ms: feed {:.1} like {:.1} comment {:.1}  \
                 {mem}  {cpu}  load {:.1}  errors {}  429s {}  viral likers {}",
                s.t,
                rate(READ_CLASSES),
                rate(WRITE_CLASSES),
                lat(FEED),
                lat(LIKE),
                lat(COMMENT),
                s.load1.unwrap_or(0.0),
                s.errors,
                s.limited,
                sh.expected[0].load(Ordering::Relaxed)
            );
        }
        samples.push(s);
        if stopping {
            return samples;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeding and the final checks.

async fn seed(world: &Arc<World>, service: &str, authors: usize, concurrency: usize) -> anyhow::Result<()> {
    let mut reqs: Vec<(String, Option<String>)> = Vec::new();
    for u in 0..world.tokens.len() {
        let body = format!(r#"{{"username":"soak{u}","verified":{}}}"#, u < 50);
        reqs.push((format!("/v1/users/{}", world.user_id(u)), Some(body)));
    }
    for p in 0..=world.zipf_cdf.len() {
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
        .map(|(path, body)| {
            let world = world.clone();
            async move {
                let url = format!("{}{path}", world.base);
                let (st, b) = call(&world.client, Method::PUT, &url, service, body).await?;
                anyhow::ensure!(st.is_success(), "seeding PUT {path}: {st} {}", String::from_utf8_lossy(&b));
                Ok(())
            }
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
        world.zipf_cdf.len() + 1
    );
    Ok(())
}

/// Every post's like count as a reader sees it, by post index.
async fn read_counts(world: &World, token: &str) -> anyhow::Result<Vec<Option<i64>>> {
    let total = world.zipf_cdf.len() + 1;
    let mut counts = vec![None; total];
    for chunk in (0..total).collect::<Vec<_>>().chunks(100) {
        let ids = chunk.iter().map(|&i| world.post_id(i).to_string()).collect::<Vec<_>>().join(",");
        let url = format!("{}/v1/posts?ids={ids}", world.base);
        let (st, b) = call(&world.client, Method::GET, &url, token, None).await?;
        anyhow::ensure!(st.is_success(), "reading counts: {st} {}", String::from_utf8_lossy(&b));
        let page: CountsPage = serde_json::from_slice(&b).context("reading counts")?;
        for p in page.posts {
            let id: u64 = p.post_id.parse()?;
            if let Some(slot) = id.checked_sub(world.post_base).and_then(|i| counts.get_mut(i as usize)) {
                *slot = p.like_count;
            }
        }
    }
    Ok(counts)
}

/// Distinct likers of a post, by walking its likers list.
async fn count_likers(world: &World, token: &str, post: u64) -> anyhow::Result<u64> {
    let mut seen = std::collections::HashSet::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut url = format!("{}/v1/posts/{post}/likers?limit=100", world.base);
        if let Some(c) = &cursor {
            url.push_str("&cursor=");
            url.push_str(c);
        }
        let (st, b) = call(&world.client, Method::GET, &url, token, None).await?;
        anyhow::ensure!(st.is_success(), "likers page: {st} {}", String::from_utf8_lossy(&b));
        let page: Page = serde_json::from_slice(&b).context("likers page")?;
        for item in &page.items {
            seen.insert(item["user_id"].as_str().unwrap_or_default().to_string());
        }
        match page.next_cursor {
            Some(c) if !page.items.is_empty() => cursor = Some(c),
            _ => return Ok(seen.len() as u64),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The chart.

fn nice_step(range: f64, target: f64) -> f64 {
    let raw = (range / target).max(1e-9);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

struct Series {
    label: String,
    color: &'static str,
    points: Vec<(f64, f64)>,
}

/// One panel of the chart: axes, grid, shaded windows, polylines and a legend.
fn panel(
    out: &mut String,
    top: f64,
    title: &str,
    unit: &str,
    series: &[Series],
    x_max: f64,
    shade: &[(f64, f64, &str)],
) {
    let (left, width, height) = (70.0, 840.0, 170.0);
    let y_max_raw = series.iter().flat_map(|s| s.points.iter().map(|p| p.1)).fold(0.0, f64::max).max(1.0);
    let ystep = nice_step(y_max_raw * 1.1, 5.0);
    let y_max = (y_max_raw * 1.1 / ystep).ceil() * ystep;
    let x_max = x_max.max(1.0);
    let xs = |t: f64| left + t / x_max * width;
    let ys = |v: f64| top + height - v / y_max * height;
    let _ = writeln!(out, r##"<text x="{left}" y="{:.1}" class="h">{title}</text>"##, top - 8.0);
    for &(a, b, label) in shade {
        let _ = writeln!(
            out,
            r##"<rect x="{:.1}" y="{top:.1}" width="{:.1}" height="{height}" fill="#dde8f5"/><text x="{:.1}" y="{:.1}" class="s">{label}</text>"##,
            xs(a),
            (xs(b) - xs(a)).max(0.0),
            xs(a) + 3.0,
            top + 12.0
        );
    }
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let y = ys(v);
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{}</text>"##,
            left + width,
            left - 6.0,
            y + 4.0,
            fmt_num(v)
        );
        v += ystep;
    }
    let xstep = nice_step(x_max, 10.0);
    let mut t = 0.0;
    while t <= x_max + 1e-9 {
        let x = xs(t);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#999"/><text x="{x:.1}" y="{:.1}" class="a" text-anchor="middle">{}</text>"##,
            top + height,
            top + height + 4.0,
            top + height + 16.0,
            fmt_num(t)
        );
        t += xstep;
    }
    let _ = writeln!(
        out,
        r##"<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/><text x="{:.1}" y="{:.1}" class="a" text-anchor="end">{unit}</text>"##,
        left + width,
        top + height + 30.0
    );
    for (k, s) in series.iter().enumerate() {
        let pts: Vec<String> = s.points.iter().map(|&(t, v)| format!("{:.1},{:.1}", xs(t), ys(v))).collect();
        let _ = writeln!(
            out,
            r##"<polyline fill="none" stroke="{}" stroke-width="1.6" points="{}"/>"##,
            s.color,
            pts.join(" ")
        );
        let lx = left + 10.0 + 190.0 * k as f64;
        let ly = top + height + 30.0;
        let _ = writeln!(
            out,
            r##"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{}" stroke-width="3"/><text x="{:.1}" y="{ly:.1}" class="a">{}</text>"##,
            ly - 4.0,
            lx + 18.0,
            ly - 4.0,
            s.color,
            lx + 24.0,
            s.label
        );
    }
}

fn fmt_num(v: f64) -> String {
    if v >= 10_000.0 && v % 1000.0 == 0.0 {
        format!("{}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Per-second rates between consecutive samples, for the given classes.
fn rates(samples: &[Sample], classes: std::ops::Range<usize>) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].t - w[0].t).max(1e-9);
            let n: u64 = classes.clone().map(|c| w[1].ok[c] - w[0].ok[c]).sum();
            (w[1].t, n as f64 / dt)
        })
        .collect()
}

fn render_svg(samples: &[Sample], title: &str, subtitle: &str) -> String {
    let x_max = samples.last().map(|s| s.t).unwrap_or(1.0);
    let rss = series(samples, |s| s.rss_mib);
    let unaccounted = series(samples, unaccounted);
    let heap = series(samples, |s| s.heap_mib);
    let unexplained = series(samples, unexplained);
    let at = |q: usize| x_max * q as f64 / 10.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="960" height="1070" viewBox="0 0 960 1070" font-family="sans-serif">
<style>.h{{font-size:14px;font-weight:bold}} .a{{font-size:11px;fill:#444}} .s{{font-size:10px;fill:#5577aa}} .t{{font-size:16px;font-weight:bold}} .u{{font-size:12px;fill:#333}}</style>
<rect width="960" height="1070" fill="#fff"/>
<text x="70" y="26" class="t">{title}</text>
<text x="70" y="46" class="u">{subtitle}</text>"##
    );
    panel(
        &mut out,
        90.0,
        "Resident memory (RSS)",
        "MiB over seconds",
        &[
            Series { label: "RSS MiB".into(), color: "#c0392b", points: rss },
            Series { label: "RSS - bounded parts".into(), color: "#16a085", points: unaccounted },
            Series { label: "live heap".into(), color: "#8e44ad", points: heap },
            Series {
                label: "live heap - bounded parts (judged)".into(),
                color: "#d35400",
                points: unexplained,
            },
        ],
        x_max,
        &[(at(2), at(4), "baseline window"), (at(8), at(10), "final window")],
    );
    let reads = [
        Series { label: "all reads/s".into(), color: "#2c3e50", points: rates(samples, READ_CLASSES) },
        Series { label: "feed pages/s".into(), color: "#2980b9", points: rates(samples, FEED..FEED + 1) },
    ];
    panel(&mut out, 340.0, "Reads", "requests/s over seconds", &reads, x_max, &[]);
    let writes = [
        Series {
            label: "post likes/unlikes/s".into(),
            color: "#c0392b",
            points: rates(samples, LIKE..LIKE + 1),
        },
        Series { label: "comments/s".into(), color: "#27ae60", points: rates(samples, COMMENT..COMMENT + 1) },
        Series {
            label: "comment likes/s".into(),
            color: "#8e44ad",
            points: rates(samples, COMMENT_LIKE..COMMENT_LIKE + 1),
        },
    ];
    panel(&mut out, 590.0, "Writes", "requests/s over seconds", &writes, x_max, &[]);
    let latency = [
        Series { label: "feed page".into(), color: "#2980b9", points: mean_latency(samples, FEED) },
        Series { label: "comment page".into(), color: "#16a085", points: mean_latency(samples, COMMENTS) },
        Series { label: "post like/unlike".into(), color: "#c0392b", points: mean_latency(samples, LIKE) },
        Series { label: "comment".into(), color: "#27ae60", points: mean_latency(samples, COMMENT) },
    ];
    panel(&mut out, 840.0, "Mean latency per second", "ms over seconds", &latency, x_max, &[]);
    out.push_str("</svg>\n");
    out
}

// ---------------------------------------------------------------------------------------------
// The run.

/// The in-process service: its shutdown trigger, its task and the temporary store it uses.
struct InProcess {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    _tmp: tempfile::TempDir,
}

pub async fn run(a: &SoakArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.concurrency >= 1, "--concurrency must be at least 1");
    anyhow::ensure!(
        a.users >= a.concurrency.max(100),
        "--users must be at least 100 and at least --concurrency"
    );
    anyhow::ensure!(a.posts >= 20, "--posts must be at least 20 (a feed page)");
    anyhow::ensure!((0.0..=1.0).contains(&a.viral_share), "--viral-share is a fraction from 0 to 1");
    let rss_at_launch = RssSource::This.rss_mib();

    // The service: in this process, or a running server.
    let (base, keys, server, rss) = match &a.url {
        Some(url) => {
            let secret =
                super::server_secret(a.secret.as_deref(), a.config.as_deref(), a.data_dir.as_deref())?;
            let rss = a.pid.map(RssSource::Pid).unwrap_or(RssSource::None);
            (url.trim_end_matches('/').to_string(), TokenKeys::new(&secret), None, rss)
        }
        None => {
            let tmp = tempfile::tempdir()?;
            let data_dir = a.data_dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
            let cfg = Config::load(
                a.config.as_deref(),
                &Overrides { listen: Some("127.0.0.1:0".into()), role: None, data_dir: Some(data_dir) },
            )?;
            let app = Application::build(&cfg).await?;
            let addr = app.local_addr();
            let keys = app.keys();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(app.run_until_stopped(async move {
                let _ = stopped.await;
            }));
            (format!("http://{addr}"), keys, Some(InProcess { stop, task, _tmp: tmp }), RssSource::This)
        }
    };
    let where_ = match &server {
        Some(_) => {
            format!("in process ({base}, embedded store, fresh temporary directory unless --data-dir)")
        }
        None => format!("against {base}"),
    };
    println!(
        "soak: {} s, concurrency {}, {}, target rate {}",
        a.duration.as_secs(),
        a.concurrency,
        where_,
        a.rate.map(|r| format!("{r:.0} req/s")).unwrap_or_else(|| "unthrottled".into())
    );
    if matches!(rss, RssSource::None) {
        println!("no --pid: the server's RSS is not sampled and the memory rule is not applied");
    }

    // The world: IDs fresh per run, so runs against one server do not collide.
    let run_no = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs() % 1_000_000 + 1;
    let id_base = run_no * 1_000_000_000;
    let ttl = a.duration + Duration::from_secs(7200);
    let user_base = id_base + 100_000_000;
    let tokens: Vec<String> = (0..a.users as u64)
        .map(|i| keys.mint(UserId(user_base + i), false, ttl))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!(e))?;
    let weights: Vec<f64> = (1..=a.posts).map(|r| 1.0 / (r as f64).powf(a.zipf)).collect();
    let total: f64 = weights.iter().sum();
    let mut acc = 0.0;
    let zipf_cdf = weights
        .iter()
        .map(|w| {
            acc += w / total;
            acc
        })
        .collect();
    let client: HttpClient =
        Client::builder(TokioExecutor::new()).pool_max_idle_per_host(a.concurrency + 8).build_http();
    let world = Arc::new(World {
        base,
        client,
        keys: keys.clone(),
        ttl,
        tokens,
        user_base,
        viral_user_base: id_base + 200_000_000,
        post_base: id_base,
        zipf_cdf,
        viral_share: a.viral_share,
        concurrency: a.concurrency,
        write_per_mille: a.write_per_mille,
    });
    let service = keys.mint(UserId(1), true, ttl).map_err(|e| anyhow::anyhow!(e))?;
    let seeded = Instant::now();
    seed(&world, &service, 500.min(a.users), a.concurrency.max(16)).await?;
    println!("seeding took {:.1} s; viral post {}", seeded.elapsed().as_secs_f64(), world.post_id(0));

    let sh = Arc::new(Shared {
        counters: Default::default(),
        latency: std::array::from_fn(|c| Mutex::new(Reservoir::new(a.seed ^ c as u64))),
        kinds: ErrorKinds::default(),
        error_log: Mutex::new(Vec::new()),
        expected: (0..=a.posts).map(|_| AtomicI64::new(0)).collect(),
        comments: Mutex::new(Ring { items: VecDeque::with_capacity(RING) }),
        top_level: Mutex::new(Ring { items: VecDeque::with_capacity(RING) }),
        burst_left: AtomicU64::new(0),
        burst_post: AtomicU64::new(0),
        burst_parent: AtomicU64::new(0),
        bursts: AtomicU64::new(0),
        viral_next: AtomicU64::new(0),
        scrapes: AtomicU64::new(0),
        scrape_errors: AtomicU64::new(0),
        gauges: Mutex::new(None),
        stop: AtomicBool::new(false),
    });

    // The load.
    let rss_start = rss.rss_mib();
    let started = Instant::now();
    let report_every = (a.duration.as_secs() / 20).clamp(5, 60);
    let sampler = tokio::spawn(sampler(sh.clone(), rss, started, report_every));
    let bursts = {
        let (sh, world, every, n) = (sh.clone(), world.clone(), a.burst_every.max(1), a.burst_comments);
        let mut rng = StdRng::seed_from_u64(a.seed ^ 0xb0b);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(
                tokio::time::Instant::now() + Duration::from_secs(every / 2 + 1),
                Duration::from_secs(every),
            );
            if n == 0 {
                return;
            }
            loop {
                tick.tick().await;
                if sh.stop.load(Ordering::Relaxed) {
                    return;
                }
                // Alternately the viral post and one of the ten most popular others.
                let k = sh.bursts.fetch_add(1, Ordering::Relaxed);
                let post = if k % 2 == 0 { 0 } else { 1 + rng.random_range(0..10.min(world.zipf_cdf.len())) };
                sh.burst_post.store(post as u64, Ordering::Relaxed);
                sh.burst_parent.store(0, Ordering::Relaxed);
                sh.burst_left.store(n, Ordering::Relaxed);
            }
        })
    };
    let scraper = (a.scrape_every > 0).then(|| {
        let (sh, world, every) = (sh.clone(), world.clone(), a.scrape_every);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(every));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while !sh.stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let ok = get_metrics(&world).await.is_some();
                let counter = if ok { &sh.scrapes } else { &sh.scrape_errors };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
    });
    // The server's bounded memory, for the memory rule (only when its RSS is measured).
    let poller = (!matches!(rss, RssSource::None)).then(|| {
        let (sh, world) = (sh.clone(), world.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            while !sh.stop.load(Ordering::Relaxed) {
                tick.tick().await;
                let Some(body) = get_metrics(&world).await else { continue };
                let parsed = ServerMemory::parse(&String::from_utf8_lossy(&body));
                *sh.gauges.lock().unwrap_or_else(|e| e.into_inner()) = parsed;
            }
        })
    });
    let interval = a.rate.filter(|r| *r > 0.0).map(|r| Duration::from_secs_f64(a.concurrency as f64 / r));
    let mut loops = Vec::with_capacity(a.concurrency);
    for w in 0..a.concurrency {
        let l = Loop {
            w,
            world: world.clone(),
            sh: sh.clone(),
            rng: StdRng::seed_from_u64(a.seed.wrapping_mul(1000) + w as u64),
            likes: VecDeque::with_capacity(512),
            feeds: w as u64,
        };
        loops.push(tokio::spawn(l.run(interval)));
    }
    tokio::time::sleep(a.duration).await;
    sh.stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.await?;
    }
    let elapsed = started.elapsed();
    bursts.abort();
    if let Some(s) = scraper {
        s.abort();
    }
    if let Some(p) = poller {
        p.abort();
    }
    let samples = sampler.await?;
    let last_write = Instant::now();

    // Results.
    let mut failures: Vec<String> = Vec::new();
    let secs = elapsed.as_secs_f64();
    let (ok, errors, limited) = sh.totals();
    let total_ok: u64 = ok.iter().sum();
    let reads: u64 = ok[READ_CLASSES].iter().sum();
    let writes: u64 = ok[WRITE_CLASSES].iter().sum();
    println!();
    println!("== results ({secs:.1} s of load) ==");
    println!(
        "total: {total_ok} successful requests, {:.0}/s (reads {:.0}/s, writes {:.0}/s, reads:writes {:.1}:1); {} comment bursts",
        total_ok as f64 / secs,
        reads as f64 / secs,
        writes as f64 / secs,
        reads as f64 / writes.max(1) as f64,
        sh.bursts.load(Ordering::Relaxed)
    );
    println!(
        "{:<22} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>5} {:>6}",
        "class", "ok", "ok/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "404*", "429", "errors"
    );
    let ms = |us: u64| us as f64 / 1000.0;
    for c in 0..CLASSES {
        let mut lat = {
            let r = sh.latency[c].lock().unwrap_or_else(|e| e.into_inner());
            r.samples[..r.len].to_vec()
        };
        let s = stats::summarise(&mut lat);
        let k = &sh.counters[c];
        println!(
            "{:<22} {:>9} {:>8.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>6} {:>5} {:>6}",
            NAMES[c],
            ok[c],
            ok[c] as f64 / secs,
            ms(s.p50),
            ms(s.p90),
            ms(s.p99),
            ms(s.p999),
            ms(s.max),
            k.expected_404.load(Ordering::Relaxed),
            k.limited.load(Ordering::Relaxed),
            k.errors.load(Ordering::Relaxed)
        );
    }
    println!(
        "(latency of every answered request, from a uniform sample of up to {RESERVOIR} per class; \
         404* = expected 404 on a comment held back by moderation)"
    );
    let kinds = &sh.kinds;
    println!(
        "errors: {errors} (5xx {}, other 4xx {}, transport {}, malformed 2xx {}, read-your-writes {}); rate limited (429, not an error): {limited}",
        kinds.server.load(Ordering::Relaxed),
        kinds.client.load(Ordering::Relaxed),
        kinds.transport.load(Ordering::Relaxed),
        kinds.bad_body.load(Ordering::Relaxed),
        kinds.ryw.load(Ordering::Relaxed)
    );
    for e in sh.error_log.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        println!("  error: {e}");
    }
    if errors > 0 {
        failures.push(format!("{errors} request errors"));
    }
    if a.scrape_every > 0 {
        let bad = sh.scrape_errors.load(Ordering::Relaxed);
        println!(
            "GET /metrics scraped every {} s: {} ok, {bad} failed",
            a.scrape_every,
            sh.scrapes.load(Ordering::Relaxed)
        );
        if bad > 0 {
            failures.push(format!("{bad} failed scrapes of /metrics"));
        }
    }

    // Memory.
    let rss_series = series(&samples, |s| s.rss_mib);
    let peak = rss_series.iter().map(|p| p.1).fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    // Unaccounted = RSS - bounded parts, once the server has reported them; unexplained heap
    // = live heap - bounded parts, when it also reports its live heap (then that is judged).
    let unaccounted = series(&samples, unaccounted);
    let unexplained = series(&samples, unexplained);
    let judged_heap = !unexplained.is_empty() && unexplained.len() + 10 >= rss_series.len();
    let judged_unaccounted =
        judged_heap || (!unaccounted.is_empty() && unaccounted.len() + 10 >= rss_series.len());
    let raw_verdict = judge_growth(&rss_series, a.max_growth_pct, a.max_growth_mib);
    let verdict = if judged_heap {
        judge_growth(&unexplained, a.max_growth_pct, a.max_growth_mib)
    } else if judged_unaccounted {
        judge_growth(&unaccounted, a.max_growth_pct, a.max_growth_mib)
    } else {
        raw_verdict.clone()
    };
    let last_gauges = sh.gauges.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let f0 = |v: Option<f64>| v.map(|m| format!("{m:.0}")).unwrap_or_else(|| "-".into());
    if !matches!(rss, RssSource::None) {
        println!(
            "RSS MiB: {}load start {}, peak {} (VmHWM {}), end {}",
            if matches!(rss, RssSource::This) {
                format!("client launch {}, ", f0(rss_at_launch))
            } else {
                String::new()
            },
            f0(rss_start),
            f0(peak),
            f0(rss.hwm_mib()),
            f0(rss_series.last().map(|p| p.1))
        );
    }
    if let Some(g) = last_gauges {
        println!(
            "server's bounded memory at the end: block cache {:.0} of {:.0} MiB, memtables {:.0} MiB (caps {:.0} MiB), \
             pinned filters and indexes {:.1} MiB (data on disk {:.0} MiB), caches {:.0} MiB:",
            mib(g.block_cache),
            mib(g.block_cache_cap),
            mib(g.write_buffer),
            mib(g.write_buffer_cap),
            mib(g.pinned),
            mib(g.disk),
            mib(g.cache_bytes())
        );
        for (name, [entries, cap, bytes]) in &g.caches {
            println!("  cache {name:<16} {entries:>8} of {cap:>8} entries, {:>7.1} MiB", mib(*bytes));
        }
        for over in g.over_caps() {
            failures.push(format!("bounded memory above its cap: {over}"));
        }
    }
    if let (true, Some(g)) = (judged_unaccounted, &raw_verdict) {
        println!(
            "raw RSS (not judged): {:.0} MiB over 20-40%, {:.0} MiB over 80-100% ({:+.1} MiB, late slope {:.2} MiB/min)",
            g.baseline_mib, g.final_mib, g.growth_mib, g.late_slope
        );
    }
    if judged_heap {
        if let Some(g) = judge_growth(&unaccounted, a.max_growth_pct, a.max_growth_mib) {
            println!(
                "RSS - bounded parts (not judged): {:.0} MiB over 20-40%, {:.0} MiB over 80-100% ({:+.1} MiB, late slope {:.2} MiB/min)",
                g.baseline_mib, g.final_mib, g.growth_mib, g.late_slope
            );
        }
        if let Some(line) = overhead_guard(&samples, &mut failures) {
            println!("{line}");
        }
    }
    let what = if judged_heap {
        "unexplained live heap (live heap - bounded parts)"
    } else if judged_unaccounted {
        "unaccounted memory (RSS - bounded parts)"
    } else {
        "RSS"
    };
    let memory_line = match &verdict {
        Some(g) => {
            let line = format!(
                "memory rule on {what}: mean {:.0} MiB over 20-40% of the run, {:.0} MiB over 80-100%: {:+.1} MiB ({:+.1}%); \
                 slope {:.2} MiB/min between the windows, {:.2} MiB/min over the last 40% -> {} \
                 (fails only if growth > {} MiB and > {}% and the late slope >= half the window slope)",
                g.baseline_mib,
                g.final_mib,
                g.growth_mib,
                g.growth_pct,
                g.window_slope,
                g.late_slope,
                if g.unbounded { "GROWING WITHOUT BOUND" } else { "bounded OK" },
                a.max_growth_mib,
                a.max_growth_pct
            );
            if g.unbounded {
                failures.push("memory grows without bound".into());
            }
            line
        }
        None => "memory rule: not applied (RSS not sampled, or fewer than 10 samples)".into(),
    };
    println!("{memory_line}");
    if let Some(line) = over_time(&samples) {
        println!("{line}");
    }

    // Counts: every post's like count converges to the client's net likes, and the viral
    // post's count equals the length of its likers list.
    let checker =
        keys.mint(UserId(user_base + a.users as u64 + 7), false, ttl).map_err(|e| anyhow::anyhow!(e))?;
    let expected: Vec<i64> = sh.expected.iter().map(|e| e.load(Ordering::Relaxed)).collect();
    let deadline = Duration::from_secs(a.converge_seconds);
    let (converged, mismatches) = loop {
        let counts = read_counts(&world, &checker).await?;
        let bad: Vec<(usize, Option<i64>, i64)> = counts
            .iter()
            .zip(&expected)
            .enumerate()
            .filter(|(_, (got, want))| **got != Some(**want))
            .map(|(i, (got, want))| (i, *got, *want))
            .collect();
        if bad.is_empty() {
            break (Some(last_write.elapsed()), bad);
        }
        if last_write.elapsed() > deadline {
            break (None, bad);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let viral_id = world.post_id(0);
    let likers = count_likers(&world, &checker, viral_id).await?;
    let viral_count = read_counts(&world, &checker).await?[0];
    match converged {
        Some(d) => println!(
            "counts: all {} posts' like_count == the client's net likes, {:.0} ms after the last request  OK",
            expected.len(),
            d.as_secs_f64() * 1000.0
        ),
        None => {
            println!(
                "counts: {} of {} posts did NOT converge within {} s, e.g.:",
                mismatches.len(),
                expected.len(),
                a.converge_seconds
            );
            for (i, got, want) in mismatches.iter().take(10) {
                println!("  post {}: like_count {got:?}, client's net likes {want}", world.post_id(*i));
            }
            failures.push(format!("{} post counts did not converge", mismatches.len()));
        }
    }
    let viral_ok = viral_count == Some(expected[0]) && likers as i64 == expected[0];
    println!(
        "viral post {viral_id}: like_count {} == likers listed {likers} == client's net likes {}  {}",
        viral_count.map(|c| c.to_string()).unwrap_or_else(|| "null".into()),
        expected[0],
        if viral_ok { "OK" } else { "MISMATCH" }
    );
    if !viral_ok {
        failures.push("viral post: like_count, likers list and the client's likes differ".into());
    }

    // The chart.
    let title = format!(
        "likewise bench soak: {} s, {} client loops, {}",
        a.duration.as_secs(),
        a.concurrency,
        if server.is_some() { "in process (embedded store)" } else { "external server" }
    );
    let subtitle = format!(
        "RSS start {} MiB, peak {} MiB, end {} MiB; {:.0} req/s ({:.1}:1 reads:writes); errors {errors}; {}",
        f0(rss_start),
        f0(peak),
        f0(rss_series.last().map(|p| p.1)),
        total_ok as f64 / secs,
        reads as f64 / writes.max(1) as f64,
        match &verdict {
            Some(g) if g.unbounded => "memory GROWING".to_string(),
            Some(g) => format!("memory bounded ({:+.0} MiB final vs baseline window)", g.growth_mib),
            None => "memory not judged".to_string(),
        }
    );
    if let Some(dir) = a.svg.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    write_svg(&a.svg, &render_svg(&samples, &title, &subtitle))?;
    println!("chart: {}", a.svg.display());

    if let Some(s) = server {
        let _ = s.stop.send(());
        s.task.await?.context("the in-process service failed")?;
    }
    anyhow::ensure!(failures.is_empty(), "soak FAILED: {}", failures.join("; "));
    println!("soak: OK");
    Ok(())
}

fn write_svg(path: &Path, svg: &str) -> anyhow::Result<()> {
    std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..600).map(|s| s as f64).map(|t| (t, f(t))).collect()
    }

    /// A little deterministic noise, as a real RSS series has.
    fn noise(t: f64) -> f64 {
        (t * 1.7).sin() * 3.0
    }

    #[test]
    fn server_memory_is_read_from_the_exposition_and_checked_against_its_caps() {
        let text = "# TYPE likewise_store_block_cache_bytes gauge\n\
            likewise_store_block_cache_bytes 104857600\n\
            likewise_store_block_cache_capacity_bytes 268435456\n\
            likewise_store_write_buffer_bytes 20971520\n\
            likewise_store_write_buffer_limit_bytes 297795584\n\
            likewise_store_pinned_bytes 3145728\n\
            likewise_store_disk_bytes 104857600\n\
            likewise_heap_allocated_bytes 209715200\n\
            likewise_cache_entries{cache=\"posts\"} 5001\n\
            likewise_cache_capacity{cache=\"posts\"} 200000\n\
            likewise_cache_bytes{cache=\"posts\"} 524288\n\
            likewise_cache_bytes{cache=\"view_sketches\"} 524288\n";
        let m = ServerMemory::parse(text).expect("reported");
        assert_eq!(mib(m.bounded()), 100.0 + 20.0 + 3.0 + 1.0);
        assert_eq!(mib(m.heap), 200.0);
        assert_eq!(m.caches["posts"], [5001.0, 200000.0, 524288.0]);
        assert!(m.over_caps().is_empty(), "{:?}", m.over_caps());
        let mut over = ServerMemory { block_cache: 300.0 * 1048576.0, ..m.clone() };
        over.caches.insert("posts".into(), [200_001.0, 200_000.0, 1.0]);
        assert_eq!(over.over_caps().len(), 2, "{:?}", over.over_caps());
        let pinned = ServerMemory { pinned: 2.0 * m.disk, ..m.clone() };
        assert_eq!(pinned.over_caps().len(), 1, "{:?}", pinned.over_caps());
        // A store that reports no block cache: raw RSS is judged.
        assert!(ServerMemory::parse("likewise_cache_entries{cache=\"posts\"} 3\n").is_none());
    }

    #[test]
    fn a_flat_series_passes() {
        let g = judge_growth(&series(|t| 400.0 + noise(t)), 10.0, 32.0).expect("judged");
        assert!(!g.unbounded, "{g:?}");
        assert!(g.growth_mib.abs() < 2.0, "{g:?}");
    }

    #[test]
    fn a_linearly_growing_series_fails() {
        // 0.5 MiB/s: 300 MiB over ten minutes, still climbing at the end.
        let g = judge_growth(&series(|t| 200.0 + 0.5 * t + noise(t)), 10.0, 32.0).expect("judged");
        assert!(g.unbounded, "{g:?}");
        assert!((g.late_slope - 30.0).abs() < 2.0 && (g.window_slope - 30.0).abs() < 2.0, "{g:?}");
    }

    #[test]
    fn a_plateau_after_warm_up_passes() {
        // Climbs through the warm-up only, then flat.
        let g = judge_growth(&series(|t| 100.0 + 4.0 * t.min(100.0) + noise(t)), 10.0, 32.0).expect("judged");
        assert!(!g.unbounded, "{g:?}");
        // Climbs into the baseline window (caches filling), then levels off: large growth
        // between the windows, but no longer climbing at the end.
        let g = judge_growth(&series(|t| 100.0 + (t.min(300.0)) + noise(t)), 10.0, 32.0).expect("judged");
        assert!(g.growth_mib > 100.0 && !g.unbounded, "{g:?}");
    }

    #[test]
    fn small_growth_passes_and_short_runs_are_not_judged() {
        let g = judge_growth(&series(|t| 400.0 + 0.02 * t), 10.0, 32.0).expect("judged");
        assert!(!g.unbounded, "{g:?}");
        assert!(judge_growth(&[(0.0, 1.0); 9], 10.0, 32.0).is_none());
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("600").ok(), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("600s").ok(), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m").ok(), Some(Duration::from_secs(600)));
        assert!(parse_duration("0").is_err() && parse_duration("5x").is_err());
    }

    fn sample(t: f64, rss: f64, heap: Option<f64>) -> Sample {
        Sample {
            t,
            rss_mib: Some(rss),
            bounded_mib: Some(40.0),
            heap_mib: heap,
            ok: [0; CLASSES],
            answered: [0; CLASSES],
            latency_us: [0; CLASSES],
            errors: 0,
            limited: 0,
            cpu_s: None,
            load1: None,
        }
    }

    #[test]
    fn allocator_overhead_beyond_the_heap_plus_64_mib_fails() {
        let run = |rss: f64, heap: f64| {
            let samples: Vec<Sample> = (0..100).map(|i| sample(i as f64, rss, Some(heap))).collect();
            let mut failures = Vec::new();
            let line = overhead_guard(&samples, &mut failures).expect("judged");
            (line, failures)
        };
        let (line, failures) = run(300.0, 200.0);
        assert!(failures.is_empty() && line.contains("OK"), "{line}");
        let (line, failures) = run(500.0, 200.0);
        assert_eq!(failures.len(), 1, "{line}");
        // Without a live-heap gauge there is nothing to judge.
        let samples: Vec<Sample> = (0..100).map(|i| sample(i as f64, 300.0, None)).collect();
        assert!(overhead_guard(&samples, &mut Vec::new()).is_none());
    }

    #[test]
    fn the_chart_is_an_svg_with_one_polyline_per_series() {
        let samples: Vec<Sample> = (0..30)
            .map(|i| Sample {
                t: i as f64,
                rss_mib: Some(100.0 + i as f64),
                bounded_mib: Some(40.0),
                heap_mib: Some(60.0 + i as f64 / 2.0),
                ok: [i * 10; CLASSES],
                answered: [i * 10; CLASSES],
                latency_us: [i * 20_000; CLASSES],
                errors: 0,
                limited: 0,
                cpu_s: None,
                load1: None,
            })
            .collect();
        let svg = render_svg(&samples, "t", "s");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 13);
    }
}
