use super::*;
use crate::ids::UserId;

const NOW: u64 = 1_800_000_000_000;

fn like(user: u64, post: u64, ts: u64) -> Event {
    Event::like(0, true, Target::post(post), UserId(1), UserId(user), ts, post)
}

/// A small deterministic generator (xorshift64*).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// `users` ordinary accounts (IDs from 100,000) each liking 2..=25 distinct posts of 200,
/// drawn on a Zipf curve (weight 1/rank), all within one minute before `NOW`.
fn zipf_crowd(s: &mut Integrity, o: &IntegrityOptions, users: u64, seed: u64) {
    let weights: Vec<f64> = (1..=200).map(|r| 1.0 / r as f64).collect();
    let total: f64 = weights.iter().sum();
    let mut rng = Rng(seed);
    for u in 0..users {
        let n = 2 + rng.below(24) as usize;
        let mut liked = std::collections::HashSet::new();
        while liked.len() < n {
            let mut x = (rng.below(1 << 30) as f64 / (1u64 << 30) as f64) * total;
            let mut post = 200;
            for (i, w) in weights.iter().enumerate() {
                if x < *w {
                    post = i as u64 + 1;
                    break;
                }
                x -= w;
            }
            liked.insert(post);
        }
        for p in liked {
            s.apply(o, &like(100_000 + u, p, NOW - rng.below(60_000)));
        }
    }
}

/// 50 accounts (IDs 1..=50) liking the same 30 posts (1,001..=1,030) within seconds.
fn ring(s: &mut Integrity, o: &IntegrityOptions, start: u64) {
    for p in 0..30u64 {
        for u in 1..=50u64 {
            s.apply(o, &like(u, 1_001 + p, start + p * 200 + u * 20));
        }
    }
}

fn flagged(s: &Integrity) -> Vec<(u64, Reason)> {
    let mut v: Vec<(u64, Reason)> = s.flags().map(|f| (f.user, f.reason)).collect();
    v.sort_by_key(|f| f.0);
    v
}

#[test]
fn a_ring_of_50_liking_30_posts_in_lockstep_is_flagged_and_a_zipf_crowd_is_not() {
    let o = IntegrityOptions::default();
    for seed in [1u64, 7, 42] {
        let mut s = Integrity::default();
        zipf_crowd(&mut s, &o, 5_000, seed);
        ring(&mut s, &o, NOW - 10_000);
        s.scan(&o, NOW);
        let got = flagged(&s);
        let want: Vec<(u64, Reason)> = (1..=50).map(|u| (u, Reason::LockstepRing)).collect();
        assert_eq!(got, want, "seed {seed}");
        let f = s.flags().find(|f| f.user == 7).expect("flag");
        match &f.evidence {
            Evidence::Ring { partners, shared_targets, sample_partners, .. } => {
                assert_eq!((*partners, *shared_targets), (49, 30));
                assert!(!sample_partners.is_empty() && !sample_partners.contains(&7));
            }
            e => panic!("{e:?}"),
        }
    }
}

#[test]
fn a_zipf_crowd_alone_is_never_flagged_even_on_its_second_scan() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    zipf_crowd(&mut s, &o, 5_000, 99);
    s.scan(&o, NOW);
    zipf_crowd(&mut s, &o, 5_000, 100);
    s.scan(&o, NOW + 1_000);
    assert_eq!(flagged(&s), Vec::new());
}

#[test]
fn likes_spread_over_minutes_are_not_lockstep() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    // The same 30 posts, but each account on its own schedule, minutes apart.
    for u in 1..=50u64 {
        for p in 0..30u64 {
            s.apply(&o, &like(u, 1_001 + p, NOW - 590_000 + ((u * 7 + p * 13) % 50) * 11_000));
        }
    }
    s.scan(&o, NOW);
    assert!(flagged(&s).iter().all(|f| f.1 != Reason::LockstepRing), "{:?}", flagged(&s));
}

