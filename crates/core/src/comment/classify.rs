//! The classifier port, and the offline implementation every deployment starts with.
//!
//! The write path only needs two numbers per comment, so the port is one synchronous method.
//! A deployment that wants a hosted model (Perspective-style) implements [`Classifier`] in an
//! outer crate; the domain keeps the thresholds ([`should_hold`]) so the decision does not
//! change with the scorer.

use super::spam::{SpamSignals, spam_score};
use super::toxic_terms::{has_severe_term, spelled_out_profanity};
use rustrict::{Censor, Type};

/// A classifier's opinion of one comment. Both scores are 0..=1.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Verdict {
    /// How likely the text insults, harasses or sexualises someone.
    pub toxicity: f32,
    /// How likely the comment is spam.
    pub spam: f32,
}

/// Scores comment text. Implementations must be cheap enough for the write path, or bring
/// their own timeout and fall back to [`RulesClassifier`].
pub trait Classifier: Send + Sync {
    /// Score `text`, written by a user who posted `comments_by_user_last_minute` comments in
    /// the last minute (including this one).
    fn classify(&self, text: &str, comments_by_user_last_minute: u32) -> Verdict;
}

/// Toxicity at or above this holds a comment back.
pub const HOLD_TOXICITY: f32 = 0.8;

/// Spam at or above this holds a comment back.
pub const HOLD_SPAM: f32 = 0.7;

/// Should the comment be stored as hidden-by-filter instead of visible?
pub fn should_hold(v: &Verdict) -> bool {
    v.toxicity >= HOLD_TOXICITY || v.spam >= HOLD_SPAM
}

/// The offline classifier: explicit term lists for toxicity (rustrict as a signal that never
/// holds alone), the spam signals for spam.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesClassifier;

/// Maps rustrict's analysis to a toxicity score.
///
/// Offensive, sexual and mean language scores by severity: severe 0.95 (then capped at
/// [`RUSTRICT_CAP`] by [`text_toxicity`]), moderate 0.6, mild 0.3. Plain profanity is one step lower (severe 0.6), because swearing is usually
/// emphasis ("this is f***ing great"), not an attack on someone.
fn toxicity(t: Type) -> f32 {
    let targeted = Type::OFFENSIVE | Type::SEXUAL | Type::MEAN;
    if t.is(targeted & Type::SEVERE) {
        0.95
    } else if t.is(targeted & Type::MODERATE) || t.is(Type::PROFANE & Type::SEVERE) {
        0.6
    } else if t.is(targeted & Type::MILD) || t.is(Type::PROFANE & Type::MODERATE) {
        0.3
    } else if t.is(Type::PROFANE & Type::MILD) {
        0.1
    } else {
        0.0
    }
}

/// Characters that stand for letters in leetspeak or censoring ("b!tch", "@ss", "f*ck"): part
/// of a word, not a break between words.
fn is_letter_symbol(c: char) -> bool {
    matches!(c, '@' | '$' | '!' | '*')
}

/// Words spelled out letter by letter: each run of two or more single-character words, joined
/// ("f u c k", "f.u.c.k", "f-u-c-k" give "fuck"). Words are split at whitespace and
/// punctuation, except the symbols that stand for letters.
fn spelled_runs(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut spelled = String::new();
    let mut letters = 0;
    let words = text.split(|c: char| !c.is_alphanumeric() && !is_letter_symbol(c)).filter(|w| !w.is_empty());
    for w in words.chain(std::iter::once("")) {
        if w.chars().count() == 1 {
            spelled.push_str(w);
            letters += 1;
            continue;
        }
        if letters >= 2 {
            out.push(std::mem::take(&mut spelled));
        }
        spelled.clear();
        letters = 0;
    }
    out
}

/// The most rustrict alone may score: below [`HOLD_TOXICITY`].
const RUSTRICT_CAP: f32 = 0.6;

/// Toxicity of a text.
///
/// Held (0.95): a slur or incitement from [`super::toxic_terms`] in any spelling, or profanity
/// spelled out letter by letter. rustrict's score is kept as a signal for other consumers,
/// capped below the hold threshold: it reads text as one stream of letters and matches inside
/// words, so "tundra pebble", "Schwarzenegger", "puberty" or "cummings" read as sexual or
/// offensive, and on its own it held 2.6% of ordinary texts (docs/moderation.md).
fn text_toxicity(text: &str) -> f32 {
    if has_severe_term(text) || spelled_runs(text).iter().any(|w| spelled_out_profanity(w)) {
        return 0.95;
    }
    toxicity(Censor::from_str(text).analyze()).min(RUSTRICT_CAP)
}

