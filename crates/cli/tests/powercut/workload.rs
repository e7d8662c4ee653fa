//! The power-cut storm and its ledger: client tasks that like, unlike, re-like and comment,
//! each remembering what the server acknowledged, and the checks run after every restart.
//!
//! Each task owns its users, so one key's requests are never concurrent and "the last
//! request on a key" is well defined. Likes toggle over a bounded pool of users, so the
//! checks cost the same at the thousandth cut as at the first.

use crate::common::proc::Client;
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Registered posts (author [`AUTHOR`]); the first one is hot.
pub const POSTS: [u64; 3] = [1, 2, 3];
pub const AUTHOR: u64 = 7;
/// Users per task in the like pool.
const POOL: u64 = 150;

/// The client's knowledge of one like key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum St {
    /// The last request was acknowledged: liked or not.
    Known(bool),
    /// The last request (asking for the flag) got no answer.
    Pending(bool),
}

/// An acknowledged comment.
pub struct Comment {
    pub id: u64,
    pub post: u64,
    pub author: u64,
    pub text: String,
}

/// What became of one request.
enum Sent {
    Acked,
    /// A 503: the server lives, the write may or may not commit.
    Unanswered,
    /// No answer: the server is gone.
    Dead,
}

/// One task's ledger.
pub struct Task {
    rng: StdRng,
    users: std::ops::Range<u64>,
    next_author: u64,
    pub likes: HashMap<(u64, u64), St>,
    pub comments: Vec<Comment>,
    /// Comments sent without an answer, by text: (post, author).
    pub unanswered: HashMap<String, (u64, u64)>,
    pub acked: u64,
}

/// Words for comment texts: each comment's text is unique (a counter spelled in words; digits
/// could read as leetspeak to the toxicity filter).
const WORDS: [&str; 16] = [
    "amber", "birch", "cedar", "dune", "elm", "fern", "grove", "heath", "iris", "juniper", "kelp", "larch",
    "maple", "nettle", "oak", "pine",
];

impl Task {
    pub fn new(t: u64, seed: u64) -> Task {
        let first = 10_000 + t * 1_000;
        Task {
            rng: StdRng::seed_from_u64(seed ^ (t + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)),
            users: first..first + POOL,
            next_author: 1_000_000 + t * 10_000_000,
            likes: HashMap::new(),
            comments: Vec::new(),
            unanswered: HashMap::new(),
            acked: 0,
        }
    }

    /// Run until the server stops answering or `stop` is set.
    pub async fn run(
        mut self,
        c: Arc<Client>,
        base: String,
        stop: Arc<AtomicBool>,
        total: Arc<AtomicU64>,
    ) -> Task {
        while !stop.load(Ordering::Relaxed) {
            let sent = if self.rng.random_bool(0.9) {
                self.toggle(&c, &base).await
            } else {
                self.comment(&c, &base).await
            };
            match sent {
                Sent::Acked => {
                    self.acked += 1;
                    total.fetch_add(1, Ordering::Relaxed);
                }
                Sent::Unanswered => {}
                Sent::Dead => break,
            }
        }
        self
    }

    /// Like, unlike or re-like a random key of this task's pool (sometimes a retry of an
    /// acknowledged like, which must change nothing).
    async fn toggle(&mut self, c: &Client, base: &str) -> Sent {
        let post =
            if self.rng.random_bool(0.6) { POSTS[0] } else { POSTS[self.rng.random_range(1..POSTS.len())] };
        let key = (post, self.rng.random_range(self.users.clone()));
        let (liked, changed) = match self.likes.get(&key) {
            None | Some(St::Known(false)) => (true, Some(true)),
            Some(St::Known(true)) if self.rng.random_bool(0.2) => (true, Some(false)),
            Some(St::Known(true)) => (false, Some(true)),
            Some(St::Pending(want)) => (*want, None),
        };
        self.send_like(c, base, key, liked, changed).await
    }

