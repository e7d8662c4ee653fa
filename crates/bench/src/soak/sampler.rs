//! One sample a second during the load: cumulative successes, answers and latency per class,
//! errors, the measured process's RSS and CPU, and the server's memory gauges; every few
//! seconds a progress line on stderr.

use super::gauges::mib;
use super::shared::{CLASSES, COMMENT, FEED, LIKE, READ_CLASSES, Shared, WRITE_CLASSES};
use crate::proc::{RssSource, load_average};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One sample, taken every second during the load: cumulative successes per class.
#[derive(Clone)]
pub(super) struct Sample {
    pub(super) t: f64,
    pub(super) rss_mib: Option<f64>,
    /// The server's bounded memory (see `args::RULES`) at its last poll, MiB.
    pub(super) bounded_mib: Option<f64>,
    /// The server's live heap (`likewise_heap_allocated_bytes`) at its last poll, MiB.
    pub(super) heap_mib: Option<f64>,
    pub(super) ok: [u64; CLASSES],
    pub(super) answered: [u64; CLASSES],
    pub(super) latency_us: [u64; CLASSES],
    pub(super) errors: u64,
    pub(super) limited: u64,
    /// CPU seconds used by the measured process so far.
    pub(super) cpu_s: Option<f64>,
    /// The machine's 1-minute load average.
    pub(super) load1: Option<f64>,
}

/// (seconds, MiB) of the samples where `f` has a value.
pub(super) fn series(samples: &[Sample], f: impl Fn(&Sample) -> Option<f64>) -> Vec<(f64, f64)> {
    samples.iter().filter_map(|s| Some((s.t, f(s)?))).collect()
}

/// RSS minus the bounded parts.
pub(super) fn unaccounted(s: &Sample) -> Option<f64> {
    Some(s.rss_mib? - s.bounded_mib?)
}

/// Live heap minus the bounded parts: what the memory rule judges when the server reports it.
pub(super) fn unexplained(s: &Sample) -> Option<f64> {
    Some(s.heap_mib? - s.bounded_mib?)
}

/// Sample every second until the stop flag is seen (that last sample included); a progress
/// line every `report_every` samples.
pub(super) async fn sampler(
    sh: Arc<Shared>,
    rss: RssSource,
    started: Instant,
    report_every: u64,
) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(4096);
    let mut since_report = 0u64;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let stopping = sh.stop.load(Ordering::Relaxed);
        let s = Sample::take(&sh, rss, started);
        since_report += 1;
        if let Some(prev) = samples.last().filter(|_| since_report >= report_every) {
            since_report = 0;
            report(&sh, prev, &s);
        }
        samples.push(s);
        if stopping {
            return samples;
        }
    }
}

impl Sample {
    /// The counters and gauges now.
    fn take(sh: &Shared, rss: RssSource, started: Instant) -> Sample {
        let (ok, errors, limited) = sh.totals();
        // One lock for both (a guard held across the struct literal would self-deadlock).
        let (bounded_mib, heap_mib) = {
            let g = sh.gauges.lock().unwrap_or_else(|e| e.into_inner());
            let g = g.as_ref();
            (g.map(|g| mib(g.bounded())), g.filter(|g| g.heap > 0.0).map(|g| mib(g.heap)))
        };
        Sample {
            t: started.elapsed().as_secs_f64(),
            rss_mib: rss.rss_mib(),
            bounded_mib,
            heap_mib,
            ok,
            answered: std::array::from_fn(|c| sh.counters[c].answered.load(Ordering::Relaxed)),
            latency_us: std::array::from_fn(|c| sh.counters[c].latency_us.load(Ordering::Relaxed)),
            errors,
            limited,
            cpu_s: rss.cpu_seconds(),
            load1: load_average(),
        }
    }
}

/// The progress line: rates and mean latencies since the previous sample.
fn report(sh: &Shared, prev: &Sample, s: &Sample) {
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
