//! The journal is checked before fjall replays it, so damage never cuts acknowledged writes
//! away silently.
//!
//! How fjall 3 recovers its journal (`fjall/src/journal/{reader,batch_reader}.rs`): it reads
//! the journal files (`<store>/<id>.jnl`, the highest id is the active one, the others are
//! sealed) batch by batch, and at the first entry it cannot decode (a bad tag or trailer, a
//! short read, a batch that starts inside another) it truncates the file to the end of the
//! last whole batch and goes on as if the journal ended there. Only a batch whose checksum
//! does not match (or whose item count is wrong) stops the start. So 8 overwritten bytes in
//! the middle of a journal, or a journal truncated or deleted while the keyspaces remain,
//! started a healthy store with every later write gone, and the truncation destroyed the
//! evidence. A torn last write (the batch being written when the process or the power
//! died) looks exactly like that to fjall, and must stay harmless: it was never acknowledged.
//!
//! What tells the two apart is a small file of ours, [`PROGRESS`] in the store's folder,
//! recording how far the journal was durable:
//! - at open: the newest journal's id and where its valid batches ended, and fjall's sequence
//!   number then (`base`): everything up to it was recovered;
//! - after every group commit's fsync (and every other durable write): fjall's sequence
//!   number of the last group-commit batch before that fsync (`durable`; not fjall's
//!   counter, which flushes and compactions move too without a journal batch) and the newest
//!   journal's id. One `pwrite` of 64
//!   bytes, no fsync: it survives the process, and after a power cut it can only be older
//!   than the journal, never ahead of it (it is written after the journal's fsync), so the
//!   check stays sound, only less precise about the last writes;
//! - at a clean stop, after every memtable is flushed to tables: `clean`, made durable. The
//!   journal then holds nothing the tables lack, so losing it loses nothing.
//!
//! Before fjall opens, every journal is scanned read-only, exactly as fjall will read it. The
//! store refuses to start, naming the file and the offset, when:
//! - a sealed journal does not end in its last whole batch followed by nothing but zeros
//!   (fjall fsyncs a journal before sealing it, so no torn write can be there);
//! - the active journal is cut (bytes that are not zeros after its last valid batch) before
//!   the last acknowledged batch, or before where its valid batches ended at the last start;
//! - the journals end before the last acknowledged batch (truncated, zeroed, deleted), except
//!   when the only journal is a fresh, untouched one (the older ones were flushed and removed);
//! - after fjall opened, its sequence number is below the last acknowledged batch's.
//!
//! A cut after the last acknowledged batch is a torn last write: fjall drops it and the store
//! starts. After a clean stop, a damaged or missing journal is set aside (`<id>.jnl.damaged`)
//! with a warning: the tables hold everything. `likewise store repair` ([`repair`]) says what a
//! refusing store would drop, and drops it when confirmed.

use super::error::engine_err;
use fjall::Database;
use likewise_core::{StoreError, StoreResult};
use parking_lot::Mutex;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use xxhash_rust::xxh3::Xxh3;

/// Our durable-progress file in the store's folder (fjall reads only `*.jnl` files there).
pub const PROGRESS: &str = "journal.progress";

/// fjall's journal files are created at this size, zero-filled (`PRE_ALLOCATED_BYTES`).
const PREALLOCATED: u64 = 64 * 1024 * 1024;

/// The trailer of fjall's batch end marker (`MAGIC_BYTES` in fjall's `file.rs`).
const TRAILER: [u8; 4] = [b'F', b'J', b'L', 3];

/// How far the journal was durable (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Progress {
    /// The newest journal at the last open, and where its valid batches ended.
    open_journal: u64,
    open_end: u64,
    /// fjall's last sequence number at the last open: everything up to it was recovered.
    base: u64,
    /// fjall's last sequence number known durable in the journal (>= `base`).
    durable: u64,
    /// The newest journal when `durable` was recorded.
    sync_journal: u64,
    /// Every memtable was flushed to tables at a clean stop, and nothing was written since.
    clean: bool,
}

const SLOT: usize = 64;
const MAGIC: [u8; 4] = *b"LWJP";

