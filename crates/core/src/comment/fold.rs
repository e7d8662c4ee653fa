//! Folding text to the plain lowercase Latin letters it looks like, for matching word lists.
//!
//! People dodge a word list with characters that render like the listed word but compare
//! unequal: full-width (`ｒｕｂｂｉｓｈ`) and mathematical letters (`𝐫𝐮𝐛𝐛𝐢𝐬𝐡`), accents, Cyrillic
//! or Greek look-alikes (`rubbіsh` with a Cyrillic і), and invisible characters inside the
//! word (zero-width space, joiners, soft hyphen). [`fold`] undoes all of them:
//!
//! 1. Unicode compatibility decomposition (NFKD, the decomposing half of NFKC): full-width,
//!    mathematical, circled and other compatibility letters become their plain letters, and
//!    accented letters become a letter plus combining marks;
//! 2. combining marks and invisible characters ([`super::text::is_invisible`]) are dropped;
//! 3. a confusables table maps Cyrillic and Greek letters to the Latin letter they look like
//!    (before lowercasing, because case changes the look: Greek `Η` looks like `H`, `η` like `n`);
//! 4. lowercase.
//!
//! The table is the common subset of Unicode's confusables (`confusables.txt`) for letters
//! that look like Latin ones in ordinary fonts, not the whole file: what matters here is
//! that a listed word still matches, never that every script folds.

use super::text::is_invisible;
use unicode_normalization::UnicodeNormalization;

/// Combining marks of the blocks accents and diacritics come from.
fn is_combining_mark(c: char) -> bool {
    matches!(c,
        '\u{0300}'..='\u{036F}' | '\u{0483}'..='\u{0489}' | '\u{1AB0}'..='\u{1AFF}'
        | '\u{1DC0}'..='\u{1DFF}' | '\u{20D0}'..='\u{20FF}' | '\u{FE20}'..='\u{FE2F}')
}

/// The Latin letter a Cyrillic or Greek letter is confused with, if any.
fn confusable(c: char) -> Option<char> {
    Some(match c {
        // Cyrillic capitals
        'А' => 'a',
        'В' => 'b',
        'С' => 'c',
        'Е' | 'Ё' => 'e',
        'Н' => 'h',
        'І' | 'Ӏ' => 'i',
        'Ј' => 'j',
        'К' => 'k',
        'М' => 'm',
        'О' => 'o',
        'Р' => 'p',
        'Ѕ' => 's',
        'Т' => 't',
        'Х' => 'x',
        'У' | 'Ү' => 'y',
        'Ԛ' => 'q',
        'Ԝ' => 'w',
        // Cyrillic small letters
        'а' => 'a',
        'в' => 'b',
        'с' => 'c',
        'ԁ' => 'd',
        'е' | 'ё' => 'e',
        'һ' | 'н' => 'h',
        'і' | 'ї' => 'i',
        'ј' => 'j',
        'к' => 'k',
        'ӏ' => 'l',
        'м' => 'm',
        'п' => 'n',
        'о' => 'o',
        'р' => 'p',
        'ԛ' => 'q',
        'г' => 'r',
        'ѕ' => 's',
        'т' => 't',
        'ц' => 'u',
        'ѵ' => 'v',
        'ԝ' | 'ш' => 'w',
        'х' => 'x',
        'у' | 'ү' => 'y',
        // Greek capitals
        'Α' => 'a',
        'Β' => 'b',
        'Ε' => 'e',
        'Ζ' => 'z',
        'Η' => 'h',
        'Ι' => 'i',
        'Κ' => 'k',
        'Μ' => 'm',
        'Ν' => 'n',
        'Ο' => 'o',
        'Ρ' => 'p',
        'Τ' => 't',
        'Υ' => 'y',
        'Χ' => 'x',
        // Greek small letters
        'α' => 'a',
        'β' => 'b',
        'γ' => 'y',
        'ε' => 'e',
        'η' => 'n',
        'ι' => 'i',
        'κ' => 'k',
        'ν' => 'v',
        'ο' => 'o',
        'ρ' => 'p',
        'τ' => 't',
        'υ' => 'u',
        'χ' => 'x',
        'ω' => 'w',
        // Latin letters that are not in NFKD's reach
        'ı' => 'i',
        'ȷ' => 'j',
        'ɑ' => 'a',
        'ɡ' => 'g',
        'ɩ' => 'i',
        'ʀ' => 'r',
        'ᴀ' => 'a',
        'ʙ' => 'b',
        'ᴄ' => 'c',
        'ᴅ' => 'd',
        'ᴇ' => 'e',
        'ʜ' => 'h',
        'ɪ' => 'i',
        'ᴊ' => 'j',
        'ᴋ' => 'k',
        'ʟ' => 'l',
        'ᴍ' => 'm',
        'ɴ' => 'n',
        'ᴏ' => 'o',
        'ᴘ' => 'p',
        'ꜱ' => 's',
        'ᴛ' => 't',
        'ᴜ' => 'u',
        'ᴠ' => 'v',
        'ᴡ' => 'w',
        'ʏ' => 'y',
        'ᴢ' => 'z',
        'ø' => 'o',
        'đ' => 'd',
        'ł' => 'l',
        _ => return None,
    })
}

