//! Trending: posts ranked by recent engagement velocity (docs/api.md, "Trending and integrity").
//!
//! The state is a per-post series of one-minute buckets holding the net change of the post's
//! likes and visible comments, taken from log events: a like and its unlike cancel out, a
//! comment hidden or deleted takes back what its creation added. Buckets older than the
//! longest window (24 h) are dropped. A window's score weighs each bucket by
//! `exp(-age / tau)` (tau: 10 minutes for `1h`, 2 hours for `24h`), so recent engagement weighs
//! more: 500 likes in the last minutes outrank 5,000 spread over the day before.
//!
//! The state and the two rankings serialize into one snapshot (`encode`); readers decode only
//! the rankings at its front.
//!
//! Partitions: a post's windows depend on its own events only, so the state splits by post
//! partition (`post % PARTITIONS`, [`Trending::retain_part`]) with nothing shared, and a
//! scaled-out deployment keeps one snapshot per partition. Each partition's snapshot ranks its
//! own best [`RANKED`] posts; the best [`RANKED`] of the whole deployment are among them (a
//! post in the overall top is in its partition's top), so [`merge`] of the partitions'
//! rankings computed at one minute is exactly the ranking of one state holding every
//! partition's events, scores and order alike.

use crate::event::{Event, EventKind};
use crate::like::TargetKind;
use std::collections::{HashMap, VecDeque};

/// A trending window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// The last hour.
    Hour,
    /// The last 24 hours.
    Day,
}

impl Window {
    /// `1h` or `24h`.
    pub fn parse(s: &str) -> Option<Window> {
        match s {
            "1h" => Some(Window::Hour),
            "24h" => Some(Window::Day),
            _ => None,
        }
    }
    fn minutes(self) -> u64 {
        match self {
            Window::Hour => 60,
            Window::Day => 1_440,
        }
    }
    fn tau_minutes(self) -> f64 {
        match self {
            Window::Hour => 10.0,
            Window::Day => 120.0,
        }
    }
}

/// A visible comment counts as much as this many likes.
pub const COMMENT_WEIGHT: f64 = 2.0;
/// Posts kept per ranking.
pub const RANKED: usize = 1_000;
/// Posts tracked at most; past it the least engaged are dropped.
pub const MAX_POSTS: usize = 200_000;
/// Posts tracked at most by one partition's state: its share of [`MAX_POSTS`].
pub const MAX_POSTS_PER_PART: usize = MAX_POSTS / crate::ports::cluster::PARTITIONS as usize;

/// One post's place in a ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ranked {
    /// The post.
    pub post: u64,
    /// Net likes in the window (never below 0).
    pub likes: u64,
    /// Net visible comments in the window (never below 0).
    pub comments: u64,
    /// The weighted score.
    pub score: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    minute: u64,
    likes: i32,
    comments: i32,
}

/// The windows of every engaged post.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Trending {
    posts: HashMap<u64, VecDeque<Bucket>>,
}

impl Trending {
    /// Fold one log event in (events of other kinds and comment likes change nothing).
    pub fn apply(&mut self, e: &Event) {
        let (likes, comments) = match e.kind {
            EventKind::LikeCreated | EventKind::LikeRemoved if e.target.kind == TargetKind::Post => {
                (e.delta as i32, 0)
            }
            EventKind::CommentCreated | EventKind::CommentStatusChanged | EventKind::CommentDeleted
                if e.delta != 0 =>
            {
                (0, e.delta as i32)
            }
            _ => return,
        };
        let minute = e.ts_ms / 60_000;
        let series = self.posts.entry(e.post).or_default();
        // Events come in log order, which is time order give or take clock skew between
        // writers: a late one joins its bucket.
        match series.iter_mut().rev().find(|b| b.minute <= minute) {
            Some(b) if b.minute == minute => {
                b.likes += likes;
                b.comments += comments;
            }
            _ => {
                let at = series.partition_point(|b| b.minute < minute);
                series.insert(at, Bucket { minute, likes, comments });
            }
        }
    }

    /// Drop buckets older than 24 h before `now_ms`, then the least engaged posts past
    /// [`MAX_POSTS`].
    pub fn prune(&mut self, now_ms: u64) {
        self.prune_to(now_ms, MAX_POSTS)
    }

    /// Keep only the posts of partition `part` (`post % PARTITIONS`).
    pub fn retain_part(&mut self, part: u16) {
        self.posts.retain(|post, _| crate::ports::cluster::part_of_post(*post) == part);
    }

