//! The offline classifier's precision on a fixed sample of benign text: 4,000 fortunes of
//! Debian's `fortunes` package and 1,500 random sequences of `wamerican` dictionary words
//! (written by `examples/classifier_precision.rs --sample`; the full measurement and its
//! command are in docs/moderation.md). At most 0.1% may be held by the classifier layer.

use likewise_core::comment::classify::{Classifier, RulesClassifier, should_hold};

#[test]
fn at_most_one_benign_text_in_a_thousand_is_held_by_the_classifier() {
    let sample = include_str!("data/benign_sample.txt");
    let texts: Vec<String> = sample.lines().map(|l| l.replace("\\n", "\n").replace("\\\\", "\\")).collect();
    assert!(texts.len() >= 5_000, "the sample has {} texts", texts.len());
    let held: Vec<&String> = texts.iter().filter(|t| should_hold(&RulesClassifier.classify(t, 1))).collect();
    let allowed = texts.len() / 1_000;
    assert!(held.len() <= allowed, "{} of {} benign texts held: {held:#?}", held.len(), texts.len());
}

#[test]
fn abuse_and_spam_are_still_held() {
    for text in [
        "you are a worthless n1gger, go kill yourself",
        "BUY NOW!!!!!!!! cheap-pills.biz www.x.ru http://spam.io",
        "f u c k you",
        "f.u.c.k",
        "shut up f a g",
        "go kys",
        "you stupid n i g g a",
    ] {
        assert!(should_hold(&RulesClassifier.classify(text, 1)), "{text:?}");
    }
}
