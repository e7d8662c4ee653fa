//! Comments: everything about a comment that needs no I/O.
//!
//! - [`id`]: time-sortable 64-bit comment IDs and their generator.
//! - [`record`]: a comment as stored ([`record::CommentRecord`]) and its byte form.
//! - [`text`]: the normalised stored text and the `@mentions` in it.
//! - [`fold`]: text folded to the plain Latin letters it looks like (NFKC, confusables).
//! - [`hidden_words`]: an author's hidden-words filter, robust to simple obfuscation.
//! - [`simhash`]: 64-bit SimHash fingerprints for near-duplicate (copy-paste) detection.
//! - [`spam`]: cheap per-comment spam signals and the spam score.
//! - [`toxic_terms`]: the slurs and incitement the classifier holds, in any spelling.
//! - [`classify`]: the classifier port, the offline rules classifier and the hold decision.
//! - [`status`]: comment statuses and what each audience is shown (shadowing).
//! - [`thread`]: threads follow their parent: which comments are counted, and a post's
//!   counts from its stored comments.
//! - [`transition`]: what a create, a status change or a delete does to a comment and its
//!   counts, as a plan both engines apply.
//! - [`uncounted`]: approvals and holds the counters have not taken in yet, as their
//!   author's view of the count takes them.
//! - [`idempotency`]: `Idempotency-Key` on comment creation: keys, fingerprints, replays.
//! - [`pins`]: what a pin or unpin does to a post's pin list, under the cap.
//! - [`report`]: reports of a comment, each reporter counted once.
//! - [`appeal`]: which layer holds a comment, and the author's appeal.
//! - [`rank`]: the "top comments" score and order.

pub mod appeal;
pub mod classify;
pub mod fold;
pub mod hidden_words;
pub mod id;
pub mod idempotency;
pub mod pins;
pub mod rank;
pub mod record;
pub mod report;
pub mod simhash;
pub mod spam;
pub mod status;
pub mod text;
pub mod thread;
pub mod toxic_terms;
pub mod transition;
pub mod uncounted;

pub use appeal::{HeldBy, QueueNote};
pub use classify::{Classifier, RulesClassifier, Verdict, should_hold};
pub use hidden_words::{HiddenWords, HiddenWordsError};
pub use id::{CommentIdGen, first_id_at, id_timestamp_ms};
pub use rank::{RankInput, base_score, order_top, viewer_score};
pub use simhash::{duplicate_radius, hamming, near_duplicate, simhash64};
pub use spam::{SpamSignals, spam_score};
pub use status::{Audience, CommentStatus, shown_as};
pub use text::{MAX_COMMENT_CHARS, TextError, mentions, normalize_text};
