//! The power-cut filesystem's state, without FUSE: what every file and directory holds now
//! (the live view every read sees) and what a power cut would leave of it (the durable view).
//!
//! Every change is applied to the live view at once and also recorded in one log of pending
//! operations, in the order they arrived. `fsync`/`fdatasync` of a file moves that file's
//! pending writes and truncations into its durable content; `fsync` of a directory moves its
//! pending creates, unlinks and renames into its durable entries. Nothing else is durable.
//!
//! [`State::cut`] builds what a power cut leaves: the durable view plus the part of the
//! pending log a [`Cut`] variant keeps. The result is a new state whose live and durable views
//! are that image and whose log is empty, as after a reboot.

use rand::Rng;
use rand::rngs::StdRng;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

/// Bytes per chunk of a [`Sparse`] file.
const CHUNK: u64 = 64 * 1024;

/// A file's bytes: chunks that were written, zeros everywhere else (fjall preallocates its
/// journals to 64 MiB with `set_len`; they cost nothing here).
#[derive(Clone, Default, Debug)]
pub struct Sparse {
    len: u64,
    chunks: BTreeMap<u64, Box<[u8]>>,
}

impl Sparse {
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn write(&mut self, off: u64, data: &[u8]) {
        let mut done = 0usize;
        while done < data.len() {
            let pos = off + done as u64;
            let (idx, at) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = (CHUNK as usize - at).min(data.len() - done);
            let chunk = self.chunks.entry(idx).or_insert_with(|| vec![0u8; CHUNK as usize].into());
            chunk[at..at + n].copy_from_slice(&data[done..done + n]);
            done += n;
        }
        self.len = self.len.max(off + data.len() as u64);
    }

    pub fn read(&self, off: u64, size: usize) -> Vec<u8> {
        let end = self.len.min(off.saturating_add(size as u64));
        let mut out = vec![0u8; end.saturating_sub(off) as usize];
        let mut pos = off;
        while pos < end {
            let (idx, at) = (pos / CHUNK, (pos % CHUNK) as usize);
            let n = ((CHUNK as usize - at) as u64).min(end - pos) as usize;
            if let Some(chunk) = self.chunks.get(&idx) {
                let o = (pos - off) as usize;
                out[o..o + n].copy_from_slice(&chunk[at..at + n]);
            }
            pos += n as u64;
        }
        out
    }

    pub fn set_len(&mut self, len: u64) {
        if len < self.len {
            // Bytes past the new end must read as zeros if the file grows again.
            self.chunks.retain(|&idx, _| idx * CHUNK < len);
            if let Some(last) = self.chunks.get_mut(&(len / CHUNK)) {
                last[(len % CHUNK) as usize..].fill(0);
            }
        }
        self.len = len;
    }
}

/// An inode.
#[derive(Clone, Debug)]
pub struct Node {
    pub dir: bool,
    pub mtime: SystemTime,
    /// Regular files: what reads see now, and what survives a cut.
    pub live: Sparse,
    pub durable: Sparse,
}

/// A change not yet made durable by an fsync.
#[derive(Clone, Debug)]
pub enum Op {
    Write { ino: u64, off: u64, data: Vec<u8> },
    SetLen { ino: u64, len: u64 },
    Link { dir: u64, name: OsString, ino: u64 },
    Unlink { dir: u64, name: OsString },
    Rename { from_dir: u64, from: OsString, to_dir: u64, to: OsString, ino: u64 },
}

impl Op {
    /// The file whose fsync makes this durable (data operations).
    fn file(&self) -> Option<u64> {
        match self {
            Op::Write { ino, .. } | Op::SetLen { ino, .. } => Some(*ino),
            _ => None,
        }
    }

    /// Whether an fsync of directory `d` makes this durable.
    fn in_dir(&self, d: u64) -> bool {
        match self {
            Op::Link { dir, .. } | Op::Unlink { dir, .. } => *dir == d,
            Op::Rename { from_dir, to_dir, .. } => *from_dir == d || *to_dir == d,
            _ => false,
        }
    }
}

