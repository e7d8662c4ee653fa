//! An author's hidden-words filter: comments on their posts containing any listed word or
//! phrase are held back from everyone else.
//!
//! Matching is on whole words, case-insensitive, and sees through the cheap obfuscations people
//! use to dodge a word list: leetspeak (`b4d`), stretched letters (`baaaad`), spelled-out letters
//! (`b.a.d`, `b a d`) and Latin accents (`bád`). Whole words matter more than recall here: a
//! filter that hides "class" because the author listed "ass" would silently eat legitimate
//! comments, and the commenter would never know why.
//!
//! How it works: text is lowercased, accent-folded and split into tokens. Each listed word
//! becomes a *pattern*: its letters with runs collapsed (`hello` → `helo`). A token matches a
//! pattern when it can be cut into consecutive non-empty runs, run *k* made only of characters
//! equal to letter *k* or leetspeak for it. That one rule absorbs stretching on both sides and
//! the ambiguous `1` (i or l) without guessing. It is run as a small NFA over the token.

/// The most entries one author may list.
pub const MAX_HIDDEN_WORDS: usize = 1000;

/// The longest entry, in characters.
pub const MAX_WORD_CHARS: usize = 64;

/// The NFA keeps its states in a `u128`, one bit per matched letter count.
const MAX_PATTERN_LETTERS: usize = 127;

/// Why a hidden-words list was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HiddenWordsError {
    /// More than [`MAX_HIDDEN_WORDS`] entries.
    #[error("{count} hidden words listed; the limit is {MAX_HIDDEN_WORDS}")]
    TooMany {
        /// How many were listed.
        count: usize,
    },
    /// An entry longer than [`MAX_WORD_CHARS`].
    #[error("hidden word #{} has {chars} characters; the limit is {MAX_WORD_CHARS}", index + 1)]
    TooLong {
        /// Zero-based position of the entry.
        index: usize,
        /// Its length in characters.
        chars: usize,
    },
}

/// A compiled hidden-words list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenWords {
    /// Each phrase is a sequence of word patterns (lowercase letters, runs collapsed).
    phrases: Vec<Vec<Vec<char>>>,
}

impl HiddenWords {
    /// Heap bytes held (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        let word = std::mem::size_of::<Vec<char>>();
        self.phrases.capacity() * std::mem::size_of::<Vec<Vec<char>>>()
            + self
                .phrases
                .iter()
                .map(|p| p.capacity() * word + p.iter().map(|w| w.capacity() * 4).sum::<usize>())
                .sum::<usize>()
    }
}

/// What leetspeak character `c` may stand for.
fn leet(c: char) -> &'static [char] {
    match c {
        '0' => &['o'],
        '1' => &['i', 'l'],
        '3' => &['e'],
        '4' | '@' => &['a'],
        '5' | '$' => &['s'],
        '7' => &['t'],
        '8' => &['b'],
        '!' => &['i'],
        _ => &[],
    }
}

fn fold_accent(c: char) -> char {
    match c {
        'é' | 'è' | 'ê' | 'ë' => 'e',
        'á' | 'à' | 'â' | 'ä' | 'å' => 'a',
        'í' | 'ì' | 'î' | 'ï' => 'i',
        'ó' | 'ò' | 'ô' | 'ö' => 'o',
        'ú' | 'ù' | 'û' | 'ü' => 'u',
        'ç' => 'c',
        'ñ' => 'n',
        _ => c,
    }
}

/// Lowercase and accent-fold. Combining accents (U+0300..=U+036F) are dropped, so a decomposed
/// "e" + "´" folds like a precomposed "é".
fn fold(text: &str) -> impl Iterator<Item = char> + '_ {
    text.chars()
        .flat_map(char::to_lowercase)
        .filter(|c| !('\u{300}'..='\u{36F}').contains(c))
        .map(fold_accent)
}

/// Leet symbols count as word characters, or "@ss" would lose its first letter.
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '@' | '$' | '!')
}

