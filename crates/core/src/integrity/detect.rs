//! Pattern detection over like events: lockstep rings, brand-new accounts acting only
//! together, and inhuman sustained rates.
//!
//! Per event the cost is O(1) amortised: the liker's bounded list of recent actions and its
//! per-second activity are updated, and the liker is marked active. That is one map lookup
//! and no allocation for an account's first like: most likers of a viral post like once, so
//! their windows live inline in the map entry, "active" is a round number in it, and only
//! accounts with enough likes to show a pattern go on the scan's list (a storm of a million
//! likers is a million first likes). The expensive part runs
//! once per round ([`Detector::scan`]) over the users listed since the previous scan:
//!
//! 1. Users with enough recent likes (candidates) get a MinHash signature of their liked set;
//!    LSH buckets (bands of the signature) group users whose sets are alike. Set similarity,
//!    not timing, is what separates a ring from a crowd liking the same popular posts in the
//!    same minute.
//! 2. A bucket holding an active user is verified: its core is the targets liked by at least
//!    half of its members; a member belongs to the ring when at least `min_shared` of its
//!    likes are core targets liked within `lockstep` of that target's median like time among
//!    the members, and those likes are at least half of everything it liked recently.
//! 3. Rate: an account with `rate_min_likes` likes in `rate_window` and activity in most of
//!    the window's seconds is no human.
//!
//! The windows live in memory only: a restart forgets recent activity (flags already raised
//! are kept by the consumer's snapshot).

use super::{Evidence, Flag, IntegrityOptions, Reason};
use crate::like::Target;
use smallvec::SmallVec;
use std::collections::HashMap;

/// MinHash functions per signature.
const SIG: usize = 16;
/// Rows per LSH band (SIG / ROWS bands).
const ROWS: usize = 2;
/// Share of a bucket's members that must like a target for it to be in the core.
const CORE_SHARE: f64 = 0.5;
/// Share of a ring member's recent likes that must be lockstep core likes.
const MIN_FOCUS: f64 = 0.5;
/// The same for brand-new accounts ("acting only together").
const NEW_FOCUS: f64 = 0.8;
/// Partner IDs kept as evidence.
const SAMPLES: usize = 5;

/// One recent action of a user: a like (or an unlike) of a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Action {
    /// The target.
    pub target: Target,
    /// When (ms).
    pub ts_ms: u64,
    /// A like (true) or an unlike.
    pub created: bool,
}

#[derive(Debug, Default)]
struct Track {
    first_seen_ms: u64,
    last_ms: u64,
    /// Recent actions, oldest first, at most `recent_cap` (one inline: no allocation for an
    /// account that liked once).
    recent: SmallVec<[Action; 1]>,
    /// Likes per second in the rate window, oldest first, and their sum.
    secs: SmallVec<[(u64, u32); 1]>,
    in_window: u32,
    /// The scan round this account last acted in (see [`Detector::record`]).
    round: u32,
    /// The round it was last put on the scan's list in.
    listed: u32,
    /// The MinHash signature, while a candidate (boxed: few accounts are).
    sig: Option<Box<[u64; SIG]>>,
}

impl Track {
    /// Targets whose latest recent action is a like, with that like's time.
    fn liked(&self) -> HashMap<Target, u64> {
        let mut out = HashMap::with_capacity(self.recent.len());
        for a in &self.recent {
            if a.created {
                out.insert(a.target, a.ts_ms);
            } else {
                out.remove(&a.target);
            }
        }
        out
    }
}

/// The detection windows (memory only).
#[derive(Debug)]
pub struct Detector {
    // foldhash: every like looks its user up here (SipHash showed in profiles of a storm).
    users: foldhash::HashMap<u64, Track>,
    /// Accounts the next scan looks at, once each (see [`Detector::record`]).
    active: Vec<u64>,
    /// The current round (never 0, which a new account's window starts with).
    round: u32,
    candidates: foldhash::HashSet<u64>,
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finaliser: a cheap, well-spread hash.
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn target_key(t: Target) -> u64 {
    t.id.wrapping_mul(4).wrapping_add(u64::from(t.kind.code()))
}

fn signature(liked: &HashMap<Target, u64>) -> [u64; SIG] {
    let mut sig = [u64::MAX; SIG];
    for t in liked.keys() {
        let k = target_key(*t);
        for (i, s) in sig.iter_mut().enumerate() {
            *s = (*s).min(mix(k ^ mix(i as u64 + 1)));
        }
    }
    sig
}

impl Default for Detector {
    fn default() -> Self {
        // Round 1: a new account's window starts at round 0, so it is not taken as listed.
        Detector { users: Default::default(), active: Vec::new(), round: 1, candidates: Default::default() }
    }
}

/// The fewest recent likes that can make an account part of a ring.
fn min_candidate(o: &IntegrityOptions) -> usize {
    o.min_shared.min(o.new_min_shared).max(1)
}

impl Detector {
    /// Users tracked.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Accounts on the next scan's list.
    pub fn listed(&self) -> usize {
        self.active.len()
    }