/// What a power cut keeps of the pending log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Nothing: only what was fsynced survives.
    DropAll,
    /// A random prefix of the log, in arrival order (a disk writing back in order).
    Prefix,
    /// A random prefix whose last write is torn at a random byte.
    Torn,
    /// Directory changes in order up to a random point; file writes as a random subset, each
    /// file on its own (a disk writing pages back in any order).
    Reorder,
}

impl Cut {
    pub const ALL: [Cut; 4] = [Cut::DropAll, Cut::Prefix, Cut::Torn, Cut::Reorder];
}

pub const ROOT: u64 = 1;

/// The filesystem: inodes, live and durable directory entries, and the pending log.
#[derive(Clone, Debug)]
pub struct State {
    pub nodes: HashMap<u64, Node>,
    pub live_dirs: HashMap<u64, BTreeMap<OsString, u64>>,
    durable_dirs: HashMap<u64, BTreeMap<OsString, u64>>,
    pub pending: Vec<Op>,
    next_ino: u64,
    /// Set by a cut: the old filesystem answers nothing more (`EIO`).
    pub frozen: bool,
}

impl State {
    pub fn new() -> State {
        let root =
            Node { dir: true, mtime: SystemTime::now(), live: Sparse::default(), durable: Sparse::default() };
        State {
            nodes: HashMap::from([(ROOT, root)]),
            live_dirs: HashMap::from([(ROOT, BTreeMap::new())]),
            durable_dirs: HashMap::from([(ROOT, BTreeMap::new())]),
            pending: Vec::new(),
            next_ino: ROOT + 1,
            frozen: false,
        }
    }

    pub fn lookup(&self, dir: u64, name: &OsStr) -> Option<u64> {
        self.live_dirs.get(&dir)?.get(name).copied()
    }

