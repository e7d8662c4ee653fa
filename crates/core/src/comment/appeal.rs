//! Why a comment is held, and the author's appeal of a decision (docs/moderation.md).
//!
//! Every layer that holds a comment records itself as the comment's [`HeldBy`], so the
//! moderators' queue can say why each comment waits. The comment's author may appeal once:
//! the answer is the same for every status (a held comment must not reveal that it is held),
//! and only a held comment enters the queue, marked appealed, with the author's message.

use super::status::CommentStatus;

/// The longest appeal message, in characters.
pub const MAX_APPEAL_CHARS: usize = 1000;

/// The layer (or person) that holds a comment back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeldBy {
    /// The offline (or external) toxicity and spam classifier.
    Classifier,
    /// The post author's hidden words.
    HiddenWords,
    /// The same text posted again and again by one user.
    NearDuplicate,
    /// Enough distinct reporters.
    Reports,
    /// The post author restricts the commenter.
    Restricted,
    /// A moderator hid it.
    Moderator,
}

impl HeldBy {
    /// Every layer, for exhaustive checks.
    pub const ALL: [HeldBy; 6] = [
        HeldBy::Classifier,
        HeldBy::HiddenWords,
        HeldBy::NearDuplicate,
        HeldBy::Reports,
        HeldBy::Restricted,
        HeldBy::Moderator,
    ];

    /// The wire name (`held_by` in the moderation queue, the `layer` label of metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            HeldBy::Classifier => "classifier",
            HeldBy::HiddenWords => "hidden_words",
            HeldBy::NearDuplicate => "near_duplicate",
            HeldBy::Reports => "reports",
            HeldBy::Restricted => "restricted",
            HeldBy::Moderator => "moderator",
        }
    }

    /// Stable one-byte code used in stored rows; never renumber.
    pub fn code(self) -> u8 {
        match self {
            HeldBy::Classifier => 1,
            HeldBy::HiddenWords => 2,
            HeldBy::NearDuplicate => 3,
            HeldBy::Reports => 4,
            HeldBy::Restricted => 5,
            HeldBy::Moderator => 6,
        }
    }

    /// Inverse of [`HeldBy::code`].
    pub fn from_code(code: u8) -> Option<Self> {
        HeldBy::ALL.into_iter().find(|h| h.code() == code)
    }
}

/// What the moderators' queue adds to a queued comment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueNote {
    /// Why it is held (`None`: reported while visible, or approved since).
    pub held_by: Option<HeldBy>,
    /// The author's appeal message, when they appealed (`Some("")` without a message).
    pub appeal: Option<String>,
}

/// Why an appeal was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppealError {
    /// The message is longer than [`MAX_APPEAL_CHARS`].
    #[error("the appeal message has {chars} characters; the limit is {MAX_APPEAL_CHARS}")]
    TooLong {
        /// Its length in characters.
        chars: usize,
    },
    /// Contains a bidirectional override or isolate, which can make text display reversed.
    #[error("the appeal message contains a text-direction override character")]
    BidiControl,
}

/// The stored form of an appeal message: trimmed, at most [`MAX_APPEAL_CHARS`] characters,
/// control characters other than newline and tab removed (the queue is read by people),
/// bidi overrides refused and other invisible characters dropped as in comment text
/// ([`crate::names`]).
pub fn appeal_message(raw: Option<&str>) -> Result<String, AppealError> {
    let raw = raw.unwrap_or("");
    if raw.chars().any(super::text::is_bidi_control) {
        return Err(AppealError::BidiControl);
    }
    let text: String = crate::names::strip_invisible(raw)
        .trim()
        .chars()
        .filter(|c| !c.is_control() || matches!(c, '\n' | '\t'))
        .collect();
    let chars = text.chars().count();
    if chars > MAX_APPEAL_CHARS {
        return Err(AppealError::TooLong { chars });
    }
    Ok(text)
}

/// Does an appeal of a comment in `status` put it in front of a moderator? Only a comment
/// others cannot see for a moderation reason: held by a filter or classifier, hidden after
/// reports, or waiting on the post author's approval. A visible or deleted comment has
/// nothing to review; its appeal is recorded (a second one is still refused) and answered
/// the same way, so the answer never tells the author how their comment stands.
pub fn appeal_is_reviewed(status: CommentStatus) -> bool {
    matches!(status, CommentStatus::HiddenByFilter | CommentStatus::Pending | CommentStatus::Restricted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_stable_and_round_trip() {
        let names: Vec<_> = HeldBy::ALL.iter().map(|h| h.as_str()).collect();
        assert_eq!(
            names,
            ["classifier", "hidden_words", "near_duplicate", "reports", "restricted", "moderator"]
        );
        for h in HeldBy::ALL {
            assert_eq!(HeldBy::from_code(h.code()), Some(h));
        }
        assert_eq!(HeldBy::from_code(0), None);
        assert_eq!(HeldBy::from_code(7), None);
    }

    #[test]
    fn only_held_comments_are_reviewed_on_appeal() {
        let reviewed: Vec<_> = CommentStatus::ALL.into_iter().filter(|s| appeal_is_reviewed(*s)).collect();
        assert_eq!(
            reviewed,
            [CommentStatus::Pending, CommentStatus::HiddenByFilter, CommentStatus::Restricted]
        );
    }

    #[test]
    fn appeal_messages_are_trimmed_cleaned_and_bounded() {
        assert_eq!(appeal_message(None).as_deref(), Ok(""));
        assert_eq!(appeal_message(Some("  it was a joke\u{7}\n ")).as_deref(), Ok("it was a joke"));
        assert_eq!(appeal_message(Some("a\nb\tc")).as_deref(), Ok("a\nb\tc"));
        assert!(appeal_message(Some(&"é".repeat(MAX_APPEAL_CHARS))).is_ok());
        assert_eq!(
            appeal_message(Some(&"é".repeat(MAX_APPEAL_CHARS + 1))),
            Err(AppealError::TooLong { chars: MAX_APPEAL_CHARS + 1 })
        );
    }

    #[test]
    fn appeal_messages_refuse_overrides_and_drop_invisible_characters() {
        for c in ['\u{202E}', '\u{202A}', '\u{2066}', '\u{2069}'] {
            assert_eq!(appeal_message(Some(&format!("please {c}look again"))), Err(AppealError::BidiControl));
        }
        let sneaky = "it was\u{200B} a joke\u{E0041}\u{FFF9}";
        assert_eq!(appeal_message(Some(sneaky)).as_deref(), Ok("it was a joke"));
        assert_eq!(appeal_message(Some("fair 👍\u{FE0F}")).as_deref(), Ok("fair 👍\u{FE0F}"));
    }
}
