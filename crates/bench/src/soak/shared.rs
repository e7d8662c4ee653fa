//! What the client loops share: the operation classes, each class's counters and latency
//! sample, the errors seen, the likes each post should end with, recent comments, the burst
//! in progress, and the stop flag.

use super::gauges::ServerMemory;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

// Operation classes: the index of a request's counters, latency sample and name.
pub(super) const FEED: usize = 0;
pub(super) const POST: usize = 1;
pub(super) const COMMENTS: usize = 2;
pub(super) const LIKERS: usize = 3;
pub(super) const REPLIES: usize = 4;
pub(super) const LIKE: usize = 5;
pub(super) const COMMENT: usize = 6;
pub(super) const COMMENT_LIKE: usize = 7;
/// How many operation classes there are.
pub(super) const CLASSES: usize = 8;
/// The reads among the classes.
pub(super) const READ_CLASSES: std::ops::Range<usize> = 0..5;
/// The writes among the classes.
pub(super) const WRITE_CLASSES: std::ops::Range<usize> = 5..8;
/// Each class's name in the results.
pub(super) const NAMES: [&str; CLASSES] = [
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
pub(super) const RESERVOIR: usize = 200_000;

/// A uniform sample of a class's latencies (microseconds).
pub(super) struct Reservoir {
    samples: Vec<u64>,
    len: usize,
    seen: u64,
    rng: StdRng,
}

impl Reservoir {
    pub(super) fn new(seed: u64) -> Self {
        // Filled with a non-zero value so the pages are resident before the load starts.
        Reservoir { samples: vec![u64::MAX; RESERVOIR], len: 0, seen: 0, rng: StdRng::seed_from_u64(seed) }
    }

    /// Offer one latency to the sample.
    pub(super) fn add(&mut self, v: u64) {
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

    /// The latencies sampled so far.
    pub(super) fn samples(&self) -> &[u64] {
        &self.samples[..self.len]
    }
}

/// What happened to one class's requests.
#[derive(Default)]
pub(super) struct Counters {
    pub(super) ok: AtomicU64,
    pub(super) expected_404: AtomicU64,
    pub(super) limited: AtomicU64,
    pub(super) errors: AtomicU64,
    /// Answered requests and the sum of their latencies (mean latency over time).
    pub(super) answered: AtomicU64,
    pub(super) latency_us: AtomicU64,
}

/// Errors by kind (see `args::RULES`).
#[derive(Default)]
pub(super) struct ErrorKinds {
    pub(super) server: AtomicU64,
    pub(super) client: AtomicU64,
    pub(super) transport: AtomicU64,
    pub(super) bad_body: AtomicU64,
    pub(super) ryw: AtomicU64,
}

/// Recent comments (ID, post index), bounded.
pub(super) struct Ring {
    items: VecDeque<(u64, usize)>,
}

const RING: usize = 4096;

impl Ring {
    fn new() -> Self {
        Ring { items: VecDeque::with_capacity(RING) }
    }

    /// Remember a comment, forgetting the oldest when full.
    pub(super) fn push(&mut self, item: (u64, usize)) {
        if self.items.len() == RING {
            self.items.pop_front();
        }
        self.items.push_back(item);
    }

    /// A remembered comment, at random.
    pub(super) fn pick(&self, rng: &mut StdRng) -> Option<(u64, usize)> {
        if self.items.is_empty() {
            return None;
        }
        self.items.get(rng.random_range(0..self.items.len())).copied()
    }
}

/// State shared by the client loops.
pub(super) struct Shared {
    pub(super) counters: [Counters; CLASSES],
    pub(super) latency: [Mutex<Reservoir>; CLASSES],
    pub(super) kinds: ErrorKinds,
    pub(super) error_log: Mutex<Vec<String>>,
    /// Net likes per post index (0 = the viral post), from the `changed` flag of every answer:
    /// +1 for a like that created a row, -1 for an unlike that removed one.
    pub(super) expected: Vec<AtomicI64>,
    pub(super) comments: Mutex<Ring>,
    pub(super) top_level: Mutex<Ring>,
    pub(super) burst_left: AtomicU64,
    pub(super) burst_post: AtomicU64,
    pub(super) burst_parent: AtomicU64,
    pub(super) bursts: AtomicU64,
    pub(super) viral_next: AtomicU64,
    pub(super) scrapes: AtomicU64,
    pub(super) scrape_errors: AtomicU64,
    /// The server's bounded memory from its last /metrics (see `args::RULES`), bytes.
    pub(super) gauges: Mutex<Option<ServerMemory>>,
    pub(super) stop: AtomicBool,
}

impl Shared {
    /// Fresh state for `posts` ordinary posts (and the viral one); `seed` seeds the latency
    /// samples.
    pub(super) fn new(posts: usize, seed: u64) -> Self {
        Shared {
            counters: Default::default(),
            latency: std::array::from_fn(|c| Mutex::new(Reservoir::new(seed ^ c as u64))),
            kinds: ErrorKinds::default(),
            error_log: Mutex::new(Vec::new()),
            expected: (0..=posts).map(|_| AtomicI64::new(0)).collect(),
            comments: Mutex::new(Ring::new()),
            top_level: Mutex::new(Ring::new()),
            burst_left: AtomicU64::new(0),
            burst_post: AtomicU64::new(0),
            burst_parent: AtomicU64::new(0),
            bursts: AtomicU64::new(0),
            viral_next: AtomicU64::new(0),
            scrapes: AtomicU64::new(0),
            scrape_errors: AtomicU64::new(0),
            gauges: Mutex::new(None),
            stop: AtomicBool::new(false),
        }
    }

    /// Count an error of `kind` on `class`; the first 20 are kept for the results.
    pub(super) fn error(&self, class: usize, kind: &AtomicU64, msg: String) {
        self.counters[class].errors.fetch_add(1, Ordering::Relaxed);
        kind.fetch_add(1, Ordering::Relaxed);
        let mut log = self.error_log.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() < 20 {
            log.push(msg);
        }
    }

    /// Successes per class, errors and 429s so far.
    pub(super) fn totals(&self) -> ([u64; CLASSES], u64, u64) {
        let ok = std::array::from_fn(|c| self.counters[c].ok.load(Ordering::Relaxed));
        let errors = self.counters.iter().map(|c| c.errors.load(Ordering::Relaxed)).sum();
        let limited = self.counters.iter().map(|c| c.limited.load(Ordering::Relaxed)).sum();
        (ok, errors, limited)
    }
}
