//! Comment text: normalisation (`comment::text::normalize_text`), `@mentions`, and the cheap
//! signals computed on every stored text (SimHash, spam signals, the rules classifier).
//!
//! Properties:
//! - nothing panics, on any UTF-8 (and on the lossy decoding of any bytes);
//! - the result agrees with a reference written from the rules (no control character but
//!   `\n`, `\t`, `\r` and no bidi override/isolate in the raw text, unify line endings, drop
//!   format characters, trim, 1..=2200 characters, not only invisible characters);
//! - normalisation is idempotent, and what it returns satisfies every rule;
//! - mentions are 1..=30 lowercase `[a-z0-9_.]` not ending in `.`, distinct, at most 10, and
//!   each is written in the text after an `@`;
//! - scores are finite and within 0..=1.
#![no_main]

use libfuzzer_sys::fuzz_target;
use likewise_core::comment::classify::{Classifier, RulesClassifier};
use likewise_core::comment::simhash::simhash64;
use likewise_core::comment::spam::{SpamSignals, spam_score};
use likewise_core::comment::text::{
    MAX_COMMENT_CHARS, MAX_MENTIONS, TextError, is_invisible, mentions, normalize_text,
};
use likewise_core::names::strip_invisible;

fn forbidden(c: char) -> Option<TextError> {
    if c.is_control() && c != '\n' && c != '\t' {
        return Some(TextError::ControlCharacter);
    }
    if matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}') {
        return Some(TextError::BidiControl);
    }
    None
}

fn reference(raw: &str) -> Result<String, TextError> {
    // Refused on the raw text, before anything is dropped ('\r' is unified below).
    if let Some(e) = raw.chars().filter(|&c| c != '\r').find_map(forbidden) {
        return Err(e);
    }
    let mut unified = String::with_capacity(raw.len());
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' {
            if chars.peek() == Some(&'\n') {
                chars.next();
            }
            unified.push('\n');
        } else {
            unified.push(c);
        }
    }
    // Format characters are dropped by the one rule every text entry point shares
    // (`likewise_core::names`, with unit tests of its own).
    let stripped = strip_invisible(&unified);
    let text = stripped.trim_matches(char::is_whitespace);
    let n = text.chars().count();
    if n == 0 {
        return Err(TextError::Empty);
    }
    if n > MAX_COMMENT_CHARS {
        return Err(TextError::TooLong { chars: n });
    }
    if text.chars().all(|c| c.is_whitespace() || is_invisible(c)) {
        return Err(TextError::Empty);
    }
    Ok(text.to_string())
}

fuzz_target!(|data: &[u8]| {
    let raw = String::from_utf8_lossy(data);
    let got = normalize_text(&raw);
    assert_eq!(got, reference(&raw), "normalize_text({raw:?})");
    let Ok(text) = got else { return };

    assert_eq!(normalize_text(&text).as_ref(), Ok(&text), "idempotent");
    assert_eq!(text.trim(), text, "trimmed");
    assert!(!text.contains('\r'), "line endings unified");
    assert!(text.chars().all(|c| forbidden(c).is_none()), "no forbidden characters");
    assert_eq!(strip_invisible(&text), text, "no format character left to drop");
    assert!((1..=MAX_COMMENT_CHARS).contains(&text.chars().count()));

    let found = mentions(&text);
    assert!(found.len() <= MAX_MENTIONS);
    let lower = text.to_ascii_lowercase();
    for (i, m) in found.iter().enumerate() {
        assert!((1..=30).contains(&m.len()), "mention length: {m:?}");
        let ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.';
        assert!(m.bytes().all(ok), "mention alphabet: {m:?}");
        assert!(!m.ends_with('.'), "mention ends with a dot: {m:?}");
        assert!(!found[..i].contains(m), "duplicate mention {m:?}");
        assert!(lower.contains(&format!("@{m}")), "mention {m:?} not written in the text");
    }

    let _ = simhash64(&text);
    let signals = SpamSignals::of(&text);
    for v in [0, 1, 5, u32::MAX] {
        let s = spam_score(&signals, v);
        assert!(s.is_finite() && (0.0..=1.0).contains(&s), "spam score {s}");
    }
    // rustrict is the slowest part: classify only texts of ordinary length.
    if text.len() <= 512 {
        let verdict = RulesClassifier.classify(&text, 1);
        assert!(verdict.toxicity.is_finite() && (0.0..=1.0).contains(&verdict.toxicity));
        assert!(verdict.spam.is_finite() && (0.0..=1.0).contains(&verdict.spam));
    }
});
