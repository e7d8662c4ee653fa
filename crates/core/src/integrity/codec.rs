//! The integrity consumer's snapshot: big-endian binary behind a version byte.
//!
//! In order: the discounts (what every API node reads, once a second: first, so a reader
//! decodes nothing else), the flags (what the moderation list reads), then the rest of the
//! state: the newest verdict time seen, the verdicts applied and the confirmed accounts'
//! memberships. The detection windows are not saved (a restart forgets recent activity).

use super::discount::Discounts;
use super::{Evidence, Flag, Integrity, Reason, Verdict};
use crate::like::{Target, TargetKind};
use std::collections::{HashMap, HashSet};

const VERSION: u8 = 1;

fn put_target(out: &mut Vec<u8>, t: Target) {
    out.push(t.kind.code());
    out.extend_from_slice(&t.id.to_be_bytes());
}

fn put_flag(out: &mut Vec<u8>, f: &Flag) {
    out.extend_from_slice(&f.user.to_be_bytes());
    out.push(f.reason.code());
    out.extend_from_slice(&f.flagged_at_ms.to_be_bytes());
    match &f.evidence {
        Evidence::Ring { partners, shared_targets, span_ms, sample_partners } => {
            out.push(1);
            for v in [partners, shared_targets, span_ms] {
                out.extend_from_slice(&v.to_be_bytes());
            }
            out.push(sample_partners.len().min(255) as u8);
            for p in sample_partners.iter().take(255) {
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
        Evidence::Rate { likes, window_s, active_seconds } => {
            out.push(2);
            out.extend_from_slice(&likes.to_be_bytes());
            out.extend_from_slice(&window_s.to_be_bytes());
            out.extend_from_slice(&active_seconds.to_be_bytes());
        }
    }
}

/// The snapshot of `s`.
pub fn encode(s: &Integrity) -> Vec<u8> {
    let mut out = vec![VERSION];
    let counts = s.discounts.counts();
    out.extend_from_slice(&(counts.len() as u32).to_be_bytes());
    for (t, n) in counts {
        put_target(&mut out, *t);
        out.extend_from_slice(&n.to_be_bytes());
    }
    out.extend_from_slice(&(s.flags.len() as u32).to_be_bytes());
    for f in s.flags.values() {
        put_flag(&mut out, f);
    }
    out.extend_from_slice(&s.decisions_seen_ms.to_be_bytes());
    out.extend_from_slice(&(s.applied.len() as u32).to_be_bytes());
    for (u, (v, at)) in &s.applied {
        out.extend_from_slice(&u.to_be_bytes());
        out.push(v.code());
        out.extend_from_slice(&at.to_be_bytes());
    }
    let members = s.discounts.members();
    out.extend_from_slice(&(members.len() as u32).to_be_bytes());
    for (u, set) in members {
        out.extend_from_slice(&u.to_be_bytes());
        out.extend_from_slice(&(set.len() as u32).to_be_bytes());
        for t in set {
            put_target(&mut out, *t);
        }
    }
    out
}

/// The discounts at the front of a snapshot (`None`: not a snapshot this version reads).
pub fn decode_discounts(b: &[u8]) -> Option<HashMap<Target, u32>> {
    let mut r = Reader::new(b)?;
    discounts(&mut r)
}

/// The flags of a snapshot.
pub fn decode_flags(b: &[u8]) -> Option<Vec<Flag>> {
    let mut r = Reader::new(b)?;
    discounts(&mut r)?;
    flags(&mut r)
}

/// The state of a snapshot (with empty detection windows).
pub fn decode(b: &[u8]) -> Option<Integrity> {
    let mut r = Reader::new(b)?;
    discounts(&mut r)?;
    let flags = flags(&mut r)?.into_iter().map(|f| (f.user, f)).collect();
    let decisions_seen_ms = r.u64()?;
    let n = r.u32()? as usize;
    let mut applied = HashMap::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let u = r.u64()?;
        let v = Verdict::from_code(r.u8()?)?;
        applied.insert(u, (v, r.u64()?));
    }
    let n = r.u32()? as usize;
    let mut members = HashMap::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let u = r.u64()?;
        let m = r.u32()? as usize;
        let mut set = HashSet::with_capacity(m.min(1 << 16));
        for _ in 0..m {
            set.insert(r.target()?);
        }
        members.insert(u, set);
    }
    if !r.b.is_empty() {
        return None;
    }
    Some(Integrity {
        flags,
        applied,
        decisions_seen_ms,
        discounts: Discounts::from_members(members),
        ..Integrity::default()
    })
}

fn discounts(r: &mut Reader) -> Option<HashMap<Target, u32>> {
    let n = r.u32()? as usize;
    let mut out = HashMap::with_capacity(n.min(1 << 20));
    for _ in 0..n {
        let t = r.target()?;
        out.insert(t, r.u32()?);
    }
    Some(out)
}

fn flags(r: &mut Reader) -> Option<Vec<Flag>> {
    let n = r.u32()? as usize;
    let mut out = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let user = r.u64()?;
        let reason = Reason::from_code(r.u8()?)?;
        let flagged_at_ms = r.u64()?;
        let evidence = match r.u8()? {
            1 => {
                let (partners, shared_targets, span_ms) = (r.u64()?, r.u64()?, r.u64()?);
                let k = r.u8()? as usize;
                let sample_partners = (0..k).map(|_| r.u64()).collect::<Option<Vec<u64>>>()?;
                Evidence::Ring { partners, shared_targets, span_ms, sample_partners }
            }
            2 => Evidence::Rate { likes: r.u32()?, window_s: r.u64()?, active_seconds: r.u64()? },
            _ => return None,
        };
        out.push(Flag { user, reason, evidence, flagged_at_ms });
    }
    Some(out)
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(b: &'a [u8]) -> Option<Self> {
        let (&v, rest) = b.split_first()?;
        (v == VERSION).then_some(Reader { b: rest })
    }
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.b.len() < n {
            return None;
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Some(h)
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn target(&mut self) -> Option<Target> {
        let kind = TargetKind::from_code(self.u8()?)?;
        Some(Target { kind, id: self.u64()? })
    }
}
