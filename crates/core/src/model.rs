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
        vec![RECORD_V1, self.hide_like_counts as u8]
    }
    /// Parse the stored form.
    pub fn decode(b: &[u8]) -> Result<Self, BadRecord> {
        check_version(b, b.len() == 2)?;
        Ok(ViewerSettings { hide_like_counts: b[1] != 0 })
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
        let s = ViewerSettings { hide_like_counts: true };
        assert_eq!(ViewerSettings::decode(&s.encode()), Ok(s));
    }

    #[test]
    fn unknown_record_versions_are_rejected() {
        assert!(PostMeta::decode(&[2; 11]).is_err());
        assert!(ViewerSettings::decode(&[]).is_err());
        assert!(UserProfile::decode(&[1]).is_err());
    }
}
