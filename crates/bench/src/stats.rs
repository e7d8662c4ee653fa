//! What a benchmark shows as it runs and at the end: a progress bar, and latency percentiles
//! from recorded samples (microseconds).

/// Summary of a run.
pub struct Summary {
    /// Samples summarised.
    pub count: usize,
    /// Percentiles and the maximum, microseconds.
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// Summarise samples (sorts them).
pub fn summarise(samples: &mut [u64]) -> Summary {
    samples.sort_unstable();
    let at = |q: f64| -> u64 {
        if samples.is_empty() {
            return 0;
        }
        let i = ((samples.len() as f64 - 1.0) * q).round() as usize;
        samples[i.min(samples.len() - 1)]
    };
    Summary {
        count: samples.len(),
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        p999: at(0.999),
        max: samples.last().copied().unwrap_or(0),
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |us: u64| us as f64 / 1000.0;
        write!(
            f,
            "latency ms: p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}  (n={})",
            ms(self.p50),
            ms(self.p90),
            ms(self.p99),
            ms(self.p999),
            ms(self.max),
            self.count
        )
    }
}

/// A progress bar of `total` steps, with the rate and the time left.
pub fn progress(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len}  {per_sec}  eta {eta}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_the_right_samples() {
        let mut v: Vec<u64> = (1..=1000).rev().collect();
        let s = summarise(&mut v);
        assert_eq!((s.p50, s.p99, s.max, s.count), (501, 990, 1000, 1000));
    }
}
