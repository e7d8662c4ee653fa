//! Near-duplicate detection with a 64-bit SimHash, to catch the same comment pasted over and
//! over (copy-paste spam), also with a word changed or added each time, without storing or
//! comparing whole texts.
//!
//! Features come from the normalised text (lowercase, punctuation stripped, whitespace
//! collapsed, padded with a space at each end): every character 4-gram, which makes a changed
//! or added word touch only the few grams around it, plus every whole word at twice the weight,
//! so texts that share their words lean together. Each feature is hashed with a fixed FNV-1a + splitmix64 hash: the
//! fingerprints are stored, so the hash must never change between builds or processes (std's
//! `RandomState` is randomly seeded per process).
//!
//! Similar texts get fingerprints a small Hamming distance apart, but a short text has few
//! features, so one word changed in a comment of ten words moves about 5 to 12 of the 64 bits
//! (a 3-bit radius, right for web pages of hundreds of words, caught only exact copies). So the
//! radius depends on the text ([`duplicate_radius`]):
//! - a text of at least [`NEAR_DUPLICATE_MIN_WORDS`] words matches within
//!   [`NEAR_DUPLICATE_BITS`]: measured on nine spam sentences of 7 to 13 words, each posted
//!   ten times with a different one-word edit (`!`, ` ok`, `now` -> `today`, a word appended or
//!   prepended), every copy from the fifth on matches at least four earlier ones (so each is
//!   held, as exact copies are); of the 13.7 million pairs of the unrelated texts of at least
//!   five words in `tests/data/benign_sample.txt` 58 do (4 in a million, mostly quotes sharing
//!   an attribution), and a user's comment is held only when it matches four of their own
//!   recent ones;
//! - a shorter text ("nice!", "love this", "great shot") matches only within [`COPY_BITS`],
//!   that is as the same words: one word of three changed is another comment, and everyday
//!   short comments by one person ("great shot", "great post", "great work") must never add
//!   up to a hold.
//!
//! Copies are counted through chains ([`copies`]): spam that grows by a word each time drifts
//! a few bits per copy, so its fifth copy may be far from the first though each copy is near
//! the one before.

/// Fingerprints of texts of any length at most this many bits apart are copies (case,
/// punctuation and spacing aside).
pub const COPY_BITS: u32 = 3;

/// Fingerprints at most this many bits apart are near duplicates when the new text has at
/// least [`NEAR_DUPLICATE_MIN_WORDS`] words.
pub const NEAR_DUPLICATE_BITS: u32 = 12;

/// The fewest words for which a changed or added word still leaves a near duplicate.
pub const NEAR_DUPLICATE_MIN_WORDS: usize = 5;

/// FNV-1a 64 followed by the splitmix64 finaliser. FNV alone mixes its last bytes poorly, and
/// SimHash needs every output bit to be an unbiased coin flip per feature.
fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Lowercase, punctuation and symbols removed, words separated by single spaces. A text of
/// symbols only (emoji reactions: "😍", "🔥🔥") keeps its symbols instead: with nothing left,
/// every such text had the same fingerprint, and one person's different reactions on a few
/// posts were held as copies of each other.
fn normalize(text: &str) -> Vec<String> {
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| w.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect())
        .filter(|w: &String| !w.is_empty())
        .collect();
    if !words.is_empty() {
        return words;
    }
    text.split_whitespace().map(str::to_string).collect()
}

/// Weight of a whole word against a 4-gram's 1: a word changed moves about as many grams as
/// its length, so words must weigh more for the texts' shared vocabulary to hold them together
/// (measured: a weight of 1 let one copy in seven through at the fifth, 2 none).
const WORD_WEIGHT: i32 = 2;

/// The weighted feature hashes of a text: its padded character 4-grams and its words.
fn features(text: &str) -> Vec<(u64, i32)> {
    let words = normalize(text);
    if words.is_empty() {
        return Vec::new();
    }
    let padded: Vec<char> = format!(" {} ", words.join(" ")).chars().collect();
    let mut out: Vec<(u64, i32)> = if padded.len() < 4 {
        // A one-letter text: the whole of it is the one gram.
        vec![(stable_hash(padded.iter().collect::<String>().as_bytes()), 1)]
    } else {
        padded.windows(4).map(|g| (stable_hash(g.iter().collect::<String>().as_bytes()), 1)).collect()
    };
    // Prefixed so a word never hashes like a 4-gram of the same letters.
    out.extend(words.iter().map(|w| (stable_hash(format!("w:{w}").as_bytes()), WORD_WEIGHT)));
    out
}

