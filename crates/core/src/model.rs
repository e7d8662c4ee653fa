//! Upstream data the service keeps a copy of (posts, users, viewer settings), with their
//! versioned stored forms. The owners of this data push it through the service-role routes.

use crate::ids::UserId;

/// Record format version for the records below.
pub const RECORD_V1: u8 = 1;

/// Who may comment on a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CommentsPolicy {
    /// Anyone.
    #[default]
    Everyone,
    /// Only the author's followers.
    Followers,
    /// Nobody.
    Off,
}

impl CommentsPolicy {
    fn code(self) -> u8 {
        match self {
            CommentsPolicy::Everyone => 0,
            CommentsPolicy::Followers => 1,
            CommentsPolicy::Off => 2,
        }
    }
    fn from_code(c: u8) -> Option<Self> {
        match c {
            0 => Some(CommentsPolicy::Everyone),
            1 => Some(CommentsPolicy::Followers),
            2 => Some(CommentsPolicy::Off),
            _ => None,
        }
    }
}

/// What the service knows about a post.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostMeta {
    /// The post's author.
    pub author: UserId,
    /// The author hid the like count from others.
    pub hide_like_count: bool,
    /// Who may comment.
    pub comments: CommentsPolicy,
}

/// A user's public profile as pushed by the user service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserProfile {
    /// Display handle.
    pub username: String,
    /// Verified account.
    pub verified: bool,
}

/// A viewer's own preferences.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ViewerSettings {
    /// Hide like counts on posts this viewer sees (except their own).
    pub hide_like_counts: bool,
    /// Which notifications the viewer wants, per kind.
    pub notifications: NotifPrefs,
    /// The latest changes of `notifications`, oldest first: the notifier decides on a held
    /// like by the preference in force when the like was made, which a later change (turning
    /// a kind off and on again within the hold) must not overrule.
    pub pref_changes: PrefChanges,
}

/// How many changes of notification preferences a user's settings keep.
pub const PREF_CHANGES_KEPT: usize = 16;

/// One change of a notification preference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefChange {
    /// When, ms since the epoch.
    pub at_ms: u64,
    /// The kind whose preference changed.
    pub kind: crate::notify::NotifKind,
    /// The preference before the change.
    pub before: NotifPref,
}

/// The latest [`PREF_CHANGES_KEPT`] changes of a user's notification preferences, oldest
/// first (a fixed array keeps settings `Copy` and their cache entries small).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PrefChanges {
    kept: [Option<PrefChange>; PREF_CHANGES_KEPT],
}

impl PrefChanges {
    /// The changes kept, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &PrefChange> {
        self.kept.iter().flatten()
    }

    /// Keep `c`, forgetting the oldest change when full.
    pub fn push(&mut self, c: PrefChange) {
        let n = self.iter().count();
        if n == PREF_CHANGES_KEPT {
            self.kept.rotate_left(1);
            self.kept[PREF_CHANGES_KEPT - 1] = Some(c);
        } else {
            self.kept[n] = Some(c);
        }
    }
}

impl ViewerSettings {
    /// Record, at `now_ms`, each notification preference that differs from `before` (the
    /// preferences as they were before this update).
    pub fn record_pref_changes(&mut self, before: &NotifPrefs, now_ms: u64) {
        use crate::notify::NotifKind;
        for kind in [NotifKind::PostLiked, NotifKind::CommentLiked, NotifKind::Commented, NotifKind::Replied]
        {
            let was = before.for_kind(kind);
            if was != self.notifications.for_kind(kind) {
                self.pref_changes.push(PrefChange { at_ms: now_ms, kind, before: was });
            }
        }
    }

    /// The preference for `kind` that was in force at `at_ms`: the current one, undone by
    /// every later change kept. (Before the oldest change kept, the preference that change
    /// replaced is the best known.)
    pub fn pref_at(&self, kind: crate::notify::NotifKind, at_ms: u64) -> NotifPref {
        self.pref_changes
            .iter()
            .rev()
            .filter(|c| c.kind == kind && c.at_ms > at_ms)
            .fold(self.notifications.for_kind(kind), |_, c| c.before)
    }
}

/// Whose actions of one kind notify a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NotifPref {
    /// Everyone's (the default).
    #[default]
    All,
    /// Only those of people the user follows.
    Following,
    /// No one's.
    Off,
}

