//! The event log's consumers beside the counter aggregator, listed once.
//!
//! Each reads the log with an offset of its own, kept under its [`Consumer::name`].
//! [`Consumer::runs`] says which of them a set of [`WorkerOptions`] runs; the single node
//! ([`crate::single_node`]) and the worker role ([`crate::cluster`]) start exactly those, and
//! the aggregator holds the log's truncation for exactly those
//! ([`WorkerOptions::aggregator_options`]): a consumer that does not run would hold it forever.

use crate::cluster::WorkerOptions;
use likewise_core::ports::cluster::{LeaseName, Partitioned};

/// A consumer of the event log with an offset of its own, other than the counter aggregator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Consumer {
    /// Notifications ([`crate::notifier`]).
    Notifier,
    /// Per-post engagement windows and the trending rankings ([`crate::trending`]).
    Trending,
    /// Like farms and bot rings ([`crate::integrity`]).
    Integrity,
    /// Every event as public JSON to a destination, when one is configured ([`crate::export`]).
    Export,
}

impl Consumer {
    /// Every consumer, in the order they are started.
    pub const ALL: [Consumer; 4] =
        [Consumer::Notifier, Consumer::Trending, Consumer::Integrity, Consumer::Export];

    /// The consumer's name: the key of its offset, and of its durable consumer on the stream.
    pub fn name(self) -> &'static str {
        match self {
            Consumer::Notifier => crate::notifier::NOTIFIER,
            Consumer::Trending => likewise_service::trending::TRENDING,
            Consumer::Integrity => likewise_service::integrity::INTEGRITY,
            Consumer::Export => crate::export::EXPORT,
        }
    }

    /// Whether `opts` run it: the export only with a destination, and none that `opts` leave
    /// out.
    pub fn runs(self, opts: &WorkerOptions) -> bool {
        let configured = match self {
            Consumer::Export => opts.export.is_some(),
            Consumer::Notifier | Consumer::Trending | Consumer::Integrity => true,
        };
        configured && !opts.without.contains(&self)
    }

    /// Whether a scaled-out worker role splits it into the stream's post partitions, each
    /// under a lease of its own, shared by every worker process (`crate::cluster::parts`);
    /// `None`: it runs whole, under [`Consumer::lease`], in one process at a time.
    pub fn partitioned(self) -> Option<Partitioned> {
        match self {
            Consumer::Notifier => Some(Partitioned::Notifier),
            Consumer::Trending | Consumer::Integrity | Consumer::Export => None,
        }
    }

    /// The lease it runs under in a scaled-out worker role, unless [`Consumer::partitioned`]. Trending and integrity share one:
    /// each holds a connection for as long as it is held, and a small pool should not run out
    /// of them for lease holders.
    pub fn lease(self) -> LeaseName {
        match self {
            Consumer::Notifier => LeaseName::Notifier,
            Consumer::Trending | Consumer::Integrity => LeaseName::Trending,
            Consumer::Export => LeaseName::Export,
        }
    }
}
