//! The demo's seeded world: a few hundred named users with a follow graph, 30 posts (one of
//! them viral, with tens of thousands of likes), comment threads with replies, a restricted
//! user and a hidden word, a moderator, held comments of every `held_by` reason (one of them
//! appealed) and a ring of accounts liking in lockstep for the integrity consumer to flag.
//! Written through the service facade, only into an empty store (the world's IDs are fixed,
//! so a restarted demo describes the same world).

use anyhow::Context;
use likewise_core::ids::{CommentId, PostId, UserId};
use likewise_core::like::LikeAction;
use likewise_core::model::{CommentsPolicy, PostMeta, UserProfile};
use likewise_core::ports::ReportReason;
use likewise_http::web::{DemoPost, DemoUser, DemoWorld};
use likewise_service::Engagement;
use likewise_service::comments::Reader;
use likewise_service::review::Decision;
use std::sync::Arc;
use tokio::task::JoinSet;

/// Named users: IDs 1..=USERS.
pub const USERS: u64 = 300;
/// Posts: IDs FIRST_POST..FIRST_POST+POSTS.
pub const FIRST_POST: u64 = 1001;
/// How many posts.
pub const POSTS: u64 = 30;
/// The viral post.
pub const VIRAL_POST: u64 = FIRST_POST;
/// Anonymous likers of the viral post start here (they have no profile).
const CROWD_BASE: u64 = 100_000;
/// Likes the viral post gets from the crowd (plus most named users): about "12.3K".
const CROWD: u64 = 12_050;
/// Storms like from users above this.
const STORM_BASE: u64 = 1_000_000;

/// alice signs in by default; mallory is restricted by alice; alice hides "spoiler".
pub const ALICE: u64 = 1;
const MALLORY: u64 = 13;
/// The moderator: `/demo/token` signs them in with the service role (the `/moderate` page).
pub const MODERATOR: u64 = 9_000;
/// A like farm: accounts (no profiles) liking the same posts in lockstep.
const RING_BASE: u64 = 800_001;
/// Accounts in the farm (a lockstep ring needs 20 by default).
const RING: u64 = 24;
/// Posts the farm likes (a ring member needs 10 shared by default).
const RING_POSTS: std::ops::Range<u64> = FIRST_POST + 18..FIRST_POST + 30;

const FIRST: &[&str] = &[
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "ken", "liam",
    "mallory", "nina", "oscar", "peggy", "quinn", "rupert", "sybil", "trent", "uma", "victor", "wendy",
    "xavier", "yara", "zoe", "amir", "bea", "chen", "dara", "emeka", "fatima", "goran", "hana", "ines",
    "jonas", "kofi", "lena", "mateo", "noor", "olga", "pablo", "rosa", "sami", "tariq", "ursula", "vera",
    "wei", "yusuf", "zainab",
];
const LAST: &[&str] =
    &["lee", "garcia", "novak", "okafor", "silva", "tanaka", "muller", "rossi", "dubois", "khan"];

const CAPTIONS: &[&str] = &[
    "Sunrise over the bay, worth the 5am alarm",
    "First sourdough that actually rose",
    "Trail run, 21 km, legs are jelly",
    "New desk setup, finally cable-managed",
    "The cat has claimed the laundry basket",
    "Rainy Sunday, new book, no plans",
    "Homemade ramen from scratch",
    "Caught the last light at the lighthouse",
    "Garden update: the tomatoes are winning",
    "Finished the 1000-piece puzzle",
];

const COMMENTS: &[&str] = &[
    "This is stunning",
    "Wow, where is this?",
    "Absolutely love it",
    "Saving this for later",
    "You have to tell me the recipe",
    "Goals right here",
    "The colours are unreal",
    "Okay this made my day",
    "How long did that take?",
    "Need this in my life",
    "Incredible work",
    "Can't stop looking at this",
];