#[test]
fn brand_new_accounts_acting_only_together_are_flagged_with_lower_thresholds() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    // 12 accounts, 8 posts: below the lockstep thresholds (20 accounts, 10 posts).
    for p in 0..8u64 {
        for u in 1..=12u64 {
            s.apply(&o, &like(u, 500 + p, NOW - 5_000 + p * 100 + u));
        }
    }
    s.scan(&o, NOW);
    let want: Vec<(u64, Reason)> = (1..=12).map(|u| (u, Reason::NewAccountsRing)).collect();
    assert_eq!(flagged(&s), want);

    // The same pattern by accounts first seen two days ago is not flagged.
    let mut s = Integrity::default();
    for u in 1..=12u64 {
        s.apply(&o, &like(u, 9, NOW - 2 * 86_400_000));
    }
    s.scan(&o, NOW - 2 * 86_400_000);
    for p in 0..8u64 {
        for u in 1..=12u64 {
            s.apply(&o, &like(u, 500 + p, NOW - 5_000 + p * 100 + u));
        }
    }
    s.scan(&o, NOW);
    assert_eq!(flagged(&s), Vec::new());
}

#[test]
fn an_inhuman_sustained_rate_is_flagged_and_a_bursty_human_is_not() {
    let o = IntegrityOptions { rate_window_ms: 10_000, rate_min_likes: 40, ..IntegrityOptions::default() };
    let mut s = Integrity::default();
    // A bot: 5 likes a second for 10 s.
    for i in 0..50u64 {
        s.apply(&o, &like(1, 10_000 + i, NOW - 10_000 + i * 200));
    }
    // A person: 45 likes in a 2-second binge.
    for i in 0..45u64 {
        s.apply(&o, &like(2, 20_000 + i, NOW - 2_000 + i * 40));
    }
    s.scan(&o, NOW);
    assert_eq!(flagged(&s), vec![(1, Reason::InhumanRate)]);
    let f = s.flags().next().expect("flag");
    assert!(matches!(f.evidence, Evidence::Rate { likes: 50, window_s: 10, .. }), "{f:?}");
    // The defaults leave both alone.
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    for i in 0..120u64 {
        s.apply(&o, &like(1, 10_000 + i, NOW - 60_000 + i * 500));
    }
    s.scan(&o, NOW);
    assert_eq!(flagged(&s), Vec::new());
}

#[test]
fn confirming_discounts_the_accounts_likes_and_clearing_restores_them_exactly() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    ring(&mut s, &o, NOW - 10_000);
    s.scan(&o, NOW);
    for u in 1..=50u64 {
        let liked: Vec<Target> = (0..30).map(|p| Target::post(1_001 + p)).collect();
        s.decide(&Decision { user: UserId(u), verdict: Verdict::Confirm, at_ms: NOW + u }, liked, NOW + 100);
    }
    assert_eq!(s.discounts().discount(Target::post(1_001)), 50);
    // An unlike by a confirmed account takes one back; a like by anyone else changes nothing.
    s.apply(&o, &Event::like(0, false, Target::post(1_001), UserId(1), UserId(3), NOW + 200, 1_001));
    s.apply(&o, &like(9_999, 1_001, NOW + 200));
    assert_eq!(s.discounts().discount(Target::post(1_001)), 49);
    // The snapshot keeps flags, verdicts and memberships; readers get the discounts alone.
    let b = codec::encode(&s);
    let back = codec::decode(&b).expect("decode");
    assert_eq!(back.discounts(), s.discounts());
    assert_eq!(back.flag_count(), 50);
    assert_eq!(codec::decode_discounts(&b).expect("front"), s.discounts().counts().clone());
    assert_eq!(codec::decode_flags(&b).expect("flags").len(), 50);
    assert!(codec::decode(&b[..b.len() - 1]).is_none(), "a torn snapshot is refused");
    // A verdict seen again is not applied twice.
    let d = Decision { user: UserId(1), verdict: Verdict::Confirm, at_ms: NOW + 1 };
    assert!(!s.is_new(&d));
    for u in 1..=50u64 {
        s.decide(&Decision { user: UserId(u), verdict: Verdict::Clear, at_ms: NOW + 1_000 }, Vec::new(), NOW);
    }
    assert!(s.discounts().counts().is_empty());
    assert_eq!(s.flag_count(), 50, "cleared flags stay listed");
}