impl NotifPref {
    /// `all`, `following` or `off`.
    pub fn name(self) -> &'static str {
        match self {
            NotifPref::All => "all",
            NotifPref::Following => "following",
            NotifPref::Off => "off",
        }
    }
    /// Parse a wire name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "all" => Some(NotifPref::All),
            "following" => Some(NotifPref::Following),
            "off" => Some(NotifPref::Off),
            _ => None,
        }
    }
    fn code(self) -> u8 {
        match self {
            NotifPref::All => 0,
            NotifPref::Following => 1,
            NotifPref::Off => 2,
        }
    }
    fn from_code(c: u8) -> Result<Self, BadRecord> {
        match c {
            0 => Ok(NotifPref::All),
            1 => Ok(NotifPref::Following),
            2 => Ok(NotifPref::Off),
            _ => Err(BadRecord("notification preference")),
        }
    }
}

/// Notification preferences, one per kind (docs/api.md, `/v1/me/notification-settings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotifPrefs {
    /// Likes of my posts.
    pub post_liked: NotifPref,
    /// Likes of my comments.
    pub comment_liked: NotifPref,
    /// Comments on my posts.
    pub commented: NotifPref,
    /// Replies to my comments and mentions.
    pub replied: NotifPref,
}

impl NotifPrefs {
    /// The preference for `kind`.
    pub fn for_kind(&self, kind: crate::notify::NotifKind) -> NotifPref {
        use crate::notify::NotifKind;
        match kind {
            NotifKind::PostLiked => self.post_liked,
            NotifKind::CommentLiked => self.comment_liked,
            NotifKind::Commented => self.commented,
            NotifKind::Replied => self.replied,
        }
    }
}

/// A stored record could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad record: {0}")]
pub struct BadRecord(pub &'static str);

fn check_version(b: &[u8], len_ok: bool) -> Result<(), BadRecord> {
    match b.first() {
        Some(&RECORD_V1) if len_ok => Ok(()),
        Some(&RECORD_V1) => Err(BadRecord("wrong length")),
        Some(_) => Err(BadRecord("unknown format version")),
        None => Err(BadRecord("empty")),
    }
}

impl PostMeta {
    /// Stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(11);
        b.push(RECORD_V1);
        b.extend_from_slice(&self.author.0.to_be_bytes());
        b.push(self.hide_like_count as u8);
        b.push(self.comments.code());
        b
    }
    /// Parse the stored form.
    pub fn decode(b: &[u8]) -> Result<Self, BadRecord> {
        check_version(b, b.len() == 11)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[1..9]);
        Ok(PostMeta {
            author: UserId(u64::from_be_bytes(a)),
            hide_like_count: b[9] != 0,
            comments: CommentsPolicy::from_code(b[10]).ok_or(BadRecord("bad comments policy"))?,
        })
    }
}

impl UserProfile {
    /// Stored form.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(2 + self.username.len());
        b.push(RECORD_V1);
        b.push(self.verified as u8);
        b.extend_from_slice(self.username.as_bytes());
        b
    }
    /// Parse the stored form.
    pub fn decode(b: &[u8]) -> Result<Self, BadRecord> {
        check_version(b, b.len() >= 2)?;
        let username = std::str::from_utf8(&b[2..]).map_err(|_| BadRecord("username not UTF-8"))?;
        Ok(UserProfile { username: username.to_string(), verified: b[1] != 0 })
    }
    /// The name shown for a user who was never registered.
    pub fn placeholder_name(user: UserId) -> String {
        format!("user{user}")
    }
}

/// Length of one encoded [`PrefChange`]: when (8), kind (1), preference before (1).
const PREF_CHANGE_LEN: usize = 10;

