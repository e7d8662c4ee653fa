//! The embedded engine's tuning.

/// Tuning of the embedded engine.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// Block cache size. fjall's 32 MiB default makes point reads ~100x slower once the data
    /// no longer fits, so we always set it.
    pub cache_bytes: u64,
    /// Memtable size of each high-volume keyspace (likes, reverse index, likers, events);
    /// the small keyspaces get an eighth. Bounds memory: fjall's 64 MiB default times our
    /// two dozen keyspaces would exceed the whole RSS budget.
    pub memtable_bytes: u64,
    /// Journal size that forces memtable flushes (bounds recovery time after a crash).
    pub max_journal_bytes: u64,
    /// Budget for all active memtables together: past it the largest is sealed and flushed.
    /// The per-keyspace caps alone would let two dozen keyspaces hold their sum, and a
    /// quiet keyspace's memtable would grow for hours before reaching its cap.
    pub write_buffer_bytes: u64,
    /// fjall's flush and compaction threads. One by default: with two or more, the first
    /// re-queues every compaction request (leaving compactions to the others) and takes it
    /// straight back while they are busy, spinning on a core. One thread measured 7-12% less
    /// CPU per like and 4-7% more likes/s at 10-30M likes, with no write stall
    /// (docs/benchmarks.md, "What we tried").
    pub engine_threads: usize,
    /// Free space the write path leaves on the store's file system: below it, write batches
    /// are refused (503) until space is freed, so fjall never meets a full disk, which it
    /// cannot recover from without a restart (`space.rs`). 0 turns the check off.
    pub min_free_bytes: u64,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            cache_bytes: 256 << 20,
            memtable_bytes: 32 << 20,
            max_journal_bytes: 256 << 20,
            write_buffer_bytes: 64 << 20,
            engine_threads: 1,
            min_free_bytes: 256 << 20,
        }
    }
}