impl Classifier for RulesClassifier {
    fn classify(&self, text: &str, comments_by_user_last_minute: u32) -> Verdict {
        Verdict {
            toxicity: text_toxicity(text),
            spam: spam_score(&SpamSignals::of(text), comments_by_user_last_minute),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(text: &str) -> Verdict {
        RulesClassifier.classify(text, 1)
    }

    #[test]
    fn a_friendly_sentence_is_not_held() {
        for text in ["What a lovely photo, congratulations to you both!", "Thanks for sharing this"] {
            let v = verdict(text);
            assert_eq!(v.toxicity, 0.0, "{text:?}");
            assert!(!should_hold(&v), "{text:?}: {v:?}");
        }
    }

    #[test]
    fn a_severe_slur_laden_insult_is_held() {
        let v = verdict("you are a worthless n1gger, go kill yourself");
        assert!(v.toxicity >= 0.9, "{v:?}");
        assert!(should_hold(&v));
    }

    #[test]
    fn letters_of_neighbouring_words_do_not_make_an_insult() {
        for text in [
            "tundra pebble falcon harp sunset marble maple dune velvet",
            "c200: mango raven pixel cedar saffron canyon cobalt cricket dune",
        ] {
            let v = verdict(text);
            assert!(!should_hold(&v), "{text:?}: {v:?}");
        }
    }

    #[test]
    fn slurs_spelled_out_or_in_leetspeak_are_still_held() {
        for text in [
            "you worthless n i g g e r",
            "you worthless n.i.g.g.e.r",
            "you worthless n-1-g-g-e-r",
            "shut up you f a g g o t",
            "f.a.g.g.o.t",
            "you are a worthless n1gg3r",
            "die you f@gg0t",
            "f u c k you",
            "go k.y.s",
            "you worthless nіggеr",
        ] {
            let v = verdict(text);
            assert!(should_hold(&v), "{text:?}: {v:?}");
        }
    }

    #[test]
    fn spelled_out_profanity_is_held_but_plain_swearing_is_not() {
        for text in ["f u c k", "f.u.c.k this", "what the f-u-c-k", "s h i t"] {
            assert!(should_hold(&verdict(text)), "{text:?}");
        }
        for text in ["this is fucking great", "oh shit, I forgot", "f*ck", "a b c d e"] {
            assert!(!should_hold(&verdict(text)), "{text:?}");
        }
    }

    #[test]
    fn rustrict_alone_never_holds() {
        for text in ["Real programmers don't write BASIC after reaching puberty.", "Hoare's Law"] {
            let v = verdict(text);
            assert!(v.toxicity <= RUSTRICT_CAP && !should_hold(&v), "{text:?}: {v:?}");
        }
    }

    #[test]
    fn single_letters_are_joined_into_spelled_runs() {
        assert_eq!(spelled_runs("a b, c"), ["abc"]);
        assert_eq!(spelled_runs("f.u.c.k you"), ["fuck"]);
        assert!(spelled_runs("f*ck @ss").is_empty());
        assert!(spelled_runs("I am").is_empty());
        assert_eq!(spelled_runs("x y then z w"), ["xy", "zw"]);
    }

    #[test]
    fn the_spam_example_is_held() {
        let v = verdict("BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io");
        assert!(v.spam > HOLD_SPAM, "{v:?}");
        assert!(should_hold(&v));
    }

    #[test]
    fn severity_maps_to_toxicity_tiers() {
        assert_eq!(toxicity(Type::NONE), 0.0);
        assert_eq!(toxicity(Type::MEAN & Type::MILD), 0.3);
        assert_eq!(toxicity(Type::SEXUAL & Type::MODERATE), 0.6);
        assert_eq!(toxicity(Type::OFFENSIVE & Type::SEVERE), 0.95);
        assert_eq!(toxicity(Type::PROFANE & Type::SEVERE), 0.6);
        assert_eq!(toxicity(Type::SPAM & Type::SEVERE), 0.0);
    }

    #[test]
    fn holding_thresholds_are_inclusive() {
        assert!(should_hold(&Verdict { toxicity: HOLD_TOXICITY, spam: 0.0 }));
        assert!(should_hold(&Verdict { toxicity: 0.0, spam: HOLD_SPAM }));
        assert!(!should_hold(&Verdict { toxicity: 0.79, spam: 0.69 }));
    }

    #[test]
    fn the_classifier_is_usable_as_a_trait_object() {
        let c: Box<dyn Classifier> = Box::new(RulesClassifier);
        assert!(c.classify("nice", 20).spam > HOLD_SPAM);
    }
}
