//! The embedded engine: every port on one fjall database in the service's process.
//!
//! One fjall `Database` holds all keyspaces and a single journal, so a write batch spanning
//! keyspaces (like row + reverse-index row + event) is atomic, and one fsync of the journal
//! makes every earlier batch durable, in order. See [`crate::keys`] for the layouts; the
//! comment, moderation and idempotency-key keyspaces are tabled in `comments.rs`,
//! `moderation.rs` and `idempotency.rs`.

mod batch;
mod comments;
mod counters;
mod engine;
mod error;
mod idempotency;
mod integrity;
mod journal_check;
mod journal_sync;
mod like_filter;
mod like_filter_build;
mod liker_pages;
mod likes;
mod meta;
mod moderation;
mod notifications;
mod opening;
mod options;
mod ranks;
mod snapshots;
mod space;
mod state;
mod tail;
mod views;
mod write;

pub use engine::StoreMemory;
pub use journal_check::{PROGRESS, Problem, RepairReport, repair};
pub use options::EmbeddedOptions;
pub use state::EmbeddedStore;

#[cfg(test)]
mod conformance_tests {
    use crate::open::from_embedded;
    use likewise_engine::group_commit::GroupCommitOptions;

    fn open_temp() -> (likewise_engine::Stores, tempfile::TempDir) {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = super::EmbeddedStore::open(dir.path(), &super::EmbeddedOptions::default()).expect("open");
        (from_embedded(store, GroupCommitOptions::default()), dir)
    }

    likewise_engine::conformance_suite!(open_temp());
}
