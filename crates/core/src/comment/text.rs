//! Comment text rules: the one normalised form every comment is stored in, and the
//! `@mentions` found in it.
//!
//! Normalising once, at the edge, means storage, filters and the near-duplicate hash all see
//! the same text, and that invisible tricks (control characters, bidi overrides that make a
//! comment render differently from what it says) never reach other users.

/// The most Unicode scalar values a comment may hold after normalisation.
pub const MAX_COMMENT_CHARS: usize = 2200;

/// The most distinct mentions taken from one comment (more is a spam pattern, not a
/// conversation, and each mention may fan out into a notification).
pub const MAX_MENTIONS: usize = 10;

/// The longest username a mention can name.
const MAX_USERNAME_CHARS: usize = 30;

/// Why a comment's text was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    /// Nothing left after trimming whitespace.
    #[error("the comment is empty")]
    Empty,
    /// Longer than [`MAX_COMMENT_CHARS`].
    #[error("the comment has {chars} characters; the limit is {MAX_COMMENT_CHARS}")]
    TooLong {
        /// The length found, in Unicode scalar values.
        chars: usize,
    },
    /// Contains a control character other than newline or tab.
    #[error("the comment contains an invisible control character")]
    ControlCharacter,
    /// Contains a bidirectional override or isolate, which can make text display reversed.
    #[error("the comment contains a text-direction override character")]
    BidiControl,
}

/// True for the bidi embedding/override (U+202A..=U+202E) and isolate (U+2066..=U+2069)
/// controls: they are general category Cf, so `is_control` does not catch them. Free text
/// refuses them (they make text display reversed); the marks (LRM, RLM, ALM) are only dropped.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Characters that render as nothing (or as blank space) yet are not whitespace: controls,
/// format characters and the other default-ignorable code points
/// ([`crate::names::is_invisible`], the one rule), and the blank fillers (Hangul fillers,
/// braille blank). A comment made only of these is empty, and word filters see through them.
pub fn is_invisible(c: char) -> bool {
    crate::names::is_invisible(c) && !c.is_whitespace()
}

/// The stored form of a comment: line endings unified to `\n`, invisible format characters
/// (the line and paragraph separators too) dropped but for what emoji and joining scripts
/// need ([`crate::names::strip_invisible`]), surrounding whitespace trimmed,
/// 1..=[`MAX_COMMENT_CHARS`] characters, and no control or bidi-control characters except
/// newline and tab (refused). Text made only of whitespace and invisible characters
/// ([`is_invisible`]) is empty.
pub fn normalize_text(raw: &str) -> Result<String, TextError> {
    // Refused before anything is dropped: an override silently removed would still have
    // been an attempt to make the text read otherwise.
    for c in raw.chars() {
        // `char::is_control` is exactly Unicode general category Cc.
        if c.is_control() && !matches!(c, '\n' | '\t' | '\r') {
            return Err(TextError::ControlCharacter);
        }
        if is_bidi_control(c) {
            return Err(TextError::BidiControl);
        }
    }
    let unified = crate::names::strip_invisible(&raw.replace("\r\n", "\n").replace('\r', "\n"));
    let text = unified.trim();
    let chars = text.chars().count();
    if chars == 0 {
        return Err(TextError::Empty);
    }
    if chars > MAX_COMMENT_CHARS {
        return Err(TextError::TooLong { chars });
    }
    if text.chars().all(|c| c.is_whitespace() || is_invisible(c)) {
        return Err(TextError::Empty);
    }
    Ok(text.to_owned())
}

fn is_username_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

