//! The hidden-words matcher (`comment::hidden_words::HiddenWords`).
//!
//! Input: one mode byte; the rest is split at the first 0xFF into the list (entries separated
//! by 0xFE) and the comment text.
//! - Even modes take both as (lossy) UTF-8. Compiling and matching never panic; a list matches
//!   a text exactly when one of its entries alone does; every entry made of letters, digits and
//!   spaces (not only combining accents) matches its own text.
//! - Odd modes map every byte into a small ASCII alphabet (letters in both cases, digits that
//!   are not leetspeak, and separators) and compare with a naive reference written from the
//!   documented rules: whole words, case-insensitive, stretched letters (a run of a letter
//!   stands for a run of it in the word when it is as long, or longer and at least 3), letters
//!   spelled out with `.`, `-`, `_` or whitespace between them, phrases of consecutive words.
#![no_main]

use libfuzzer_sys::fuzz_target;
use likewise_core::comment::hidden_words::{HiddenWords, MAX_HIDDEN_WORDS, MAX_WORD_CHARS};

const WORD_ALPHABET: &[u8] = b"abcdABo269 ";
const TEXT_ALPHABET: &[u8] = b"abcdABo269 .-_,/?\n";

fn split(rest: &[u8]) -> (Vec<&[u8]>, &[u8]) {
    let (list, text) = match rest.iter().position(|&b| b == 0xFF) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    (list.split(|&b| b == 0xFE).collect(), text)
}

fn compile(words: &[String]) -> Option<HiddenWords> {
    HiddenWords::new(words).ok()
}

/// Runs of letters: "baaad" -> [(b, 1), (a, 3), (d, 1)].
fn runs(s: &str) -> Vec<(char, usize)> {
    let mut out: Vec<(char, usize)> = Vec::new();
    for c in s.chars() {
        match out.last_mut() {
            Some((l, n)) if *l == c => *n += 1,
            _ => out.push((c, 1)),
        }
    }
    out
}

/// Is `token` the word `word`, letter runs as long or stretched (longer, and at least 3)?
fn fits(token: &str, word: &str) -> bool {
    let (t, w) = (runs(token), runs(word));
    t.len() == w.len() && t.iter().zip(&w).all(|(&(a, n), &(b, m))| a == b && (n == m || (n > m && n >= 3)))
}

/// Tokens (lowercased maximal runs of letters and digits) and whether the gap after each one
/// holds only spelling separators.
fn reference_tokens(text: &str) -> (Vec<String>, Vec<bool>) {
    let mut tokens = Vec::new();
    let mut joins = Vec::new();
    let mut current = String::new();
    let mut gap_spelling = true;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if current.is_empty() && !tokens.is_empty() {
                *joins.last_mut().expect("a join per token") = gap_spelling;
            }
            current.push(c.to_ascii_lowercase());
        } else {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
                joins.push(false);
                gap_spelling = true;
            }
            gap_spelling &= matches!(c, '.' | '-' | '_') || c.is_whitespace();
        }
    }
    if !current.is_empty() {
        tokens.push(current);
        joins.push(false);
    }
    (tokens, joins)
}

/// Where `word` can end when it starts at token `pos`: the token itself when it fits the word,
/// or a run of two or more one-letter tokens joined by spelling separators that together fit
/// the word.
fn word_ends(tokens: &[String], joins: &[bool], pos: usize, word: &str) -> Vec<usize> {
    let mut ends = Vec::new();
    if fits(&tokens[pos], word) {
        ends.push(pos + 1);
    }
    let mut spelled = String::new();
    let mut end = pos;
    while end < tokens.len() && tokens[end].len() == 1 {
        if end > pos && !joins[end - 1] {
            break;
        }
        spelled.push_str(&tokens[end]);
        end += 1;
        if end - pos >= 2 && fits(&spelled, word) {
            ends.push(end);
        }
    }
    ends
}

fn phrase_at(tokens: &[String], joins: &[bool], pos: usize, words: &[String]) -> bool {
    let Some((word, rest)) = words.split_first() else { return true };
    pos < tokens.len()
        && word_ends(tokens, joins, pos, word).into_iter().any(|end| phrase_at(tokens, joins, end, rest))
}

fn reference_matches(entries: &[String], text: &str) -> bool {
    let (tokens, joins) = reference_tokens(text);
    entries.iter().any(|entry| {
        let words: Vec<String> = reference_tokens(entry).0;
        (0..tokens.len()).any(|pos| phrase_at(&tokens, &joins, pos, &words))
    })
}

fn map(bytes: &[u8], alphabet: &[u8]) -> String {
    bytes.iter().map(|&b| alphabet[usize::from(b) % alphabet.len()] as char).collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let (list, text) = split(rest);
    if mode % 2 == 0 {
        let words: Vec<String> = list.iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect();
        let text = String::from_utf8_lossy(text);
        let Some(h) = compile(&words) else { return };
        let any_single =
            words.iter().any(|w| compile(std::slice::from_ref(w)).is_some_and(|s| s.matches(&text)));
        assert_eq!(h.matches(&text), any_single, "a list is the OR of its entries: {words:?} on {text:?}");
        for w in &words {
            // (Combining accents are folded away: an entry of nothing else is blank.)
            let letter = |c: char| c.is_alphanumeric() && !('\u{300}'..='\u{36F}').contains(&c);
            if w.chars().any(letter) && w.chars().all(|c| c.is_alphanumeric() || c == ' ') {
                assert!(h.matches(w), "entry {w:?} does not match its own text");
            }
        }
    } else {
        let words: Vec<String> = list
            .iter()
            .map(|w| map(&w[..w.len().min(MAX_WORD_CHARS)], WORD_ALPHABET))
            .filter(|w| !w.trim().is_empty())
            .take(MAX_HIDDEN_WORDS)
            .collect();
        let text = map(text, TEXT_ALPHABET);
        let h = compile(&words).expect("a list of letters, digits and spaces compiles");
        assert_eq!(
            h.matches(&text),
            reference_matches(&words, &text),
            "matcher and reference disagree: {words:?} on {text:?}"
        );
    }
});
