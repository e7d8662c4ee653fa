//! The client loops: each sends one request at a time in a social feed's mix (about 20 reads
//! per write), joins the comment bursts, and checks what it reads against what it wrote.

use super::shared::{COMMENT, COMMENT_LIKE, COMMENTS, FEED, LIKE, LIKERS, POST, REPLIES, Shared};
use super::world::{Created, LikeAnswer, Page, PostCount, PostsPage, World};
use hyper::Method;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// One client loop.
pub(super) struct Loop {
    w: usize,
    world: Arc<World>,
    sh: Arc<Shared>,
    rng: StdRng,
    /// (user index, post index) this loop liked recently: unlikes undo real likes.
    likes: VecDeque<(usize, usize)>,
    feeds: u64,
}

impl Loop {
    /// Loop `w` of the run, its random choices seeded with `seed`.
    pub(super) fn new(w: usize, world: Arc<World>, sh: Arc<Shared>, seed: u64) -> Self {
        Loop {
            w,
            world,
            sh,
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1000) + w as u64),
            likes: VecDeque::with_capacity(512),
            feeds: w as u64,
        }
    }

    /// Run until the stop flag is set, one operation every `interval` when given.
    pub(super) async fn run(mut self, interval: Option<Duration>) {
        let mut next = Instant::now();
        while !self.sh.stop.load(Ordering::Relaxed) {
            if let Some(iv) = interval {
                next += iv;
                let now = Instant::now();
                if next > now {
                    tokio::time::sleep_until(next.into()).await;
                } else if now - next > Duration::from_secs(1) {
                    next = now;
                }
            }
            if self.sh.burst_left.load(Ordering::Relaxed) > 0
                && self.rng.random_bool(0.5)
                && self
                    .sh
                    .burst_left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                self.burst_comment().await;
                continue;
            }
            // Per 1,000 operations, by default 952 reads and 48 writes (about 20:1, before the
            // bursts); --write-per-mille moves the split, keeping the mix within each side.
            let writes = self.world.write_per_mille;
            let x = self.rng.random_range(0..1000u32);
            if x < 1000 - writes {
                match x * 952 / (1000 - writes) {
                    0..560 => self.feed().await,
                    560..740 => {
                        let p = self.world.pick_post(&mut self.rng, 0.2);
                        self.read_post(p).await;
                    }
                    740..880 => self.comment_page().await,
                    880..930 => self.likers_page().await,
                    _ => self.replies_page().await,
                }
            } else {
                match (x - (1000 - writes)) * 48 / writes {
                    0..30 => self.like().await,
                    30..38 => self.comment().await,
                    _ => self.comment_like().await,
                }
            }
        }
    }

    async fn feed(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let mut ids: Vec<usize> = Vec::with_capacity(20);
        if self.rng.random_bool(0.5) {
            ids.push(0);
        }
        while ids.len() < 20 {
            let p = world.zipf(&mut self.rng);
            if !ids.contains(&p) {
                ids.push(p);
            }
        }
        let swap = self.rng.random_range(0..ids.len());
        ids.swap(0, swap);
        let list = ids.iter().map(|&i| world.post_id(i).to_string()).collect::<Vec<_>>().join(",");
        let path = format!("/v1/posts?ids={list}");
        let Some(b) = world.request(&sh, FEED, Method::GET, &path, &world.tokens[viewer], None, false).await
        else {
            return;
        };
        self.feeds += 1;
        // Every 16th page is checked: all 20 posts, in the order asked.
        if self.feeds & 15 == 0
            && let Some(page) = world.parse::<PostsPage>(&sh, FEED, "feed page", &b)
        {
            let got: Vec<&str> = page.posts.iter().map(|p| p.post_id.as_str()).collect();
            let want: Vec<String> = ids.iter().map(|&i| world.post_id(i).to_string()).collect();
            if got != want {
                sh.error(
                    FEED,
                    &sh.kinds.bad_body,
                    format!("feed page: asked {} posts, got {} (or out of order)", want.len(), got.len()),
                );
            }
        }
    }

    async fn read_post(&mut self, p: usize) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let path = format!("/v1/posts/{}", world.post_id(p));
        world.request(&sh, POST, Method::GET, &path, &world.tokens[viewer], None, false).await;
    }

    async fn comment_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let p = world.pick_post(&mut self.rng, 0.3);
        let id = world.post_id(p);
        let token = &world.tokens[viewer];
        if self.rng.random_bool(0.85) {
            let path = format!("/v1/posts/{id}/comments?order=top");
            world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await;
            return;
        }
        // Newest first, then the next page.
        let path = format!("/v1/posts/{id}/comments?order=newest");
        let Some(b) = world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await else {
            return;
        };
        if let Some(Page { next_cursor: Some(c), .. }) =
            world.parse::<Page>(&sh, COMMENTS, "comment page", &b)
        {
            let path = format!("/v1/posts/{id}/comments?order=newest&cursor={c}");
            world.request(&sh, COMMENTS, Method::GET, &path, token, None, false).await;
        }
    }

    async fn likers_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let viewer = world.my_user(self.w, &mut self.rng);
        let p = world.pick_post(&mut self.rng, 0.3);
        let path = format!("/v1/posts/{}/likers?limit=20", world.post_id(p));
        world.request(&sh, LIKERS, Method::GET, &path, &world.tokens[viewer], None, false).await;
    }

    async fn replies_page(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let parent = sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng);
        let Some((parent, _)) = parent else {
            let p = world.pick_post(&mut self.rng, 0.2);
            self.read_post(p).await;
            return;
        };
        let viewer = world.my_user(self.w, &mut self.rng);
        let path = format!("/v1/comments/{parent}/replies");
        world.request(&sh, REPLIES, Method::GET, &path, &world.tokens[viewer], None, true).await;
    }

    async fn like(&mut self) {
        if self.rng.random_bool(self.world.viral_share) {
            self.viral_like().await
        } else {
            self.ordinary_like().await
        }
    }

    /// The viral post: mostly new likers (a stream of fresh user IDs, unregistered, which the
    /// API accepts), some unlikes and some double-taps by earlier ones.
    async fn viral_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let seen = sh.viral_next.load(Ordering::Relaxed);
        let r: f64 = self.rng.random();
        let (i, method) = if r < 0.9 || seen == 0 {
            (sh.viral_next.fetch_add(1, Ordering::Relaxed), Method::PUT)
        } else if r < 0.97 {
            (self.rng.random_range(0..seen), Method::DELETE)
        } else {
            (self.rng.random_range(0..seen), Method::PUT)
        };
        let Some(token) = world.viral_token(i) else {
            sh.error(LIKE, &sh.kinds.bad_body, "minting a token failed".into());
            return;
        };
        let path = format!("/v1/posts/{}/like", world.post_id(0));
        let Some(b) = world.request(&sh, LIKE, method.clone(), &path, &token, None, false).await else {
            return;
        };
        if let Some(a) = world.parse::<LikeAnswer>(&sh, LIKE, "like", &b) {
            let like = method == Method::PUT;
            if a.liked != like {
                sh.error(LIKE, &sh.kinds.bad_body, format!("{method} {path}: answered liked={}", a.liked));
            }
            if a.changed {
                sh.expected[0].fetch_add(if like { 1 } else { -1 }, Ordering::Relaxed);
            }
        }
    }

    /// An ordinary post: a like (Zipf-skewed) or an unlike of one this loop made; every 8th is
    /// followed by a read of the post as the same user, which must show the new state.
    async fn ordinary_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let (user, post, like) = if !self.likes.is_empty() && self.rng.random_bool(0.3) {
            let k = self.rng.random_range(0..self.likes.len());
            let (u, p) = self.likes.swap_remove_back(k).unwrap_or((0, 1));
            (u, p, false)
        } else {
            (world.my_user(self.w, &mut self.rng), world.zipf(&mut self.rng), true)
        };
        let method = if like { Method::PUT } else { Method::DELETE };
        let path = format!("/v1/posts/{}/like", world.post_id(post));
        let token = &world.tokens[user];
        let Some(b) = world.request(&sh, LIKE, method.clone(), &path, token, None, false).await else {
            return;
        };
        let Some(a) = world.parse::<LikeAnswer>(&sh, LIKE, "like", &b) else {
            return;
        };
        if a.liked != like {
            sh.error(LIKE, &sh.kinds.bad_body, format!("{method} {path}: answered liked={}", a.liked));
        }
        if a.changed {
            sh.expected[post].fetch_add(if like { 1 } else { -1 }, Ordering::Relaxed);
        }
        if like {
            if self.likes.len() == 512 {
                self.likes.pop_front();
            }
            self.likes.push_back((user, post));
        }
        if self.rng.random_range(0..8) == 0 {
            let path = format!("/v1/posts/{}", world.post_id(post));
            let Some(b) = world.request(&sh, POST, Method::GET, &path, token, None, false).await else {
                return;
            };
            if let Some(v) = world.parse::<PostCount>(&sh, POST, "post", &b)
                && v.viewer_has_liked != a.liked
            {
                sh.error(
                    POST,
                    &sh.kinds.ryw,
                    format!(
                        "read-your-writes: user {} got liked={} from {method} {path}, then viewer_has_liked={}",
                        world.user_id(user),
                        a.liked,
                        v.viewer_has_liked
                    ),
                );
            }
        }
    }

    async fn post_comment(&mut self, user: usize, post: usize, parent: Option<u64>) -> Option<u64> {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let text = text(&mut self.rng);
        let body = match parent {
            Some(p) => format!(r#"{{"text":"{text}","parent_id":"{p}"}}"#),
            None => format!(r#"{{"text":"{text}"}}"#),
        };
        let path = format!("/v1/posts/{}/comments", world.post_id(post));
        let b = world
            .request(&sh, COMMENT, Method::POST, &path, &world.tokens[user], Some(body), parent.is_some())
            .await?;
        let c = world.parse::<Created>(&sh, COMMENT, "comment", &b)?;
        let Ok(id) = c.comment_id.parse::<u64>() else {
            sh.error(
                COMMENT,
                &sh.kinds.bad_body,
                format!("comment_id {:?} is not a decimal ID", c.comment_id),
            );
            return None;
        };
        sh.comments.lock().unwrap_or_else(|e| e.into_inner()).push((id, post));
        if parent.is_none() {
            sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).push((id, post));
        }
        Some(id)
    }

    async fn comment(&mut self) {
        let user = self.world.my_user(self.w, &mut self.rng);
        let parent = if self.rng.random_bool(0.3) {
            self.sh.top_level.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng)
        } else {
            None
        };
        match parent {
            Some((parent, post)) => {
                self.post_comment(user, post, Some(parent)).await;
            }
            None => {
                let post = self.world.pick_post(&mut self.rng, 0.2);
                self.post_comment(user, post, None).await;
            }
        }
    }

    async fn burst_comment(&mut self) {
        let user = self.world.my_user(self.w, &mut self.rng);
        let post = self.sh.burst_post.load(Ordering::Relaxed) as usize;
        let parent = self.sh.burst_parent.load(Ordering::Relaxed);
        if parent != 0 && self.rng.random_bool(0.25) {
            self.post_comment(user, post, Some(parent)).await;
        } else if let Some(id) = self.post_comment(user, post, None).await
            && self.rng.random_bool(0.1)
        {
            self.sh.burst_parent.store(id, Ordering::Relaxed);
        }
    }

    async fn comment_like(&mut self) {
        let (world, sh) = (self.world.clone(), self.sh.clone());
        let target = sh.comments.lock().unwrap_or_else(|e| e.into_inner()).pick(&mut self.rng);
        let Some((id, _)) = target else {
            return self.feed().await;
        };
        let user = world.my_user(self.w, &mut self.rng);
        let method = if self.rng.random_bool(0.8) { Method::PUT } else { Method::DELETE };
        let path = format!("/v1/comments/{id}/like");
        let token = &world.tokens[user];
        if let Some(b) = world.request(&sh, COMMENT_LIKE, method.clone(), &path, token, None, true).await
            && let Some(a) = world.parse::<LikeAnswer>(&sh, COMMENT_LIKE, "comment like", &b)
            && a.liked != (method == Method::PUT)
        {
            sh.error(
                COMMENT_LIKE,
                &sh.kinds.bad_body,
                format!("{method} {path}: answered liked={}", a.liked),
            );
        }
    }
}

const WORDS: [&str; 48] = [
    "what",
    "a",
    "view",
    "love",
    "this",
    "light",
    "colours",
    "morning",
    "trip",
    "again",
    "never",
    "seen",
    "such",
    "calm",
    "water",
    "city",
    "lovely",
    "shot",
    "where",
    "is",
    "that",
    "place",
    "great",
    "friends",
    "summer",
    "evening",
    "coffee",
    "garden",
    "mountain",
    "walk",
    "happy",
    "weekend",
    "photo",
    "sky",
    "dinner",
    "old",
    "town",
    "street",
    "music",
    "night",
    "river",
    "bridge",
    "quiet",
    "today",
    "forest",
    "beach",
    "sunset",
    "wonderful",
];

/// A comment of 4 to 13 ordinary words.
fn text(rng: &mut StdRng) -> String {
    let n = rng.random_range(4..14);
    let mut s = String::new();
    for i in 0..n {
        if i > 0 {
            s.push(' ');
        }
        s.push_str(WORDS[rng.random_range(0..WORDS.len())]);
    }
    s
}
