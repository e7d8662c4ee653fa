//! `bench soak` options, and the rules the run is judged by (its `--help`).

use crate::served::ServerArgs;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Where the server is, or how to configure the service in this process.
    #[command(flatten)]
    pub server: ServerArgs,
    /// With --url: the server's process ID, whose RSS is sampled (/proc/PID/status).
    #[arg(long, requires = "url")]
    pub pid: Option<u32>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("600").ok(), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("600s").ok(), Some(Duration::from_secs(600)));
        assert_eq!(parse_duration("10m").ok(), Some(Duration::from_secs(600)));
        assert!(parse_duration("0").is_err() && parse_duration("5x").is_err());
    }
}
