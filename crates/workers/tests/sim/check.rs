//! The properties. After every action ([`step`]): each stored offset covers exactly the
//! effects stored with it, and never passes work whose effect is not stored. Once the run is
//! quiet ([`quiet`]): counts equal rows, the reverse index equals the rows, each inbox item
//! holds exactly the current likes of its targets (less its author's) as contributions and
//! counts their distinct likers, and every live push respected the hold, named no one twice
//! and was not repeated as a new arrival.

use super::state::{Inner, SHARDS};
use super::world::{HOLD_MS, Likeable, likeables, target_name};
use likewise_core::counter::{COUNTERS_CONSUMER, CounterField, CounterKey};
use likewise_core::event::EventKind;
use likewise_core::ids::{PostId, UserId};
use likewise_core::like::{Target, TargetKind};
use likewise_core::notify::{NotifKey, NotifKind};
use likewise_core::ports::cluster::{part_consumer, shard_consumer};
use likewise_workers::notifier::NOTIFIER;
use likewise_workers::reverse_index;
use std::collections::{BTreeMap, BTreeSet};

/// One key's like events in stream order: (stream seq, created, ts).
type KeyEvents = BTreeMap<(Target, UserId), Vec<(u64, bool, u64)>>;

/// Each (target, user)'s like events.
fn key_events(w: &Inner) -> KeyEvents {
    let mut out: BTreeMap<_, Vec<_>> = BTreeMap::new();
    for m in &w.stream {
        for e in &m.events {
            out.entry((e.target, e.actor)).or_default().push((
                m.seq,
                e.kind == EventKind::LikeCreated,
                e.ts_ms,
            ));
        }
    }
    out
}

/// Is `stored` the state after the last event at or below `offset`, or after a later one?
/// (A consumer may have applied work past its offset, never left work at or below it
/// undone.) `member` maps an event to the state it leaves.
fn not_behind(events: &[(u64, bool, u64)], offset: u64, stored: bool, member: impl Fn(bool) -> bool) -> bool {
    match events.iter().rposition(|(s, ..)| *s <= offset) {
        Some(j) => events[j..].iter().any(|(_, c, _)| member(*c) == stored),
        None => !stored || events.iter().any(|(_, c, _)| member(*c) == stored),
    }
}

fn notif_key(l: &Likeable) -> NotifKey {
    let kind = if l.target.kind == TargetKind::Post { NotifKind::PostLiked } else { NotifKind::CommentLiked };
    NotifKey { recipient: l.author, post: PostId(l.post), kind }
}

/// The contribution a like of `l` stores in its item (`Change::source`).
fn source_of(l: &Likeable) -> u64 {
    if l.target.kind == TargetKind::Post { 0 } else { l.target.id }
}

fn shard_of(post: u64) -> usize {
    (post % SHARDS as u64) as usize
}

fn likes_key(t: Target) -> CounterKey {
    CounterKey { target: t, field: CounterField::Likes }
}

/// The properties that hold after every action.
pub fn step(w: &Inner) -> Result<(), String> {
    let events = key_events(w);
    for s in 0..SHARDS {
        // Counters: exactly the deltas of the shard's messages up to the stored offset.
        let name = shard_consumer(COUNTERS_CONSUMER, s);
        let off = w.offsets.get(&name).copied().unwrap_or(0);
        let mut want: BTreeMap<Target, i64> = BTreeMap::new();
        for m in w.stream.iter().filter(|m| m.shard == s && m.seq <= off) {
            for e in &m.events {
                *want.entry(e.target).or_default() += e.delta();
            }
        }
        for l in likeables().iter().filter(|l| shard_of(l.post) == s) {
            let got = w.counters.get(&likes_key(l.target)).copied().unwrap_or(0);
            let expect = want.get(&l.target).copied().unwrap_or(0);
            if got != expect {
                return Err(format!(
                    "{name} at offset {off}: counter of {} is {got}, the events up to the offset sum to {expect}",
                    target_name(l.target)
                ));
            }
        }
        // Reverse index: no key older than the offset says.
        let name = reverse_index::consumer(s);
        let off = w.offsets.get(&name).copied().unwrap_or(0);
        for ((t, u), evs) in events.iter().filter(|((t, _), _)| shard_of(post_of(*t)) == s) {
            let stored = w.reverse.contains_key(&(*u, *t));
            if !not_behind(evs, off, stored, |c| c) {
                return Err(format!(
                    "{name} at offset {off}: user {} on {} is {stored} in the reverse index, behind the offset",
                    u.0,
                    target_name(*t)
                ));
            }
        }
    }
    // Inbox: no actor older than the notifier's offset says (its partition's, once that
    // committed: a partition starts at the whole notifier's).
    let whole = w.offsets.get(NOTIFIER).copied().unwrap_or(0);
    for l in likeables() {
        let part = super::world::part_of(l.post);
        let off = w.offsets.get(&part_consumer(NOTIFIER, part)).copied().unwrap_or(whole);
        let key = notif_key(&l);
        let actors = w.inbox.get(&key).map(|s| s.actors.clone()).unwrap_or_default();
        for u in 1..=super::world::USERS {
            let u = UserId(u);
            let stored = actors.contains_key(&(u, source_of(&l)));
            let evs = events.get(&(l.target, u)).map(Vec::as_slice).unwrap_or(&[]);
            let own = u == l.author;
            if (own && stored) || !not_behind(evs, off, stored, |c| c && !own) {
                return Err(format!(
                    "notifier at offset {off}: user {}'s like of {} in the {:?} item of post {} is {stored}, \
                     behind the offset (events of the key: {evs:?})",
                    u.0,
                    target_name(l.target),
                    key.kind,
                    l.post
                ));
            }
        }
    }
    Ok(())
}

