//! The loops of `bench overload`: a closed loop (a fixed number of requests in flight, the next
//! sent when one is answered) that finds the capacity, and an open loop (requests sent at a
//! fixed rate whatever the answers) that offers a multiple of it. Every write is a new one
//! (request `i` is user `user_base + i`'s), so the ledger can later tell which were stored.

use super::World;
use crate::stats;
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// What the requests write.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Workload {
    /// Likes, each from a new user, spread over the workload's posts.
    Likes,
    /// Likes, and this share of comment creates (each from a new user).
    Mix { comment_percent: u64 },
}

impl Workload {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Workload::Likes => "likes",
            Workload::Mix { .. } => "mix",
        }
    }

    pub(crate) fn index(self) -> u64 {
        match self {
            Workload::Likes => 0,
            Workload::Mix { .. } => 1,
        }
    }

    /// Whether request `i` creates a comment: spread evenly, not in runs.
    fn comments(self, i: u64) -> bool {
        match self {
            Workload::Likes => false,
            Workload::Mix { comment_percent } => {
                (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % 100 < comment_percent
            }
        }
    }
}

/// A write the ledger remembers: request `i` on `post`, a comment or a like.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Write {
    pub(crate) i: u64,
    pub(crate) post: u64,
    pub(crate) comment: bool,
}

/// Every write of a workload that was acknowledged, or shed (answered 503 with `Retry-After`,
/// so never stored). The rest (timeouts, other errors) may or may not be stored.
#[derive(Default)]
pub(crate) struct Ledger {
    next: AtomicU64,
    pub(crate) acked: parking_lot::Mutex<Vec<Write>>,
    pub(crate) shed: parking_lot::Mutex<Vec<Write>>,
}

/// What one request's answer counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Acknowledged within the client timeout.
    Acked,
    /// 503 with `Retry-After`: refused by admission control.
    Shed,
    /// 503 without `Retry-After`: the server's own request timeout.
    Unavailable,
    /// No answer within the client timeout (or an acknowledgement after it).
    TimedOut,
    /// Anything else: another status, a connection error.
    Other,
}

/// A phase's counts and latencies.
#[derive(Default)]
pub(crate) struct Phase {
    secs: f64,
    /// Requests the open loop should have sent.
    offered: u64,
    /// Requests not sent because `--max-in-flight` were already in flight.
    unsent: u64,
    acked: u64,
    shed: u64,
    unavailable: u64,
    timed_out: u64,
    other: u64,
    /// First other answer, to say what it was.
    other_example: Option<String>,
    acked_us: Vec<u64>,
    shed_us: Vec<u64>,
}

impl Phase {
    /// Writes acknowledged within the client timeout, per second.
    pub(crate) fn goodput(&self) -> f64 {
        self.acked as f64 / self.secs.max(1e-9)
    }

    fn sent(&self) -> u64 {
        self.acked + self.shed + self.unavailable + self.timed_out + self.other
    }

    /// Share of the requests sent that were shed.
    pub(crate) fn shed_share(&self) -> f64 {
        self.shed as f64 / self.sent().max(1) as f64
    }

    fn add(&mut self, a: Answer, us: u64, example: impl FnOnce() -> String) {
        match a {
            Answer::Acked => {
                self.acked += 1;
                self.acked_us.push(us);
            }
            Answer::Shed => {
                self.shed += 1;
                self.shed_us.push(us);
            }
            Answer::Unavailable => self.unavailable += 1,
            Answer::TimedOut => self.timed_out += 1,
            Answer::Other => {
                self.other += 1;
                if self.other_example.is_none() {
                    self.other_example = Some(example());
                }
            }
        }
    }

    /// The phase's report line.
    pub(crate) fn line(&mut self) -> String {
        let sent = self.sent().max(1) as f64;
        let pct = |n: u64| n as f64 * 100.0 / sent;
        let offered = if self.offered > 0 {
            format!("offered {:.0}/s (unsent {}), ", self.offered as f64 / self.secs, self.unsent)
        } else {
            String::new()
        };
        let acked = stats::summarise(&mut self.acked_us);
        let shed = stats::summarise(&mut self.shed_us);
        let ms = |us: u64| us as f64 / 1000.0;
        let other = match &self.other_example {
            Some(e) => format!(" (first: {e})"),
            None => String::new(),
        };
        format!(
            "{offered}goodput {:.0}/s; sent {}: acked {:.1}%, shed 503 {:.1}%, other 503 {:.1}%, \
             timed out {:.1}%, other {:.1}%{other}; acked ms p50 {:.1} p99 {:.1} max {:.1}; shed ms p50 {:.1} p99 {:.1}",
            self.goodput(),
            self.sent(),
            pct(self.acked),
            pct(self.shed),
            pct(self.unavailable),
            pct(self.timed_out),
            pct(self.other),
            ms(acked.p50),
            ms(acked.p99),
            ms(acked.max),
            ms(shed.p50),
            ms(shed.p99),
        )
    }
}