#[test]
fn a_confirm_replays_recent_actions_an_index_behind_the_log_missed() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    s.apply(&o, &like(5, 1, NOW - 1_000));
    s.apply(&o, &like(5, 2, NOW - 900));
    s.apply(&o, &Event::like(0, false, Target::post(3), UserId(1), UserId(5), NOW - 800, 3));
    // The enumeration saw post 3 (unliked since) and not post 2 (liked since).
    let stale = vec![Target::post(1), Target::post(3)];
    s.decide(&Decision { user: UserId(5), verdict: Verdict::Confirm, at_ms: NOW }, stale, NOW);
    let got: Vec<u32> = (1..=3).map(|p| s.discounts().discount(Target::post(p))).collect();
    assert_eq!(got, vec![1, 1, 0]);
}

#[test]
fn a_ring_of_new_accounts_growing_into_a_lockstep_ring_is_shown_as_one() {
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    // 50 new accounts, 8 shared posts: a new-accounts ring (lockstep needs 10 posts)...
    for p in 0..8u64 {
        for u in 1..=50u64 {
            s.apply(&o, &like(u, 1_001 + p, NOW - 20_000 + p * 200 + u));
        }
    }
    s.scan(&o, NOW - 10_000);
    assert!(flagged(&s).iter().all(|f| f.1 == Reason::NewAccountsRing) && s.flag_count() == 50);
    let at = s.flags().next().map(|f| f.flagged_at_ms);
    // ...then 22 more: the same flags, now a lockstep ring, flagged at the same time.
    for p in 8..30u64 {
        for u in 1..=50u64 {
            s.apply(&o, &like(u, 1_001 + p, NOW - 9_000 + p * 200 + u));
        }
    }
    s.scan(&o, NOW);
    assert!(flagged(&s).iter().all(|f| f.1 == Reason::LockstepRing) && s.flag_count() == 50);
    assert_eq!(s.flags().next().map(|f| f.flagged_at_ms), at);
}

#[test]
fn a_ring_whose_likes_arrive_between_many_scans_is_still_flagged() {
    // Scans run every round while the ring's likes trickle in: an account is put on a
    // round's list only once it has enough likes to show a pattern, and again in every
    // later round it acts in.
    let o = IntegrityOptions::default();
    let mut s = Integrity::default();
    let start = NOW - 10_000;
    for p in 0..30u64 {
        for u in 1..=50u64 {
            s.apply(&o, &like(u, 1_001 + p, start + p * 200 + u * 20));
        }
        s.scan(&o, start + p * 200 + 1_100);
    }
    let want: Vec<(u64, Reason)> = (1..=50).map(|u| (u, Reason::LockstepRing)).collect();
    assert_eq!(flagged(&s), want);
}

#[test]
fn a_viral_posts_one_time_likers_are_tracked_but_not_scanned() {
    let o = IntegrityOptions::default();
    let mut d = detect::Detector::default();
    for u in 0..10_000u64 {
        d.record(&o, u, detect::Action { target: Target::post(1), ts_ms: NOW + u / 10, created: true });
    }
    assert_eq!((d.len(), d.listed()), (10_000, 0));
    // One account with enough likes for a ring goes on the list, once.
    for p in 0..(o.min_shared.min(o.new_min_shared) as u64 + 3) {
        d.record(&o, 7, detect::Action { target: Target::post(100 + p), ts_ms: NOW + p, created: true });
    }
    assert_eq!(d.listed(), 1);
    d.scan(&o, NOW + 1_000);
    assert_eq!(d.listed(), 0);
}
