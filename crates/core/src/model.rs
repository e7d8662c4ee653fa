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

/// Notification preferences, one per kind (API.md, `/v1/me/notification-settings`).
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

impl ViewerSettings {
    /// Stored form.
    pub fn encode(&self) -> Vec<u8> {
        let n = &self.notifications;
        vec![
            RECORD_V1,
            self.hide_like_counts as u8,
            n.post_liked.code(),
            n.comment_liked.code(),
            n.commented.code(),
            n.replied.code(),
        ]
    }
    /// Parse the stored form (records written before notification preferences existed hold
    /// only the first flag: every kind is then `all`).
    pub fn decode(b: &[u8]) -> Result<Self, BadRecord> {
        check_version(b, b.len() == 2 || b.len() == 6)?;
        let notifications = if b.len() == 6 {
            NotifPrefs {
                post_liked: NotifPref::from_code(b[2])?,
                comment_liked: NotifPref::from_code(b[3])?,
                commented: NotifPref::from_code(b[4])?,
                replied: NotifPref::from_code(b[5])?,
            }
        } else {
            NotifPrefs::default()
        };
        Ok(ViewerSettings { hide_like_counts: b[1] != 0, notifications })
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
        };
        assert_eq!(ViewerSettings::decode(&s.encode()), Ok(s));
        // A record from before notification preferences.
        assert_eq!(
            ViewerSettings::decode(&[RECORD_V1, 1]),
            Ok(ViewerSettings { hide_like_counts: true, notifications: NotifPrefs::default() })
        );
    }

    #[test]
    fn unknown_record_versions_are_rejected() {
        assert!(PostMeta::decode(&[2; 11]).is_err());
        assert!(ViewerSettings::decode(&[]).is_err());
        assert!(UserProfile::decode(&[1]).is_err());
    }
}
