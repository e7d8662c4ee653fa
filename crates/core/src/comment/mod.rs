//! Comments: everything about a comment that needs no I/O.
//!
//! - [`id`]: time-sortable 64-bit comment IDs and their generator.
//! - [`text`]: the normalised stored text and the `@mentions` in it.
//! - [`hidden_words`]: an author's hidden-words filter, robust to simple obfuscation.
//! - [`simhash`]: 64-bit SimHash fingerprints for near-duplicate (copy-paste) detection.
//! - [`spam`]: cheap per-comment spam signals and the spam score.
//! - [`classify`]: the classifier port, the offline rules classifier and the hold decision.
//! - [`status`]: comment statuses and what each audience is shown (shadowing).
//! - [`rank`]: the "top comments" score and order.

pub mod classify;
pub mod hidden_words;
pub mod id;
pub mod rank;
pub mod simhash;
pub mod spam;
pub mod status;
pub mod text;

pub use classify::{Classifier, RulesClassifier, Verdict, should_hold};
pub use hidden_words::{HiddenWords, HiddenWordsError};
pub use id::{CommentIdGen, first_id_at, id_timestamp_ms};
pub use rank::{RankInput, base_score, order_top, viewer_score};
pub use simhash::{hamming, near_duplicate, simhash64};
pub use spam::{SpamSignals, spam_score};
pub use status::{Audience, CommentStatus, shown_as};
pub use text::{MAX_COMMENT_CHARS, TextError, mentions, normalize_text};
