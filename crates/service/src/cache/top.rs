//! The heads of posts' rankings for feed previews ([`TopCache`]): the best entries of a post
//! with what a viewer's filter needs, recomputed by the ranker (`crate::ranking`) when events
//! touch the post, forgotten when pins or a ranked comment's status change.

use super::ttl::TtlMap;
use likewise_core::comment::status::CommentStatus;
use likewise_core::ids::{CommentId, PostId, UserId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A ranked comment, with what deciding its visibility to a viewer needs: re-ranking per
/// viewer must not load every candidate's record from the store on every request (the soak
/// showed it taking 41% of the CPU once posts had many comments). The status may lag a
/// change by one ranker round elsewhere in a cluster; pages still re-read the records they
/// return and filter them, so a stale status can shorten a page but never show a comment.
#[derive(Debug, Clone, Copy)]
pub struct Candidate {
    /// The comment.
    pub id: CommentId,
    /// Its author.
    pub author: UserId,
    /// Base score (higher first).
    pub base: f64,
    /// Moderation status when ranked.
    pub status: CommentStatus,
}

impl super::Weigh for TopList {
    fn heap_bytes(&self) -> usize {
        self.ranked.capacity() * std::mem::size_of::<Candidate>()
    }
}

/// The head of a post's ranking.
#[derive(Debug, Clone)]
pub struct TopList {
    /// The post's author (every candidate's `post_author`).
    pub post_author: UserId,
    /// Candidates, best first.
    pub ranked: Vec<Candidate>,
}

/// The heads of posts' rankings (feed previews).
pub struct TopCache {
    lists: TtlMap<PostId, Arc<TopList>>,
    computed: AtomicU64,
}

impl TopCache {
    /// A cache for about `capacity` posts.
    pub fn new(capacity: usize) -> Self {
        TopCache {
            lists: TtlMap::new("top_comments", Duration::from_secs(60), capacity),
            computed: AtomicU64::new(0),
        }
    }

    /// Forget a post's ranking (pins or a ranked comment's status changed).
    pub fn invalidate(&self, post: PostId) {
        self.lists.remove(&post);
    }

    /// Is the post's ranking cached (the ranker only refreshes those)?
    pub fn is_cached(&self, post: PostId) -> bool {
        self.lists.get(&post).is_some()
    }

    /// Usage of the rankings map (for `/metrics`).
    pub fn usage(&self) -> [super::Usage; 1] {
        [self.lists.usage()]
    }

    /// A post's cached ranking, if it is fresh.
    pub fn get(&self, post: PostId) -> Option<Arc<TopList>> {
        self.lists.get(&post)
    }

    /// Cache a ranking just computed.
    pub fn put(&self, post: PostId, list: Arc<TopList>) {
        self.lists.put(post, list);
        self.computed.fetch_add(1, Ordering::Relaxed);
    }

    /// How many rankings have been computed (benchmarks, tests).
    pub fn computed(&self) -> u64 {
        self.computed.load(Ordering::Relaxed)
    }
}