    /// [`Trending::prune`], keeping at most `max_posts` posts ([`MAX_POSTS_PER_PART`] for
    /// one partition's state).
    pub fn prune_to(&mut self, now_ms: u64, max_posts: usize) {
        let oldest = (now_ms / 60_000).saturating_sub(Window::Day.minutes());
        self.posts.retain(|_, s| {
            while s.front().is_some_and(|b| b.minute < oldest) {
                s.pop_front();
            }
            !s.is_empty()
        });
        if self.posts.len() > max_posts {
            let mut sums: Vec<(i64, u64)> = self
                .posts
                .iter()
                .map(|(p, s)| (s.iter().map(|b| b.likes as i64 + b.comments as i64).sum(), *p))
                .collect();
            sums.sort_unstable();
            for (_, p) in &sums[..sums.len() - max_posts] {
                self.posts.remove(p);
            }
        }
    }

    /// Posts tracked.
    pub fn len(&self) -> usize {
        self.posts.len()
    }

    /// Nothing tracked.
    pub fn is_empty(&self) -> bool {
        self.posts.is_empty()
    }

    /// The `limit` best posts of `window` at `now_ms`, best first (ties: lower post ID).
    pub fn rank(&self, window: Window, now_ms: u64, limit: usize) -> Vec<Ranked> {
        let now = now_ms / 60_000;
        let from = now.saturating_sub(window.minutes() - 1);
        let mut out: Vec<Ranked> = self
            .posts
            .iter()
            .filter_map(|(post, series)| {
                let (mut likes, mut comments, mut score) = (0i64, 0i64, 0f64);
                for b in series.iter().filter(|b| b.minute >= from) {
                    likes += b.likes as i64;
                    comments += b.comments as i64;
                    let age = now.saturating_sub(b.minute) as f64;
                    let w = (-age / window.tau_minutes()).exp();
                    score += w * (b.likes as f64 + COMMENT_WEIGHT * b.comments as f64);
                }
                (score > 0.0).then(|| Ranked {
                    post: *post,
                    likes: likes.max(0) as u64,
                    comments: comments.max(0) as u64,
                    score: (score * 1000.0).round() / 1000.0,
                })
            })
            .collect();
        out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.post.cmp(&b.post)));
        out.truncate(limit);
        out
    }

    /// The snapshot: both rankings at `now_ms` (what readers need), then the state.
    pub fn encode(&self, now_ms: u64) -> Vec<u8> {
        let mut out = vec![1u8];
        out.extend_from_slice(&now_ms.to_be_bytes());
        for w in [Window::Hour, Window::Day] {
            let ranked = self.rank(w, now_ms, RANKED);
            out.extend_from_slice(&(ranked.len() as u32).to_be_bytes());
            for r in ranked {
                out.extend_from_slice(&r.post.to_be_bytes());
                out.extend_from_slice(&r.likes.to_be_bytes());
                out.extend_from_slice(&r.comments.to_be_bytes());
                out.extend_from_slice(&r.score.to_be_bytes());
            }
        }
        out.extend_from_slice(&(self.posts.len() as u32).to_be_bytes());
        for (post, series) in &self.posts {
            out.extend_from_slice(&post.to_be_bytes());
            out.extend_from_slice(&(series.len() as u32).to_be_bytes());
            for b in series {
                out.extend_from_slice(&b.minute.to_be_bytes());
                out.extend_from_slice(&b.likes.to_be_bytes());
                out.extend_from_slice(&b.comments.to_be_bytes());
            }
        }
        out
    }

    /// The state of a snapshot.
    pub fn decode(b: &[u8]) -> Option<Trending> {
        let mut r = Reader::new(b)?;
        r.u64()?; // when the rankings were computed
        for _ in 0..2 {
            let n = r.u32()? as usize;
            r.skip(n.checked_mul(32)?)?;
        }
        let posts = r.u32()? as usize;
        let mut t = Trending { posts: HashMap::with_capacity(posts.min(MAX_POSTS)) };
        for _ in 0..posts {
            let post = r.u64()?;
            let n = r.u32()? as usize;
            let mut series = VecDeque::with_capacity(n.min(1_440));
            for _ in 0..n {
                series.push_back(Bucket {
                    minute: r.u64()?,
                    likes: r.u32()? as i32,
                    comments: r.u32()? as i32,
                });
            }
            t.posts.insert(post, series);
        }
        Some(t)
    }
}

/// The best `limit` of several rankings of disjoint posts (the partitions' rankings), best
/// first, in [`Trending::rank`]'s order (ties: lower post ID).
pub fn merge(rankings: impl IntoIterator<Item = Vec<Ranked>>, limit: usize) -> Vec<Ranked> {
    let mut out: Vec<Ranked> = rankings.into_iter().flatten().collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.post.cmp(&b.post)));
    out.truncate(limit);
    out
}