    /// Nothing tracked.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Record a like (or unlike) by `user`.
    pub fn record(&mut self, o: &IntegrityOptions, user: u64, a: Action) {
        let t =
            self.users.entry(user).or_insert_with(|| Track { first_seen_ms: a.ts_ms, ..Track::default() });
        t.last_ms = t.last_ms.max(a.ts_ms);
        t.recent.push(a);
        if t.recent.len() > o.recent_cap {
            t.recent.remove(0);
        }
        if a.created {
            let sec = a.ts_ms / 1_000;
            match t.secs.last_mut() {
                Some((s, n)) if *s == sec => *n += 1,
                _ => t.secs.push((sec, 1)),
            }
            t.in_window += 1;
            let oldest = sec.saturating_sub(o.rate_window_ms / 1_000);
            let stale = t.secs.iter().take_while(|(s, _)| *s <= oldest).count();
            if stale > 0 {
                t.in_window -= t.secs.drain(..stale).map(|(_, n)| n).sum::<u32>();
            }
        }
        t.sig = None;
        t.round = self.round;
        // The scan looks only at accounts that could show a pattern: enough recent actions
        // for a ring, or enough likes for a rate (not the viral post's one-time likers).
        let could = t.recent.len() >= min_candidate(o) || t.in_window >= o.rate_min_likes;
        if could && t.listed != self.round {
            t.listed = self.round;
            self.active.push(user);
        }
    }

    /// The user's recent actions since `since_ms`, oldest first (for a confirm's replay).
    pub fn recent_actions(&self, user: u64, since_ms: u64) -> Vec<Action> {
        self.users
            .get(&user)
            .map(|t| t.recent.iter().filter(|a| a.ts_ms >= since_ms).copied().collect())
            .unwrap_or_default()
    }

    /// Look for patterns among the users active since the last scan; returns new flags
    /// (a user may appear once). Also forgets what fell out of the windows.
    pub fn scan(&mut self, o: &IntegrityOptions, now_ms: u64) -> Vec<Flag> {
        let active = std::mem::take(&mut self.active);
        // Accounts acting from now on join the next round's list.
        let round = self.round;
        self.round = self.round.wrapping_add(1).max(1);
        let mut flags: HashMap<u64, Flag> = HashMap::new();
        let min_candidate = min_candidate(o);
        for u in &active {
            let Some(t) = self.users.get(u) else { continue };
            if t.in_window >= o.rate_min_likes {
                let window_s = (o.rate_window_ms / 1_000).max(1);
                let busy = t.secs.len() as u64;
                if busy as f64 >= o.rate_active_share * window_s as f64 {
                    let ev = Evidence::Rate { likes: t.in_window, window_s, active_seconds: busy };
                    flags.insert(
                        *u,
                        Flag { user: *u, reason: Reason::InhumanRate, evidence: ev, flagged_at_ms: now_ms },
                    );
                }
            }
            // Fewer actions than a candidate needs cannot make one: skip building the set
            // (most likers of a viral post have one recent like).
            if t.recent.len() >= min_candidate && t.liked().len() >= min_candidate {
                self.candidates.insert(*u);
            }
        }
        // Candidates whose recent likes went stale leave; signatures of the others are
        // recomputed only when they acted.
        let recent_from = now_ms.saturating_sub(o.recent_window_ms);
        let users = &mut self.users;
        self.candidates.retain(|u| {
            let Some(t) = users.get_mut(u) else { return false };
            let stale = t.recent.iter().take_while(|a| a.ts_ms < recent_from).count();
            if stale > 0 {
                t.recent.drain(..stale);
                t.sig = None;
            }
            let liked = t.liked();
            if liked.len() < min_candidate {
                return false;
            }
            if t.sig.is_none() {
                t.sig = Some(Box::new(signature(&liked)));
            }
            true
        });
        let mut buckets: HashMap<(usize, u64), Vec<u64>> = HashMap::new();
        for u in &self.candidates {
            if let Some(sig) = self.users.get(u).and_then(|t| t.sig.as_deref()) {
                for (b, band) in sig.chunks(ROWS).enumerate() {
                    let key = band.iter().fold(b as u64, |h, v| mix(h ^ v));
                    buckets.entry((b, key)).or_default().push(*u);
                }
            }
        }
        let smallest = o.ring_min.min(o.new_ring_min).max(2);
        for members in buckets.values() {
            let acted = |m: &u64| self.users.get(m).is_some_and(|t| t.round == round);
            if members.len() >= smallest && members.iter().any(acted) {
                for f in self.verify(o, members, now_ms) {
                    flags.entry(f.user).or_insert(f);
                }
            }
        }
        self.forget(o, now_ms);
        let mut out: Vec<Flag> = flags.into_values().collect();
        out.sort_by_key(|f| f.user);
        out
    }