impl Progress {
    fn encode(&self, generation: u64) -> [u8; SLOT] {
        let mut b = [0u8; SLOT];
        b[..4].copy_from_slice(&MAGIC);
        b[4] = 1;
        b[5] = u8::from(self.clean);
        let words =
            [generation, self.open_journal, self.open_end, self.base, self.durable, self.sync_journal];
        for (i, w) in words.iter().enumerate() {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&w.to_le_bytes());
        }
        let sum = xxhash_rust::xxh3::xxh3_64(&b[..56]);
        b[56..].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// The record and its generation, if the slot holds a whole one.
    fn decode(b: &[u8]) -> Option<(u64, Progress)> {
        if b.len() < SLOT || b[..4] != MAGIC || b[4] != 1 {
            return None;
        }
        let sum = u64::from_le_bytes(b[56..64].try_into().ok()?);
        if xxhash_rust::xxh3::xxh3_64(&b[..56]) != sum {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(b[8 + i * 8..16 + i * 8].try_into().expect("8 bytes"));
        Some((
            w(0),
            Progress {
                clean: b[5] == 1,
                open_journal: w(1),
                open_end: w(2),
                base: w(3),
                durable: w(4),
                sync_journal: w(5),
            },
        ))
    }
}

/// Read the progress file: the newest whole slot of its two (a write torn by a power cut
/// spoils one slot at most). None when there is no file or no whole slot.
fn read_progress(dir: &Path) -> std::io::Result<Option<Progress>> {
    let bytes = match std::fs::read(dir.join(PROGRESS)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let slots = bytes.chunks(SLOT).take(2).filter_map(Progress::decode);
    Ok(slots.max_by_key(|(generation, _)| *generation).map(|(_, p)| p))
}

/// The open progress file of a running store.
pub(super) struct ProgressFile {
    dir: PathBuf,
    file: File,
    /// The generation last written and its record; writes alternate between the two slots.
    last: Mutex<(u64, Progress)>,
}

impl ProgressFile {
    /// Record an open: what was recovered, durably, before any write is taken.
    fn open(dir: &Path, p: Progress) -> std::io::Result<ProgressFile> {
        let file =
            File::options().read(true).write(true).create(true).truncate(false).open(dir.join(PROGRESS))?;
        let f = ProgressFile { dir: dir.to_path_buf(), file, last: Mutex::new((0, p)) };
        f.write(|q| *q = p, true)?;
        f.write(|q| *q = p, true)?;
        crate::durable_dir::sync(dir)?;
        Ok(f)
    }

    fn write(&self, change: impl FnOnce(&mut Progress), sync: bool) -> std::io::Result<()> {
        let mut last = self.last.lock();
        let mut p = last.1;
        change(&mut p);
        let generation = last.0 + 1;
        let slot = (generation % 2) * SLOT as u64;
        self.file.write_all_at(&p.encode(generation), slot)?;
        if sync {
            self.file.sync_data()?;
        }
        *last = (generation, p);
        Ok(())
    }

    /// Every batch up to fjall's sequence number `seqno` is durable in the journal; `journal`
    /// is the newest journal file now (looked up when not given). No fsync (module docs).
    pub(super) fn durable(&self, seqno: u64, journal: Option<u64>) {
        let journal = journal.or_else(|| newest_journal(&self.dir).ok().flatten()).unwrap_or(0);
        let wrote = self.write(
            |p| {
                p.durable = p.durable.max(seqno);
                p.sync_journal = p.sync_journal.max(journal);
                p.clean = false;
            },
            false,
        );
        if let Err(e) = wrote {
            tracing::warn!(error = %e, "could not record the journal's durable progress");
        }
    }

    /// Every memtable is flushed up to `seqno`: the journal may be lost without loss.
    pub(super) fn clean(&self, seqno: u64) -> std::io::Result<()> {
        self.write(
            |p| {
                p.durable = p.durable.max(seqno);
                p.clean = true;
            },
            true,
        )
    }
}

/// fjall's sequence number of the last batch committed so far (0 before any).
pub(super) fn last_seqno(db: &Database) -> u64 {
    db.seqno().saturating_sub(1)
}

/// One journal file, read as fjall will read it.
#[derive(Debug, Clone)]
struct Scan {
    id: u64,
    path: PathBuf,
    len: u64,
    /// Where the last whole, valid batch ends: fjall truncates the file here.
    valid_end: u64,
    /// Sequence numbers of the first and last valid batches.
    first_seqno: Option<u64>,
    last_seqno: Option<u64>,
    /// Why reading stopped before the end of the file, when bytes other than zeros follow
    /// `valid_end` (a cut: damage, or a torn last write).
    cut: Option<&'static str>,
    /// A whole, valid batch follows `valid_end` with a sequence number out of order: damage
    /// (fjall writes batches in sequence order, and a torn write leaves no whole batch).
    disordered: bool,
    /// Bytes other than zeros after `valid_end`.
    nonzero_after: u64,
}

impl Scan {
    fn untouched_preallocation(&self) -> bool {
        self.cut.is_none() && self.valid_end == 0 && self.len == PREALLOCATED
    }
}

/// A reader that counts what it consumed.
struct Counted<R> {
    inner: R,
    pos: u64,
}

impl<R: Read> Counted<R> {
    fn bytes<const N: usize>(&mut self) -> std::io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }
    fn u8(&mut self) -> std::io::Result<u8> {
        Ok(self.bytes::<1>()?[0])
    }
    fn u32(&mut self) -> std::io::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }
    fn u64(&mut self) -> std::io::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }
    fn vec(&mut self, n: u64, into: &mut Vec<u8>) -> std::io::Result<()> {
        let before = into.len();
        (&mut self.inner).take(n).read_to_end(into)?;
        let got = (into.len() - before) as u64;
        self.pos += got;
        if got < n {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }
}