/// The ranking of `window` in a snapshot, and when it was computed (ms).
pub fn decode_ranking(b: &[u8], window: Window) -> Option<(u64, Vec<Ranked>)> {
    let mut r = Reader::new(b)?;
    let at = r.u64()?;
    let read = |r: &mut Reader| -> Option<Vec<Ranked>> {
        let n = r.u32()? as usize;
        let mut v = Vec::with_capacity(n.min(RANKED));
        for _ in 0..n {
            v.push(Ranked {
                post: r.u64()?,
                likes: r.u64()?,
                comments: r.u64()?,
                score: f64::from_bits(r.u64()?),
            });
        }
        Some(v)
    };
    let hour = read(&mut r)?;
    Some((at, if window == Window::Hour { hour } else { read(&mut r)? }))
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    /// After the version byte (1).
    fn new(b: &'a [u8]) -> Option<Self> {
        let (&v, rest) = b.split_first()?;
        (v == 1).then_some(Reader { b: rest })
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn skip(&mut self, n: usize) -> Option<()> {
        self.take(n).map(|_| ())
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::UserId;
    use crate::like::Target;

    const MIN: u64 = 60_000;

    fn like(post: u64, created: bool, ts: u64) -> Event {
        Event::like(0, created, Target::post(post), UserId(1), UserId(2), ts, post)
    }

    #[test]
    fn a_fresh_burst_outranks_a_larger_spread_over_yesterday() {
        let now = 3 * 24 * 60 * MIN;
        let mut t = Trending::default();
        // 5,000 likes spread over the 24 hours before the last hour.
        for i in 0..5_000u64 {
            t.apply(&like(1, true, now - 60 * MIN - (i * 23 * 60 * MIN / 5_000)));
        }
        // 500 likes in the last 5 minutes.
        for i in 0..500u64 {
            t.apply(&like(2, true, now - (i % 5) * MIN));
        }
        for w in [Window::Hour, Window::Day] {
            let r = t.rank(w, now, 10);
            assert_eq!(r[0].post, 2, "{w:?}: {r:?}");
        }
        assert_eq!(t.rank(Window::Hour, now, 10).len(), 1, "yesterday's post is outside the hour");
    }

    #[test]
    fn unlikes_and_hidden_comments_take_back_what_they_added() {
        let now = 100 * MIN;
        let mut t = Trending::default();
        for _ in 0..10 {
            t.apply(&like(1, true, now));
            t.apply(&like(1, false, now));
        }
        let mut c = Event::like(0, true, Target::comment(9), UserId(1), UserId(2), now, 3);
        c.kind = EventKind::CommentCreated;
        c.delta = 1;
        t.apply(&c);
        c.kind = EventKind::CommentStatusChanged;
        c.delta = -1;
        t.apply(&c);
        assert!(t.rank(Window::Hour, now, 10).is_empty(), "{:?}", t.rank(Window::Hour, now, 10));
    }

    /// The partitions' snapshots, each ranking its own posts, merge into exactly the
    /// ranking of one state that took every event: same posts, order, counts and scores,
    /// with more engaged posts than a partition's ranking holds.
    #[test]
    fn merged_partition_rankings_equal_one_states_ranking() {
        use crate::ports::cluster::PARTITIONS;
        let now = 50_000 * MIN;
        let mut whole = Trending::default();
        let mut parts: Vec<Trending> = (0..PARTITIONS).map(|_| Trending::default()).collect();
        // A pseudo-random mix of likes, unlikes and comments over 5,000 posts and two hours.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let post = 1 + x % 5_000;
            let ts = now - (x >> 20) % (120 * MIN);
            let mut e = like(post, !(x >> 40).is_multiple_of(5), ts);
            if (x >> 44).is_multiple_of(7) {
                e.kind = EventKind::CommentCreated;
                e.delta = 1;
            }
            whole.apply(&e);
            parts[(post % PARTITIONS) as usize].apply(&e);
        }
        for w in [Window::Hour, Window::Day] {
            let single = decode_ranking(&whole.encode(now), w).expect("ranking").1;
            assert_eq!(single.len(), RANKED);
            let merged =
                merge(parts.iter().map(|p| decode_ranking(&p.encode(now), w).expect("ranking").1), RANKED);
            assert_eq!(merged, single, "{w:?}");
        }
        // A partition's state split off a whole one is that partition's.
        let mut split = whole.clone();
        split.retain_part(7);
        assert_eq!(split, parts[7]);
    }

    #[test]
    fn snapshots_round_trip_and_old_buckets_go() {
        let now = 10_000 * MIN;
        let mut t = Trending::default();
        t.apply(&like(1, true, now - 2 * 24 * 60 * MIN));
        t.apply(&like(2, true, now - 3 * MIN));
        t.apply(&like(2, true, now - 5 * MIN));
        let b = t.encode(now);
        assert_eq!(Trending::decode(&b), Some(t.clone()));
        let (at, r) = decode_ranking(&b, Window::Day).expect("ranking");
        assert_eq!((at, r.len(), r[0].post, r[0].likes), (now, 1, 2, 2));
        t.prune(now);
        assert_eq!(t.len(), 1);
        assert!(Trending::decode(&b[..b.len() - 1]).is_none(), "a torn snapshot is refused");
    }
}
