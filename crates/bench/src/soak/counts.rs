//! The counts check after the load: every post's like count converges to the likes the
//! client made (by the `changed` flag of each answer), and the viral post's count equals its
//! likers list.

use super::args::SoakArgs;
use super::shared::Shared;
use super::world::{CountsPage, World};
use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Every post's like count as a reader sees it, by post index.
async fn read_counts(world: &World, token: &str) -> anyhow::Result<Vec<Option<i64>>> {
    let total = world.posts() + 1;
    let mut counts = vec![None; total];
    for chunk in (0..total).collect::<Vec<_>>().chunks(100) {
        let ids = chunk.iter().map(|&i| world.post_id(i).to_string()).collect::<Vec<_>>().join(",");
        let page: CountsPage =
            world.client.get_json(&format!("/v1/posts?ids={ids}"), token, "reading counts").await?;
        for p in page.posts {
            let id: u64 = p.post_id.parse()?;
            if let Some(slot) = id.checked_sub(world.post_base).and_then(|i| counts.get_mut(i as usize)) {
                *slot = p.like_count;
            }
        }
    }
    Ok(counts)
}

/// Wait up to `--converge-seconds` after `last_write` for every count to reach the client's
/// net likes, then compare the viral post's count with its likers list; a failure for each
/// that does not hold.
pub(super) async fn check(
    a: &SoakArgs,
    world: &World,
    sh: &Shared,
    last_write: Instant,
    failures: &mut Vec<String>,
) -> anyhow::Result<()> {
    let checker = world.mint(world.user_id(a.users) + 7, false)?;
    let expected: Vec<i64> = sh.expected.iter().map(|e| e.load(Ordering::Relaxed)).collect();
    let deadline = Duration::from_secs(a.converge_seconds);
    let (converged, mismatches) = loop {
        let counts = read_counts(world, &checker).await?;
        let bad: Vec<(usize, Option<i64>, i64)> = counts
            .iter()
            .zip(&expected)
            .enumerate()
            .filter(|(_, (got, want))| **got != Some(**want))
            .map(|(i, (got, want))| (i, *got, *want))
            .collect();
        if bad.is_empty() {
            break (Some(last_write.elapsed()), bad);
        }
        if last_write.elapsed() > deadline {
            break (None, bad);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let viral = viral(world, &checker).await?;
    match converged {
        Some(d) => println!(
            "counts: all {} posts' like_count == the client's net likes, {:.0} ms after the last request  OK",
            expected.len(),
            d.as_secs_f64() * 1000.0
        ),
        None => {
            println!(
                "counts: {} of {} posts did NOT converge within {} s, e.g.:",
                mismatches.len(),
                expected.len(),
                a.converge_seconds
            );
            for (i, got, want) in mismatches.iter().take(10) {
                println!("  post {}: like_count {got:?}, client's net likes {want}", world.post_id(*i));
            }
            failures.push(format!("{} post counts did not converge", mismatches.len()));
        }
    }
    viral.print(world.post_id(0), expected[0], failures);
    Ok(())
}

/// The viral post's count and its distinct likers listed.
struct Viral {
    count: Option<i64>,
    likers: u64,
}

/// Read the viral post's likers list and its count.
async fn viral(world: &World, checker: &str) -> anyhow::Result<Viral> {
    let likers: HashSet<String> = world.client.likers(world.post_id(0), checker).await?.into_iter().collect();
    let count = read_counts(world, checker).await?[0];
    Ok(Viral { count, likers: likers.len() as u64 })
}

impl Viral {
    /// Whether count, likers list and the client's net likes agree; a failure if not.
    fn print(&self, viral_id: u64, expected: i64, failures: &mut Vec<String>) {
        let (viral_count, likers) = (self.count, self.likers);
        let viral_ok = viral_count == Some(expected) && likers as i64 == expected;
        println!(
            "viral post {viral_id}: like_count {} == likers listed {likers} == client's net likes {}  {}",
            viral_count.map(|c| c.to_string()).unwrap_or_else(|| "null".into()),
            expected,
            if viral_ok { "OK" } else { "MISMATCH" }
        );
        if !viral_ok {
            failures.push("viral post: like_count, likers list and the client's likes differ".into());
        }
    }
}