    async fn send_like(
        &mut self,
        c: &Client,
        base: &str,
        key: (u64, u64),
        liked: bool,
        changed: Option<bool>,
    ) -> Sent {
        self.likes.insert(key, St::Pending(liked));
        let m = if liked { Method::PUT } else { Method::DELETE };
        match c.call(base, m, &format!("/v1/posts/{}/like", key.0), key.1, false, "").await {
            Ok((200, v)) => {
                assert_eq!(v["liked"].as_bool(), Some(liked), "{key:?}: {v}");
                if let Some(want) = changed {
                    assert_eq!(v["changed"].as_bool(), Some(want), "{key:?} liked={liked}: {v}");
                }
                self.likes.insert(key, St::Known(liked));
                Sent::Acked
            }
            Ok((503, _)) => Sent::Unanswered,
            Ok((st, v)) => panic!("like {key:?} answered {st}: {v}"),
            Err(_) => Sent::Dead,
        }
    }

    /// A comment with a unique text by a fresh user (no rate limit applies).
    async fn comment(&mut self, c: &Client, base: &str) -> Sent {
        self.next_author += 1;
        let (post, author) = (POSTS[self.rng.random_range(0..POSTS.len())], self.next_author);
        let mut n = author;
        let mut words = Vec::new();
        while n > 0 {
            words.push(WORDS[(n % 16) as usize]);
            n /= 16;
        }
        let text = format!("Lovely light on the {}", words.join(" "));
        let body = serde_json::json!({ "text": text }).to_string();
        match c.call(base, Method::POST, &format!("/v1/posts/{post}/comments"), author, false, &body).await {
            Ok((201, v)) => {
                let id = v["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id");
                self.comments.push(Comment { id, post, author, text });
                Sent::Acked
            }
            Ok((503, _)) => {
                self.unanswered.insert(text, (post, author));
                Sent::Unanswered
            }
            Ok((st, v)) => panic!("comment on {post} as {author} answered {st}: {v}"),
            Err(_) => {
                self.unanswered.insert(text, (post, author));
                Sent::Dead
            }
        }
    }
}

