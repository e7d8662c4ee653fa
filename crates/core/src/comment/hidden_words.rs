//! An author's hidden-words filter: comments on their posts containing any listed word or
//! phrase are held back from everyone else.
//!
//! Matching is on whole words, case-insensitive, and sees through the cheap obfuscations people
//! use to dodge a word list: leetspeak (`b4d`), stretched letters (`baaaad`), spelled-out letters
//! (`b.a.d`, `b a d`), accents (`bád`), look-alike letters from other scripts, full-width and
//! mathematical letters, and invisible characters inside a word ([`super::fold`]). Whole words
//! matter more than recall here: a filter that hides "class" or "as" because the author listed
//! "ass", or "good" because they listed "god", would silently eat legitimate comments, and the
//! commenter would never know why.
//!
//! How it works: text is folded ([`super::fold::fold`]) and split into tokens. Each listed word
//! becomes a *pattern*: its letters as runs (`ass` → a×1, s×2). A token matches a pattern when
//! it can be cut into consecutive runs, run *k* made only of characters equal to letter *k* or
//! leetspeak for it, and as long as the pattern's run or *stretched*: longer, and at least
//! [`STRETCH`] characters. So "asssss" and "a$$" are "ass", but "as" is not, and "good" (a real
//! double letter) is not "god" while "gooood" is. The ambiguous `1` (i or l) is tried both ways.

use super::fold::fold;

/// The most entries one author may list.
pub const MAX_HIDDEN_WORDS: usize = 1000;

/// The longest entry, in characters.
pub const MAX_WORD_CHARS: usize = 64;

/// The most letters one word of an entry may have (after folding).
const MAX_PATTERN_LETTERS: usize = 127;

/// A run of a letter this long or longer is emphasis ("baaad"), so it may stand for a
/// shorter run of the same letter; a doubled letter is spelling ("good" is not "god").
pub const STRETCH: usize = 3;

/// One letter of a pattern and how many times it is written in a row.
type Run = (char, usize);

/// A listed word: its runs of letters.
type Pattern = Vec<Run>;

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
    /// An entry that shows nothing: empty, whitespace, or only invisible characters.
    #[error("hidden word #{} is blank", index + 1)]
    Blank {
        /// Zero-based position of the entry.
        index: usize,
    },
}

/// Refuse a list that has a blank entry: one made only of whitespace and invisible characters
/// ([`crate::names::is_invisible`]), such as `""`, `"   "` or `"\u{200B}"`. Such an entry can
/// never match and reads back as nothing, so the author most likely made a mistake. Checked on
/// the way in only: [`HiddenWords::new`] ignores blank entries of a list stored before.
pub fn refuse_blank(words: &[String]) -> Result<(), HiddenWordsError> {
    match words.iter().position(|w| w.chars().all(crate::names::is_invisible)) {
        Some(index) => Err(HiddenWordsError::Blank { index }),
        None => Ok(()),
    }
}

/// A compiled hidden-words list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HiddenWords {
    /// Each phrase is a sequence of word patterns.
    phrases: Vec<Vec<Pattern>>,
}

impl HiddenWords {
    /// Heap bytes held (for memory accounting).
    pub fn heap_bytes(&self) -> usize {
        let word = std::mem::size_of::<Pattern>();
        self.phrases.capacity() * std::mem::size_of::<Vec<Pattern>>()
            + self
                .phrases
                .iter()
                .map(|p| {
                    p.capacity() * word
                        + p.iter().map(|w| w.capacity() * std::mem::size_of::<Run>()).sum::<usize>()
                })
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

/// A pattern run by characters, as a small NFA. A state is (run `k`, characters `c` read into
/// it), with `c` saturating at `cap(k)`: past it, more characters change nothing, because a
/// run read `c` times fits run `k` of `m` letters when `c == m` or `c >= cap(k)`
/// (`cap = max(m + 1, STRETCH)`). So the states are few, and words spelled out letter by letter
/// are matched incrementally, one character at a time.
struct Matcher<'p> {
    pattern: &'p [Run],
    /// Index of state (k, 1) in `states`.
    offsets: Vec<usize>,
    states: Vec<bool>,
    next: Vec<bool>,
    started: bool,
}

fn cap(m: usize) -> usize {
    (m + 1).max(STRETCH)
}

impl<'p> Matcher<'p> {
    fn new(pattern: &'p [Run]) -> Self {
        let mut offsets = Vec::with_capacity(pattern.len());
        let mut total = 0;
        for &(_, m) in pattern {
            offsets.push(total);
            total += cap(m);
        }
        Matcher { pattern, offsets, states: vec![false; total], next: vec![false; total], started: false }
    }

    fn fits(&self, k: usize, c: usize) -> bool {
        let m = self.pattern[k].1;
        c == m || c >= cap(m)
    }

    /// Read one more character; false when no state is left (the text can never match).
    fn step(&mut self, x: char) -> bool {
        let Some(&(first, _)) = self.pattern.first() else { return false };
        self.next.iter_mut().for_each(|s| *s = false);
        let mut any = false;
        if !self.started {
            self.started = true;
            if char_matches(x, first) {
                self.next[0] = true;
                any = true;
            }
        }
        for (k, &(letter, m)) in self.pattern.iter().enumerate() {
            for c in 1..=cap(m) {
                if !self.states[self.offsets[k] + c - 1] {
                    continue;
                }
                if char_matches(x, letter) {
                    self.next[self.offsets[k] + (c + 1).min(cap(m)) - 1] = true;
                    any = true;
                }
                if self.fits(k, c) && self.pattern.get(k + 1).is_some_and(|&(l, _)| char_matches(x, l)) {
                    self.next[self.offsets[k + 1]] = true;
                    any = true;
                }
            }
        }
        std::mem::swap(&mut self.states, &mut self.next);
        any
    }