impl ViewerSettings {
    /// Stored form: version, flag, four preferences, then (when any) the count of changes
    /// kept and each change.
    pub fn encode(&self) -> Vec<u8> {
        let n = &self.notifications;
        let mut b = vec![
            RECORD_V1,
            self.hide_like_counts as u8,
            n.post_liked.code(),
            n.comment_liked.code(),
            n.commented.code(),
            n.replied.code(),
        ];
        let changes: Vec<&PrefChange> = self.pref_changes.iter().collect();
        if !changes.is_empty() {
            b.push(changes.len() as u8);
            for c in changes {
                b.extend_from_slice(&c.at_ms.to_be_bytes());
                b.push(c.kind.code());
                b.push(c.before.code());
            }
        }
        b
    }
    /// Parse the stored form (records written before notification preferences existed hold
    /// only the first flag: every kind is then `all`; records written before their changes
    /// were kept end after the preferences).
    pub fn decode(b: &[u8]) -> Result<Self, BadRecord> {
        let with_changes = b.len() > 6 && {
            let n = b[6] as usize;
            n <= PREF_CHANGES_KEPT && b.len() == 7 + PREF_CHANGE_LEN * n
        };
        check_version(b, b.len() == 2 || b.len() == 6 || with_changes)?;
        let mut pref_changes = PrefChanges::default();
        if with_changes {
            for c in b[7..].chunks_exact(PREF_CHANGE_LEN) {
                let mut at = [0u8; 8];
                at.copy_from_slice(&c[..8]);
                pref_changes.push(PrefChange {
                    at_ms: u64::from_be_bytes(at),
                    kind: crate::notify::NotifKind::from_code(c[8])
                        .ok_or(BadRecord("bad notification kind"))?,
                    before: NotifPref::from_code(c[9])?,
                });
            }
        }
        let notifications = if b.len() >= 6 {
            NotifPrefs {
                post_liked: NotifPref::from_code(b[2])?,
                comment_liked: NotifPref::from_code(b[3])?,
                commented: NotifPref::from_code(b[4])?,
                replied: NotifPref::from_code(b[5])?,
            }
        } else {
            NotifPrefs::default()
        };
        Ok(ViewerSettings { hide_like_counts: b[1] != 0, notifications, pref_changes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let p = PostMeta { author: UserId(7), hide_like_count: true, comments: CommentsPolicy::Followers };
        assert_eq!(PostMeta::decode(&p.encode()), Ok(p));
        let u = UserProfile { username: "zoë".into(), verified: true };
        assert_eq!(UserProfile::decode(&u.encode()), Ok(u));
        let s = ViewerSettings {
            hide_like_counts: true,
            notifications: NotifPrefs {
                commented: NotifPref::Following,
                replied: NotifPref::Off,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(ViewerSettings::decode(&s.encode()), Ok(s));
        // A record from before notification preferences.
        assert_eq!(
            ViewerSettings::decode(&[RECORD_V1, 1]),
            Ok(ViewerSettings { hide_like_counts: true, ..Default::default() })
        );
    }

    /// `post_liked` turned off at 1,000 and on again at 2,000: a like at 1,500 was made
    /// while it was off, whatever the setting is when the notifier gets to it; the changes
    /// survive the stored form, and only the latest are kept.
    #[test]
    fn the_preference_in_force_at_a_time_is_known_after_later_changes() {
        use crate::notify::NotifKind::{CommentLiked, PostLiked};
        let mut s = ViewerSettings::default();
        let before = s.notifications;
        s.notifications.post_liked = NotifPref::Off;
        s.record_pref_changes(&before, 1_000);
        let before = s.notifications;
        s.notifications.post_liked = NotifPref::All;
        s.record_pref_changes(&before, 2_000);
        assert_eq!(s.notifications, NotifPrefs::default());
        assert_eq!(s.pref_at(PostLiked, 999), NotifPref::All);
        assert_eq!(s.pref_at(PostLiked, 1_000), NotifPref::Off);
        assert_eq!(s.pref_at(PostLiked, 1_500), NotifPref::Off);
        assert_eq!(s.pref_at(PostLiked, 2_000), NotifPref::All);
        assert_eq!(s.pref_at(CommentLiked, 1_500), NotifPref::All, "other kinds did not change");
        let stored = ViewerSettings::decode(&s.encode());
        assert_eq!(stored, Ok(s));
        for t in 0..40u64 {
            let before = s.notifications;
            s.notifications.comment_liked = if t % 2 == 0 { NotifPref::Off } else { NotifPref::All };
            s.record_pref_changes(&before, 3_000 + t);
        }
        assert_eq!(s.pref_changes.iter().count(), PREF_CHANGES_KEPT);
        assert_eq!(s.pref_changes.iter().next().map(|c| c.at_ms), Some(3_024), "the oldest are forgotten");
        assert_eq!(ViewerSettings::decode(&s.encode()), Ok(s));
        assert!(ViewerSettings::decode(&s.encode()[..20]).is_err(), "a cut record");
    }

    #[test]
    fn unknown_record_versions_are_rejected() {
        assert!(PostMeta::decode(&[2; 11]).is_err());
        assert!(ViewerSettings::decode(&[]).is_err());
        assert!(UserProfile::decode(&[1]).is_err());
    }
}