fn is_spelling_separator(c: char) -> bool {
    matches!(c, '.' | '-' | '_') || c.is_whitespace()
}

struct Token {
    chars: Vec<char>,
    /// The gap to the next token holds only spelling separators, so a single-letter token may
    /// continue a spelled-out word there.
    joins_next: bool,
}

fn tokenize(text: &str) -> Vec<Token> {
    let mut tokens: Vec<Token> = Vec::new();
    let mut current = Vec::new();
    let mut gap_is_spelling = true;
    for c in fold(text) {
        if is_word_char(c) {
            // A new token starts: now the gap behind the previous one is known.
            if let Some(prev) = tokens.last_mut().filter(|_| current.is_empty()) {
                prev.joins_next = gap_is_spelling;
            }
            current.push(c);
        } else {
            if !current.is_empty() {
                tokens.push(Token { chars: std::mem::take(&mut current), joins_next: false });
                gap_is_spelling = true;
            }
            gap_is_spelling &= is_spelling_separator(c);
        }
    }
    if !current.is_empty() {
        tokens.push(Token { chars: current, joins_next: false });
    }
    tokens
}

/// `chars` without leading and trailing leet symbols: "bad!!" is "bad" shouting, not "badi".
fn trim_symbols(chars: &[char]) -> &[char] {
    let symbol = |c: &char| matches!(c, '@' | '$' | '!');
    let start = chars.iter().position(|c| !symbol(c)).unwrap_or(chars.len());
    let end = chars.iter().rposition(|c| !symbol(c)).map_or(start, |i| i + 1);
    &chars[start..end]
}

fn char_matches(c: char, letter: char) -> bool {
    c == letter || leet(c).contains(&letter)
}

/// Bit `j` of the state: `j` pattern letters matched, the last run still open.
fn step(pattern: &[char], states: u128, c: char) -> u128 {
    let mut next = 0;
    for j in 0..=pattern.len() {
        if states & (1 << j) == 0 {
            continue;
        }
        if j > 0 && char_matches(c, pattern[j - 1]) {
            next |= 1 << j;
        }
        if j < pattern.len() && char_matches(c, pattern[j]) {
            next |= 1 << (j + 1);
        }
    }
    next
}

fn accepts(pattern: &[char], chars: &[char]) -> bool {
    let mut states = 1u128;
    for &c in chars {
        states = step(pattern, states, c);
        if states == 0 {
            return false;
        }
    }
    states & (1 << pattern.len()) != 0
}

fn token_matches(pattern: &[char], token: &Token) -> bool {
    let chars = &token.chars;
    let trimmed = trim_symbols(chars);
    // Only the shouting cut off: "a$$!" is "a$$" (ass) shouted; trimming every symbol would
    // leave "a", and keeping the "!" reads it as an i.
    let shouted = chars.iter().rposition(|c| *c != '!').map_or(&chars[..0], |i| &chars[..=i]);
    accepts(pattern, chars)
        || (!trimmed.is_empty() && trimmed.len() < chars.len() && accepts(pattern, trimmed))
        || (!shouted.is_empty() && shouted.len() < chars.len() && accepts(pattern, shouted))
}

/// The one character a token contributes to a spelled-out word ("d!" ends "b. a. d!").
fn spelled_char(token: &Token) -> Option<char> {
    match (token.chars.as_slice(), trim_symbols(&token.chars)) {
        (&[c], _) | (_, &[c]) => Some(c),
        _ => None,
    }
}

