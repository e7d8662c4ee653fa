//! Errors shared by the storage ports. Classified by kind, mapped to HTTP in one place (the
//! `http` crate), never by transport.

/// What went wrong in a storage engine.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The engine failed, as described (a condition of ours, not a library's error).
    #[error("storage failure: {0}")]
    Engine(String),
    /// A storage library or server failed (I/O, lost connection, a refused statement); the
    /// library's error is kept as the source, so callers can inspect it. The message names
    /// only the engine: the source is the next link of the error chain (`{:#}` in anyhow,
    /// [`chain`] in logs), so printing both would say it twice.
    #[error("{engine} failed")]
    Backend {
        /// Which engine: `fjall`, `postgres`, `redis`, `nats`.
        engine: &'static str,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A stored record could not be decoded (unknown format version, truncated bytes).
    #[error("corrupt record in {keyspace}: {detail}")]
    Corrupt {
        /// Which keyspace held the record.
        keyspace: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// The engine is shutting down and takes no more writes.
    #[error("storage is shutting down")]
    Closed,
    /// The engine is there but cannot take this call now (every pooled connection busy for
    /// longer than the pool waits): retryable, a 503 rather than a 500.
    #[error("{engine} is overloaded")]
    Overloaded {
        /// Which engine.
        engine: &'static str,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A leased consumer's write was refused: another process has taken the consumer's
    /// fence since this one took its own (a standby took over while this process was cut
    /// off). The writer must stop; nothing of the refused write was applied.
    #[error("consumer {0:?} was taken over by another process")]
    Superseded(String),
    /// A server the engine needs could not be reached or lost the connection (a partition,
    /// a restart, a refused connection): nothing is wrong with the request, try again later;
    /// a 503 rather than a 500.
    #[error("{engine} is unreachable")]
    Unreachable {
        /// Which engine.
        engine: &'static str,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The write was refused before it was queued: the queue ahead of it would outlast the
    /// request's deadline (admission control). Nothing was written; retry after the given
    /// number of seconds.
    #[error("too many writes queued; retry in {retry_after_secs} s")]
    Shed {
        /// When a retry has a fair chance.
        retry_after_secs: u64,
    },
    /// The engine takes no writes for now (its disk is full): nothing of this write was
    /// stored; retry after the given number of seconds. Reads still work.
    #[error("storage takes no writes now: {reason}")]
    Refused {
        /// Why, for the log and the answer's message.
        reason: String,
        /// When a retry has a fair chance.
        retry_after_secs: u64,
    },
    /// The write may or may not have been stored: the connection failed while its commit was
    /// on its way. Not a 503 (which says nothing was created): the client is told to retry
    /// with the same `Idempotency-Key`, which answers the stored write if there is one.
    #[error("{engine} did not confirm the commit")]
    OutcomeUnknown {
        /// Which engine.
        engine: &'static str,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// An error and its sources as one line, `outer: inner: innermost`: for logs, where only
/// the outer message would otherwise be printed.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        out.push_str(": ");
        out.push_str(&s.to_string());
        next = s.source();
    }
    out
}

/// Result of a storage call.
pub type StoreResult<T> = Result<T, StoreError>;

/// Coarse error kinds used for metrics and HTTP mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The backend is unavailable (shutting down, unreachable): retryable.
    Unavailable,
    /// An internal fault: not the caller's doing.
    Internal,
    /// A write whose outcome is not known (it may be stored): retry it with its key.
    OutcomeUnknown,
}

impl StoreError {
    /// A storage library's error, kept as the source.
    pub fn backend(
        engine: &'static str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        StoreError::Backend { engine, source: e.into() }
    }

    /// The same error for another receiver (a batch's failure goes to every request in it):
    /// the same variant and message, with the source kept as its text.
    pub fn duplicate(&self) -> StoreError {
        let text = |s: &(dyn std::error::Error + Send + Sync + 'static)| -> Box<dyn std::error::Error + Send + Sync> {
            chain(s).into()
        };
        match self {
            StoreError::Engine(m) => StoreError::Engine(m.clone()),
            StoreError::Backend { engine, source } => StoreError::Backend { engine, source: text(&**source) },
            StoreError::Corrupt { keyspace, detail } => {
                StoreError::Corrupt { keyspace, detail: detail.clone() }
            }
            StoreError::Closed => StoreError::Closed,
            StoreError::Superseded(c) => StoreError::Superseded(c.clone()),
            StoreError::Overloaded { engine, source } => {
                StoreError::Overloaded { engine, source: text(&**source) }
            }
            StoreError::Unreachable { engine, source } => {
                StoreError::Unreachable { engine, source: text(&**source) }
            }
            StoreError::OutcomeUnknown { engine, source } => {
                StoreError::OutcomeUnknown { engine, source: text(&**source) }
            }
            StoreError::Shed { retry_after_secs } => StoreError::Shed { retry_after_secs: *retry_after_secs },
            StoreError::Refused { reason, retry_after_secs } => {
                StoreError::Refused { reason: reason.clone(), retry_after_secs: *retry_after_secs }
            }
        }
    }

    /// The kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::Closed
            | StoreError::Overloaded { .. }
            | StoreError::Unreachable { .. }
            | StoreError::Shed { .. }
            | StoreError::Refused { .. } => ErrorKind::Unavailable,
            StoreError::Engine(_)
            | StoreError::Backend { .. }
            | StoreError::Corrupt { .. }
            | StoreError::Superseded(_) => ErrorKind::Internal,
            StoreError::OutcomeUnknown { .. } => ErrorKind::OutcomeUnknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backend_error_keeps_its_source() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no");
        let e = StoreError::backend("fjall", io);
        let source = std::error::Error::source(&e).expect("a source");
        let io = source.downcast_ref::<std::io::Error>().expect("the io::Error itself");
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(e.to_string(), "fjall failed");
    }

    #[test]
    fn a_backend_errors_chain_names_its_source_once() {
        let io = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "no");
        assert_eq!(chain(&StoreError::backend("fjall", io)), "fjall failed: no");
    }
}