    /// Does what was read so far match the whole pattern?
    fn accepting(&self) -> bool {
        let Some(k) = self.pattern.len().checked_sub(1) else { return false };
        (1..=cap(self.pattern[k].1)).any(|c| self.states[self.offsets[k] + c - 1] && self.fits(k, c))
    }
}

/// Can `chars` be cut into the pattern's runs (see the module documentation)?
fn accepts(pattern: &[Run], chars: &[char]) -> bool {
    // Most tokens fail on their first or last character: no matcher for them.
    match (chars.first(), chars.last(), pattern.first(), pattern.last()) {
        (Some(&a), Some(&z), Some(first), Some(last))
            if char_matches(a, first.0) && char_matches(z, last.0) => {}
        _ => return false,
    }
    let mut m = Matcher::new(pattern);
    chars.iter().all(|&c| m.step(c)) && m.accepting()
}

fn token_matches(pattern: &[Run], token: &Token) -> bool {
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
fn matches_at(tokens: &[Token], pos: usize, words: &[Pattern]) -> bool {
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
    let mut matcher = Matcher::new(word);
    let mut end = pos;
    while let Some(c) = tokens.get(end).and_then(spelled_char) {
        if !matcher.step(c) {
            break;
        }
        end += 1;
        if end - pos >= 2 && matcher.accepting() && matches_at(tokens, end, rest) {
            return true;
        }
        if !tokens[end - 1].joins_next {
            break;
        }
    }
    false
}

/// A listed word as a pattern: leetspeak resolved (the author may list "h4te"), stray
/// exclamation marks dropped, letters counted in runs.
fn pattern_of(token: &Token) -> Pattern {
    let without_bangs: Vec<char> = {
        let start = token.chars.iter().position(|&c| c != '!');
        let end = token.chars.iter().rposition(|&c| c != '!');
        match (start, end) {
            (Some(s), Some(e)) => token.chars[s..=e].to_vec(),
            _ => token.chars.clone(),
        }
    };
    let mut pattern: Pattern = Vec::new();
    for c in without_bangs.into_iter().map(|c| leet(c).first().copied().unwrap_or(c)) {
        match pattern.last_mut() {
            Some((letter, n)) if *letter == c => *n += 1,
            _ => pattern.push((c, 1)),
        }
    }
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
            let phrase: Vec<Pattern> = tokenize(entry).iter().map(pattern_of).collect();
            // An entry with no letter or digit ("", "...") can never match a word: ignored,
            // like a blank line in a settings form, rather than refusing the whole list.
            if phrase.is_empty() {
                continue;
            }
            // Folding can lengthen a word (a ligature is two letters).
            if phrase.iter().any(|w| w.iter().map(|r| r.1).sum::<usize>() > MAX_PATTERN_LETTERS) {
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
    fn a_blank_entry_is_refused_on_the_way_in() {
        for blank in
            ["", "   ", "\u{200B}", "\u{200B}\u{200D}\u{FEFF}", " \u{2060} ", "\u{3164}", "\u{FE0F}", "\t"]
        {
            let words = vec!["fine".to_string(), blank.to_string()];
            assert_eq!(refuse_blank(&words), Err(HiddenWordsError::Blank { index: 1 }), "{blank:?}");
        }
        let words: Vec<String> =
            ["bad", " spoiler ", "b\u{200B}ad", "...", "中文"].map(String::from).to_vec();
        assert_eq!(refuse_blank(&words), Ok(()));
        assert_eq!(refuse_blank(&[]), Ok(()));
        // A list stored before the rule still compiles, its blank entries ignored.
        assert!(
            HiddenWords::new(&["\u{200B}".to_string(), "  ".to_string()]).expect("stored list").is_empty()
        );
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
    fn a_doubled_letter_is_spelling_not_stretching() {
        let ass = list(&["ass"]);
        for innocent in ["as", "as you like", "pass", "class", "AS IF", "a s"] {
            assert!(!ass.matches(innocent), "{innocent:?}");
        }
        for hit in ["ass", "asssss", "a$$", "A$$$", "you @ss", "a.s.s", "aaasss"] {
            assert!(ass.matches(hit), "{hit:?}");
        }
        let god = list(&["god"]);
        assert!(!god.matches("good morning"));
        assert!(god.matches("oh god"));
        assert!(god.matches("oh gooood"), "three or more is emphasis");
        let to = list(&["to"]);
        assert!(!to.matches("me too"));
        assert!(to.matches("to me"));
        assert!(list(&["too"]).matches("me tooooo"));
        assert!(!list(&["too"]).matches("to"));
    }

    #[test]
    fn look_alike_and_invisible_characters_do_not_dodge_a_word() {
        let h = list(&["rubbish"]);
        for dodge in [
            "rub\u{200b}bish",
            "rub\u{200c}bish",
            "rub\u{2060}bish",
            "rub\u{ad}bish",
            "rubbіsh",
            "rubbιsh",
            "ｒｕｂｂｉｓｈ",
            "𝐫𝐮𝐛𝐛𝐢𝐬𝐡",
            "𝕣𝕦𝕓𝕓𝕚𝕤𝕙",
            "total RUBBISH!",
        ] {
            assert!(h.matches(dodge), "{dodge:?}");
        }
        assert!(!h.matches("rubbishy"), "still whole words");
        assert!(list(&["ѕраm"]).matches("spam"), "a listed look-alike folds too");
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
