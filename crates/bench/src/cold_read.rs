//! `bench cold-post`: 10,000 concurrent reads of one post nobody has read yet. With the
//! single-flight count cache they cause exactly one storage load (hot-key protection,
//! docs/architecture.md, "The read path"); the command prints the loads and fails if there
//! was more than one.

use crate::fresh::{Fresh, fresh};
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{LikeAction, Target};
use std::sync::Arc;
use std::time::Instant;

/// `bench cold-post` options.
#[derive(Debug, clap::Args)]
pub struct ColdPostArgs {
    /// Concurrent readers.
    #[arg(long, default_value_t = 10_000)]
    pub readers: usize,
}

/// Run `bench cold-post`.
pub async fn run(a: &ColdPostArgs) -> anyhow::Result<()> {
    let Fresh { svc, stores, .. } = &fresh().await?;
    for u in 0..100u64 {
        svc.likes.set_post_like(UserId(1000 + u), PostId(1), LikeAction::Like).await?;
    }
    let before = svc.shared.counts.store_loads();
    let barrier = Arc::new(tokio::sync::Barrier::new(a.readers));
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(a.readers);
    for _ in 0..a.readers {
        let (svc, barrier) = (svc.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            svc.shared.counts.get_many(&[Target::post(1)]).await.map(|c| c.len())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let loads = svc.shared.counts.store_loads() - before;
    println!(
        "{} concurrent reads of one cold post: {} storage load(s) in {:.1} ms",
        a.readers,
        loads,
        started.elapsed().as_secs_f64() * 1000.0
    );
    stores.close()?;
    anyhow::ensure!(loads == 1, "expected one storage load, saw {loads}");
    println!("check: single-flight  OK");
    Ok(())
}