const REPLIES: &[&str] = &[
    "Right? I said the same thing",
    "Totally agree",
    "Ha, same here",
    "Came here to say this",
    "This thread is wholesome",
    "I was there last year, it's even better in person",
    "Following for the answer",
    "Same question!",
];

fn username(id: u64) -> String {
    let i = (id - 1) as usize;
    if i < FIRST.len() {
        FIRST[i].to_string()
    } else {
        format!("{}_{}", FIRST[i % FIRST.len()], LAST[(i / FIRST.len()) % LAST.len()])
    }
}

fn author_of(post: u64) -> u64 {
    // alice writes every fifth post; the viral one is grace's.
    let k = post - FIRST_POST;
    if k == 0 {
        7
    } else if k % 5 == 1 {
        ALICE
    } else {
        2 + (k * 7) % 40
    }
}

/// A small deterministic generator (the world is the same on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The world the page is told about (no storage access).
pub fn world() -> DemoWorld {
    let users = (1..=USERS).map(|id| DemoUser { user_id: id.to_string(), username: username(id) }).collect();
    let posts = (FIRST_POST..FIRST_POST + POSTS)
        .map(|p| {
            let k = (p - FIRST_POST) as usize;
            let caption = CAPTIONS[k % CAPTIONS.len()];
            DemoPost {
                post_id: p.to_string(),
                author_username: username(author_of(p)),
                caption: caption.to_string(),
                hue: ((k * 47) % 360) as u16,
            }
        })
        .collect();
    DemoWorld {
        users,
        posts,
        viral_post_id: VIRAL_POST.to_string(),
        default_user_id: ALICE.to_string(),
        moderator: DemoUser { user_id: MODERATOR.to_string(), username: "moderator".to_string() },
        storm_base: STORM_BASE,
    }
}

