//! Cheap spam signals for one comment, and the score that combines them.
//!
//! These are the tells of bulk spam that cost nothing to compute: links, stretched characters
//! ("!!!!!!!!"), shouting, mass mentions, and an account posting faster than a person types.
//! No single signal condemns a comment (people share one link, or shout when excited); the
//! score only gets high when several line up, or one is extreme.

use super::text::mentions;

/// The spam tells found in one comment.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpamSignals {
    /// Links: `http://`, `https://`, `www.` and bare domains like `example.com/xyz`.
    pub links: u32,
    /// The longest run of one repeated character.
    pub longest_repeat: u32,
    /// Share of uppercase among letters, 0..=1; 0 when there are fewer than 8 letters, where
    /// "OK" or "LOL" says nothing.
    pub shout_ratio: f32,
    /// Distinct `@mentions` (capped like [`mentions`]).
    pub mention_count: u32,
}

/// The fewest letters for the shout ratio to mean anything.
const MIN_LETTERS_FOR_SHOUT: u32 = 8;

/// Does one whitespace-separated word look like a link?
fn is_link(word: &str) -> bool {
    let lower = word.to_ascii_lowercase();
    if lower.contains("http://") || lower.contains("https://") || lower.contains("www.") {
        return true;
    }
    // A bare domain: labels of letters, digits and hyphens, then a 2..=10 letter TLD, then
    // optionally a port or path. Sentence punctuation around the word is not part of it.
    let trimmed = lower.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '/');
    let host = trimmed.split(['/', ':']).next().unwrap_or("");
    let labels: Vec<&str> = host.split('.').collect();
    let Some((tld, names)) = labels.split_last() else {
        return false;
    };
    !names.is_empty()
        && (2..=10).contains(&tld.len())
        && tld.bytes().all(|b| b.is_ascii_lowercase())
        && names.iter().all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}

impl SpamSignals {
    /// Measure `text` (normally already normalised by [`super::text::normalize_text`]).
    pub fn of(text: &str) -> Self {
        let links = text.split_whitespace().filter(|w| is_link(w)).count();

        let mut longest = 0u32;
        let mut run = 0u32;
        let mut prev = None;
        for c in text.chars() {
            run = if prev == Some(c) { run + 1 } else { 1 };
            longest = longest.max(run);
            prev = Some(c);
        }

        let letters = text.chars().filter(|c| c.is_alphabetic()).count();
        let upper = text.chars().filter(|c| c.is_uppercase()).count();
        let shout_ratio =
            if letters >= MIN_LETTERS_FOR_SHOUT as usize { upper as f32 / letters as f32 } else { 0.0 };

        SpamSignals {
            links: u32::try_from(links).unwrap_or(u32::MAX),
            longest_repeat: longest,
            shout_ratio,
            mention_count: u32::try_from(mentions(text).len()).unwrap_or(u32::MAX),
        }
    }
}

/// Comments a minute a person may post in a lively conversation without the pace alone
/// counting against them (docs/api.md: up to 10 a minute is never limited).
pub const CONVERSATION_PACE: u32 = 10;