/// Does the phrase `words` match the tokens starting at `pos`?
fn matches_at(tokens: &[Token], pos: usize, words: &[Vec<char>]) -> bool {
    let Some((word, rest)) = words.split_first() else {
        return true;
    };
    let Some(token) = tokens.get(pos) else {
        return false;
    };
    if token_matches(word, token) && matches_at(tokens, pos + 1, rest) {
        return true;
    }
    // Spelled out: two or more single-character tokens joined only by spelling separators.
    let mut states = 1u128;
    let mut end = pos;
    while let Some(c) = tokens.get(end).and_then(spelled_char) {
        states = step(word, states, c);
        if states == 0 {
            break;
        }
        end += 1;
        if end - pos >= 2 && states & (1 << word.len()) != 0 && matches_at(tokens, end, rest) {
            return true;
        }
        if !tokens[end - 1].joins_next {
            break;
        }
    }
    false
}

/// A listed word as a pattern: leetspeak resolved (the author may list "h4te"), stray
/// exclamation marks dropped, runs collapsed.
fn pattern_of(token: &Token) -> Vec<char> {
    let without_bangs: Vec<char> = {
        let start = token.chars.iter().position(|&c| c != '!');
        let end = token.chars.iter().rposition(|&c| c != '!');
        match (start, end) {
            (Some(s), Some(e)) => token.chars[s..=e].to_vec(),
            _ => token.chars.clone(),
        }
    };
    let mut pattern: Vec<char> =
        without_bangs.into_iter().map(|c| leet(c).first().copied().unwrap_or(c)).collect();
    pattern.dedup();
    pattern
}

impl HiddenWords {
    /// Compile an author's list. Entries may be phrases of several words.
    pub fn new(words: &[String]) -> Result<Self, HiddenWordsError> {
        if words.len() > MAX_HIDDEN_WORDS {
            return Err(HiddenWordsError::TooMany { count: words.len() });
        }
        let mut phrases = Vec::with_capacity(words.len());
        for (index, entry) in words.iter().enumerate() {
            let entry = entry.trim();
            let chars = entry.chars().count();
            if chars > MAX_WORD_CHARS {
                return Err(HiddenWordsError::TooLong { index, chars });
            }
            let phrase: Vec<Vec<char>> = tokenize(entry).iter().map(pattern_of).collect();
            // An entry with no letter or digit ("", "...") can never match a word: ignored,
            // like a blank line in a settings form, rather than refusing the whole list.
            if phrase.is_empty() {
                continue;
            }
            // Lowercasing can lengthen a word (rarely); the NFA has a fixed number of states.
            if phrase.iter().any(|w| w.len() > MAX_PATTERN_LETTERS) {
                return Err(HiddenWordsError::TooLong { index, chars });
            }
            if !phrases.contains(&phrase) {
                phrases.push(phrase);
            }
        }
        Ok(HiddenWords { phrases })
    }

    /// True when nothing is listed, so callers can skip matching altogether.
    pub fn is_empty(&self) -> bool {
        self.phrases.is_empty()
    }

