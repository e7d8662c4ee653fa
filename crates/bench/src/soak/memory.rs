//! The memory part of the results: RSS over the run, the server's bounded memory against its
//! caps, and the memory-growth rule applied to what is judged (see `args::RULES`).

use super::args::SoakArgs;
use super::gauges::{ServerMemory, mib};
use super::growth::{Growth, judge_growth, overhead_guard};
use super::sampler::{Sample, series, unaccounted, unexplained};
use crate::proc::RssSource;

/// What the memory rule judged, and the figures the chart's subtitle repeats.
pub(super) struct MemoryReport {
    /// Peak and last RSS sampled, MiB.
    pub(super) peak: Option<f64>,
    pub(super) end: Option<f64>,
    /// The rule's verdict, `None` when it was not applied.
    pub(super) verdict: Option<Growth>,
}

/// Which series the rule judges: the most precise one the server reports for (nearly) the
/// whole run.
#[derive(Clone, Copy, PartialEq)]
enum Judged {
    /// Live heap minus the bounded parts.
    Heap,
    /// RSS minus the bounded parts.
    Unaccounted,
    /// RSS.
    Raw,
}

/// A number of MiB with no decimals, or `-`.
pub(super) fn f0(v: Option<f64>) -> String {
    v.map(|m| format!("{m:.0}")).unwrap_or_else(|| "-".into())
}

/// Print the memory results and apply the rule; a failure for memory growing without bound,
/// for a bounded part above its cap and for allocator overhead beyond its limit.
pub(super) fn report(
    a: &SoakArgs,
    samples: &[Sample],
    gauges: Option<ServerMemory>,
    rss: RssSource,
    (at_launch, at_start): (Option<f64>, Option<f64>),
    failures: &mut Vec<String>,
) -> MemoryReport {
    let rss_series = series(samples, |s| s.rss_mib);
    let peak = rss_series.iter().map(|p| p.1).fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
    let end = rss_series.last().map(|p| p.1);
    // Unaccounted = RSS - bounded parts, once the server has reported them; unexplained heap
    // = live heap - bounded parts, when it also reports its live heap (then that is judged).
    let unaccounted = series(samples, unaccounted);
    let unexplained = series(samples, unexplained);
    let judged = if !unexplained.is_empty() && unexplained.len() + 10 >= rss_series.len() {
        Judged::Heap
    } else if !unaccounted.is_empty() && unaccounted.len() + 10 >= rss_series.len() {
        Judged::Unaccounted
    } else {
        Judged::Raw
    };
    let judge = |v: &[(f64, f64)]| judge_growth(v, a.max_growth_pct, a.max_growth_mib);
    let raw_verdict = judge(&rss_series);
    let verdict = match judged {
        Judged::Heap => judge(&unexplained),
        Judged::Unaccounted => judge(&unaccounted),
        Judged::Raw => raw_verdict.clone(),
    };
    if !matches!(rss, RssSource::None) {
        let launch = match rss {
            RssSource::This => format!("client launch {}, ", f0(at_launch)),
            _ => String::new(),
        };
        println!(
            "RSS MiB: {launch}load start {}, peak {} (VmHWM {}), end {}",
            f0(at_start),
            f0(peak),
            f0(rss.hwm_mib()),
            f0(end)
        );
    }
    if let Some(g) = gauges {
        print_gauges(&g, failures);
    }
    if let (true, Some(g)) = (judged != Judged::Raw, &raw_verdict) {
        print_not_judged("raw RSS", g);
    }
    if judged == Judged::Heap {
        if let Some(g) = judge(&unaccounted) {
            print_not_judged("RSS - bounded parts", &g);
        }
        if let Some(line) = overhead_guard(samples, failures) {
            println!("{line}");
        }
    }
    println!("{}", rule_line(a, judged, verdict.as_ref(), failures));
    MemoryReport { peak, end, verdict }
}

/// The server's bounded memory at the end, each part against its cap.
fn print_gauges(g: &ServerMemory, failures: &mut Vec<String>) {
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

/// A series the rule did not judge, for comparison.
fn print_not_judged(what: &str, g: &Growth) {
    println!(
        "{what} (not judged): {:.0} MiB over 20-40%, {:.0} MiB over 80-100% ({:+.1} MiB, late slope {:.2} MiB/min)",
        g.baseline_mib, g.final_mib, g.growth_mib, g.late_slope
    );
}

/// The rule's verdict on what it judged.
fn rule_line(a: &SoakArgs, judged: Judged, verdict: Option<&Growth>, failures: &mut Vec<String>) -> String {
    let what = match judged {
        Judged::Heap => "unexplained live heap (live heap - bounded parts)",
        Judged::Unaccounted => "unaccounted memory (RSS - bounded parts)",
        Judged::Raw => "RSS",
    };
    let Some(g) = verdict else {
        return "memory rule: not applied (RSS not sampled, or fewer than 10 samples)".into();
    };
    if g.unbounded {
        failures.push("memory grows without bound".into());
    }
    format!(
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
    )
}
