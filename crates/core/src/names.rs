//! Characters that change how a text reads without being seen: controls, format characters
//! (bidi overrides, zero-width characters, tags), the line and paragraph separators and other
//! default-ignorable code points. One rule for every text the API takes, applied per field:
//!
//! | field | controls (Cc) | bidi overrides, embeddings, isolates | other invisible characters |
//! |---|---|---|---|
//! | comment text, appeal message | refused (400), tab and newline aside | refused (400) | dropped ([`strip_invisible`]), the line and paragraph separators too; blank fillers written as spaces |
//! | hidden words | (a word has none) | dropped | dropped, as in comment text; a word of nothing else is refused (400) |
//! | usernames | refused | refused | refused ([`is_clean_name`]), blank fillers too |
//!
//! Free text keeps what it needs to render as written: a zero-width joiner or non-joiner
//! between two visible characters (emoji sequences such as 👩‍💻, and the scripts that join
//! letters with them), a variation selector after a visible character (❤️), and the tag
//! characters of a flag sequence (🏴 with its region tags). A name keeps only what an emoji
//! needs. The line and paragraph separators (U+2028, U+2029) are dropped rather than read as
//! line breaks: many renderers show them as nothing, so `scam\u{2028}link` reads as one word.
//! Whatever is kept, the word filters see through it (`comment::fold`), and
//! notification texts drop every control and format character, whatever was stored before
//! these rules.

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

/// Invisible characters that carry no text of their own: every [`is_hidden_char`] but the
/// controls (refused or kept as line breaks by each field), plus the default-ignorable code
/// points that are not format characters (combining grapheme joiner, variation selectors,
/// Khmer inherent vowels, the unassigned ignorables). Not whitespace, and not the blank
/// fillers (Hangul fillers, the Braille blank), which take up space as a space does.
pub fn is_format_like(c: char) -> bool {
    (is_hidden_char(c) && !c.is_control())
        || matches!(c,
            '\u{034F}' | '\u{17B4}' | '\u{17B5}' | '\u{180B}'..='\u{180F}' | '\u{2065}'
            | '\u{FE00}'..='\u{FE0F}' | '\u{FFF0}'..='\u{FFF8}' | '\u{E0000}'..='\u{E0FFF}')
}

/// Blank fillers: the Hangul fillers and the Braille blank. They show as a space does, but
/// Unicode calls them letters (or a symbol), so a word filter reading them as part of a word
/// would see `bad\u{3164}word` as one word while readers see two.
pub fn is_blank_filler(c: char) -> bool {
    matches!(c, '\u{115F}' | '\u{1160}' | '\u{3164}' | '\u{FFA0}' | '\u{2800}')
}

/// Variation selectors: they pick a glyph for the character before them (❤ or ❤️).
fn is_variation_selector(c: char) -> bool {
    matches!(c, '\u{180B}'..='\u{180D}' | '\u{180F}' | '\u{FE00}'..='\u{FE0F}' | '\u{E0100}'..='\u{E01EF}')
}

/// Emoji and other pictographs (Unicode's Extended_Pictographic, by block): what a zero-width
/// joiner may join in a name.
pub fn is_pictograph(c: char) -> bool {
    matches!(c,
        '\u{00A9}' | '\u{00AE}' | '\u{203C}' | '\u{2049}' | '\u{2122}' | '\u{2139}'
        | '\u{2194}'..='\u{21AA}' | '\u{2300}'..='\u{23FF}' | '\u{24C2}' | '\u{25A0}'..='\u{27BF}'
        | '\u{2900}'..='\u{297F}' | '\u{2B00}'..='\u{2BFF}' | '\u{3030}' | '\u{303D}' | '\u{3297}'
        | '\u{3299}' | '\u{1F000}'..='\u{1FAFF}')
}

/// Visible for the purpose of joining: neither whitespace nor invisible.
fn shows(c: Option<char>) -> bool {
    c.is_some_and(|c| !is_invisible(c))
}

/// How many characters after `chars[0]` form the tags of a well-formed flag sequence: the
/// black flag U+1F3F4, one or more tag characters U+E0020..=U+E007E, and the cancel tag
/// U+E007F that ends it. 0 when `chars` does not start one.
fn flag_tags(chars: &[char]) -> usize {
    if chars.first() != Some(&'\u{1F3F4}') {
        return 0;
    }
    let tags = chars[1..].iter().take_while(|&&c| matches!(c, '\u{E0020}'..='\u{E007E}')).count();
    if tags > 0 && chars.get(1 + tags) == Some(&'\u{E007F}') { tags + 1 } else { 0 }
}

