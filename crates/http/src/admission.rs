//! Admission control at the door: a request that would wait past its deadline is refused
//! before any work is spent on it (body, token, reads, the write queue).
//!
//! Under overload the queue forms ahead of the group commit: requests wait for a runtime
//! worker, their body, their token check and their reads before the commit queue sees them,
//! so the group commit's own estimate ([`likewise_engine::group_commit`]) sees a short queue
//! while the request's time is mostly gone. Here each request is counted from the moment the
//! router hands it over until its response: requests in flight over the rate at which the
//! node answers them (Little's law) is the wait a new one can expect. A write expecting more
//! than `server.admission_wait_share` of the request timeout gets an immediate 503 with
//! `Retry-After` and the shed body (nothing written); a read, more than the whole timeout.
//! The group commit's check stays as the second line.
//!
//! The rate is an exponentially weighted average of answers per second over windows of
//! [`WINDOW`] that began and ended with at least [`FLOOR`] requests in flight: only a node
//! with a queue answers as fast as it can, so a quiet or lightly loaded window says nothing
//! about capacity. It counts only answers that did work (not 503s or 504s, which are quick
//! and would make the queue look faster than it is). Nothing is refused below [`FLOOR`]
//! requests in flight, nor before [`MIN_SAMPLES`] such windows have measured the rate.
//!
//! Little's law holds in a steady state, not at the start of a burst: while the first answers
//! of a burst are still on their way the windows count few of them, so the rate reads low and
//! the expected wait far too long (a fresh node refused a quarter of its first burst of 2,000
//! likes with `Retry-After: 30`, though every answer came within 2 s of a 5 s bound). So the
//! door also asks the answers themselves: it refuses only while the requests it serves are
//! slow too, their average time in the node (or, with none answered, how long the queue has
//! waited without an answer) at least [`SLOW_SHARE`] of the bound. A queue that is truly
//! behind shows both; a burst being worked through quickly shows only the first. The
//! `Retry-After` it sends is the expected wait bounded by that observed time: how long
//! answers take now is what a retry would find, not the estimate of a rate still being
//! measured.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Length of one rate sample.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Weight of the newest sample in the rate.
const ALPHA: f64 = 0.3;
/// Fewest requests in flight (of one kind) at which the door ever refuses one, and at which a
/// window measures the rate.
pub const FLOOR: u64 = 256;
/// Windows of measured rate before the door refuses anything.
pub const MIN_SAMPLES: u64 = 3;
/// Share of the bound that the observed time of answers must reach before the door refuses.
pub const SLOW_SHARE: f64 = 0.5;

/// Requests of one kind (writes, or reads) in flight and the rate they are answered at.
#[derive(Debug)]
pub struct Estimator {
    in_flight: AtomicU64,
    /// Answers counted in the current window.
    answered: AtomicU64,
    /// Microseconds those answers spent in the node, summed.
    answered_us: AtomicU64,
    /// Seconds an answer spends in the node (`f64` bits), averaged over windows with answers.
    latency: AtomicU64,
    /// Windows in a row that had a queue throughout and no answer.
    stalled: AtomicU64,
    /// Answers per second (`f64` bits); 0 until the first measuring window ends.
    rate: AtomicU64,
    /// Windows that measured the rate.
    samples: AtomicU64,
    /// Start of the current window, and whether at least [`FLOOR`] requests were in flight
    /// then.
    window: Mutex<(Instant, bool)>,
}

/// One admitted request, counted in flight until dropped (answered, or given up by its
/// client: the future is dropped either way).
pub struct Ticket<'a> {
    est: &'a Estimator,
    admitted: Instant,
    answered: Option<Instant>,
}