/// Why reading stopped, or a batch read whole: (its sequence number, where it ends).
enum Step {
    Batch(u64),
    Stop(&'static str),
}

/// Read one batch (fjall's `Entry` encoding: Start, Items or Clears, End with a checksum of
/// the items' bytes and a trailer).
fn read_batch<R: Read>(r: &mut Counted<R>, len: u64) -> std::io::Result<Step> {
    let eof = |e: &std::io::Error| e.kind() == std::io::ErrorKind::UnexpectedEof;
    macro_rules! read {
        ($e:expr, $why:expr) => {
            match $e {
                Ok(v) => v,
                Err(e) if eof(&e) => return Ok(Step::Stop($why)),
                Err(e) => return Err(e),
            }
        };
    }
    let tag = read!(r.u8(), "the file ends");
    if tag == 0 {
        return Ok(Step::Stop("zeros"));
    }
    if tag != 1 {
        return Ok(Step::Stop("an entry that is not a batch start"));
    }
    let mut count = read!(r.u32(), "a batch start is cut short");
    let seqno = read!(r.u64(), "a batch start is cut short");
    let mut hash = Xxh3::new();
    let mut raw = Vec::new();
    loop {
        let tag = read!(r.u8(), "a batch is cut short");
        match tag {
            2 => {
                raw.clear();
                raw.push(2);
                let head: [u8; 1 + 1 + 8 + 2 + 4 + 4] = read!(r.bytes(), "a batch is cut short");
                raw.extend_from_slice(&head);
                let key_len = u64::from(u16::from_le_bytes([head[10], head[11]]));
                let length = u32::from_le_bytes(head[12..16].try_into().expect("4 bytes"));
                let stored = u64::from(u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")));
                if head[1] == 0 && u64::from(length) != stored {
                    return Ok(Step::Stop("an uncompressed item whose lengths disagree"));
                }
                if r.pos + key_len + stored > len {
                    return Ok(Step::Stop("a batch is cut short"));
                }
                read!(r.vec(key_len + stored, &mut raw), "a batch is cut short");
            }
            4 => {
                raw.clear();
                raw.push(4);
                raw.extend_from_slice(&read!(r.bytes::<8>(), "a batch is cut short"));
            }
            3 => {
                let sum = read!(r.u64(), "a batch end is cut short");
                let trailer: [u8; 4] = read!(r.bytes(), "a batch end is cut short");
                if trailer != TRAILER {
                    return Ok(Step::Stop("a batch end without its trailer"));
                }
                if count != 0 {
                    return Ok(Step::Stop("a batch with fewer items than it announced"));
                }
                if hash.digest() != sum {
                    return Ok(Step::Stop("a batch whose checksum does not match"));
                }
                return Ok(Step::Batch(seqno));
            }
            _ => return Ok(Step::Stop("an entry that is not part of a batch")),
        }
        if count == 0 {
            return Ok(Step::Stop("a batch with more items than it announced"));
        }
        count -= 1;
        hash.update(&raw);
    }
}

/// Read journal `id` at `path`; `prev` is the last sequence number of the journals before it.
fn scan(id: u64, path: &Path, prev: Option<u64>) -> std::io::Result<Scan> {
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut r = Counted { inner: BufReader::with_capacity(1 << 20, file), pos: 0 };
    let mut s = Scan {
        id,
        path: path.to_path_buf(),
        len,
        valid_end: 0,
        first_seqno: None,
        last_seqno: None,
        cut: None,
        disordered: false,
        nonzero_after: 0,
    };
    let why = loop {
        match read_batch(&mut r, len)? {
            Step::Batch(seqno) if s.last_seqno.or(prev).is_some_and(|p| seqno <= p) => {
                s.disordered = true;
                break "a batch out of sequence order";
            }
            Step::Batch(seqno) => {
                s.first_seqno.get_or_insert(seqno);
                s.last_seqno = Some(seqno);
                s.valid_end = r.pos;
            }
            Step::Stop(why) => break why,
        }
    };
    // What follows the last valid batch: zeros only (the preallocated end) is no cut.
    let mut rest = File::open(path)?;
    std::io::Seek::seek(&mut rest, std::io::SeekFrom::Start(s.valid_end))?;
    let mut rest = BufReader::with_capacity(1 << 20, rest);
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = rest.read(&mut buf)?;
        if n == 0 {
            break;
        }
        s.nonzero_after += buf[..n].iter().filter(|b| **b != 0).count() as u64;
    }
    if s.nonzero_after > 0 {
        s.cut = Some(why);
    }
    Ok(s)
}

/// The journal files in `dir`, by id.
fn journals(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        if let Some(id) =
            name.to_str().and_then(|n| n.strip_suffix(".jnl")).and_then(|n| n.parse::<u64>().ok())
        {
            out.push((id, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// The id of the newest journal file in `dir`.
pub(super) fn newest_journal(dir: &Path) -> std::io::Result<Option<u64>> {
    Ok(journals(dir)?.last().map(|(id, _)| *id))
}

/// What stops the store from starting: a file, an offset in it, what is wrong, and what a
/// repair drops.
#[derive(Debug, Clone)]
pub struct Problem {
    /// The journal file (or, for a missing one, the store's folder).
    pub file: PathBuf,
    /// Where in it the damage starts.
    pub offset: u64,
    /// What was found.
    pub what: String,
    /// What `likewise store repair --yes` drops.
    pub drops: String,
    /// Truncate `file` at `offset` to repair it.
    truncate: bool,
}

/// The journals of a store that is not running, judged against its progress file.
struct Judged {
    scans: Vec<Scan>,
    progress: Option<Progress>,
    problems: Vec<Problem>,
}

fn judge(dir: &Path) -> std::io::Result<Judged> {
    let progress = read_progress(dir)?;
    let mut scans: Vec<Scan> = Vec::new();
    for (id, path) in journals(dir)? {
        let prev = scans.iter().rev().find_map(|s| s.last_seqno);
        scans.push(scan(id, &path, prev)?);
    }
    let mut problems = Vec::new();
    let Some(p) = progress.filter(|p| !p.clean) else {
        return Ok(Judged { scans, progress, problems });
    };
    let newest = scans.last().map(|s| s.id);
    let recovered = scans.iter().filter_map(|s| s.last_seqno).max();
    let acked = |upto: Option<u64>| match upto {
        Some(m) => format!("the journals hold batches up to sequence number {m}"),
        None => "the journals hold no batch".to_string(),
    };
    // Batches acknowledged since the last open: the journals must still reach them.
    let since_open = p.durable > p.base;
    let lost = |from: Option<u64>| {
        let from = from.map_or(p.base, |m| m.max(p.base));
        if since_open && p.durable > from {
            format!(
                "the acknowledged batches after sequence number {from} up to {} (they cannot be recovered)",
                p.durable
            )
        } else {
            "nothing acknowledged since the last start".to_string()
        }
    };
    for s in &scans {
        let Some(why) = s.cut else { continue };
        let is_newest = Some(s.id) == newest;
        let before_open_end = s.id == p.open_journal && s.valid_end < p.open_end;
        let before_acked = since_open && recovered.is_none_or(|m| m < p.durable);
        if !is_newest || before_open_end || before_acked || s.disordered {
            let kind = if is_newest { "the active journal" } else { "a sealed journal" };
            problems.push(Problem {
                file: s.path.clone(),
                offset: s.valid_end,
                what: format!(
                    "{kind} is damaged at offset {} ({why}, {} bytes follow); {}",
                    s.valid_end,
                    s.len - s.valid_end,
                    acked(recovered)
                ),
                drops: format!(
                    "{} bytes of {} from offset {}: {}",
                    s.len - s.valid_end,
                    s.path.display(),
                    s.valid_end,
                    lost(s.last_seqno)
                ),
                truncate: true,
            });
        }
    }
    if !problems.is_empty() {
        return Ok(Judged { scans, progress, problems });
    }
    match newest {
        None => problems.push(Problem {
            file: dir.to_path_buf(),
            offset: 0,
            what: format!(
                "the journal is missing (no *.jnl file in {}) and the store was not stopped cleanly",
                dir.display()
            ),
            drops: format!("whatever the journal held that the tables lack: {}", lost(None)),
            truncate: false,
        }),
        Some(n) if n < p.sync_journal.max(p.open_journal) => problems.push(Problem {
            file: dir.join(format!("{}.jnl", p.sync_journal.max(p.open_journal))),
            offset: 0,
            what: format!(
                "journal {}.jnl is missing (the newest is {n}.jnl) and the store was not stopped cleanly",
                p.sync_journal.max(p.open_journal)
            ),
            drops: format!("whatever that journal held that the tables lack: {}", lost(recovered)),
            truncate: false,
        }),
        Some(_) => {
            let last = scans.last().expect("a newest journal");
            let open = scans.iter().find(|s| s.id == p.open_journal);
            if let Some(o) = open.filter(|o| o.valid_end < p.open_end) {
                problems.push(Problem {
                    file: o.path.clone(),
                    offset: o.valid_end,
                    what: format!(
                        "the journal ends at offset {} but held valid batches up to offset {} when the store last started",
                        o.valid_end, p.open_end
                    ),
                    drops: format!("the batches that were in {} after offset {}", o.path.display(), o.valid_end),
                    truncate: false,
                });
            } else if since_open
                && recovered.is_none_or(|m| m < p.durable)
                && !(scans.len() == 1 && last.untouched_preallocation())
            {
                problems.push(Problem {
                    file: last.path.clone(),
                    offset: last.valid_end,
                    what: format!(
                        "the journal ends at offset {} but writes up to sequence number {} were acknowledged; {}",
                        last.valid_end,
                        p.durable,
                        acked(recovered)
                    ),
                    drops: lost(recovered),
                    truncate: false,
                });
            }
        }
    }
    Ok(Judged { scans, progress, problems })
}

fn refusal(dir: &Path, problems: &[Problem]) -> StoreError {
    let data_dir = dir.parent().unwrap_or(dir);
    let list: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.file.display(), p.what)).collect();
    StoreError::Engine(format!(
        "the store's journal is damaged, and starting would silently lose acknowledged writes: {}. \
         Restore the data directory from a backup, or see what `likewise store repair --data-dir {}` \
         would drop and drop it with `--yes` (docs/reliability.md)",
        list.join("; "),
        data_dir.display()
    ))
}

/// What the check before the open found, for [`after_open`].
pub(super) struct BeforeOpen {
    progress: Option<Progress>,
    /// Where each journal's valid batches end (fjall truncates them there).
    ends: Vec<(u64, u64)>,
}

/// Check the journals in `dir` before fjall reads (and truncates) them. Refuses with the
/// file and the offset when starting would lose acknowledged writes; after a clean stop,
/// sets damaged journals aside instead (the tables hold everything).
pub(super) fn before_open(dir: &Path) -> StoreResult<BeforeOpen> {
    if !dir.join("version").exists() {
        return Ok(BeforeOpen { progress: None, ends: Vec::new() });
    }
    let judged = judge(dir).map_err(engine_err)?;
    if !judged.problems.is_empty() {
        for p in &judged.problems {
            tracing::error!(file = %p.file.display(), offset = p.offset, "{}", p.what);
        }
        return Err(refusal(dir, &judged.problems));
    }
    let clean = judged.progress.is_some_and(|p| p.clean);
    let mut ends = Vec::new();
    for s in &judged.scans {
        let Some(why) = s.cut else {
            ends.push((s.id, s.valid_end));
            continue;
        };
        if clean {
            let aside = s.path.with_extension("jnl.damaged");
            tracing::warn!(
                file = %s.path.display(), offset = s.valid_end, reason = why, set_aside = %aside.display(),
                "a journal is damaged, but the store was stopped cleanly and its tables hold every write: \
                 setting the journal aside"
            );
            std::fs::rename(&s.path, &aside).map_err(engine_err)?;
            empty_journal(&s.path)?;
            ends.push((s.id, 0));
        } else {
            if judged.progress.is_none() {
                tracing::warn!(
                    file = %s.path.display(), offset = s.valid_end, reason = why,
                    "the journal is cut, and this store has no record of how far it was durable: \
                     taking it as a torn last write"
                );
            } else {
                tracing::warn!(
                    file = %s.path.display(), offset = s.valid_end, reason = why, bytes = s.len - s.valid_end,
                    "dropping a torn last write from the journal (never acknowledged)"
                );
                // As fjall would, but without leaving it to read the torn bytes (a damaged
                // length trips an assertion in its debug builds).
                let f = File::options().write(true).open(&s.path).map_err(engine_err)?;
                f.set_len(s.valid_end).and_then(|()| f.sync_all()).map_err(engine_err)?;
            }
            ends.push((s.id, s.valid_end));
        }
    }
    // fjall recovers its sequence number from the keyspaces only while replaying an existing
    // journal: with none, it starts again at 0 and every stored row is hidden from reads
    // (found by the tests below). A store stopped cleanly, or one with no progress record,
    // gets an empty journal in place of a missing one; the others were refused above.
    if judged.scans.is_empty() {
        let id = judged.progress.map_or(0, |p| p.sync_journal.max(p.open_journal));
        let path = dir.join(format!("{id}.jnl"));
        tracing::warn!(file = %path.display(), "the journal is missing; the tables hold every write: starting an empty one");
        empty_journal(&path)?;
        ends.push((id, 0));
    }
    Ok(BeforeOpen { progress: judged.progress, ends })
}

/// An empty journal file at `path`, durable.
fn empty_journal(path: &Path) -> StoreResult<()> {
    File::create(path).and_then(|f| f.sync_all()).map_err(engine_err)?;
    crate::durable_dir::sync(path.parent().unwrap_or(Path::new("."))).map_err(engine_err)
}

/// Right after fjall opened: check that it recovered every acknowledged batch.
pub(super) fn check_recovered(dir: &Path, db: &Database, before: &BeforeOpen) -> StoreResult<()> {
    let head = last_seqno(db);
    if let Some(p) = before.progress.filter(|p| !p.clean && p.durable > p.base)
        && head < p.durable
    {
        let what = format!(
            "the store recovered batches up to sequence number {head}, but writes up to {} were \
             acknowledged (a journal was truncated or deleted)",
            p.durable
        );
        tracing::error!(dir = %dir.display(), "{what}");
        let problem =
            Problem { file: dir.to_path_buf(), offset: 0, what, drops: String::new(), truncate: false };
        return Err(refusal(dir, &[problem]));
    }
    Ok(())
}

/// Once the store is open (every keyspace created): record what was recovered in the
/// progress file, durably, before any write is taken.
pub(super) fn record_open(dir: &Path, db: &Database, before: BeforeOpen) -> StoreResult<ProgressFile> {
    let head = last_seqno(db);
    let newest = newest_journal(dir).map_err(engine_err)?.unwrap_or(0);
    let end = before.ends.iter().find(|(id, _)| *id == newest).map_or(0, |(_, end)| *end);
    let p = Progress {
        open_journal: newest,
        open_end: end,
        base: head,
        durable: head,
        sync_journal: newest,
        clean: false,
    };
    ProgressFile::open(dir, p).map_err(engine_err)
}

/// The store's lock file (the one fjall takes), held while the journals are checked, so a
/// running store's journal is never judged nor set aside.
pub(super) enum Lock {
    /// No store yet: nothing to check.
    Fresh,
    /// Held until dropped.
    Held(#[allow(dead_code)] File),
    /// Another process holds it.
    Busy,
}

/// How long a lock may stay held before it counts as another process's: a store of this
/// process that was just dropped lets go of it a moment later (its background threads last).
pub(super) const LOCK_LET_GO: std::time::Duration = std::time::Duration::from_secs(3);

/// Take the lock, waiting up to [`LOCK_LET_GO`] for it.
pub(super) fn lock(dir: &Path) -> StoreResult<Lock> {
    if !dir.join("version").exists() {
        return Ok(Lock::Fresh);
    }
    let lock = File::options().read(true).write(true).create(true).truncate(false).open(dir.join("lock"));
    let lock = lock.map_err(engine_err)?;
    let until = std::time::Instant::now() + LOCK_LET_GO;
    while lock.try_lock().is_err() {
        if std::time::Instant::now() >= until {
            return Ok(Lock::Busy);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(Lock::Held(lock))
}

/// What `likewise store repair` found, and did when confirmed.
#[derive(Debug)]
pub struct RepairReport {
    /// What stopped the store from starting (empty: nothing to repair).
    pub problems: Vec<Problem>,
    /// Whether the problems were dropped.
    pub repaired: bool,
}

/// Check a stopped store's journals (`dir` is the store's folder, `<data_dir>/store`); when
/// `confirm`, drop what keeps it from starting: truncate each damaged journal at its damage
/// and forget the recorded progress, so the store starts with what the journals still hold.
pub fn repair(dir: &Path, confirm: bool) -> StoreResult<RepairReport> {
    if !dir.join("version").exists() {
        return Err(StoreError::Engine(format!("no embedded store in {}", dir.display())));
    }
    // Never beside a running store: take the lock fjall takes.
    let held = lock(dir)?;
    if matches!(held, Lock::Busy) {
        return Err(StoreError::Engine(format!(
            "another likewise process holds {}: stop it before repairing",
            dir.display()
        )));
    }
    let mut judged = judge(dir).map_err(engine_err)?;
    drop(held);
    // No damaged journal, but writes acknowledged since the last start: only fjall can say
    // whether its tables and journals still reach them (the check after its open).
    if let Some(p) = judged.progress.filter(|p| judged.problems.is_empty() && !p.clean && p.durable > p.base)
    {
        let db = Database::builder(dir).open().map_err(engine_err)?;
        let head = last_seqno(&db);
        drop(db);
        if head < p.durable {
            judged.problems.push(Problem {
                file: dir.to_path_buf(),
                offset: 0,
                what: format!(
                    "the store holds batches up to sequence number {head}, but writes up to {} were acknowledged \
                     (a journal was truncated or deleted)",
                    p.durable
                ),
                drops: format!("the acknowledged batches after sequence number {head} up to {} (already gone)", p.durable),
                truncate: false,
            });
        }
    }
    if judged.problems.is_empty() || !confirm {
        return Ok(RepairReport { problems: judged.problems, repaired: false });
    }
    for p in judged.problems.iter().filter(|p| p.truncate) {
        let f = File::options().write(true).open(&p.file).map_err(engine_err)?;
        f.set_len(p.offset).and_then(|()| f.sync_all()).map_err(engine_err)?;
        tracing::warn!(file = %p.file.display(), offset = p.offset, "truncated the journal");
    }
    match std::fs::remove_file(dir.join(PROGRESS)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(engine_err(e)),
    }
    crate::durable_dir::sync(dir).map_err(engine_err)?;
    Ok(RepairReport { problems: judged.problems, repaired: true })
}

#[cfg(test)]
mod tests {
    use super::super::{EmbeddedOptions, EmbeddedStore};
    use super::*;
    use likewise_core::ids::UserId;
    use likewise_core::like::{LikeAction, LikeOp, Target};
    use likewise_core::ports::{EventLog, WriteEngine};
    use likewise_core::write::WriteOp;

    const PER_BATCH: u64 = 20;

    fn like(user: u64) -> WriteOp {
        WriteOp::Like(LikeOp {
            target: Target::post(1 + user % 7),
            user: UserId(user),
            action: LikeAction::Like,
            target_author: UserId(9),
            ts_ms: 1,
            post: 1 + user % 7,
            trace: None,
        })
    }

    fn open(dir: &Path) -> StoreResult<EmbeddedStore> {
        EmbeddedStore::open(dir, &EmbeddedOptions::default())
    }

    /// Apply `batches` batches of likes after those already there, each acknowledged (synced).
    fn write(store: &EmbeddedStore, from: u64, batches: u64) {
        for b in from..from + batches {
            let ops: Vec<WriteOp> = (0..PER_BATCH).map(|i| like(b * PER_BATCH + i)).collect();
            store.apply(&ops).expect("apply");
            store.sync().expect("sync");
        }
    }

    /// A store holding `batches` acknowledged batches, left as a crash leaves it: nothing
    /// flushed to tables, everything in the journal.
    fn crashed(batches: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).expect("open");
        write(&store, 0, batches);
        drop(store);
        dir
    }

    /// The same, stopped cleanly.
    fn stopped_cleanly(batches: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).expect("open");
        write(&store, 0, batches);
        store.close_durably().expect("close");
        drop(store);
        dir
    }

    fn copy(from: &Path) -> tempfile::TempDir {
        let to = tempfile::tempdir().expect("tempdir");
        let status = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(to.path())
            .status()
            .expect("cp");
        assert!(status.success());
        to
    }

    fn journal(dir: &Path) -> PathBuf {
        let all = journals(dir).expect("journals");
        assert_eq!(all.len(), 1, "one journal");
        all[0].1.clone()
    }

    /// Where the journal's batches end.
    fn valid_end(dir: &Path) -> u64 {
        let path = journal(dir);
        scan(0, &path, None).expect("scan").valid_end
    }

    /// Opening either refuses, naming the journal and an offset, or finds every acknowledged
    /// like; `what` says which damage this was.
    async fn opens_whole_or_refuses(dir: &Path, batches: u64, what: &str) -> bool {
        match open(dir) {
            Ok(store) => {
                let head = store.head().await.expect("head");
                let likes = store.inner.user_likes.iter().count() as u64;
                assert_eq!(
                    (head, likes),
                    (batches * PER_BATCH, batches * PER_BATCH),
                    "{what}: started without every acknowledged like"
                );
                true
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(
                    msg.contains(".jnl") && msg.contains("offset"),
                    "{what}: the refusal names no file and offset: {msg}"
                );
                assert!(msg.contains("likewise store repair --data-dir"), "{what}: no repair command: {msg}");
                false
            }
        }
    }

    fn overwrite(path: &Path, at: u64, n: usize) {
        let f = File::options().read(true).write(true).open(path).expect("open");
        let mut b = vec![0u8; n];
        f.read_exact_at(&mut b, at).expect("read");
        for x in &mut b {
            *x ^= 0xa5;
        }
        f.write_all_at(&b, at).expect("write");
    }

    /// A flush between the last batch and its sync takes a fjall sequence number of its own
    /// (a new table version) but writes no journal batch: the sync must not record that number
    /// as a batch the journal holds, or the next start refuses a whole journal as cut.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flush_before_the_sync_is_not_taken_for_a_lost_batch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).expect("open");
        write(&store, 0, 3);
        let ops: Vec<WriteOp> = (0..PER_BATCH).map(|i| like(3 * PER_BATCH + i)).collect();
        store.apply(&ops).expect("apply");
        let before = store.inner.db.seqno();
        store.inner.user_likes.rotate_memtable_and_wait().expect("flush");
        assert!(store.inner.db.seqno() > before, "the flush took a sequence number");
        store.sync().expect("sync");
        drop(store);
        assert!(
            opens_whole_or_refuses(dir.path(), 4, "a flush after the last batch").await,
            "refused a whole journal"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn damage_anywhere_in_acknowledged_batches_refuses_with_the_file_and_offset() {
        let batches = 40;
        let template = crashed(batches);
        let end = valid_end(template.path());
        assert!(end > 30_000, "the journal holds {end} bytes");
        let mut offsets: Vec<u64> = (0..end).step_by((end / 30) as usize).collect();
        offsets.extend([30_720, end - 30, end - 8]);
        for at in offsets {
            let dir = copy(template.path());
            overwrite(&journal(dir.path()), at, 8);
            let started = opens_whole_or_refuses(dir.path(), batches, &format!("8 bytes at {at}")).await;
            assert!(!started, "8 damaged bytes at {at} of {end} (all acknowledged) started the store");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_truncated_or_deleted_journal_refuses() {
        let batches = 40;
        let template = crashed(batches);
        let end = valid_end(template.path());
        for len in (0..end).step_by((end / 12) as usize).chain([end - 1]) {
            let dir = copy(template.path());
            let f = File::options().write(true).open(journal(dir.path())).expect("open");
            f.set_len(len).expect("truncate");
            assert!(!opens_whole_or_refuses(dir.path(), batches, &format!("cut to {len}")).await);
        }
        let dir = copy(template.path());
        std::fs::remove_file(journal(dir.path())).expect("rm");
        let e = open(dir.path()).err().expect("a deleted journal refuses");
        assert!(e.to_string().contains("journal is missing"), "{e}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_torn_last_write_is_dropped_and_the_store_starts() {
        let batches = 10;
        let dir = tempfile::tempdir().expect("tempdir");
        let store = open(dir.path()).expect("open");
        write(&store, 0, batches);
        // One more batch reaches the journal but is never acknowledged (no sync recorded).
        let ops: Vec<WriteOp> = (0..PER_BATCH).map(|i| like(batches * PER_BATCH + i)).collect();
        store.apply(&ops).expect("apply");
        store.inner.db.persist(fjall::PersistMode::SyncAll).expect("persist");
        drop(store);
        let end = valid_end(dir.path());
        let template = copy(dir.path());
        let acked_end = {
            let s = scan(0, &journal(template.path()), None).expect("scan");
            assert_eq!(s.valid_end, end);
            // The unacknowledged batch is the last one: find where it starts.
            let data = std::fs::read(journal(template.path())).expect("read");
            let mut at = 0;
            let mut starts = Vec::new();
            let mut r = Counted { inner: &data[..end as usize], pos: 0 };
            while let Ok(Step::Batch(_)) = read_batch(&mut r, end) {
                starts.push(at);
                at = r.pos;
            }
            *starts.last().expect("batches")
        };
        for cut in (acked_end + 1..end).step_by(((end - acked_end) / 12).max(1) as usize) {
            let dir = copy(template.path());
            let f = File::options().write(true).open(journal(dir.path())).expect("open");
            f.set_len(cut).expect("truncate");
            assert!(
                opens_whole_or_refuses(dir.path(), batches, &format!("torn at {cut}")).await,
                "torn at {cut}"
            );
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_a_clean_stop_the_journal_can_be_lost_or_damaged_without_loss() {
        let batches = 40;
        let template = stopped_cleanly(batches);
        let end = valid_end(template.path());
        for at in (0..end).step_by((end / 8) as usize).chain([30_720]) {
            let dir = copy(template.path());
            overwrite(&journal(dir.path()), at, 8);
            assert!(opens_whole_or_refuses(dir.path(), batches, &format!("clean, 8 bytes at {at}")).await);
        }
        let dir = copy(template.path());
        std::fs::remove_file(journal(dir.path())).expect("rm");
        assert!(opens_whole_or_refuses(dir.path(), batches, "clean, deleted").await);
        // And the store goes on: more writes, a crash, damage: refused again.
        let store = open(dir.path()).expect("open");
        write(&store, batches, 5);
        drop(store);
        let j = journal(dir.path());
        overwrite(&j, 100, 8);
        assert!(!opens_whole_or_refuses(dir.path(), batches + 5, "written after the clean start").await);
    }

    /// A store dropped in this process lets go of its lock file a moment later (fjall's
    /// background threads hold it last): a repair right after waits for it, as a start does,
    /// and one beside a lock that stays held is refused.
    #[test]
    fn repair_waits_for_a_lock_let_go_a_moment_later_and_refuses_one_held() {
        let dir = crashed(4);
        // The lock as a running store holds it (once the dropped one has let go of it).
        let take = |dir: &Path| {
            let file = File::options().read(true).write(true).open(dir.join("lock")).expect("lock file");
            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while file.try_lock().is_err() {
                assert!(std::time::Instant::now() < until, "the dropped store never let go of its lock");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            file
        };
        let file = take(dir.path());
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(400));
            drop(file);
        });
        let report = repair(dir.path(), false).expect("waits for the lock, then checks");
        assert!(!report.repaired);
        letting_go.join().expect("join");

        let file = take(dir.path());
        let e = repair(dir.path(), false).expect_err("refused beside a held lock");
        assert!(e.to_string().contains("stop it before repairing"), "{e}");
        drop(file);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn repair_says_what_it_drops_and_drops_it_only_when_confirmed() {
        let batches = 40;
        let dir = crashed(batches);
        let j = journal(dir.path());
        overwrite(&j, 30_720, 8);
        let before = std::fs::read(&j).expect("read");
        let report = repair(dir.path(), false).expect("dry run");
        assert!(!report.repaired);
        assert_eq!(report.problems.len(), 1);
        let p = &report.problems[0];
        // At the start of the batch holding the damaged bytes: a batch of 20 likes is about
        // 2 KiB of journal.
        assert!(p.offset <= 30_720 && p.offset > 30_720 - 4_096, "damage found at {}", p.offset);
        assert!(
            p.drops.contains("0.jnl") && p.drops.contains(&format!("offset {}", p.offset)),
            "{}",
            p.drops
        );
        assert_eq!(std::fs::read(&j).expect("read"), before, "a dry run changes nothing");
        assert!(open(dir.path()).is_err(), "still refused");
        let report = repair(dir.path(), true).expect("repair");
        assert!(report.repaired);
        let store = open(dir.path()).expect("starts after the repair");
        let head = store.head().await.expect("head");
        assert!(head > 0 && head < batches * PER_BATCH, "kept the batches before the damage: {head}");
        write(&store, batches, 1);
        drop(store);
        assert!(repair(dir.path(), false).expect("check").problems.is_empty());
    }
}