    /// Check one bucket for a lockstep ring (or a ring of brand-new accounts).
    fn verify(&self, o: &IntegrityOptions, members: &[u64], now_ms: u64) -> Vec<Flag> {
        let liked: Vec<(u64, &Track, HashMap<Target, u64>)> =
            members.iter().filter_map(|u| self.users.get(u).map(|t| (*u, t, t.liked()))).collect();
        let mut times: HashMap<Target, Vec<u64>> = HashMap::new();
        for (_, _, l) in &liked {
            for (t, ts) in l {
                times.entry(*t).or_default().push(*ts);
            }
        }
        let need = ((liked.len() as f64) * CORE_SHARE).ceil() as usize;
        let core: HashMap<Target, u64> = times
            .into_iter()
            .filter(|(_, v)| v.len() >= need.max(2))
            .map(|(t, mut v)| {
                v.sort_unstable();
                (t, v[v.len() / 2])
            })
            .collect();
        if core.len() < o.min_shared.min(o.new_min_shared) {
            return Vec::new();
        }
        // Per member: its lockstep core likes, the largest gap to a median, its focus.
        let scored: Vec<(u64, usize, u64, f64, bool)> = liked
            .iter()
            .map(|(u, t, l)| {
                let (mut n, mut span) = (0usize, 0u64);
                for (target, ts) in l {
                    if let Some(median) = core.get(target) {
                        let gap = ts.abs_diff(*median);
                        if gap <= o.lockstep_ms {
                            n += 1;
                            span = span.max(gap);
                        }
                    }
                }
                let focus = n as f64 / l.len().max(1) as f64;
                let new = t.first_seen_ms >= now_ms.saturating_sub(o.new_account_ms);
                (*u, n, span, focus, new)
            })
            .collect();
        let ring: Vec<&(u64, usize, u64, f64, bool)> =
            scored.iter().filter(|s| s.1 >= o.min_shared && s.3 >= MIN_FOCUS).collect();
        let (reason, ring) = if ring.len() >= o.ring_min && core.len() >= o.min_shared {
            (Reason::LockstepRing, ring)
        } else {
            let new: Vec<&(u64, usize, u64, f64, bool)> =
                scored.iter().filter(|s| s.4 && s.1 >= o.new_min_shared && s.3 >= NEW_FOCUS).collect();
            if new.len() < o.new_ring_min || core.len() < o.new_min_shared {
                return Vec::new();
            }
            (Reason::NewAccountsRing, new)
        };
        let ids: Vec<u64> = ring.iter().map(|s| s.0).collect();
        ring.iter()
            .map(|(u, n, span, _, _)| Flag {
                user: *u,
                reason,
                evidence: Evidence::Ring {
                    partners: ids.len() as u64 - 1,
                    shared_targets: *n as u64,
                    span_ms: *span,
                    sample_partners: ids.iter().filter(|p| *p != u).take(SAMPLES).copied().collect(),
                },
                flagged_at_ms: now_ms,
            })
            .collect()
    }

    /// Drop users idle past both windows, then, over `max_users`, the longest idle.
    fn forget(&mut self, o: &IntegrityOptions, now_ms: u64) {
        let keep_from = now_ms.saturating_sub(o.recent_window_ms.max(o.rate_window_ms).max(o.new_account_ms));
        self.users.retain(|_, t| t.last_ms >= keep_from);
        if self.users.len() > o.max_users {
            let mut last: Vec<u64> = self.users.values().map(|t| t.last_ms).collect();
            let cut = self.users.len() - o.max_users;
            let (_, nth, _) = last.select_nth_unstable(cut);
            let nth = *nth;
            self.users.retain(|_, t| t.last_ms > nth);
        }
        let users = &self.users;
        self.candidates.retain(|u| users.contains_key(u));
    }
}
