//! The terms the offline classifier holds a comment for, matched as whole words.
//!
//! A short explicit list beats a large fuzzy one here: a held comment is silently hidden from
//! everyone but its author, so every false hit is a person's ordinary comment gone. The lists
//! hold what is abusive in any context (slurs, and telling someone to kill themselves), and
//! are matched with the hidden-words matcher ([`super::hidden_words`]): whole words only, in
//! any case, and through leetspeak (`n1gg3r`), stretched letters, letters spelled out with
//! spaces or separators (`f a g`, `f.a.g`), accents, look-alike letters of other scripts and
//! invisible characters. Plain profanity is not on them (swearing is usually emphasis, not an
//! attack), except spelled out letter by letter: writing `f.u.c.k` is dodging a filter, and
//! the dodge is the signal ([`spelled_out_profanity`]).

use super::hidden_words::HiddenWords;
use std::sync::LazyLock;

/// Slurs and direct incitement to self-harm: held in any spelling.
const SEVERE: &[&str] = &[
    "nigger",
    "niggers",
    "nigga",
    "niggas",
    "niggaz",
    "faggot",
    "faggots",
    "fag",
    "fags",
    "kike",
    "kikes",
    "spic",
    "spics",
    "wetback",
    "wetbacks",
    "raghead",
    "ragheads",
    "towelhead",
    "towelheads",
    "tranny",
    "trannies",
    "cunt",
    "cunts",
    "kill yourself",
    "kill urself",
    "kill ur self",
    "kys",
    "neck yourself",
    "hope you die",
    "go die",
    "fuck you",
    "fuck u",
];

/// Profanity, held only when spelled out letter by letter (see the module documentation).
const PROFANITY: &[&str] = &[
    "fuck",
    "fucking",
    "fucker",
    "fuckers",
    "motherfucker",
    "shit",
    "bitch",
    "bitches",
    "whore",
    "slut",
    "dick",
    "cock",
    "pussy",
    "asshole",
    "bastard",
];

fn compile(terms: &[&str]) -> HiddenWords {
    let owned: Vec<String> = terms.iter().map(|t| (*t).to_owned()).collect();
    // The lists are constants within the matcher's limits (checked by a test).
    HiddenWords::new(&owned).unwrap_or_default()
}

static SEVERE_TERMS: LazyLock<HiddenWords> = LazyLock::new(|| compile(SEVERE));
static PROFANE_TERMS: LazyLock<HiddenWords> = LazyLock::new(|| compile(PROFANITY));

/// Does `text` contain a slur or incitement, in any spelling?
pub fn has_severe_term(text: &str) -> bool {
    SEVERE_TERMS.matches(text)
}

/// Is `word` (a run of single letters joined, as written "f u c k") profanity?
pub fn spelled_out_profanity(word: &str) -> bool {
    PROFANE_TERMS.matches(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_compile_whole() {
        let severe: Vec<String> = SEVERE.iter().map(|t| (*t).to_owned()).collect();
        let profane: Vec<String> = PROFANITY.iter().map(|t| (*t).to_owned()).collect();
        assert!(HiddenWords::new(&severe).is_ok_and(|h| !h.is_empty()));
        assert!(HiddenWords::new(&profane).is_ok_and(|h| !h.is_empty()));
    }

    #[test]
    fn slurs_are_found_in_any_spelling_but_only_as_words() {
        for text in
            ["you n1gg3r", "N I G G E R", "n.i.g.g.e.r", "f@gg0t", "ｆａｇ", "go k y s", "kill    yourself"]
        {
            assert!(has_severe_term(text), "{text:?}");
        }
        for text in ["Niger and Nigeria", "a niggardly sum", "snigger", "fagin", "a cuneiform", "spicy food"]
        {
            assert!(!has_severe_term(text), "{text:?}");
        }
    }

    #[test]
    fn profanity_counts_only_when_spelled_out() {
        assert!(spelled_out_profanity("fuck"));
        assert!(spelled_out_profanity("fuuuck"));
        assert!(!spelled_out_profanity("duck"));
    }
}
