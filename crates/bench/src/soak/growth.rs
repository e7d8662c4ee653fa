//! The memory-growth rule (see `args::RULES`): memory that climbs during warm-up, or climbs
//! and levels off, passes; memory still climbing at its average rate at the end fails. And the
//! guard on the allocator's overhead beside the live heap.

use super::sampler::Sample;

/// The memory-growth rule's numbers (see `args::RULES`).
#[derive(Debug, Clone)]
pub(super) struct Growth {
    pub(super) baseline_mib: f64,
    pub(super) final_mib: f64,
    pub(super) growth_mib: f64,
    pub(super) growth_pct: f64,
    /// (F - B) / time between the window centres, MiB per minute.
    pub(super) window_slope: f64,
    /// Least-squares slope over the last 40% of the run, MiB per minute.
    pub(super) late_slope: f64,
    pub(super) unbounded: bool,
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

/// Allocator overhead guard: over the last 20% of the run, RSS minus the live heap (allocator
/// headers, rounding and kept pages, plus code and stacks) must stay below the live heap
/// itself plus 64 MiB. Pathological fragmentation fails here; ordinary overhead, which grows
/// with the heap, does not.
pub(super) fn overhead_guard(samples: &[Sample], failures: &mut Vec<String>) -> Option<String> {
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
pub(super) fn judge_growth(rss: &[(f64, f64)], max_pct: f64, max_mib: f64) -> Option<Growth> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::shared::CLASSES;

    fn series(f: impl Fn(f64) -> f64) -> Vec<(f64, f64)> {
        (0..600).map(|s| s as f64).map(|t| (t, f(t))).collect()
    }

    /// A little deterministic noise, as a real RSS series has.
    fn noise(t: f64) -> f64 {
        (t * 1.7).sin() * 3.0
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
}