/// `text` as the plain lowercase letters it looks like (see the module documentation).
/// Everything else (digits, punctuation, other scripts) passes through, lowercased.
pub fn fold(text: &str) -> impl Iterator<Item = char> + '_ {
    text.nfkd().filter(|&c| !is_combining_mark(c) && !is_invisible(c)).flat_map(|c| {
        let c = confusable(c).unwrap_or(c);
        c.to_lowercase()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folded(s: &str) -> String {
        fold(s).collect()
    }

    #[test]
    fn compatibility_letters_fold_to_plain_ones() {
        assert_eq!(folded("ｒｕｂｂｉｓｈ"), "rubbish");
        assert_eq!(folded("𝐫𝐮𝐛𝐛𝐢𝐬𝐡"), "rubbish");
        assert_eq!(folded("𝓇𝓊𝒷𝒷𝒾𝓈𝒽"), "rubbish");
        assert_eq!(folded("ⓡⓤⓑⓑⓘⓢⓗ"), "rubbish");
        assert_eq!(folded("RUBBISH"), "rubbish");
    }

    #[test]
    fn accents_are_dropped() {
        assert_eq!(folded("crème brûlée"), "creme brulee");
        assert_eq!(folded("cafe\u{301}"), "cafe");
        assert_eq!(folded("NIÑO"), "nino");
    }

    #[test]
    fn invisible_characters_inside_a_word_are_dropped() {
        for hidden in [
            "rub\u{200b}bish",
            "rub\u{200c}bish",
            "rub\u{200d}bish",
            "rub\u{2060}bish",
            "rub\u{ad}bish",
            "rub\u{feff}bish",
            // Every format character, not only the zero-width ones.
            "rub\u{fff9}bish",
            "rub\u{fffa}bish",
            "rub\u{fffb}bish",
            "rub\u{13430}bish",
            "rub\u{13438}bish",
            "rub\u{0600}bish",
            "rub\u{06dd}bish",
            "rub\u{070f}bish",
            "rub\u{e0041}bish",
        ] {
            assert_eq!(folded(hidden), "rubbish", "{hidden:?}");
        }
    }

    #[test]
    fn cyrillic_and_greek_look_alikes_fold_to_latin() {
        assert_eq!(folded("rubbіsh"), "rubbish", "Cyrillic і");
        assert_eq!(folded("rubbιsh"), "rubbish", "Greek ι");
        assert_eq!(folded("ΡΑΥΡΑΙ"), "paypai");
        assert_eq!(folded("арр"), "app");
        assert_eq!(folded("НЕLLО"), "hello");
    }

    #[test]
    fn other_text_passes_through_lowercased() {
        assert_eq!(folded("Hello, World! 42"), "hello, world! 42");
        assert_eq!(folded("日本語"), "日本語");
        assert_eq!(folded("👍🏽"), "👍🏽");
    }
}