/// Free text with its blank fillers ([`is_blank_filler`]) written as spaces, and its invisible
/// characters ([`is_format_like`]) dropped, except those it needs
/// to render as written: a zero-width joiner or non-joiner between two visible characters, a
/// variation selector right after a visible character, and the tags of a well-formed flag
/// sequence (U+1F3F4, tag characters, the cancel tag U+E007F: [`flag_tags`]). Any other tag
/// character is dropped: tags outside a flag, and those of a sequence that is not closed by
/// its cancel tag, would otherwise carry hidden text. Controls and bidi overrides are left to
/// the caller, which refuses them.
pub fn strip_invisible(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    // Characters before this index that are tags belong to a well-formed flag sequence.
    let mut flag_end = 0;
    for (i, &c) in chars.iter().enumerate() {
        let prev = out.chars().next_back();
        // A joiner may follow a selector that follows a visible character (🏳️‍🌈).
        let base = out.chars().rev().find(|&p| !is_variation_selector(p));
        let next = chars.get(i + 1).copied();
        if is_blank_filler(c) {
            out.push(' ');
            continue;
        }
        if !is_format_like(c) {
            flag_end = flag_end.max(i + 1 + flag_tags(&chars[i..]));
            out.push(c);
            continue;
        }
        let keep = match c {
            '\u{200C}' | '\u{200D}' => shows(base) && shows(next),
            '\u{E0020}'..='\u{E007F}' => i < flag_end,
            c if is_variation_selector(c) => shows(prev),
            _ => false,
        };
        if keep {
            out.push(c);
        }
    }
    out
}