/// Send request number `i` of workload `w`, with the client timeout; what its answer counts
/// as, recorded in the ledger, and a description of an unexpected answer.
async fn one(world: &World, ledger: &Ledger, w: Workload, i: u64) -> (Answer, String) {
    let t0 = Instant::now();
    let post = world.post_of(w, i);
    let write = Write { i, post, comment: w.comments(i) };
    let token = match world.mint(world.user_base + i, false) {
        Ok(t) => t,
        Err(e) => return (Answer::Other, e.to_string()),
    };
    let (method, path, body) = if write.comment {
        let body = format!(r#"{{"text":"overload write {i}"}}"#);
        (Method::POST, format!("/v1/posts/{post}/comments"), Some(body))
    } else {
        (Method::PUT, format!("/v1/posts/{post}/like"), None)
    };
    let url = world.client.url(&path);
    let sent = world.client.send_full(method, &url, Some(&token), body);
    let answer = match tokio::time::timeout(world.timeout, sent).await {
        Err(_) => return (Answer::TimedOut, String::new()),
        Ok(Err(e)) => return (Answer::Other, e.to_string()),
        Ok(Ok(a)) => a,
    };
    let (st, headers, body) = answer;
    let ok = if write.comment { StatusCode::CREATED } else { StatusCode::OK };
    if st == ok {
        ledger.acked.lock().push(write);
        // On a starved CPU the timer can fire late: an answer after the timeout is stored
        // (the check looks for it) but is no goodput.
        let answer = if t0.elapsed() <= world.timeout { Answer::Acked } else { Answer::TimedOut };
        (answer, String::new())
    } else if st == StatusCode::SERVICE_UNAVAILABLE && headers.contains_key("retry-after") {
        ledger.shed.lock().push(write);
        (Answer::Shed, String::new())
    } else if st == StatusCode::SERVICE_UNAVAILABLE {
        (Answer::Unavailable, String::new())
    } else {
        (Answer::Other, format!("{st} {}", String::from_utf8_lossy(&body)))
    }
}

/// Send workload `w`'s next request (the ledger numbers them): what its answer counts as,
/// its latency in microseconds, and a description of an unexpected answer. Both loops send
/// every request through here; they differ only in when they send the next one.
async fn next(world: &World, ledger: &Ledger, w: Workload) -> (Answer, u64, String) {
    let i = ledger.next.fetch_add(1, Ordering::Relaxed);
    let t0 = Instant::now();
    let (a, e) = one(world, ledger, w, i).await;
    (a, t0.elapsed().as_micros() as u64, e)
}

/// `concurrency` loops, each sending its next request when the last is answered, for `secs`.
pub(crate) async fn closed_loop(
    world: &Arc<World>,
    ledger: &Arc<Ledger>,
    w: Workload,
    concurrency: usize,
    secs: u64,
) -> anyhow::Result<Phase> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for _ in 0..concurrency {
        let (world, ledger) = (world.clone(), ledger.clone());
        tasks.push(tokio::spawn(async move {
            let mut p = Phase::default();
            while Instant::now() < deadline {
                let (a, us, e) = next(&world, &ledger, w).await;
                p.add(a, us, || e);
            }
            p
        }));
    }
    let mut all = Phase::default();
    for t in tasks {
        merge(&mut all, t.await?);
    }
    all.secs = started.elapsed().as_secs_f64();
    Ok(all)
}

/// Requests at `rate` per second for `secs`, each sent when due whatever the answers so far
/// (at most `max_in_flight` at once).
pub(crate) async fn open_loop(
    world: &Arc<World>,
    ledger: &Arc<Ledger>,
    w: Workload,
    rate: f64,
    secs: u64,
    max_in_flight: usize,
) -> anyhow::Result<Phase> {
    let total = (rate * secs as f64).round() as u64;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let results = Arc::new(parking_lot::Mutex::new(Phase::default()));
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let (mut issued, mut unsent) = (0u64, 0u64);
    let started = Instant::now();
    while issued < total {
        tick.tick().await;
        let due = ((started.elapsed().as_secs_f64() * rate) as u64).min(total);
        while issued < due {
            issued += 1;
            if in_flight.load(Ordering::Relaxed) >= max_in_flight {
                unsent += 1;
                continue;
            }
            in_flight.fetch_add(1, Ordering::Relaxed);
            let (world, ledger, in_flight, results) =
                (world.clone(), ledger.clone(), in_flight.clone(), results.clone());
            tokio::spawn(async move {
                let (a, us, e) = next(&world, &ledger, w).await;
                results.lock().add(a, us, || e);
                in_flight.fetch_sub(1, Ordering::Relaxed);
            });
        }
    }
    // Every request ends within its timeout: wait that long (and a little) for the last ones.
    let secs_sent = started.elapsed().as_secs_f64();
    let until = Instant::now() + world.timeout + Duration::from_secs(1);
    while in_flight.load(Ordering::Relaxed) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut p = std::mem::take(&mut *results.lock());
    p.secs = secs_sent;
    p.offered = total;
    p.unsent = unsent;
    Ok(p)
}

fn merge(all: &mut Phase, p: Phase) {
    all.acked += p.acked;
    all.shed += p.shed;
    all.unavailable += p.unavailable;
    all.timed_out += p.timed_out;
    all.other += p.other;
    if all.other_example.is_none() {
        all.other_example = p.other_example;
    }
    all.acked_us.extend(p.acked_us);
    all.shed_us.extend(p.shed_us);
}