    /// A new file or directory `name` in `dir` (the caller checked it does not exist).
    pub fn create(&mut self, dir: u64, name: &OsStr, is_dir: bool) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        let node = Node {
            dir: is_dir,
            mtime: SystemTime::now(),
            live: Sparse::default(),
            durable: Sparse::default(),
        };
        self.nodes.insert(ino, node);
        if is_dir {
            self.live_dirs.insert(ino, BTreeMap::new());
            self.durable_dirs.insert(ino, BTreeMap::new());
        }
        self.live_dirs.entry(dir).or_default().insert(name.to_owned(), ino);
        self.pending.push(Op::Link { dir, name: name.to_owned(), ino });
        ino
    }

    pub fn unlink(&mut self, dir: u64, name: &OsStr) -> Option<u64> {
        let ino = self.live_dirs.get_mut(&dir)?.remove(name)?;
        self.pending.push(Op::Unlink { dir, name: name.to_owned() });
        Some(ino)
    }

    pub fn rename(&mut self, from_dir: u64, from: &OsStr, to_dir: u64, to: &OsStr) -> Option<u64> {
        let ino = self.live_dirs.get_mut(&from_dir)?.remove(from)?;
        self.live_dirs.entry(to_dir).or_default().insert(to.to_owned(), ino);
        self.pending.push(Op::Rename { from_dir, from: from.to_owned(), to_dir, to: to.to_owned(), ino });
        Some(ino)
    }

    pub fn write(&mut self, ino: u64, off: u64, data: &[u8]) -> bool {
        let Some(n) = self.nodes.get_mut(&ino).filter(|n| !n.dir) else { return false };
        n.live.write(off, data);
        n.mtime = SystemTime::now();
        self.pending.push(Op::Write { ino, off, data: data.to_vec() });
        true
    }

    pub fn set_len(&mut self, ino: u64, len: u64) -> bool {
        let Some(n) = self.nodes.get_mut(&ino).filter(|n| !n.dir) else { return false };
        n.live.set_len(len);
        n.mtime = SystemTime::now();
        self.pending.push(Op::SetLen { ino, len });
        true
    }

    /// `fsync`/`fdatasync` of `ino`: a file's pending data, or a directory's pending entries,
    /// become durable.
    pub fn fsync(&mut self, ino: u64) {
        let is_dir = self.nodes.get(&ino).is_some_and(|n| n.dir);
        let (synced, rest): (Vec<Op>, Vec<Op>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|op| if is_dir { op.in_dir(ino) } else { op.file() == Some(ino) });
        self.pending = rest;
        for op in &synced {
            apply(&mut self.nodes, &mut self.durable_dirs, op);
        }
    }

    /// Pending operations (unsynced writes and directory changes).
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// What a power cut of `kind` leaves, as a fresh state (its log empty).
    pub fn cut(&self, kind: Cut, rng: &mut StdRng) -> State {
        let n = self.pending.len();
        let keep: Vec<Op> = match kind {
            Cut::DropAll => Vec::new(),
            Cut::Prefix => self.pending[..rng.random_range(0..=n)].to_vec(),
            Cut::Torn => {
                let mut kept = self.pending[..rng.random_range(0..=n)].to_vec();
                if let Some(i) = kept.iter().rposition(|op| matches!(op, Op::Write { .. }))
                    && let Op::Write { data, .. } = &mut kept[i]
                {
                    let at = rng.random_range(0..data.len().max(1));
                    data.truncate(at);
                }
                kept
            }
            Cut::Reorder => {
                let meta_upto = rng.random_range(0..=n);
                // Each file keeps its own random subset of writes, in their order.
                let mut p_keep: HashMap<u64, f64> = HashMap::new();
                self.pending
                    .iter()
                    .enumerate()
                    .filter(|(i, op)| match op.file() {
                        None => *i < meta_upto,
                        Some(ino) => {
                            let p = *p_keep.entry(ino).or_insert_with(|| rng.random_range(0.0..1.0));
                            rng.random_bool(p)
                        }
                    })
                    .map(|(_, op)| op.clone())
                    .collect()
            }
        };
        let mut nodes = self.nodes.clone();
        let mut dirs = self.durable_dirs.clone();
        for op in &keep {
            apply(&mut nodes, &mut dirs, op);
        }
        // Only what the durable entries reach from the root survives.
        let mut out = State {
            nodes: HashMap::new(),
            live_dirs: HashMap::new(),
            durable_dirs: HashMap::new(),
            pending: Vec::new(),
            next_ino: self.next_ino,
            frozen: false,
        };
        let mut stack = vec![ROOT];
        while let Some(ino) = stack.pop() {
            let Some(mut node) = nodes.remove(&ino) else { continue };
            node.live = node.durable.clone();
            if node.dir {
                let entries = dirs.remove(&ino).unwrap_or_default();
                stack.extend(entries.values().copied());
                out.live_dirs.insert(ino, entries.clone());
                out.durable_dirs.insert(ino, entries);
            }
            out.nodes.insert(ino, node);
        }
        out
    }

    /// The newest journal id (`<id>.jnl`) and the number of files in `tables` directories,
    /// for the report.
    pub fn journals_and_tables(&self) -> (u64, usize) {
        let mut newest = 0;
        let mut tables = 0;
        for entries in self.live_dirs.values() {
            for (name, ino) in entries {
                let name = name.to_string_lossy();
                if let Some(id) = name.strip_suffix(".jnl").and_then(|n| n.parse::<u64>().ok()) {
                    newest = newest.max(id);
                }
                if name == "tables" {
                    tables += self.live_dirs.get(ino).map_or(0, |d| d.len());
                }
            }
        }
        (newest, tables)
    }
}

