//! The event log's consumers beside the counter aggregator, listed once, and the options
//! that say which of them run.
//!
//! Each reads the log with an offset of its own, kept under its [`Consumer::name`].
//! [`Consumer::runs`] says which of them a set of [`WorkerOptions`] runs; the single node
//! ([`crate::single_node`]) and the worker role ([`crate::cluster`]) start exactly those, and
//! the aggregator holds the log's truncation for exactly those
//! ([`WorkerOptions::aggregator_options`]): a consumer that does not run would hold it forever.
//! This module is data: both of those start from it, and it depends on neither.

use crate::AggregatorOptions;
use crate::notifier::NotifierOptions;
use likewise_core::ports::cluster::{LeaseName, Partitioned};
use std::time::Duration;

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
            Consumer::Trending => Some(Partitioned::Trending),
            // Integrity's windows are per account, not per post: a post partition would see a
            // share of an account's likes and miss the patterns (rates, rings) across them.
            Consumer::Integrity | Consumer::Export => None,
        }
    }

    /// The lease it runs under in a scaled-out worker role, unless [`Consumer::partitioned`]
    /// (integrity keeps the lease trending ran under before it was partitioned).
    pub fn lease(self) -> LeaseName {
        match self {
            Consumer::Notifier => LeaseName::Notifier,
            Consumer::Trending | Consumer::Integrity => LeaseName::Trending,
            Consumer::Export => LeaseName::Export,
        }
    }
}

/// Options of the worker role.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// The counter aggregators (each gets its shard's consumer name, and the consumers to
    /// hold the log for from [`Self::aggregator_options`]).
    pub aggregator: AggregatorOptions,
    /// The notifier.
    pub notifier: NotifierOptions,
    /// The event export, when a destination is configured.
    pub export: Option<crate::export::Export>,
    /// How long comment creates' `Idempotency-Key`s are kept ([`crate::key_expiry`]).
    pub key_retention: Duration,
    /// How long notification items are kept ([`crate::notif_retention`]).
    pub notif_retention: crate::notif_retention::RetentionOptions,
    /// The integrity consumer.
    pub integrity: crate::integrity::IntegrityWorkerOptions,
    /// Consumers not run although configured (none in `serve`: only
    /// `bench hot-post --consumers --without` leaves some out, to measure what they cost).
    pub without: Vec<Consumer>,
}

impl Default for WorkerOptions {
    fn default() -> Self {
        WorkerOptions {
            aggregator: AggregatorOptions::default(),
            notifier: NotifierOptions::default(),
            export: None,
            key_retention: crate::key_expiry::DEFAULT_RETENTION,
            notif_retention: Default::default(),
            integrity: Default::default(),
            without: Vec::new(),
        }
    }
}

impl WorkerOptions {
    /// The log's consumers these options run, in start order.
    pub fn consumers(&self) -> impl Iterator<Item = Consumer> + '_ {
        Consumer::ALL.into_iter().filter(|c| c.runs(self))
    }

    /// The counter aggregators' options: [`Self::aggregator`], with the log's truncation held
    /// for every consumer that runs (their unread events stay, however far behind they are)
    /// and for no other.
    pub fn aggregator_options(&self) -> AggregatorOptions {
        AggregatorOptions {
            hold_for: self.consumers().map(|c| c.name().to_string()).collect(),
            ..self.aggregator.clone()
        }
    }
}