    /// Does `text` contain any listed word or phrase?
    pub fn matches(&self, text: &str) -> bool {
        if self.phrases.is_empty() {
            return false;
        }
        let tokens = tokenize(text);
        self.phrases.iter().any(|phrase| (0..tokens.len()).any(|pos| matches_at(&tokens, pos, phrase)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(words: &[&str]) -> HiddenWords {
        let owned: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        HiddenWords::new(&owned).expect("valid list")
    }

    #[test]
    fn a_listed_word_matches_in_any_case() {
        let h = list(&["bad"]);
        assert!(h.matches("That is BAD."));
        assert!(h.matches("bad"));
        assert!(!h.matches("That is good."));
    }

    #[test]
    fn only_whole_words_match() {
        let h = list(&["ass"]);
        for innocent in ["first class", "a secret passage", "bass guitar", "assess it", "Assam tea"] {
            assert!(!h.matches(innocent), "{innocent:?}");
        }
        assert!(h.matches("you ass"));
        let bad = list(&["bad"]);
        assert!(!bad.matches("a badge"));
        assert!(!bad.matches("Abadi"));
    }

    #[test]
    fn leet_obfuscation_is_still_caught() {
        assert!(list(&["idiot"]).matches("what an 1d10t"));
        assert!(list(&["hell"]).matches("he11 no"));
        assert!(list(&["loser"]).matches("l0s3r"));
        assert!(list(&["ass"]).matches("you @$$"));
        assert!(list(&["bitter"]).matches("b!77er"));
        assert!(list(&["bad"]).matches("so b4d"));
        assert!(list(&["beast"]).matches("8east"));
        assert!(list(&["taste"]).matches("74s7e"));
    }

    #[test]
    fn trailing_exclamation_marks_do_not_hide_a_word() {
        assert!(list(&["bad"]).matches("so bad!!!"));
        assert!(list(&["wow!"]).matches("wow"));
        // Symbols that stand for letters, then shouting (found by the fuzz target's model).
        assert!(list(&["ass"]).matches("a$$!"));
        assert!(list(&["ass"]).matches("you a$$!!"));
        assert!(list(&["class"]).matches("cla$$!"));
        assert!(!list(&["ass"]).matches("cla$$!"), "still whole words only");
    }

    #[test]
    fn stretched_letters_are_still_caught() {
        let h = list(&["bad"]);
        assert!(h.matches("baaaad"));
        assert!(h.matches("so baaaddd"));
        assert!(h.matches("b4aAd"));
    }

    #[test]
    fn a_word_with_real_double_letters_still_matches_itself() {
        let h = list(&["hello"]);
        assert!(h.matches("hello"));
        assert!(h.matches("hellllooooo"));
        assert!(h.matches("he11o"));
        assert!(!h.matches("hellos"));
    }

    #[test]
    fn spelled_out_letters_are_still_caught() {
        let h = list(&["bad"]);
        for spelled in ["b.a.d", "b-a-d", "b_a_d", "b a d", "you are b. a. d!", "b.4.d"] {
            assert!(h.matches(spelled), "{spelled:?}");
        }
    }

    #[test]
    fn letters_joined_by_other_punctuation_are_not_spelled_out() {
        let h = list(&["bad"]);
        assert!(!h.matches("b/a/d"));
        assert!(!h.matches("b, a, d"));
    }

    #[test]
    fn latin_accents_are_folded() {
        assert!(list(&["bad"]).matches("BÁD"));
        assert!(list(&["nino"]).matches("niño"));
        assert!(list(&["cafe"]).matches("café"));
        assert!(list(&["café"]).matches("CAFE"));
        assert!(list(&["creme"]).matches("crème"));
        assert!(list(&["facade"]).matches("façade"));
        assert!(list(&["uber"]).matches("Über"));
        assert!(list(&["cafe"]).matches("cafe\u{301}"));
    }

    #[test]
    fn phrases_match_consecutive_words_only() {
        let h = list(&["go away"]);
        assert!(h.matches("Just GO   away!"));
        assert!(h.matches("g0 awaaay"));
        assert!(!h.matches("go far away"));
        assert!(!h.matches("go"));
    }

    #[test]
    fn an_empty_list_matches_nothing() {
        let h = list(&[]);
        assert!(h.is_empty());
        assert!(!h.matches("anything at all"));
        assert!(!list(&["x"]).is_empty());
    }

    #[test]
    fn invalid_lists_are_rejected() {
        let too_many = vec!["w".to_string(); MAX_HIDDEN_WORDS + 1];
        assert_eq!(HiddenWords::new(&too_many), Err(HiddenWordsError::TooMany { count: 1001 }));
        let blank = vec!["ok".to_string(), "  ".to_string(), "...".to_string()];
        assert_eq!(
            HiddenWords::new(&blank),
            HiddenWords::new(&["ok".to_string()]),
            "blank entries are ignored"
        );
        let long = vec!["a".repeat(MAX_WORD_CHARS + 1)];
        assert_eq!(HiddenWords::new(&long), Err(HiddenWordsError::TooLong { index: 0, chars: 65 }));
        assert!(HiddenWords::new(&["a".repeat(MAX_WORD_CHARS)]).is_ok());
    }
}