/// After a restart: every acknowledged write is there, nothing unacknowledged is half there,
/// counts converge. Then the unanswered likes are retried (as a client would), so every key is
/// known again.
pub async fn verify(c: &Client, base: &str, tasks: &mut [Task], ctx: &str) {
    let mut rows: HashMap<u64, HashSet<u64>> = HashMap::new();
    for p in POSTS {
        rows.insert(p, c.likers(base, p).await);
    }
    // (a) Acknowledged likes are rows, acknowledged unlikes are not, no row is unexplained.
    let mut lost = Vec::new();
    let mut back = Vec::new();
    let mut tracked: HashSet<(u64, u64)> = HashSet::new();
    let mut pending = Vec::new();
    for t in tasks.iter() {
        for (&(p, u), s) in &t.likes {
            tracked.insert((p, u));
            match s {
                St::Known(true) if !rows[&p].contains(&u) => lost.push((p, u)),
                St::Known(false) if rows[&p].contains(&u) => back.push((p, u)),
                St::Pending(_) => pending.push((p, u)),
                _ => {}
            }
        }
    }
    assert!(
        lost.is_empty(),
        "{ctx}: {} acknowledged likes lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    assert!(
        back.is_empty(),
        "{ctx}: {} acknowledged unlikes undone, e.g. {:?}",
        back.len(),
        &back[..back.len().min(5)]
    );
    for (p, r) in &rows {
        let stray: Vec<&u64> = r.iter().filter(|u| !tracked.contains(&(*p, **u))).collect();
        assert!(stray.is_empty(), "{ctx}: post {p} has likes nobody sent: {stray:?}");
    }
    // (b) An unanswered like is whole or absent: in the likers list exactly when the user's
    // own view says liked.
    for (p, u) in pending {
        let (st, v) = c.call(base, Method::GET, &format!("/v1/posts/{p}"), u, false, "").await.expect("view");
        assert_eq!(st, 200, "{v}");
        assert_eq!(
            v["viewer_has_liked"].as_bool(),
            Some(rows[&p].contains(&u)),
            "{ctx}: unanswered like ({p}, {u}) is half there: likers and viewer_has_liked disagree"
        );
    }
    // (c) Counts converge to the rows.
    for p in POSTS {
        c.wait_count(base, p, rows[&p].len() as i64).await;
    }
    // (d) Acknowledged comments are there with their text; every listed comment was sent,
    // with exactly the text sent; the comment count converges to the visible comments.
    for p in POSTS {
        let listed = list_comments(c, base, p).await;
        let by_id: HashMap<u64, &(u64, String, String)> = listed.iter().map(|x| (x.0, x)).collect();
        for t in tasks.iter() {
            for m in t.comments.iter().filter(|m| m.post == p) {
                let got = by_id.get(&m.id);
                assert!(
                    got.is_some_and(|(_, a, text)| *a == m.author.to_string() && *text == m.text),
                    "{ctx}: acknowledged comment {} on post {p} lost or changed: {got:?}",
                    m.id
                );
            }
        }
        let known: HashSet<u64> = tasks.iter().flat_map(|t| t.comments.iter().map(|m| m.id)).collect();
        for (id, author, text) in listed.iter().filter(|x| !known.contains(&x.0)) {
            let sent = tasks.iter_mut().find_map(|t| t.unanswered.remove(text).map(|w| (t, w)));
            let Some((t, (post, a))) = sent else {
                panic!("{ctx}: comment {id} on post {p} ({text:?} by {author}) was never sent")
            };
            assert!(post == p && a.to_string() == *author, "{ctx}: comment {id} is not what was sent");
            // It is on disk now: from here on it must stay, like an acknowledged one.
            t.comments.push(Comment { id: *id, post, author: a, text: text.clone() });
        }
        let visible = listed.len() as i64;
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let (_, v) =
                c.call(base, Method::GET, &format!("/v1/posts/{p}"), AUTHOR, false, "").await.expect("post");
            if v["comment_count"].as_i64() == Some(visible) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{ctx}: post {p} comment_count {} vs {visible} listed",
                v["comment_count"]
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Comments that never arrived are gone; the client would send them again as new ones.
    for t in tasks.iter_mut() {
        t.unanswered.clear();
        // Retry the unanswered likes, as a client would: every key is known again.
        let pending: Vec<((u64, u64), bool)> = t
            .likes
            .iter()
            .filter_map(|(k, s)| if let St::Pending(w) = s { Some((*k, *w)) } else { None })
            .collect();
        for (key, want) in pending {
            let mut tries = 0;
            while !matches!(t.send_like(c, base, key, want, None).await, Sent::Acked) {
                tries += 1;
                assert!(tries < 20, "{ctx}: retrying {key:?} never succeeded");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Every top-level comment of `post` (as a moderator sees them): (id, author, text).
async fn list_comments(c: &Client, base: &str, post: u64) -> Vec<(u64, String, String)> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut path = format!("/v1/posts/{post}/comments?order=newest&limit=100");
        if let Some(cur) = &cursor {
            path.push_str(&format!("&cursor={cur}"));
        }
        let (st, v) = c.call(base, Method::GET, &path, 1, true, "").await.expect("list comments");
        assert_eq!(st, 200, "{v}");
        for i in v["items"].as_array().expect("items") {
            let id = i["comment_id"].as_str().and_then(|s| s.parse().ok()).expect("comment_id");
            assert_eq!(i["status"].as_str(), Some("visible"), "{i}");
            let author = i["author_id"].as_str().expect("author").to_string();
            out.push((id, author, i["text"].as_str().expect("text").to_string()));
        }
        match v["next_cursor"].as_str() {
            Some(cur) => cursor = Some(cur.to_string()),
            None => return out,
        }
    }
}
