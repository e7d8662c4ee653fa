//! The Kafka export's lag during `bench hot-post --in-process --consumers`: sampled ten times
//! a second as the age of the oldest event the export has not published (what
//! `likewise_export_lag_seconds` shows), then how long after the last like the export reaches
//! the log's head.

use crate::stats::summarise;
use likewise_engine::Stores;
use likewise_workers::export::EXPORT;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Samples the lag until [`Sampler::report`].
pub struct Sampler {
    stores: Stores,
    stop: watch::Sender<bool>,
    task: JoinHandle<Vec<u64>>,
}

/// Milliseconds since the oldest event not exported yet was written (0: none).
async fn lag_ms(stores: &Stores) -> anyhow::Result<u64> {
    let offset = stores.counters.offset(EXPORT).await?;
    let next = stores.events.read_after(offset, 1).await?;
    Ok(next.first().map_or(0, |e| likewise_service::now_ms().saturating_sub(e.ts_ms)))
}

impl Sampler {
    /// Start sampling.
    pub fn start(stores: Stores) -> Sampler {
        let (stop, mut stopped) = watch::channel(false);
        let s = stores.clone();
        let task = tokio::spawn(async move {
            let mut out = Vec::new();
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => return out,
                }
                if let Ok(ms) = lag_ms(&s).await {
                    out.push(ms);
                }
            }
        });
        Sampler { stores, stop, task }
    }

    /// Stop sampling, wait for the export to reach the head the storm left (at most 30 s),
    /// and print both.
    pub async fn report(self, last_write: Instant) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        let mut samples = self.task.await?;
        let s = summarise(&mut samples);
        let head = self.stores.events.head().await?;
        let caught_up = loop {
            if self.stores.counters.offset(EXPORT).await? >= head {
                break Some(last_write.elapsed());
            }
            if last_write.elapsed() > Duration::from_secs(30) {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        let secs = |ms: u64| ms as f64 / 1000.0;
        println!(
            "export lag during the storm ({} samples): p50 {:.2} s  p99 {:.2} s  max {:.2} s",
            s.count,
            secs(s.p50),
            secs(s.p99),
            secs(s.max)
        );
        match caught_up {
            Some(d) => {
                println!("export reached the head {:.0} ms after the last like", d.as_secs_f64() * 1000.0)
            }
            None => println!("export did NOT reach the head within 30 s of the last like"),
        }
        Ok(())
    }
}
