//! The stream readers' committed positions, exported on `/metrics` as
//! `likewise_stream_consumer_position{consumer}` for as long as the reader lives in this
//! process.
//!
//! Kept here rather than as gauges of the `metrics` recorder, which cannot remove a series:
//! a partition's reader (`trending.p7`) moves from process to process, and every process
//! that ever read the partition would go on exporting the position it last committed, frozen.
//! A [`Position`] is dropped with its reader (a partition given back or lost, a shutdown), and
//! its series goes with it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// The metric's name.
pub const METRIC: &str = "likewise_stream_consumer_position";

/// Reader name -> (the [`Position`] that set it, its position).
static POSITIONS: Mutex<BTreeMap<String, (u64, u64)>> = Mutex::new(BTreeMap::new());
static IDS: AtomicU64 = AtomicU64::new(1);

fn positions() -> std::sync::MutexGuard<'static, BTreeMap<String, (u64, u64)>> {
    POSITIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// One reader's exported position: set as it commits, removed when dropped (unless a newer
/// reader of the same name has set it since).
#[derive(Debug)]
pub struct Position {
    reader: String,
    id: u64,
}

impl Position {
    /// Reader `reader`'s position, exported once first [`Position::set`].
    pub fn new(reader: &str) -> Self {
        Position { reader: reader.to_string(), id: IDS.fetch_add(1, Ordering::Relaxed) }
    }

    /// The reader committed everything up to `position`.
    pub fn set(&self, position: u64) {
        positions().insert(self.reader.clone(), (self.id, position));
    }
}

impl Drop for Position {
    fn drop(&mut self) {
        let mut all = positions();
        if all.get(&self.reader).is_some_and(|(id, _)| *id == self.id) {
            all.remove(&self.reader);
        }
    }
}

/// The positions of the readers alive in this process, in the Prometheus text format.
pub fn render() -> String {
    let all = positions();
    if all.is_empty() {
        return String::new();
    }
    let mut out = format!("# TYPE {METRIC} gauge\n");
    for (reader, (_, position)) in all.iter() {
        let reader = reader.replace('\\', "\\\\").replace('"', "\\\"");
        out.push_str(&format!("{METRIC}{{consumer=\"{reader}\"}} {position}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_exported_while_its_reader_lives() {
        let first = Position::new("test-positions.p7");
        assert!(!render().contains("test-positions.p7"), "exported before it was set");
        first.set(12);
        assert!(render().contains(&format!("{METRIC}{{consumer=\"test-positions.p7\"}} 12\n")));
        // A new reader of the same name (the partition taken again) before the old one's drop.
        let second = Position::new("test-positions.p7");
        second.set(15);
        drop(first);
        assert!(render().contains("{consumer=\"test-positions.p7\"} 15\n"), "{}", render());
        drop(second);
        assert!(!render().contains("test-positions.p7"), "{}", render());
    }
}
