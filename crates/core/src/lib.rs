//! Likewise's domain, free of I/O.
//!
//! - [`ids`]: the 64-bit identifiers and their decimal-string wire form.
//! - [`integrity`]: like farms and bot rings: pattern detection, flags, exact discounts.
//! - [`like`]: like targets, like/unlike operations and their outcomes (state transitions).
//! - [`event`]: the engagement events written to the log (the transactional outbox).
//! - [`comment`]: comments: IDs, text rules, statuses and shadow visibility, what each change
//!   does (transitions) and how reports count, moderation signals (hidden words, spam,
//!   near-duplicates, classifier) and the ranking formula.
//! - [`counter`]: summing event deltas into one counter update per target.
//! - [`display`]: the rounded like-count text ("12.3K").
//! - [`hourly_views`]: unique viewers per post and UTC hour (sparse HyperLogLog sketches).
//! - [`post_views`]: the stored form of a post's unique-viewer sketch, and its merge.
//! - [`exact_viewers`]: the exact phase of both sketches (viewer hashes while few).
//! - [`visibility`]: who may see a like count.
//! - [`model`]: upstream data: posts, users, viewer settings.
//! - [`names`]: characters that hide or reorder text (usernames, notification texts).
//! - [`notify`]: notifications: hold, aggregate, withdraw, as a pure state machine.
//! - [`ports`]: the small traits the storage engines implement.
//! - [`reverse`]: what a round of like events leaves in the user-keyed reverse index.
//! - [`write`]: the operations of the single write path (likes, comment changes).
//! - [`trace`]: the W3C trace context events carry, and the hook of the trace exporter.
//! - [`error`]: the error kinds shared by every layer.

pub mod comment;
pub mod counter;
pub mod display;
pub mod error;
pub mod event;
pub mod exact_viewers;
pub mod hourly_views;
pub mod ids;
pub mod integrity;
pub mod like;
pub mod model;
pub mod names;
pub mod notify;
pub mod ports;
pub mod positions;
pub mod post_views;
pub mod public_event;
pub mod redact;
pub mod reverse;
pub mod trace;
pub mod trending;
pub mod visibility;
pub mod write;

pub use error::{StoreError, StoreResult};
pub use ids::{CommentId, PostId, UserId};