impl Ticket<'_> {
    /// The request was answered with real work done (not a refusal or a timeout): it counts
    /// towards the rate.
    pub fn served(self) {
        self.served_at(Instant::now());
    }

    /// [`Ticket::served`], answered at `at`.
    pub fn served_at(mut self, at: Instant) {
        self.answered = Some(at);
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if let Some(at) = self.answered {
            let us = at.saturating_duration_since(self.admitted).as_micros().min(u128::from(u32::MAX)) as u64;
            self.est.answered_us.fetch_add(us, Ordering::Relaxed);
            self.est.answered.fetch_add(1, Ordering::Relaxed);
        }
        self.est.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Estimator {
    /// An estimator with no requests and no rate yet; its first window starts at `now`.
    pub fn new(now: Instant) -> Self {
        Estimator {
            in_flight: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            answered_us: AtomicU64::new(0),
            latency: AtomicU64::new(0f64.to_bits()),
            stalled: AtomicU64::new(0),
            rate: AtomicU64::new(0f64.to_bits()),
            samples: AtomicU64::new(0),
            window: Mutex::new((now, false)),
        }
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Answers per second, as last estimated.
    pub fn rate(&self) -> f64 {
        f64::from_bits(self.rate.load(Ordering::Relaxed))
    }

    /// Seconds an answer spends in the node, as last observed: the average over recent windows
    /// with answers, or, while a queue has had no answer for whole windows, that time if
    /// longer.
    pub fn observed(&self) -> f64 {
        let latency = f64::from_bits(self.latency.load(Ordering::Relaxed));
        let stall = self.stalled.load(Ordering::Relaxed) as f64 * WINDOW.as_secs_f64();
        latency.max(stall)
    }

    /// Close the current window if it is [`WINDOW`] old, folding its rate in when it began and
    /// ended with a queue, and its answers' time in the node when it had any. One caller does
    /// it; the others go on with the current estimates.
    fn roll(&self, now: Instant) {
        let Some(mut w) = self.window.try_lock() else { return };
        let elapsed = now.saturating_duration_since(w.0);
        if elapsed < WINDOW {
            return;
        }
        let answered = self.answered.swap(0, Ordering::Relaxed);
        let answered_us = self.answered_us.swap(0, Ordering::Relaxed);
        let queued = self.in_flight() >= FLOOR;
        if answered > 0 {
            let sample = answered_us as f64 / 1e6 / answered as f64;
            let before = f64::from_bits(self.latency.load(Ordering::Relaxed));
            let next = if before == 0.0 { sample } else { (1.0 - ALPHA) * before + ALPHA * sample };
            self.latency.store(next.to_bits(), Ordering::Relaxed);
            self.stalled.store(0, Ordering::Relaxed);
        } else if w.1 && queued {
            self.stalled.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stalled.store(0, Ordering::Relaxed);
        }
        if w.1 && queued {
            let sample = answered as f64 / elapsed.as_secs_f64();
            let before = self.rate();
            let first = self.samples.fetch_add(1, Ordering::Relaxed) == 0;
            let next = if first { sample } else { (1.0 - ALPHA) * before + ALPHA * sample };
            self.rate.store(next.to_bits(), Ordering::Relaxed);
        }
        *w = (now, queued);
    }

    /// The wait, in seconds, a request entering at `now` can expect: requests in flight over
    /// the answer rate (infinite at a measured rate of 0), or `None` while the rate is not
    /// measured yet.
    pub fn expected_wait(&self, now: Instant) -> Option<f64> {
        self.roll(now);
        if self.samples.load(Ordering::Relaxed) < MIN_SAMPLES {
            return None;
        }
        let (rate, n) = (self.rate(), self.in_flight() as f64);
        Some(if rate > 0.0 {
            n / rate
        } else if n == 0.0 {
            0.0
        } else {
            f64::INFINITY
        })
    }

    /// Admit a request entering at `now` whose wait may be at most `max_wait`: its ticket, or
    /// the wait (seconds) it was refused for: the expected wait, bounded by the observed time
    /// of answers (for `Retry-After`).
    pub fn admit(&self, now: Instant, max_wait: Duration) -> Result<Ticket<'_>, f64> {
        let max = max_wait.as_secs_f64();
        if let Some(wait) = self.expected_wait(now)
            && self.in_flight() >= FLOOR
            && wait > max
        {
            let observed = self.observed();
            if observed >= max * SLOW_SHARE {
                return Err(wait.min(observed));
            }
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Ok(Ticket { est: self, admitted: now, answered: None })
    }
}

/// The door of one node: writes and reads counted apart (a read's cost is not a write's).
#[derive(Debug)]
pub struct Door {
    /// `PUT`, `POST` and `DELETE` under `/v1/`.
    pub writes: Estimator,
    /// `GET` and `HEAD` under `/v1/` (the notification stream and the analytics export,
    /// which are long by design, are not counted).
    pub reads: Estimator,
}

impl Default for Door {
    fn default() -> Self {
        let now = Instant::now();
        Door { writes: Estimator::new(now), reads: Estimator::new(now) }
    }
}

/// `Retry-After` for a request refused at an expected wait of `wait` seconds.
pub fn retry_after(wait: f64) -> u64 {
    if wait.is_finite() { wait.ceil().clamp(1.0, 30.0) as u64 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Run `n` requests through `e` at `now`, answered (served) at once.
    fn serve(e: &Estimator, now: Instant, n: u64) {
        serve_in(e, now, n, Duration::ZERO);
    }

    /// Run `n` requests through `e` at `now`, each answered (served) `took` later.
    fn serve_in(e: &Estimator, now: Instant, n: u64, took: Duration) {
        for _ in 0..n {
            e.admit(now, Duration::from_secs(3600)).expect("admitted").served_at(now + took);
        }
    }

    /// `FLOOR` requests held in flight from `t0`, and `MIN_SAMPLES` windows after the first
    /// each answering `per_window` more, each in `took`: the rate is measured by `t0 + 100 ms *
    /// (MIN_SAMPLES + 1)`, which is returned.
    fn measured(e: &Estimator, t0: Instant, per_window: u64, took: Duration) -> (Vec<Ticket<'_>>, Instant) {
        let held: Vec<_> = (0..FLOOR).map(|_| e.admit(t0, Duration::ZERO).expect("no rate yet")).collect();
        e.expected_wait(t0 + 100 * MS);
        for k in 1..=MIN_SAMPLES as u32 {
            serve_in(e, t0 + (100 * k + 1) * MS, per_window, took);
            e.expected_wait(t0 + 100 * (k + 1) * MS);
        }
        (held, t0 + 100 * (MIN_SAMPLES as u32 + 1) * MS)
    }

    #[test]
    fn the_rate_is_answers_per_second_of_windows_with_a_queue() {
        let t0 = Instant::now();
        let e = Estimator::new(t0);
        assert_eq!(e.expected_wait(t0), None, "nothing measured yet");
        // 500 answers a window of 100 ms: 5,000/s.
        let (held, t) = measured(&e, t0, 500, Duration::ZERO);
        assert!((e.rate() - 5000.0).abs() < 1.0, "{}", e.rate());
        assert!(e.expected_wait(t).is_some());
        // Then 100 answers a window: the average moves towards 1,000/s.
        for k in 0..30u32 {
            serve(&e, t + (100 * k + 1) * MS, 100);
            e.expected_wait(t + 100 * (k + 1) * MS);
        }
        assert!((e.rate() - 1000.0).abs() < 5.0, "{}", e.rate());
        // An idle minute (nothing in flight, nothing answered) leaves the rate as it was.
        drop(held);
        let later = t0 + Duration::from_secs(63);
        e.expected_wait(later);
        e.expected_wait(later + Duration::from_secs(1));
        assert!((e.rate() - 1000.0).abs() < 5.0, "idle windows do not count: {}", e.rate());
    }

    #[test]
    fn light_traffic_measures_no_rate() {
        let t0 = Instant::now();
        let e = Estimator::new(t0);
        // Ten answers a second for a minute: what the node was asked, not what it can do.
        for k in 1..=600u32 {
            serve(&e, t0 + (100 * k - 50) * MS, 1);
            e.expected_wait(t0 + 100 * k * MS);
        }
        assert_eq!(e.expected_wait(t0 + 60_001 * MS), None);
        // So a burst past the floor is admitted.
        let now = t0 + 60_002 * MS;
        let burst: Vec<_> =
            (0..FLOOR + 44).map(|_| e.admit(now, Duration::from_secs(1)).expect("admitted")).collect();
        assert_eq!(e.in_flight(), FLOOR + 44);
        drop(burst);
    }

    #[test]
    fn requests_past_the_floor_are_refused_when_they_would_wait_too_long() {
        let t0 = Instant::now();
        let e = Estimator::new(t0);
        // 10,000 answers/s, each answer 300 ms in the node (past half the bound: slow).
        let (held, now) = measured(&e, t0, 1000, 300 * MS);
        assert!((e.observed() - 0.3).abs() < 1e-3, "{}", e.observed());
        let max = Duration::from_millis(500);
        // 5,000 in flight at 10,000/s is 0.5 s: the 5,001st is admitted, the next is not.
        let more: Vec<_> = (FLOOR..5000).map(|_| e.admit(now, max).expect("within the bound")).collect();
        let last = e.admit(now, max).expect("exactly at the bound");
        let wait = e.admit(now, max).err().expect("past the bound");
        assert!((wait - 0.3).abs() < 1e-3, "the expected 0.5 s, bounded by the observed 0.3 s: {wait}");
        assert_eq!(retry_after(wait), 1);
        drop(last);
        assert_eq!(e.in_flight(), 5000, "a refused request is not counted in flight");
        // A refused or timed-out answer (not served) does not count towards the rate.
        drop(more);
        assert_eq!(e.in_flight(), FLOOR);
        e.expected_wait(now + 100 * MS);
        assert!(e.rate() < 10_000.0 * 0.75, "unserved answers make no rate: {}", e.rate());
        drop(held);
    }

    #[test]
    fn a_burst_answered_quickly_is_not_refused_however_low_its_rate_reads() {
        // The start of a fresh node's first burst: the windows so far saw few answers (100 a
        // window: 1,000/s), so 5,000 in flight read as a 5 s wait, past a 1 s bound. But each
        // answer came in 40 ms: the node is keeping up, and nothing is refused.
        let t0 = Instant::now();
        let e = Estimator::new(t0);
        let (held, now) = measured(&e, t0, 100, 40 * MS);
        let max = Duration::from_secs(1);
        let more: Vec<_> = (FLOOR..5000).map(|_| e.admit(now, max).expect("quick answers")).collect();
        assert!(e.expected_wait(now).expect("measured") > 4.0);
        assert!(e.admit(now, max).is_ok(), "answers in 40 ms of a 1 s bound are not slow");
        // Once answers take half the bound, the same queue is refused, and told to come back
        // when answers do (the observed 0.6 s, not the 5 s estimate).
        for k in 0..10u32 {
            serve_in(&e, now + (100 * k + 1) * MS, 100, 600 * MS);
            e.expected_wait(now + 100 * (k + 1) * MS);
        }
        let later = now + 1001 * MS;
        let wait = e.admit(later, max).err().expect("slow answers and a long queue");
        assert!(wait > 0.5 && wait < 0.61, "{wait}");
        assert_eq!(retry_after(wait), 1);
        drop((held, more));
    }

    #[test]
    fn a_cold_node_admits_a_burst_and_a_stalled_one_refuses_once_measured() {
        let t0 = Instant::now();
        let e = Estimator::new(t0);
        let max = Duration::from_secs(1);
        // No rate yet: a burst past the floor is admitted.
        let held: Vec<_> = (0..FLOOR + 44).map(|_| e.admit(t0, max).expect("not measured")).collect();
        // Windows with a queue and no answers measure a rate of 0; refused once the queue has
        // gone half the bound without an answer.
        for k in 1..=MIN_SAMPLES as u32 + 1 {
            e.expected_wait(t0 + 100 * k * MS);
        }
        let early = t0 + 100 * (MIN_SAMPLES as u32 + 1) * MS;
        assert!(e.admit(early, max).is_ok(), "300 ms without an answer is not yet a stall");
        for k in MIN_SAMPLES as u32 + 2..=6 {
            e.expected_wait(t0 + 100 * k * MS);
        }
        let stalled = t0 + 600 * MS;
        let wait = e.admit(stalled, max).err().expect("a measured stall");
        assert!((wait - 0.5).abs() < 1e-9, "bounded by the 5 windows without an answer: {wait}");
        assert_eq!(retry_after(wait), 1);
        // Once they are answered, the queue is below the floor and requests are admitted.
        for t in held {
            t.served();
        }
        assert!(e.admit(stalled + 100 * MS, max).is_ok());
    }

    #[test]
    fn retry_after_is_whole_seconds_from_1_to_30() {
        assert_eq!(retry_after(0.2), 1);
        assert_eq!(retry_after(2.1), 3);
        assert_eq!(retry_after(1e9), 30);
        assert_eq!(retry_after(f64::INFINITY), 1);
    }
}
