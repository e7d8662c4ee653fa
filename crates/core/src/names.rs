//! Characters that change how a name reads without being seen: controls, format characters
//! (bidi overrides, zero-width characters, tags) and other default-ignorable code points.
//!
//! Usernames refuse bidi controls (`adm\u{202E}nimi` reads as "adminimda") and names with
//! nothing visible in them; notification texts drop every control and format character,
//! whatever was stored before these rules.

/// Bidi formatting characters: the Arabic letter mark, left-to-right and right-to-left marks,
/// embeddings, overrides and isolates.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Format characters (Unicode general category Cf).
pub fn is_format(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
        | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
        | '\u{202A}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}'
        | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// Characters a one-line text shown to someone else never carries: controls (Cc), format
/// characters (Cf), and the line and paragraph separators.
pub fn is_hidden_char(c: char) -> bool {
    c.is_control() || is_format(c) || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Characters that show nothing: hidden ones, whitespace, and the other default-ignorable
/// code points and blanks (combining grapheme joiner, Hangul fillers, variation selectors,
/// the Braille blank).
pub fn is_invisible(c: char) -> bool {
    is_hidden_char(c)
        || c.is_whitespace()
        || matches!(c,
            '\u{034F}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}'
            | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}' | '\u{FFA0}' | '\u{E0100}'..='\u{E01EF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bidi_controls_are_format_characters() {
        for c in ['\u{061C}', '\u{200E}', '\u{200F}', '\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}'] {
            assert!(is_bidi_control(c) && is_format(c) && is_hidden_char(c) && is_invisible(c), "{c:?}");
        }
    }

    #[test]
    fn letters_marks_and_emoji_are_visible() {
        for c in ['a', 'é', 'ß', 'я', '中', '\u{0301}', '😀', '7', '_'] {
            assert!(!is_invisible(c) && !is_hidden_char(c), "{c:?}");
        }
        // The zero-width joiner builds emoji sequences: allowed in names, invisible alone.
        assert!(is_invisible('\u{200D}') && !is_bidi_control('\u{200D}'));
    }
}