/// How likely one comment is spam, 0..=1.
///
/// Each signal becomes an independent "probability" and they are combined as a noisy-OR,
/// `1 - Π(1 - pᵢ)`, so any one strong signal or several moderate ones push the score up:
///
/// | signal | pᵢ |
/// |---|---|
/// | links *l* | `min(0.22·l, 0.85)`: one link 0.22, three 0.66 |
/// | longest repeat *r* | `clamp(0.08·(r − 4), 0, 0.5)`: "soooo" 0.08, 8× "!" 0.32 |
/// | shout ratio *s* | `clamp(s − 0.5, 0, 0.5)`: all caps 0.5 |
/// | mentions *m* | `clamp(0.12·(m − 3), 0, 0.6)`: up to 3 is a conversation |
/// | comments in the last minute *v* | `clamp(0.15·(v − 10), 0, 0.9)`: a conversation reaches 10 (docs/api.md: never limited), a script goes far past it |
pub fn spam_score(signals: &SpamSignals, comments_by_user_last_minute: u32) -> f32 {
    let over = |x: u32, free: u32| x.saturating_sub(free) as f32;
    let shout = if signals.shout_ratio.is_finite() { signals.shout_ratio } else { 0.0 };
    let p = [
        (0.22 * signals.links as f32).min(0.85),
        (0.08 * over(signals.longest_repeat, 4)).min(0.5),
        (shout - 0.5).clamp(0.0, 0.5),
        (0.12 * over(signals.mention_count, 3)).min(0.6),
        (0.15 * over(comments_by_user_last_minute, CONVERSATION_PACE)).min(0.9),
    ];
    let clean = p.iter().fold(1.0f32, |acc, pi| acc * (1.0 - pi));
    (1.0 - clean).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPAM: &str = "BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io";

    fn score(text: &str) -> f32 {
        spam_score(&SpamSignals::of(text), 0)
    }

    #[test]
    fn links_of_every_form_are_counted() {
        assert_eq!(SpamSignals::of(SPAM).links, 3);
        assert_eq!(SpamSignals::of("see example.com/xyz and xyz.ru.").links, 2);
        assert_eq!(SpamSignals::of("https://a.b/c (Example.COM)").links, 2);
    }

    #[test]
    fn abbreviations_numbers_and_ellipses_are_not_links() {
        for text in ["e.g. this, i.e. that", "pi is 3.14", "wait...what", "the U.S. team", "ok."] {
            assert_eq!(SpamSignals::of(text).links, 0, "{text:?}");
        }
    }

    #[test]
    fn the_longest_repeat_is_measured() {
        assert_eq!(SpamSignals::of(SPAM).longest_repeat, 8);
        assert_eq!(SpamSignals::of("abc").longest_repeat, 1);
        assert_eq!(SpamSignals::of("").longest_repeat, 0);
    }

    #[test]
    fn shouting_needs_enough_letters() {
        assert_eq!(SpamSignals::of("LOL OK").shout_ratio, 0.0);
        assert_eq!(SpamSignals::of("THIS IS AMAZING").shout_ratio, 1.0);
        assert_eq!(SpamSignals::of("Hello Brave World").shout_ratio, 3.0 / 15.0);
    }

    #[test]
    fn mentions_are_counted() {
        assert_eq!(SpamSignals::of("@a @b @a hi").mention_count, 2);
    }

    #[test]
    fn ordinary_sentences_score_low() {
        for text in [
            "What a beautiful sunset, where was this taken?",
            "Congrats!! So happy for you @anna",
            "Sooo cute, I love it",
            "I wrote about this at example.com if you're curious",
            "Hello Brave World",
        ] {
            let s = score(text);
            assert!(s < 0.3, "{text:?}: {s}");
        }
    }

    #[test]
    fn the_classic_spam_comment_scores_high() {
        let s = score(SPAM);
        assert!(s > 0.7, "{s}");
    }

    #[test]
    fn posting_fast_raises_the_score() {
        let signals = SpamSignals::of("nice");
        assert_eq!(spam_score(&signals, 3), 0.0);
        assert!(spam_score(&signals, 20) > 0.8);
    }

    #[test]
    fn ten_ordinary_comments_a_minute_are_a_conversation_not_spam() {
        for text in ["haha yes exactly", "I was there too, @anna remember?", "see example.com for the map"] {
            for v in 1..=CONVERSATION_PACE {
                let s = spam_score(&SpamSignals::of(text), v);
                assert!(s < crate::comment::classify::HOLD_SPAM, "{text:?} at {v}/min: {s}");
            }
        }
        assert!(
            spam_score(&SpamSignals::of("nice"), 3 * CONVERSATION_PACE)
                >= crate::comment::classify::HOLD_SPAM
        );
    }

    #[test]
    fn the_score_stays_within_zero_and_one() {
        let extreme = SpamSignals { links: 99, longest_repeat: 99, shout_ratio: f32::NAN, mention_count: 99 };
        let s = spam_score(&extreme, u32::MAX);
        assert!((0.0..=1.0).contains(&s), "{s}");
        assert!(s > 0.99);
    }
}