/// Run `n` jobs spread over `workers` tasks.
async fn fan_out<F, Fut>(n: u64, workers: u64, job: F) -> anyhow::Result<()>
where
    F: Fn(u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let job = Arc::new(job);
    let mut set = JoinSet::new();
    for w in 0..workers {
        let job = job.clone();
        set.spawn(async move {
            let mut i = w;
            while i < n {
                job(i).await?;
                i += workers;
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = set.join_next().await {
        r.context("seeding task panicked")??;
    }
    Ok(())
}

/// Seed the world into an empty store (a store that has the viral post is left alone).
pub async fn seed(svc: &Arc<Engagement>) -> anyhow::Result<DemoWorld> {
    if svc.upstream.post_meta(PostId(VIRAL_POST)).await?.is_some() {
        tracing::info!("demo world already seeded");
        return Ok(world());
    }
    let started = std::time::Instant::now();
    tracing::info!("seeding the demo world");
    // Users and follows.
    let s = svc.clone();
    fan_out(USERS, 32, move |i| {
        let s = s.clone();
        async move {
            let id = i + 1;
            s.upstream
                .put_user(UserId(id), UserProfile { username: username(id), verified: id % 37 == 7 })
                .await?;
            let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id * 0x1000_0001));
            for _ in 0..12 {
                let other = 1 + rng.below(60);
                if other != id {
                    s.upstream.set_follow(UserId(id), UserId(other), true).await?;
                }
            }
            Ok(())
        }
    })
    .await?;
    svc.upstream
        .put_user(UserId(MODERATOR), UserProfile { username: "moderator".into(), verified: false })
        .await?;
    // alice follows her friends (so "Liked by" names people she knows).
    for friend in [2, 3, 4, 5, 6, 7, 8] {
        svc.upstream.set_follow(UserId(ALICE), UserId(friend), true).await?;
    }
    // Posts.
    for p in FIRST_POST..FIRST_POST + POSTS {
        let k = p - FIRST_POST;
        let meta = PostMeta {
            author: UserId(author_of(p)),
            hide_like_count: k == 4,
            comments: if k == 9 { CommentsPolicy::Off } else { CommentsPolicy::Everyone },
        };
        svc.upstream.put_post(PostId(p), meta).await?;
    }
    // Moderation: alice restricts mallory and hides a word.
    svc.moderation.set_restrict(UserId(ALICE), UserId(MALLORY), true).await?;
    svc.moderation.put_hidden_words(UserId(ALICE), vec!["spoiler".to_string()]).await?;
    // Likes on ordinary posts from named users (alice likes a couple).
    let s = svc.clone();
    fan_out(POSTS - 1, 29, move |i| {
        let s = s.clone();
        async move {
            let p = FIRST_POST + 1 + i;
            let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (p * 31));
            let n = 3 + rng.below(if p.is_multiple_of(3) { 250 } else { 60 });
            for _ in 0..n {
                let u = 2 + rng.below(USERS - 1);
                s.likes.set_post_like(UserId(u), PostId(p), LikeAction::Like).await?;
            }
            if p.is_multiple_of(4) {
                s.likes.set_post_like(UserId(ALICE), PostId(p), LikeAction::Like).await?;
            }
            Ok(())
        }
    })
    .await?;
    // The viral post: a crowd, concurrently (group commit batches them), then named users
    // (the most recent likers, so "Liked by" can name people the viewer follows).
    let s = svc.clone();
    fan_out(CROWD, 256, move |i| {
        let s = s.clone();
        async move {
            Ok(s.likes
                .set_post_like(UserId(CROWD_BASE + i), PostId(VIRAL_POST), LikeAction::Like)
                .await
                .map(|_| ())?)
        }
    })
    .await?;
    let s = svc.clone();
    fan_out(USERS - 1, 64, move |i| {
        let s = s.clone();
        async move {
            Ok(s.likes
                .set_post_like(UserId(USERS - i), PostId(VIRAL_POST), LikeAction::Like)
                .await
                .map(|_| ())?)
        }
    })
    .await?;
    seed_comments(svc).await?;
    seed_views(svc).await?;
    seed_moderation(svc).await?;
    seed_like_farm(svc).await?;
    tracing::info!(elapsed_ms = started.elapsed().as_millis() as u64, "demo world seeded");
    Ok(world())
}

async fn seed_comments(svc: &Arc<Engagement>) -> anyhow::Result<()> {
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    let mut commenter = 20u64;
    let mut next_user = move || {
        commenter = if commenter >= USERS { 20 } else { commenter + 1 };
        commenter
    };
    for p in FIRST_POST..FIRST_POST + 12 {
        if p - FIRST_POST == 9 {
            continue; // comments are off there
        }
        let n = 2 + rng.below(5);
        let mut tops: Vec<CommentId> = Vec::new();
        for j in 0..n {
            let text = COMMENTS[((p + j) % COMMENTS.len() as u64) as usize];
            let c = svc.comments.create(UserId(next_user()), PostId(p), text, None, None).await?;
            tops.push(c.record.id);
        }
        // A long thread under the first comment, short ones elsewhere.
        if let Some(&first) = tops.first() {
            let replies = if p <= FIRST_POST + 2 { 6 } else { 1 + rng.below(3) };
            let mut last = first;
            for r in 0..replies {
                let text = REPLIES[((p + r) % REPLIES.len() as u64) as usize];
                // Every third reply answers the previous reply (an @mention).
                let parent = if r % 3 == 2 { last } else { first };
                let c = svc.comments.create(UserId(next_user()), PostId(p), text, Some(parent), None).await?;
                last = c.record.id;
            }
        }
        for &c in &tops {
            for _ in 0..rng.below(8) {
                let u = 2 + rng.below(USERS - 1);
                svc.likes.set_comment_like(UserId(u), c, LikeAction::Like).await?;
            }
        }
    }
    // On alice's post: a restricted comment from mallory and one caught by her hidden word.
    let alices = FIRST_POST + 1;
    svc.comments
        .create(UserId(MALLORY), PostId(alices), "Nice try, everyone knows it's fake", None, None)
        .await?;
    svc.comments
        .create(UserId(next_user()), PostId(alices), "Spoiler: the ending is the best part", None, None)
        .await?;
    Ok(())
}

/// Views (the authors' insights count unique viewers): most named users saw most posts.
async fn seed_views(svc: &Arc<Engagement>) -> anyhow::Result<()> {
    let s = svc.clone();
    fan_out(POSTS, 10, move |i| {
        let s = s.clone();
        async move {
            let p = FIRST_POST + i;
            let mut rng = Rng(0x2545_F491_4F6C_DD1D ^ (p * 131));
            for u in 2..=USERS {
                if rng.below(4) != 0 {
                    s.views.record(UserId(u), PostId(p)).await?;
                }
            }
            Ok(())
        }
    })
    .await
}

/// Comment authors of the moderation seed: users who wrote nothing else, so no burst of theirs
/// trips the velocity signal (each comment is held by the layer it is written for).
const SPAMMER: u64 = 251;
const COPIER: u64 = 252;
const MOBBED: u64 = 253;
const REPORTED: u64 = 254;
const APPEALER: u64 = 255;

/// Held comments of every `held_by` reason, one reported but still shown, and one a moderator
/// hid whose author appealed: every control of the moderator's page has something to act on.
/// (mallory's restricted comment and the hidden word on alice's post are seeded with the
/// threads.)
async fn seed_moderation(svc: &Arc<Engagement>) -> anyhow::Result<()> {
    let c = &svc.comments;
    // The classifier: links and shouting.
    c.create(
        UserId(SPAMMER),
        PostId(FIRST_POST + 3),
        "FREE FOLLOWERS!!!!!!!! cheap-likes.biz www.x.ru http://spam.io",
        None,
        None,
    )
    .await?;
    // Near-duplicates: the same line on five posts; the fifth copy is held.
    for p in FIRST_POST + 2..FIRST_POST + 7 {
        c.create(UserId(COPIER), PostId(p), "Check my profile for daily photo tips and presets", None, None)
            .await?;
    }
    // Reports: five distinct reporters hide a comment pending review.
    let mobbed = c
        .create(UserId(MOBBED), PostId(FIRST_POST + 5), "Honestly the old version looked better", None, None)
        .await?;
    for u in 60..65 {
        svc.review
            .report(Reader { user: UserId(u), moderator: false }, mobbed.record.id, ReportReason::Bullying)
            .await?;
    }
    // One report: queued, still shown.
    let reported =
        c.create(UserId(REPORTED), PostId(FIRST_POST + 7), "Is this even your photo?", None, None).await?;
    svc.review
        .report(Reader { user: UserId(66), moderator: false }, reported.record.id, ReportReason::Other)
        .await?;
    // A moderator hid it; its author appeals.
    let hidden = c
        .create(
            UserId(APPEALER),
            PostId(FIRST_POST + 8),
            "Ha, you clearly used a filter on this one",
            None,
            None,
        )
        .await?;
    svc.review.moderate(UserId(MODERATOR), hidden.record.id, Decision::Hide).await?;
    svc.review
        .appeal(UserId(APPEALER), hidden.record.id, Some("It was a friendly joke, we know each other"))
        .await?;
    Ok(())
}

/// A like farm for the integrity consumer to flag: RING accounts liking the same posts within
/// a second or two of each other.
async fn seed_like_farm(svc: &Arc<Engagement>) -> anyhow::Result<()> {
    for p in RING_POSTS {
        let s = svc.clone();
        fan_out(RING, 8, move |i| {
            let s = s.clone();
            async move {
                s.likes.set_post_like(UserId(RING_BASE + i), PostId(p), LikeAction::Like).await?;
                Ok(())
            }
        })
        .await?;
    }
    Ok(())
}