/// The 64-bit SimHash fingerprint of `text`; 0 for an empty (or all-blank) text.
pub fn simhash64(text: &str) -> u64 {
    let mut votes = [0i32; 64];
    for (h, weight) in features(text) {
        for (bit, vote) in votes.iter_mut().enumerate() {
            *vote += if h >> bit & 1 == 1 { weight } else { -weight };
        }
    }
    votes.iter().enumerate().fold(0, |acc, (bit, &v)| if v > 0 { acc | 1 << bit } else { acc })
}

/// How many bits a fingerprint of `text` may differ from an earlier one and still count as
/// its near duplicate: [`NEAR_DUPLICATE_BITS`] for a text of at least
/// [`NEAR_DUPLICATE_MIN_WORDS`] words, [`COPY_BITS`] for a shorter one.
pub fn duplicate_radius(text: &str) -> u32 {
    if normalize(text).len() >= NEAR_DUPLICATE_MIN_WORDS { NEAR_DUPLICATE_BITS } else { COPY_BITS }
}

/// How many bits differ between two fingerprints.
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// Are two fingerprints within `radius` bits of each other ([`duplicate_radius`])?
pub fn near_duplicate(a: u64, b: u64, radius: u32) -> bool {
    hamming(a, b) <= radius
}

/// How many of `earlier` fingerprints are copies of `new`: those within `radius` of it, and
/// those within `radius` of a copy already found (a chain). Spam that drifts a word at a time
/// (a word appended to each copy) moves every copy a little further from the first; each is
/// still near the one before, so the chain keeps them all together, where counting only the
/// fingerprints near the newest would lose the oldest copies one by one. Quadratic in
/// `earlier`, which the caller bounds (a user's recent comments).
pub fn copies(earlier: &[u64], new: u64, radius: u32) -> usize {
    let mut found = vec![false; earlier.len()];
    let mut frontier = vec![new];
    let mut count = 0;
    while let Some(f) = frontier.pop() {
        for (i, &h) in earlier.iter().enumerate() {
            if !found[i] && near_duplicate(f, h, radius) {
                found[i] = true;
                count += 1;
                frontier.push(h);
            }
        }
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &str = "I visited this little bakery on the corner last weekend with my sister and \
        we ordered the almond croissants, which were flaky and warm and honestly the best I have \
        had anywhere in the city, so we went back the next morning for more of them";

    /// Spam as it is pasted under posts: a pitch of 8 to 13 words.
    const SPAM: [&str; 7] = [
        "Check out my profile for free followers and great deals every day",
        "Get 1000 free followers now, link in my bio",
        "Earn $500 a day from home, DM me now",
        "Win a free iPhone now, click the link in my bio",
        "Crypto giveaway: send 1 BTC get 2 back, visit my page now",
        "Follow me and I follow back, 100% real",
        "Hot singles in your area are waiting for you now, click my profile",
    ];

    /// The edits a spammer makes so that no two copies are the same text.
    fn variants(s: &str) -> Vec<String> {
        vec![
            s.to_string(),
            format!("{s}!"),
            format!("{s} ok"),
            s.replace("now", "today"),
            format!("{s} today"),
            format!("hey {s}"),
            format!("{s} lol"),
            format!("{s} pls"),
            format!("{s} now"),
            format!("omg {s}"),
        ]
    }

    /// Everyday short comments one person leaves under friends' posts.
    const SHORT: [&str; 30] = [
        "nice!",
        "love this",
        "great shot",
        "so cute",
        "wow",
        "amazing",
        "beautiful",
        "nice one",
        "nice pic",
        "love it",
        "congrats!",
        "happy birthday!",
        "looks delicious",
        "great pic",
        "great post",
        "great work",
        "great job",
        "so beautiful",
        "nice shot",
        "so nice",
        "cool",
        "so cool",
        "well done",
        "so proud of you",
        "this is amazing",
        "this is great",
        "thanks for sharing",
        "love your style",
        "what a view",
        "haha so true",
    ];

    fn matches(earlier: &str, new: &str) -> bool {
        near_duplicate(simhash64(earlier), simhash64(new), duplicate_radius(new))
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // Stored fingerprints depend on these exact values.
        assert_eq!(stable_hash(b""), 0xf52a_15e9_a9b5_e89b);
        assert_eq!(stable_hash(b"likewise"), 0x4944_ffd5_a0fd_0d3d);
        assert_eq!(simhash64(""), 0);
        assert_eq!(simhash64("hello world"), simhash64("hello world"));
    }

    #[test]
    fn identical_texts_are_near_duplicates() {
        assert!(matches(LONG, LONG));
        assert!(matches("nice", "nice"));
        assert!(matches("a", "A!"));
    }

    #[test]
    fn case_punctuation_and_spacing_do_not_matter() {
        let shouty = LONG.to_uppercase().replace(',', " !!! ").replace(' ', "   ");
        assert_eq!(simhash64(&shouty), simhash64(LONG));
        assert_eq!(simhash64("Great   shot!!"), simhash64("great shot"));
    }

    #[test]
    fn one_extra_trailing_word_on_a_long_text_is_a_near_duplicate() {
        assert!(matches(LONG, &format!("{LONG} today")));
    }

    #[test]
    fn spam_with_a_word_changed_or_added_is_a_near_duplicate_of_its_other_copies() {
        for s in SPAM {
            let copies = variants(s);
            // What the moderation layer counts: the earlier copies each one matches; from the
            // fifth copy on, at least the four that hold it back.
            for (i, new) in copies.iter().enumerate().skip(4) {
                let near = copies[..i].iter().filter(|e| matches(e, new)).count();
                assert!(near >= 4, "{new:?} matches only {near} of the {i} before it");
            }
        }
    }

    /// The copies earlier than the `i`th of `texts` that hold it back, as the moderation layer
    /// counts them.
    fn held_copies(texts: &[String], i: usize) -> usize {
        let earlier: Vec<u64> = texts[..i].iter().map(|t| simhash64(t)).collect();
        copies(&earlier, simhash64(&texts[i]), duplicate_radius(&texts[i]))
    }

    #[test]
    fn a_long_text_with_a_word_appended_each_time_is_caught_by_its_fifth_copy() {
        let words = ["today", "friends", "please", "thanks", "everyone", "again", "really", "now"];
        for base in SPAM.iter().copied().chain([LONG]) {
            let mut texts = vec![base.to_string()];
            for w in words {
                texts.push(format!("{} {w}", texts.last().expect("a text")));
            }
            for i in 4..texts.len() {
                assert!(
                    held_copies(&texts, i) >= 4,
                    "copy {} of {base:?}: {}",
                    i + 1,
                    held_copies(&texts, i)
                );
            }
        }
    }

    #[test]
    fn chains_of_everyday_comments_never_add_up_to_a_hold() {
        // One person's short comments of an evening: not one is counted a copy of the others,
        // even through chains.
        let texts: Vec<String> = SHORT.iter().map(|s| s.to_string()).collect();
        for i in 0..texts.len() {
            assert!(held_copies(&texts, i) < 4, "{:?}: {}", texts[i], held_copies(&texts, i));
        }
    }

    #[test]
    fn different_short_comments_by_one_person_are_not_near_duplicates() {
        for (i, new) in SHORT.iter().enumerate() {
            for earlier in &SHORT[..i] {
                assert!(!matches(earlier, new), "{earlier:?} vs {new:?}");
            }
        }
        assert_eq!(duplicate_radius("love this so much"), COPY_BITS);
    }

    #[test]
    fn different_sentences_are_not_near_duplicates() {
        let texts = [
            "What a beautiful sunset, where was this taken?",
            "I love the colours in this photo so much",
            "Congratulations on the new job, you deserve it",
            "Does anyone know what time the store opens tomorrow?",
            "This recipe turned out great, my kids loved it",
            "Check out my profile for free followers and great deals every day",
            "lol",
            "nice",
            LONG,
        ];
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                assert!(!matches(a, b) && !matches(b, a), "{a:?} vs {b:?}");
            }
        }
    }

    #[test]
    fn unrelated_texts_almost_never_fall_within_the_radius() {
        // 5,500 texts no one here wrote (fortunes, random word sequences): 15 million pairs.
        let sample = include_str!("../../tests/data/benign_sample.txt");
        let long: Vec<u64> =
            sample.lines().filter(|t| duplicate_radius(t) == NEAR_DUPLICATE_BITS).map(simhash64).collect();
        let (mut pairs, mut near) = (0u64, 0u64);
        for (i, a) in long.iter().enumerate() {
            for b in &long[i + 1..] {
                pairs += 1;
                // Exact copies in the sample (a fortune in two files) are not the point here.
                if a != b && near_duplicate(*a, *b, NEAR_DUPLICATE_BITS) {
                    near += 1;
                }
            }
        }
        assert!(pairs > 10_000_000, "{pairs}");
        assert!(near * 100_000 < pairs, "{near} of {pairs} pairs near");
    }

    #[test]
    fn different_emoji_reactions_are_not_copies_but_the_same_one_is() {
        let reactions = ["😍", "🔥🔥", "😂😂😂", "❤️", "👏👏", "🙌", "💯"];
        for (i, a) in reactions.iter().enumerate() {
            for b in &reactions[i + 1..] {
                assert!(!matches(a, b), "{a} and {b} counted as copies");
            }
            assert!(matches(a, a), "{a} is a copy of itself");
        }
    }

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(0, 0), 0);
        assert_eq!(hamming(0b1011, 0b0001), 2);
        assert_eq!(hamming(0, u64::MAX), 64);
        assert!(near_duplicate(0, 0b111, COPY_BITS));
        assert!(!near_duplicate(0, 0b1111, COPY_BITS));
    }
}
