//! The server's bounded memory, as its /metrics reports it: the store's block cache,
//! memtables and pinned filters and indexes, every in-process cache, and its live heap, each
//! beside the cap its configuration sets (see `args::RULES`).

/// The memory parts a server reports in /metrics whose sizes its configuration bounds.
#[derive(Debug, Clone, Default)]
pub(super) struct ServerMemory {
    pub(super) block_cache: f64,
    pub(super) block_cache_cap: f64,
    pub(super) write_buffer: f64,
    pub(super) write_buffer_cap: f64,
    /// Filter and index blocks the store keeps pinned: proportional to the data on disk.
    pub(super) pinned: f64,
    pub(super) disk: f64,
    /// Live heap bytes (allocated and not freed), when the server counts them.
    pub(super) heap: f64,
    /// Per in-process cache: [entries, capacity, estimated bytes].
    pub(super) caches: std::collections::BTreeMap<String, [f64; 3]>,
}

impl ServerMemory {
    /// Parse the gauges out of a Prometheus text exposition; `None` when the server reports
    /// neither its store's block cache nor any cache's bytes (then raw RSS is judged).
    pub(super) fn parse(text: &str) -> Option<ServerMemory> {
        let mut m = ServerMemory::default();
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((name, value)) = line.rsplit_once(' ') else { continue };
            let Ok(v) = value.trim().parse::<f64>() else { continue };
            let name = name.trim();
            if let Some((metric, labels)) = name.split_once('{') {
                let cache = labels.strip_prefix("cache=\"").and_then(|l| l.strip_suffix("\"}"));
                let slot = match metric {
                    "likewise_cache_entries" => 0,
                    "likewise_cache_capacity" => 1,
                    "likewise_cache_bytes" => 2,
                    _ => continue,
                };
                if let Some(cache) = cache {
                    m.caches.entry(cache.to_string()).or_default()[slot] = v;
                    seen |= slot == 2;
                }
                continue;
            }
            match name {
                "likewise_store_block_cache_bytes" => (m.block_cache, seen) = (v, true),
                "likewise_store_block_cache_capacity_bytes" => m.block_cache_cap = v,
                "likewise_store_write_buffer_bytes" => m.write_buffer = v,
                "likewise_store_write_buffer_limit_bytes" => m.write_buffer_cap = v,
                "likewise_store_pinned_bytes" => m.pinned = v,
                "likewise_store_disk_bytes" => m.disk = v,
                "likewise_heap_allocated_bytes" => m.heap = v,
                _ => {}
            }
        }
        seen.then_some(m)
    }

    /// Estimated bytes of the in-process caches.
    pub(super) fn cache_bytes(&self) -> f64 {
        self.caches.values().map(|c| c[2]).sum()
    }

    /// Bytes the bounded parts hold.
    pub(super) fn bounded(&self) -> f64 {
        self.block_cache + self.write_buffer + self.pinned + self.cache_bytes()
    }

    /// Parts above their caps. Memtables may briefly exceed the active caps by the sealed
    /// ones waiting for a flush, so they get twice theirs.
    pub(super) fn over_caps(&self) -> Vec<String> {
        let mut over = Vec::new();
        if self.block_cache_cap > 0.0 && self.block_cache > self.block_cache_cap {
            over.push(format!(
                "block cache {:.0} MiB > cap {:.0} MiB",
                mib(self.block_cache),
                mib(self.block_cache_cap)
            ));
        }
        if self.write_buffer_cap > 0.0 && self.write_buffer > 2.0 * self.write_buffer_cap {
            over.push(format!(
                "memtables {:.0} MiB > 2 x their caps {:.0} MiB",
                mib(self.write_buffer),
                mib(self.write_buffer_cap)
            ));
        }
        if self.disk > 0.0 && self.pinned > self.disk {
            over.push(format!(
                "pinned filters and indexes {:.0} MiB > the data on disk {:.0} MiB",
                mib(self.pinned),
                mib(self.disk)
            ));
        }
        for (name, [entries, cap, _]) in &self.caches {
            if *cap > 0.0 && entries > cap {
                over.push(format!("cache {name}: {entries} entries > capacity {cap}"));
            }
        }
        over
    }
}

/// Bytes in MiB.
pub(super) fn mib(bytes: f64) -> f64 {
    bytes / (1024.0 * 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_memory_is_read_from_the_exposition_and_checked_against_its_caps() {
        let text = "# TYPE likewise_store_block_cache_bytes gauge\n\
            likewise_store_block_cache_bytes 104857600\n\
            likewise_store_block_cache_capacity_bytes 268435456\n\
            likewise_store_write_buffer_bytes 20971520\n\
            likewise_store_write_buffer_limit_bytes 297795584\n\
            likewise_store_pinned_bytes 3145728\n\
            likewise_store_disk_bytes 104857600\n\
            likewise_heap_allocated_bytes 209715200\n\
            likewise_cache_entries{cache=\"posts\"} 5001\n\
            likewise_cache_capacity{cache=\"posts\"} 200000\n\
            likewise_cache_bytes{cache=\"posts\"} 524288\n\
            likewise_cache_bytes{cache=\"view_sketches\"} 524288\n";
        let m = ServerMemory::parse(text).expect("reported");
        assert_eq!(mib(m.bounded()), 100.0 + 20.0 + 3.0 + 1.0);
        assert_eq!(mib(m.heap), 200.0);
        assert_eq!(m.caches["posts"], [5001.0, 200000.0, 524288.0]);
        assert!(m.over_caps().is_empty(), "{:?}", m.over_caps());
        let mut over = ServerMemory { block_cache: 300.0 * 1048576.0, ..m.clone() };
        over.caches.insert("posts".into(), [200_001.0, 200_000.0, 1.0]);
        assert_eq!(over.over_caps().len(), 2, "{:?}", over.over_caps());
        let pinned = ServerMemory { pinned: 2.0 * m.disk, ..m.clone() };
        assert_eq!(pinned.over_caps().len(), 1, "{:?}", pinned.over_caps());
        // A store that reports no block cache: raw RSS is judged.
        assert!(ServerMemory::parse("likewise_cache_entries{cache=\"posts\"} 3\n").is_none());
    }
}
