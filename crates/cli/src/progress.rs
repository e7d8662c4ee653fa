//! Progress of the long offline jobs (`reconcile --all`, `shards rebalance`, `export
//! analytics`): items done, rate and time left.
//!
//! On a terminal (stderr), an `indicatif` bar redrawn in place. Elsewhere (a log file, a CI
//! job, `journalctl`), where a bar would be hidden or would fill the log with control codes,
//! one plain line on stderr when the job starts, one per interval while it runs and one when
//! it ends, e.g. `reconcile: 1200/5000 posts (24%), 340/s, about 11 s left`. Result lines the
//! job prints meanwhile (a repaired drift, a finished move) go to stdout either way.

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The option of every command that shows progress.
#[derive(Debug, Args, Clone, Copy)]
pub struct ProgressArgs {
    /// Seconds between two progress lines when stderr is not a terminal (a log, a pipe); on a
    /// terminal a bar is redrawn in place instead.
    #[arg(long, value_name = "SECS", env = "LIKEWISE_PROGRESS_INTERVAL", default_value_t = 5.0,
        value_parser = parse_interval)]
    pub progress_interval: f64,
}

fn parse_interval(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.001..=86_400.0).contains(&v) => Ok(v),
        _ => Err(format!("{s:?} is not a number of seconds between 0.001 and 86400")),
    }
}

/// A running job's progress; [`Progress::finish`] ends it (dropping it ends it too).
pub struct Progress {
    bar: ProgressBar,
    job: &'static str,
    unit: &'static str,
    started: Instant,
    /// The plain-line printer, when stderr is not a terminal: the sender stops it.
    ticker: Option<(mpsc::Sender<()>, JoinHandle<()>)>,
}

impl Progress {
    /// Start the progress of `job` over `total` items of `unit` (e.g. "posts").
    pub fn start(job: &'static str, total: u64, unit: &'static str, args: ProgressArgs) -> Progress {
        Self::start_on(job, total, unit, args, std::io::stderr().is_terminal())
    }

    fn start_on(
        job: &'static str,
        total: u64,
        unit: &'static str,
        args: ProgressArgs,
        tty: bool,
    ) -> Progress {
        let started = Instant::now();
        if tty {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template =
                format!("{job}: {{bar:40}} {{human_pos}}/{{human_len}} {unit}  {{per_sec}}  eta {{eta}}");
            bar.set_style(
                ProgressStyle::with_template(&template).unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            // Redrawn while one slow item (a bucket move) runs, so the rate and time left move.
            bar.enable_steady_tick(Duration::from_millis(500));
            return Progress { bar, job, unit, started, ticker: None };
        }
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        eprintln!("{}", line(job, unit, 0, total, started.elapsed()));
        let (tx, rx) = mpsc::channel::<()>();
        let every = Duration::from_secs_f64(args.progress_interval);
        let watched = bar.clone();
        let ticker = std::thread::Builder::new().name("likewise-progress".into()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(every) {
                let total = watched.length().unwrap_or(0);
                eprintln!("{}", line(job, unit, watched.position(), total, started.elapsed()));
            }
        });
        Progress { bar, job, unit, started, ticker: ticker.ok().map(|t| (tx, t)) }
    }

    /// `n` more items done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    /// The total changed (more work found than first planned).
    pub fn set_total(&self, total: u64) {
        self.bar.set_length(total);
    }

    /// Items done so far: `done` of the total.
    pub fn set_done(&self, done: u64) {
        self.bar.set_position(done);
    }

    /// Print a result line on stdout, with the bar (if any) cleared around it.
    pub fn println(&self, text: impl AsRef<str>) {
        self.bar.suspend(|| println!("{}", text.as_ref()));
    }

    /// End the job: clear the bar, or print the closing plain line.
    pub fn finish(mut self) {
        self.end(true);
    }

    fn end(&mut self, done_all: bool) {
        let Some((stop, thread)) = self.ticker.take() else {
            self.bar.finish_and_clear();
            return;
        };
        drop(stop);
        let _ = thread.join();
        let (done, elapsed) = (self.bar.position(), self.started.elapsed());
        let total = self.bar.length().unwrap_or(done);
        let rate = rate_text(done as f64 / elapsed.as_secs_f64().max(1e-9));
        let (job, unit, secs) = (self.job, self.unit, elapsed.as_secs_f64());
        if done_all {
            eprintln!("{job}: {done}/{total} {unit} done in {secs:.1} s, {rate}/s");
        } else {
            eprintln!("{job}: stopped at {done}/{total} {unit} after {secs:.1} s");
        }
    }
}

impl Drop for Progress {
    /// A job that failed midway: its bar is cleared, its last line says how far it got.
    fn drop(&mut self) {
        self.end(false);
    }
}

/// One plain progress line: done of total, share, average rate, time left at that rate.
fn line(job: &str, unit: &str, done: u64, total: u64, elapsed: Duration) -> String {
    let mut s = format!("{job}: {done}/{total} {unit}");
    if let Some(share) = (done.min(total) * 100).checked_div(total) {
        s.push_str(&format!(" ({share}%)"));
    }
    let secs = elapsed.as_secs_f64();
    if done == 0 || secs <= 0.0 {
        return s;
    }
    let rate = done as f64 / secs;
    s.push_str(&format!(", {}/s", rate_text(rate)));
    let left = total.saturating_sub(done) as f64 / rate;
    s.push_str(&format!(", about {} left", duration_text(left)));
    s
}

fn rate_text(rate: f64) -> String {
    if rate >= 100.0 { format!("{rate:.0}") } else { format!("{rate:.1}") }
}

fn duration_text(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..=99 => format!("{s} s"),
        100..=5_999 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_names_items_done_share_rate_and_time_left() {
        let l = line("reconcile", "posts", 1200, 5000, Duration::from_secs(4));
        assert_eq!(l, "reconcile: 1200/5000 posts (24%), 300/s, about 13 s left");
    }

    #[test]
    fn a_line_before_the_first_item_has_no_rate() {
        assert_eq!(
            line("export analytics", "events", 0, 10, Duration::from_secs(1)),
            "export analytics: 0/10 events (0%)"
        );
    }

    #[test]
    fn long_times_left_read_in_minutes_and_hours() {
        assert_eq!(duration_text(130.0), "2 min 10 s");
        assert_eq!(duration_text(7_500.0), "2 h 5 min");
    }

    #[test]
    fn an_interval_must_be_a_positive_number_of_seconds() {
        assert_eq!(parse_interval("0.25"), Ok(0.25));
        assert!(parse_interval("0").is_err());
        assert!(parse_interval("5s").is_err());
    }
}