fn post_of(t: Target) -> u64 {
    likeables().iter().find(|l| l.target == t).map_or(t.id, |l| l.post)
}

/// The properties of a quiet run: everything applied, nothing lost, nothing doubled.
/// `ranker` is the ranker's (offset, log head).
pub fn quiet(w: &Inner, ranker: (u64, u64), dirty: &BTreeSet<PostId>) -> Result<(), String> {
    let events = key_events(w);
    let rows = |t: Target| -> BTreeMap<UserId, u64> {
        w.likes.iter().filter(|((lt, _), _)| *lt == t).map(|((_, u), at)| (*u, *at)).collect()
    };
    if let Some(r) = w.outbox.iter().flatten().find(|r| r.relayed.is_none()) {
        return Err(format!("outbox row {} was never relayed", r.seq));
    }
    for l in likeables() {
        let name = target_name(l.target);
        let liked = rows(l.target);
        let count = w.counters.get(&likes_key(l.target)).copied().unwrap_or(0);
        if count != liked.len() as i64 {
            return Err(format!("count of {name} is {count}, it has {} like rows", liked.len()));
        }
        for u in 1..=super::world::USERS {
            let u = UserId(u);
            let (row, idx) = (liked.get(&u), w.reverse.get(&(u, l.target)));
            if row != idx {
                return Err(format!("reverse index of user {} on {name}: {idx:?}, like row: {row:?}", u.0));
            }
        }
        let key = notif_key(&l);
        let want: BTreeSet<UserId> = liked.keys().copied().filter(|u| *u != l.author).collect();
        let got: BTreeSet<UserId> = w
            .inbox
            .get(&key)
            .map(|s| s.actors.keys().filter(|(_, src)| *src == source_of(&l)).map(|(a, _)| *a).collect())
            .unwrap_or_default();
        if got != want {
            return Err(format!(
                "the {:?} item of post {} holds likes of {name} by {got:?}, the standing likers are {want:?}",
                key.kind, l.post
            ));
        }
    }
    // Each item counts and names the distinct likers of all its targets: one who still likes
    // one of them stays whatever they undid on another.
    let keys: BTreeSet<NotifKey> = likeables().iter().map(notif_key).collect();
    for key in keys {
        let targets: Vec<Likeable> = likeables().into_iter().filter(|l| notif_key(l) == key).collect();
        let want: BTreeSet<UserId> =
            targets.iter().flat_map(|l| rows(l.target).into_keys().filter(|u| *u != l.author)).collect();
        let stored = w.inbox.get(&key);
        let members = stored.map(|s| s.members()).unwrap_or_default();
        let count = stored.map_or(0, |s| s.item.actor_count);
        if members != want || count != want.len() as u64 {
            return Err(format!(
                "the {:?} item of post {} counts {count} and holds {members:?}, the standing likers are {want:?}",
                key.kind, key.post.0
            ));
        }
        pushes(w, key, &targets, &events)?;
    }
    if ranker.0 != ranker.1 || !dirty.is_empty() {
        return Err(format!("ranker at {} of {}, {} posts still dirty", ranker.0, ranker.1, dirty.len()));
    }
    Ok(())
}

/// The live pushes of the item `key` (of `targets`' likes): each one respects the hold and
/// counts each actor once, and an actor arrives at most once per like of theirs. (The last push need not be the stored
/// state: the bus is fire and forget, and a crash between the inbox commit and the publish
/// loses that push; the inbox, which a reconnecting stream reads, has it.)
fn pushes(w: &Inner, key: NotifKey, targets: &[Likeable], events: &KeyEvents) -> Result<(), String> {
    let author = key.recipient;
    let post = key.post.0;
    // An actor's like events of any of the item's targets.
    let likes_of = |a: UserId| -> Vec<(u64, bool, u64)> {
        targets.iter().flat_map(|l| events.get(&(l.target, a)).cloned().unwrap_or_default()).collect()
    };
    let mut last: BTreeSet<UserId> = BTreeSet::new();
    let mut arrivals: BTreeMap<UserId, usize> = BTreeMap::new();
    for p in w.pushes.iter().filter(|p| p.item.key == key) {
        let now: BTreeSet<UserId> = p.item.recent.iter().copied().collect();
        if now.len() != p.item.recent.len() || p.item.actor_count != now.len() as u64 || now.contains(&author)
        {
            return Err(format!("push of the {:?} item of post {post}: {:?}", key.kind, p.item));
        }
        for a in now.difference(&last) {
            let evs = likes_of(*a);
            if !evs.iter().any(|(_, created, ts)| *created && ts + HOLD_MS <= p.clock_high) {
                return Err(format!(
                    "user {} pushed into the {:?} item of post {post} at {} before any like of theirs was held {HOLD_MS} ms: {evs:?}",
                    a.0, key.kind, p.clock_high
                ));
            }
            *arrivals.entry(*a).or_default() += 1;
        }
        last = now;
    }
    for (a, n) in arrivals {
        let likes = likes_of(a).iter().filter(|(_, c, _)| *c).count();
        if n > likes {
            return Err(format!(
                "user {} arrived {n} times in the {:?} item of post {post} for {likes} likes (sent twice)",
                a.0, key.kind
            ));
        }
    }
    Ok(())
}