/// Is every character of a (trimmed) name visible, but for what an emoji needs: a variation
/// selector U+FE0F right after a pictograph, and a zero-width joiner between two pictographs
/// (each perhaps with its selector)? No control, format, bidi or other invisible character
/// anywhere else: `al\u{200B}ice` must not pass for `alice`.
pub fn is_clean_name(name: &str) -> bool {
    let chars: Vec<char> = name.chars().collect();
    chars.iter().enumerate().all(|(i, &c)| {
        if c.is_control() || is_blank_filler(c) {
            return false;
        }
        if !is_format_like(c) {
            return true;
        }
        let before = i.checked_sub(1).map(|j| chars[j]);
        let pictograph_before = match before {
            Some('\u{FE0F}') => i.checked_sub(2).is_some_and(|j| is_pictograph(chars[j])),
            Some(b) => is_pictograph(b),
            None => false,
        };
        match c {
            '\u{FE0F}' => before.is_some_and(is_pictograph),
            '\u{200D}' => pictograph_before && chars.get(i + 1).copied().is_some_and(is_pictograph),
            _ => false,
        }
    })
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

    #[test]
    fn every_format_character_of_the_report_is_dropped_from_free_text() {
        for c in [
            '\u{FFF9}',
            '\u{FFFA}',
            '\u{FFFB}',
            '\u{13430}',
            '\u{13438}',
            '\u{0600}',
            '\u{0605}',
            '\u{06DD}',
            '\u{070F}',
            '\u{200B}',
            '\u{2060}',
            '\u{FEFF}',
            '\u{00AD}',
            '\u{E0041}',
            '\u{E0001}',
            '\u{034F}',
            '\u{1D173}',
            '\u{180E}',
        ] {
            assert_eq!(strip_invisible(&format!("scam{c}link")), "scamlink", "{c:?}");
        }
        assert_eq!(strip_invisible("scam\u{2028}link\u{2029}"), "scamlink", "separators");
        assert_eq!(strip_invisible("hi\u{E0068}\u{E0069}"), "hi", "tags outside a flag");
    }

    #[test]
    fn free_text_keeps_what_emoji_and_joining_scripts_need() {
        for kept in [
            "👩\u{200D}💻",
            "👨\u{200D}👩\u{200D}👧\u{200D}👦",
            "❤\u{FE0F} so good",
            "🏳\u{FE0F}\u{200D}🌈",
            "🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F} up Scotland",
            "\u{0645}\u{06CC}\u{200C}\u{062E}\u{0648}\u{0627}\u{0645}",
            "क्\u{200D}ष",
            "plain text, é, 中文",
        ] {
            assert_eq!(strip_invisible(kept), kept, "{kept:?}");
        }
        assert_eq!(strip_invisible("\u{200D}a\u{200D}"), "a", "a joiner at an edge joins nothing");
        assert_eq!(strip_invisible("a \u{200D} b"), "a  b");
        assert_eq!(strip_invisible("\u{FE0F}x"), "x", "a selector with nothing before it");
    }

    #[test]
    fn only_a_well_formed_flag_sequence_keeps_its_tags() {
        let scotland = "🏴\u{E0067}\u{E0062}\u{E0073}\u{E0063}\u{E0074}\u{E007F}";
        for kept in [scotland.to_string(), format!("{scotland}{scotland}"), format!("a{scotland} b 🏴")] {
            assert_eq!(strip_invisible(&kept), kept, "{kept:?}");
        }
        for (raw, want) in [
            // Not closed by the cancel tag: hidden text after a flag.
            ("🏴\u{E0068}\u{E0069}", "🏴"),
            ("🏴\u{E0068}\u{E0069} hi", "🏴 hi"),
            ("🏴\u{E0068}\u{E0069}x\u{E007F}", "🏴x"),
            // A cancel tag alone, or tags after something else.
            ("🏴\u{E007F}", "🏴"),
            ("🏳\u{E0067}\u{E0062}\u{E007F}", "🏳"),
            ("a\u{E0067}\u{E007F}", "a"),
            // A well-formed sequence keeps its tags, stray ones beside it do not.
            ("🏴\u{E0067}\u{E007F}\u{E0068}\u{E007F}", "🏴\u{E0067}\u{E007F}"),
            ("🏴\u{E0001}\u{E0067}\u{E007F}", "🏴"),
            ("🏴\u{200B}\u{E0067}\u{E007F}", "🏴"),
        ] {
            assert_eq!(strip_invisible(raw), want, "{raw:?}");
        }
    }

    proptest::proptest! {
        /// Whatever the input, a tag character survives only inside a well-formed flag
        /// sequence, and stripping again changes nothing.
        #[test]
        fn tags_survive_only_in_well_formed_flags(
            parts in proptest::collection::vec(
                proptest::sample::select(vec![
                    "🏴", "🏳", "a", " ", "\u{E0067}", "\u{E0062}", "\u{E0020}", "\u{E007E}",
                    "\u{E007F}", "\u{E0001}", "\u{200D}", "\u{FE0F}", "\u{200B}",
                ]),
                0..24,
            )
        ) {
            let raw: String = parts.concat();
            let out = strip_invisible(&raw);
            let chars: Vec<char> = out.chars().collect();
            let mut i = 0;
            while i < chars.len() {
                let tags = flag_tags(&chars[i..]);
                if tags > 0 {
                    i += tags + 1;
                    continue;
                }
                proptest::prop_assert!(!matches!(chars[i], '\u{E0000}'..='\u{E007F}'), "{:?} -> {:?}", raw, out);
                i += 1;
            }
            proptest::prop_assert_eq!(strip_invisible(&out), out.clone(), "{:?}", raw);
        }
    }

    #[test]
    fn a_name_holds_nothing_invisible_but_emoji_joiners() {
        for ok in ["alice", "a b", "zoé", "👨\u{200D}👩", "❤\u{FE0F}", "❤\u{FE0F}\u{200D}🔥 fan"] {
            assert!(is_clean_name(ok), "{ok:?}");
        }
        for bad in [
            "al\u{200B}ice",
            "al\u{200D}ice",
            "a\u{FE0F}",
            "\u{200D}👩",
            "👩\u{200D}",
            "bob\u{E0041}",
            "adm\u{202E}nimi",
            "x\u{2028}y",
            "x\u{FFF9}y",
            "x\u{200E}y",
            "a\tb",
            "al\u{3164}ice",
            "al\u{FFA0}ice",
            "al\u{2800}ice",
            "\u{115F}\u{1160}",
        ] {
            assert!(!is_clean_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn blank_fillers_read_as_spaces_in_free_text() {
        for f in ['\u{115F}', '\u{1160}', '\u{3164}', '\u{FFA0}', '\u{2800}'] {
            let text = format!("total{f}rubbish{f}here");
            assert_eq!(strip_invisible(&text), "total rubbish here", "{f:?}");
            assert_eq!(strip_invisible(&strip_invisible(&text)), "total rubbish here");
        }
        // Beside a joiner, a filler is no visible character to join.
        assert_eq!(strip_invisible("a\u{200D}\u{3164}b"), "a b");
    }
}