/// Make `op` durable in `nodes`/`dirs`.
fn apply(nodes: &mut HashMap<u64, Node>, dirs: &mut HashMap<u64, BTreeMap<OsString, u64>>, op: &Op) {
    match op {
        Op::Write { ino, off, data } => {
            if let Some(n) = nodes.get_mut(ino) {
                n.durable.write(*off, data);
            }
        }
        Op::SetLen { ino, len } => {
            if let Some(n) = nodes.get_mut(ino) {
                n.durable.set_len(*len);
            }
        }
        Op::Link { dir, name, ino } => {
            dirs.entry(*dir).or_default().insert(name.clone(), *ino);
        }
        Op::Unlink { dir, name } => {
            dirs.entry(*dir).or_default().remove(name);
        }
        Op::Rename { from_dir, from, to_dir, to, ino } => {
            // The source entry is removed only if it still names the renamed inode.
            let src = dirs.entry(*from_dir).or_default();
            if src.get(from) == Some(ino) {
                src.remove(from);
            }
            dirs.entry(*to_dir).or_default().insert(to.clone(), *ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn file(s: &mut State, name: &str) -> u64 {
        s.create(ROOT, OsStr::new(name), false)
    }

    #[test]
    fn sparse_files_read_back_writes_and_zeros() {
        let mut f = Sparse::default();
        f.set_len(200_000);
        f.write(CHUNK - 2, b"abcd");
        assert_eq!(f.read(CHUNK - 3, 6), b"\0abcd\0");
        f.set_len(CHUNK);
        f.set_len(CHUNK + 10);
        assert_eq!(f.read(CHUNK - 3, 13), b"\0ab\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(f.read(CHUNK + 20, 5), b"");
    }

    #[test]
    fn only_fsynced_writes_and_entries_survive_a_cut_that_drops_everything() {
        let mut rng = StdRng::seed_from_u64(1);
        let mut s = State::new();
        let a = file(&mut s, "a");
        s.fsync(ROOT);
        s.write(a, 0, b"synced");
        s.fsync(a);
        s.write(a, 6, b" lost");
        let b = file(&mut s, "b");
        s.write(b, 0, b"synced data, entry lost");
        s.fsync(b);
        let after = s.cut(Cut::DropAll, &mut rng);
        let a2 = after.lookup(ROOT, OsStr::new("a")).expect("a's entry was synced");
        assert_eq!(after.nodes[&a2].live.read(0, 100), b"synced");
        assert!(after.lookup(ROOT, OsStr::new("b")).is_none(), "b's entry was never synced");
    }

    #[test]
    fn a_rename_is_durable_once_its_directory_is_synced() {
        let mut rng = StdRng::seed_from_u64(2);
        let mut s = State::new();
        let t = file(&mut s, "tmp");
        s.write(t, 0, b"v2");
        s.fsync(t);
        s.rename(ROOT, OsStr::new("tmp"), ROOT, OsStr::new("current"));
        let before = s.cut(Cut::DropAll, &mut rng);
        assert!(before.lookup(ROOT, OsStr::new("current")).is_none());
        s.fsync(ROOT);
        let after = s.cut(Cut::DropAll, &mut rng);
        assert!(after.lookup(ROOT, OsStr::new("tmp")).is_none());
        let c = after.lookup(ROOT, OsStr::new("current")).expect("renamed");
        assert_eq!(after.nodes[&c].live.read(0, 10), b"v2");
    }

    #[test]
    fn every_variant_keeps_what_was_synced_and_at_most_what_was_written() {
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut s = State::new();
            let a = file(&mut s, "a");
            s.fsync(ROOT);
            s.write(a, 0, b"0123");
            s.fsync(a);
            for i in 0..6u8 {
                s.write(a, 4 + u64::from(i) * 4, &[b'a' + i; 4]);
            }
            let live = s.nodes[&a].live.read(0, 100);
            for kind in Cut::ALL {
                let after = s.cut(kind, &mut rng);
                let got = after.nodes[&a].live.read(0, 100);
                assert_eq!(&got[..4], b"0123", "{kind:?}: synced bytes lost");
                // Every surviving byte is the byte written there (or zero: never written).
                for (i, b) in got.iter().enumerate() {
                    assert!(*b == live[i] || *b == 0, "{kind:?}: byte {i} is {b}, never written");
                }
                if kind == Cut::DropAll {
                    assert_eq!(got.len(), 4);
                }
            }
        }
    }
}
