//! Near-duplicate detection with a 64-bit SimHash, to catch the same comment pasted over and
//! over (copy-paste spam) without storing or comparing whole texts.
//!
//! Features come from the normalised text (lowercase, punctuation stripped, whitespace
//! collapsed): word 2-shingles when there are at least 3 words, which capture phrasing rather
//! than vocabulary; otherwise character 3-grams, because a one- or two-word comment has too few
//! shingles to hash meaningfully. Each feature is hashed with a fixed FNV-1a + splitmix64 hash:
//! the fingerprints are stored, so the hash must never change between builds or processes
//! (std's `RandomState` is randomly seeded per process).
//!
//! Similar texts get fingerprints a small Hamming distance apart. At [`NEAR_DUPLICATE_BITS`]
//! two unrelated texts collide with probability about 2^-46, so a hit is trustworthy; the price
//! is recall: only near-verbatim copies are caught. Case, punctuation and spacing never matter;
//! one word appended flips a few bits, more the shorter the text (measured: within 3 bits for
//! about 4 in 5 appended words on a 46-word comment, but only 1 in 4 on a 20-30 word one).

/// Fingerprints at most this many bits apart are near duplicates.
pub const NEAR_DUPLICATE_BITS: u32 = 3;

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

/// Lowercase, punctuation and symbols removed, words separated by single spaces.
fn normalize(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| w.chars().filter(|c| c.is_alphanumeric()).flat_map(char::to_lowercase).collect())
        .filter(|w: &String| !w.is_empty())
        .collect()
}

/// The feature hashes of a text.
fn features(text: &str) -> Vec<u64> {
    let words = normalize(text);
    if words.len() >= 3 {
        return words.windows(2).map(|w| stable_hash(format!("{} {}", w[0], w[1]).as_bytes())).collect();
    }
    let chars: Vec<char> = words.join(" ").chars().collect();
    if chars.len() < 3 {
        // Too short for a 3-gram: the whole text is the one feature (none if it is empty).
        return if chars.is_empty() {
            Vec::new()
        } else {
            vec![stable_hash(chars.iter().collect::<String>().as_bytes())]
        };
    }
    chars.windows(3).map(|g| stable_hash(g.iter().collect::<String>().as_bytes())).collect()
}

/// The 64-bit SimHash fingerprint of `text`; 0 for text with no letters or digits.
pub fn simhash64(text: &str) -> u64 {
    let mut votes = [0i32; 64];
    for h in features(text) {
        for (bit, vote) in votes.iter_mut().enumerate() {
            *vote += if h >> bit & 1 == 1 { 1 } else { -1 };
        }
    }
    votes.iter().enumerate().fold(0, |acc, (bit, &v)| if v > 0 { acc | 1 << bit } else { acc })
}

/// How many bits differ between two fingerprints.
pub fn hamming(a: u64, b: u64) -> u32 {
    (a ^ b).count_ones()
}

/// Are two fingerprints within [`NEAR_DUPLICATE_BITS`] of each other?
pub fn near_duplicate(a: u64, b: u64) -> bool {
    hamming(a, b) <= NEAR_DUPLICATE_BITS
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &str = "I visited this little bakery on the corner last weekend with my sister and \
        we ordered the almond croissants, which were flaky and warm and honestly the best I have \
        had anywhere in the city, so we went back the next morning for more of them";

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
        assert!(near_duplicate(simhash64(LONG), simhash64(LONG)));
        assert!(near_duplicate(simhash64("nice"), simhash64("nice")));
    }

    #[test]
    fn case_punctuation_and_spacing_do_not_matter() {
        let shouty = LONG.to_uppercase().replace(',', " !!! ").replace(' ', "   ");
        assert_eq!(simhash64(&shouty), simhash64(LONG));
        assert_eq!(simhash64("Great   shot!!"), simhash64("great shot"));
    }

    #[test]
    fn one_extra_trailing_word_on_a_long_text_is_a_near_duplicate() {
        let a = simhash64(LONG);
        let b = simhash64(&format!("{LONG} today"));
        assert!(near_duplicate(a, b), "distance {}", hamming(a, b));
    }

    #[test]
    fn different_sentences_by_different_people_are_not_near_duplicates() {
        let texts = [
            "What a beautiful sunset, where was this taken?",
            "I love the colours in this photo so much",
            "Congratulations on the new job, you deserve it",
            "Does anyone know what time the store opens tomorrow?",
            "This recipe turned out great, my kids loved it",
            "lol",
            "nice",
            LONG,
        ];
        for (i, a) in texts.iter().enumerate() {
            for b in &texts[i + 1..] {
                let d = hamming(simhash64(a), simhash64(b));
                assert!(d > NEAR_DUPLICATE_BITS, "{a:?} vs {b:?}: {d}");
            }
        }
    }

    #[test]
    fn hamming_counts_differing_bits() {
        assert_eq!(hamming(0, 0), 0);
        assert_eq!(hamming(0b1011, 0b0001), 2);
        assert_eq!(hamming(0, u64::MAX), 64);
        assert!(near_duplicate(0, 0b111));
        assert!(!near_duplicate(0, 0b1111));
    }
}
