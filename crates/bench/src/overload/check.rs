//! After the load: every acknowledged write is stored, no shed write is, and each post's like
//! count converges to its likers list. Read through the API as the post's author, retried for
//! up to 30 s because counts (and, on scale-out, lists) follow the writes asynchronously.

use super::World;
use super::load::{Ledger, Workload};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// What the check found (its last reading).
pub(crate) struct Verdict {
    acked: usize,
    shed: usize,
    /// Acknowledged writes not found.
    pub(crate) missing: u64,
    /// Shed writes found stored.
    pub(crate) shed_stored: u64,
    /// Posts whose like count is not the length of their likers list.
    counts_wrong: u64,
    /// How long until the reading held, or None when it never did.
    converged: Option<Duration>,
}

impl Verdict {
    /// Writes storage got wrong, counted the way the run fails on them.
    pub(crate) fn lost(&self) -> u64 {
        self.missing + self.shed_stored + self.counts_wrong
    }

    /// The check's report line.
    pub(crate) fn line(&self) -> String {
        let verdict = if self.lost() == 0 { "OK" } else { "FAILED" };
        let when = match self.converged {
            Some(d) => format!("held {:.1} s after the load", d.as_secs_f64()),
            None => "did not hold within 30 s".into(),
        };
        format!(
            "{verdict}: {} acknowledged writes, {} missing; {} shed writes, {} stored; \
             {} posts whose count is not their likers list; {when}",
            self.acked, self.missing, self.shed, self.shed_stored, self.counts_wrong
        )
    }
}

/// Check workload `w`'s writes against what the server stores.
pub(crate) async fn run(world: &World, ledger: &Ledger, w: Workload) -> anyhow::Result<Verdict> {
    let acked = ledger.acked.lock().clone();
    let shed = ledger.shed.lock().clone();
    let started = Instant::now();
    loop {
        let stored = Stored::read(world, w).await?;
        let missing = acked.iter().filter(|x| !stored.has(x.post, x.i, x.comment)).count() as u64;
        let shed_stored = shed.iter().filter(|x| stored.has(x.post, x.i, x.comment)).count() as u64;
        let counts_wrong = stored.counts_wrong;
        let held = missing == 0 && shed_stored == 0 && counts_wrong == 0;
        if held || started.elapsed() > Duration::from_secs(30) {
            let converged = held.then(|| started.elapsed());
            return Ok(Verdict {
                acked: acked.len(),
                shed: shed.len(),
                missing,
                shed_stored,
                counts_wrong,
                converged,
            });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The run's writes a workload's posts hold: request numbers of likes and of comments.
struct Stored {
    likes: HashMap<u64, HashSet<u64>>,
    comments: HashMap<u64, HashSet<u64>>,
    counts_wrong: u64,
}

impl Stored {
    async fn read(world: &World, w: Workload) -> anyhow::Result<Stored> {
        let token = world.mint(world.author, false)?;
        let mut s = Stored { likes: HashMap::new(), comments: HashMap::new(), counts_wrong: 0 };
        for post in world.posts_of(w) {
            let likers = world.client.likers(post, &token).await?;
            let count = world.client.like_count(post, &token).await?;
            if count != Some(likers.len() as u64) {
                s.counts_wrong += 1;
            }
            let likes = likers.iter().filter_map(|u| u.parse::<u64>().ok()?.checked_sub(world.user_base));
            s.likes.insert(post, likes.collect());
            s.comments.insert(post, comment_numbers(world, post, &token).await?);
        }
        Ok(s)
    }

    fn has(&self, post: u64, i: u64, comment: bool) -> bool {
        let by_post = if comment { &self.comments } else { &self.likes };
        by_post.get(&post).is_some_and(|s| s.contains(&i))
    }
}

/// One page of a comment list, as much of it as the check reads.
#[derive(serde::Deserialize)]
struct CommentsPage {
    items: Vec<serde_json::Value>,
    next_cursor: Option<String>,
}

/// The request numbers of the run's comments on `post` (their text names it), oldest first.
async fn comment_numbers(world: &World, post: u64, token: &str) -> anyhow::Result<HashSet<u64>> {
    let mut out = HashSet::new();
    let first = format!("/v1/posts/{post}/comments?order=oldest&limit=100");
    let mut path = first.clone();
    loop {
        let page: CommentsPage = world.client.get_json(&path, token, "comments page").await?;
        let texts = page.items.iter().filter_map(|c| c["text"].as_str());
        out.extend(texts.filter_map(|t| t.strip_prefix("overload write ")?.parse::<u64>().ok()));
        match page.next_cursor {
            Some(c) if !page.items.is_empty() => path = format!("{first}&cursor={c}"),
            _ => return Ok(out),
        }
    }
}