/// The users mentioned as `@username`: lowercased, deduplicated, in order of first appearance,
/// at most [`MAX_MENTIONS`].
///
/// A username is 1..=30 of ASCII letters, digits, `_` and `.`; a trailing `.` ends the sentence,
/// not the name. An `@` directly after a letter or digit is an e-mail address, not a mention,
/// and a run longer than 30 characters names no valid user, so it is skipped.
pub fn mentions(text: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    let mut prev: Option<char> = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let after_word = prev.is_some_and(|p| p.is_alphanumeric() || p == '_' || p == '.');
        prev = Some(c);
        if c != '@' || after_word {
            continue;
        }
        let start = i + 1;
        let mut end = start;
        while let Some(&(j, n)) = chars.peek() {
            if !is_username_char(n) {
                break;
            }
            end = j + n.len_utf8();
            prev = Some(n);
            chars.next();
        }
        // A letter outside the username alphabet right after the run ("@zoé") means the
        // word is not a username at all; taking its ASCII prefix would notify the wrong user.
        let cut_short = chars.peek().is_some_and(|&(_, n)| n.is_alphanumeric());
        // Usernames are ASCII, so byte lengths are character counts here.
        let name = text[start..end].trim_end_matches('.');
        if cut_short || name.is_empty() || name.len() > MAX_USERNAME_CHARS {
            continue;
        }
        let name = name.to_ascii_lowercase();
        if !found.contains(&name) {
            found.push(name);
            if found.len() == MAX_MENTIONS {
                break;
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_endings_are_unified_and_whitespace_trimmed() {
        assert_eq!(normalize_text("  a\r\nb\rc\n\t ").as_deref(), Ok("a\nb\nc"));
    }

    #[test]
    fn whitespace_only_text_is_empty() {
        assert_eq!(normalize_text(" \r\n\t "), Err(TextError::Empty));
        assert_eq!(normalize_text(""), Err(TextError::Empty));
    }

    #[test]
    fn text_of_only_invisible_characters_is_empty() {
        for blank in [
            "\u{200b}",
            "\u{200b}\u{200c}\u{200d}",
            " \u{2060} \u{feff} ",
            "\u{ad}\u{ad}",
            "\u{3164}",
            "\u{2800}\u{fe0f}",
        ] {
            assert_eq!(normalize_text(blank), Err(TextError::Empty), "{blank:?}");
        }
        // Beside visible ones, they are dropped but for what emoji sequences need.
        assert_eq!(normalize_text("a\u{200b}").as_deref(), Ok("a"));
        assert_eq!(normalize_text("👩\u{200d}💻").as_deref(), Ok("👩\u{200d}💻"));
    }

    #[test]
    fn format_characters_are_never_stored() {
        for c in ['\u{FFF9}', '\u{FFFB}', '\u{13430}', '\u{0600}', '\u{06DD}', '\u{070F}', '\u{E0041}'] {
            assert_eq!(normalize_text(&format!("scam{c}link")).as_deref(), Ok("scamlink"), "{c:?}");
        }
        assert_eq!(normalize_text("scam\u{2028}link\u{2029}").as_deref(), Ok("scamlink"));
        assert_eq!(normalize_text("\u{E0041}\u{E0042}"), Err(TextError::Empty), "tags alone");
        let family = "👨\u{200D}👩\u{200D}👧 at the beach";
        assert_eq!(normalize_text(family).as_deref(), Ok(family));
    }

    #[test]
    fn length_is_counted_in_characters_not_bytes() {
        let max = "é".repeat(MAX_COMMENT_CHARS);
        assert_eq!(normalize_text(&max).map(|t| t.chars().count()), Ok(MAX_COMMENT_CHARS));
        let over = "é".repeat(MAX_COMMENT_CHARS + 1);
        assert_eq!(normalize_text(&over), Err(TextError::TooLong { chars: 2201 }));
    }

    #[test]
    fn surrounding_whitespace_does_not_count_towards_the_limit() {
        let text = format!("   {}   ", "a".repeat(MAX_COMMENT_CHARS));
        assert!(normalize_text(&text).is_ok());
    }

    #[test]
    fn control_characters_other_than_newline_and_tab_are_rejected() {
        assert_eq!(normalize_text("a\tb\nc").as_deref(), Ok("a\tb\nc"));
        for bad in ["a\u{0}b", "a\u{7}b", "a\u{1b}[31mb", "a\u{7f}b", "a\u{85}b"] {
            assert_eq!(normalize_text(bad), Err(TextError::ControlCharacter), "{bad:?}");
        }
    }

    #[test]
    fn bidi_overrides_and_isolates_are_rejected() {
        for c in ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}'] {
            assert_eq!(normalize_text(&format!("a{c}b")), Err(TextError::BidiControl), "{c:?}");
        }
        // Ordinary right-to-left text is fine; only the invisible controls are refused.
        assert!(normalize_text("שלום عليكم").is_ok());
    }

    #[test]
    fn mentions_are_lowercased_deduplicated_and_ordered() {
        let text = "@Alice and @bob_1, thanks @ALICE! cc @carol.smith.";
        assert_eq!(mentions(text), ["alice", "bob_1", "carol.smith"]);
    }

    #[test]
    fn email_addresses_are_not_mentions() {
        assert!(mentions("write to me@example.com").is_empty());
    }

    #[test]
    fn a_lone_at_sign_or_overlong_name_is_not_a_mention() {
        assert!(mentions("meet @ noon").is_empty());
        assert!(mentions(&format!("@{}", "a".repeat(31))).is_empty());
        assert_eq!(mentions(&format!("@{}", "a".repeat(30))), ["a".repeat(30)]);
    }

    #[test]
    fn at_most_ten_mentions_are_taken() {
        let text: String = (0..15).map(|i| format!("@user{i} ")).collect();
        let found = mentions(&text);
        assert_eq!(found.len(), MAX_MENTIONS);
        assert_eq!(found[9], "user9");
    }

    #[test]
    fn mentions_work_next_to_non_ascii_text() {
        assert!(mentions("merci @zoé!").is_empty());
        assert_eq!(mentions("«@anna»"), ["anna"]);
    }
}
