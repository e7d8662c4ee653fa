//! How often the offline classifier holds benign text: the measurement behind
//! `docs/moderation.md` ("Classifier precision").
//!
//! ```bash
//! apt-get install -y fortunes wamerican
//! cargo run --release -p likewise-core --example classifier_precision -- \
//!     /usr/share/games/fortunes /usr/share/dict/american-english 10000
//! ```
//!
//! Benign texts, written by no one here: every fortune of Debian's `fortunes` package (real
//! English sentences: quotations, jokes, poems; the ASCII-art files left out, they are
//! pictures, not prose), and `N` random sequences of 4 to 16 words of Debian's `wamerican`
//! dictionary (seeded, so the run repeats), less the dictionary's own slurs (a text containing
//! one is not benign; the run prints them). Each text is normalised as a comment is
//! (`normalize_text`; longer than a comment may be: left out) and classified as the first
//! comment of its author in a minute. Prints the share held, and each held text.
//!
//! `--sample FILE` also writes 4,000 of the fortunes of at most 280 characters (evenly spread
//! over the files: comment-sized) and the first 1,500 word sequences, one per line (line
//! breaks as `\n`), for the fixed sample CI runs (`tests/data/benign_sample.txt`).

use likewise_core::comment::classify::{Classifier, RulesClassifier, should_hold};
use likewise_core::comment::text::normalize_text;
use likewise_core::comment::toxic_terms::has_severe_term;
use std::path::Path;

/// A small deterministic generator (xorshift64*), so the word sequences repeat run to run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn fortunes(dir: &Path) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("the fortunes directory (apt-get install fortunes)")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_none() && p.is_file())
        .filter(|p| !matches!(p.file_name().and_then(|n| n.to_str()), Some("art" | "ascii-art")))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let bytes = std::fs::read(&f).expect("read a fortunes file");
        let text = String::from_utf8_lossy(&bytes);
        out.extend(text.split("\n%\n").filter_map(|t| normalize_text(t.trim_end_matches('%')).ok()));
    }
    out
}

fn word_sequences(dict: &Path, n: usize) -> Vec<String> {
    let words: Vec<String> = std::fs::read_to_string(dict)
        .expect("the word list (apt-get install wamerican)")
        .lines()
        .map(str::to_owned)
        .filter(|w| !w.is_empty())
        .collect();
    // The dictionary lists slurs too: a text containing one is not benign.
    let slurs: Vec<&String> = words.iter().filter(|w| has_severe_term(w)).collect();
    println!("dictionary: {} words, {} of them slurs left out: {slurs:?}", words.len(), slurs.len());
    let words: Vec<&String> = words.iter().filter(|w| !has_severe_term(w)).collect();
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    (0..n)
        .map(|_| {
            let len = 4 + rng.below(13);
            (0..len).map(|_| words[rng.below(words.len())].as_str()).collect::<Vec<_>>().join(" ")
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(dir), Some(dict)) = (args.first(), args.get(1)) else {
        eprintln!("usage: classifier_precision FORTUNES_DIR WORDS_FILE [SEQUENCES] [--sample FILE]");
        std::process::exit(2);
    };
    let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let fortunes = fortunes(Path::new(dir));
    let sequences = word_sequences(Path::new(dict), n);
    if let Some(i) = args.iter().position(|a| a == "--sample") {
        let path = args.get(i + 1).expect("--sample FILE");
        let short: Vec<&String> = fortunes.iter().filter(|t| t.chars().count() <= 280).collect();
        let step = (short.len() / 4_000).max(1);
        let lines: Vec<String> = short
            .into_iter()
            .step_by(step)
            .take(4_000)
            .chain(sequences.iter().take(1_500))
            .map(|t| t.replace('\\', "\\\\").replace('\n', "\\n"))
            .collect();
        std::fs::write(path, lines.join("\n") + "\n").expect("write the sample");
    }
    let mut held = 0usize;
    for (kind, texts) in [("fortune", &fortunes), ("words", &sequences)] {
        let mut kind_held = 0usize;
        for t in texts.iter() {
            let v = RulesClassifier.classify(t, 1);
            if should_hold(&v) {
                kind_held += 1;
                println!("held {kind} (toxicity {:.2}, spam {:.2}): {t:?}", v.toxicity, v.spam);
            }
        }
        println!("{kind}: {kind_held} of {} held", texts.len());
        held += kind_held;
    }
    let total = fortunes.len() + sequences.len();
    println!("total: {held} of {total} benign texts held ({:.3}%)", 100.0 * held as f64 / total as f64);
}
