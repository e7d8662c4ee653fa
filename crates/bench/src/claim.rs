//! The loop the benchmarks that do `n` things share: a fixed number of concurrent tasks work
//! through `0..n`, each claiming the next number when its last call is done.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Call `f(i)` for every `i` in `0..n`, `tasks` calls at a time. Whichever task is free claims
/// the next number, so the calls start in order. Every call's result, a task's in the order it
/// made them, task after task; the first error, in that order, instead.
pub(crate) async fn each<T, F, Fut>(n: u64, tasks: usize, f: F) -> anyhow::Result<Vec<T>>
where
    T: Send + 'static,
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = anyhow::Result<T>> + Send + 'static,
{
    let f = Arc::new(f);
    let next = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(tasks);
    for _ in 0..tasks {
        let (f, next) = (f.clone(), next.clone());
        handles.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(out);
                }
                out.push(f(i).await?);
            }
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await??);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::each;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_number_is_claimed_once() {
        let mut seen = each(10_000, 16, |i| async move { Ok(i) }).await.expect("no call fails");
        seen.sort_unstable();
        assert_eq!(seen, (0..10_000).collect::<Vec<u64>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failed_call_fails_the_whole() {
        let r = each(100, 4, |i| async move {
            anyhow::ensure!(i != 57, "call {i} failed");
            Ok(i)
        })
        .await;
        assert!(r.expect_err("one call failed").to_string().contains("57"));
    }
}
