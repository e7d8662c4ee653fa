//! The results of a run: totals, a line per operation class with its latency percentiles,
//! the errors by kind, and how throughput, latency and CPU moved over the run.

use super::args::SoakArgs;
use super::sampler::Sample;
use super::shared::{
    CLASSES, COMMENT, COMMENTS, FEED, LIKE, LIKERS, NAMES, POST, READ_CLASSES, RESERVOIR, Shared,
    WRITE_CLASSES,
};
use crate::stats;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The run's totals, for the chart's subtitle.
pub(super) struct Totals {
    /// Seconds of load.
    pub(super) secs: f64,
    /// Successful requests: all, reads, writes.
    pub(super) ok: u64,
    pub(super) reads: u64,
    pub(super) writes: u64,
    /// Requests that were errors (see `args::RULES`).
    pub(super) errors: u64,
}

/// Print the totals, the table of classes and the errors; a failure for any request error
/// and any failed scrape of /metrics.
pub(super) fn results(a: &SoakArgs, sh: &Shared, elapsed: Duration, failures: &mut Vec<String>) -> Totals {
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
    print_table(sh, &ok, secs);
    print_errors(a, sh, (errors, limited), failures);
    Totals { secs, ok: total_ok, reads, writes, errors }
}

/// A line per class: successes, rate, latency percentiles, expected 404s, 429s and errors.
fn print_table(sh: &Shared, ok: &[u64; CLASSES], secs: f64) {
    println!(
        "{:<22} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>5} {:>6}",
        "class", "ok", "ok/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "404*", "429", "errors"
    );
    let ms = |us: u64| us as f64 / 1000.0;
    for c in 0..CLASSES {
        let mut lat = sh.latency[c].lock().unwrap_or_else(|e| e.into_inner()).samples().to_vec();
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
}

/// The `errors` by kind, the first few of them, the `limited` (429s), and the scrapes of
/// /metrics.
fn print_errors(a: &SoakArgs, sh: &Shared, (errors, limited): (u64, u64), failures: &mut Vec<String>) {
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
}

/// Throughput, mean latency, CPU and load in the baseline window (20-40% of the run) against
/// the final window (80-100%): whether the service slowed down as its data grew.
pub(super) fn over_time(samples: &[Sample]) -> Option<String> {
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
