//! Comments: who sees what (shadow visibility per viewer; a reply only where its parent is
//! seen, [`reply_seen_by`]), and the [`Comments`] service.
//!
//! - `seen`: who sees what (the statuses each reader is shown).
//! - `write`: create (validated, permission-checked, moderated, through the group commit)
//!   and delete.
//! - `retries`: creates under an `Idempotency-Key`: keys running on this node, and what a
//!   repeat answers.
//! - `read`: keyset pages of top-level comments and of replies, and the decoration of
//!   records into views (counts, names, the viewer's like state) in batched reads.

mod read;
pub(crate) use read::or_everyones;
mod retries;
mod seen;
mod write;
pub use read::OwnReplies;
pub use seen::{CommentPage, CommentView, Order, Reader, as_seen_by, reply_seen_by, seen_by};
pub(crate) use seen::{seen_in_thread, standing_for};
pub(crate) use write::touched;

use crate::moderation::Moderation;
use crate::shared::Shared;
use crate::upstream::Upstream;
use std::sync::Arc;

/// See the module documentation.
pub struct Comments {
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
    moderation: Arc<Moderation>,
    in_flight: retries::InFlight,
    /// Writes the rank index (also for the aggregator).
    pub indexer: Arc<crate::rank_index::RankIndexer>,
}

impl Comments {
    /// The comment service.
    pub fn new(
        shared: Arc<Shared>,
        upstream: Arc<Upstream>,
        moderation: Arc<Moderation>,
        indexer: Arc<crate::rank_index::RankIndexer>,
    ) -> Self {
        Comments { shared, upstream, moderation, in_flight: retries::InFlight::default(), indexer }
    }
}
