//! The classifier port, and the offline implementation every deployment starts with.
//!
//! The write path only needs two numbers per comment, so the port is one synchronous method.
//! A deployment that wants a hosted model (Perspective-style) implements [`Classifier`] in an
//! outer crate; the domain keeps the thresholds ([`should_hold`]) so the decision does not
//! change with the scorer.

use super::spam::{SpamSignals, spam_score};
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

/// The offline classifier: rustrict's word lists for toxicity, the spam signals for spam.
#[derive(Debug, Clone, Copy, Default)]
pub struct RulesClassifier;

/// Maps rustrict's analysis to a toxicity score.
///
/// Offensive, sexual and mean language scores by severity: severe 0.95 (held), moderate 0.6,
/// mild 0.3. Plain profanity is one step lower (severe 0.6), because swearing is usually
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

impl Classifier for RulesClassifier {
    fn classify(&self, text: &str, comments_by_user_last_minute: u32) -> Verdict {
        Verdict {
            toxicity: toxicity(Censor::from_str(text).analyze()),
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
