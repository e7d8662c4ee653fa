//! A FUSE filesystem that can lose power: every byte not yet covered by an fsync of its
//! file (and every create, unlink or rename not yet covered by an fsync of its directory)
//! lives in a volatile layer, which a power cut discards in whole or in part.
//!
//! The state lives in memory ([`model`]): reads see the live view, as on any filesystem;
//! `fsync`/`fdatasync`/`fsyncdir` move the pending changes of one file or directory into its
//! durable view. [`PowercutFs::cut`] freezes the mounted filesystem (every later request
//! fails with `EIO`), unmounts it and returns the image a power cut of the given kind leaves,
//! ready to be mounted again. An optional delay makes every fsync slow (a slow disk).
//!
//! Kernel writes go straight through to the filesystem (no FUSE write-back cache), so a
//! `write` the kernel acknowledged has reached the model before the caller returns.

pub mod model;

use fuser::{
    BackgroundSession, Config, Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo,
    LockOwner, MountOption, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use model::{Cut, State};
use rand::rngs::StdRng;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

/// How long the kernel may cache names and attributes (only the kernel changes them).
const TTL: Duration = Duration::from_secs(1);

/// The filesystem served by FUSE: a handle on the shared state.
struct Fs {
    state: Arc<Mutex<State>>,
    fsync_delay: Duration,
}

/// A mounted power-cut filesystem.
pub struct PowercutFs {
    state: Arc<Mutex<State>>,
    session: Option<BackgroundSession>,
    mountpoint: PathBuf,
}

impl PowercutFs {
    /// Mount `state` on `mountpoint`; every fsync takes `fsync_delay` longer.
    pub fn mount(state: State, mountpoint: &Path, fsync_delay: Duration) -> PowercutFs {
        let state = Arc::new(Mutex::new(state));
        let fs = Fs { state: state.clone(), fsync_delay };
        let mut config = Config::default();
        config.mount_options = vec![MountOption::FSName("powercut".into()), MountOption::RW];
        // Several threads, so a slow fsync does not hold up reads.
        config.n_threads = Some(4);
        let session = fuser::spawn_mount(fs, mountpoint, &config).expect("mount the power-cut filesystem");
        PowercutFs { state, session: Some(session), mountpoint: mountpoint.to_path_buf() }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Cut the power: freeze the filesystem, unmount it, and return what a cut of `kind`
    /// leaves on the disk.
    pub fn cut(mut self, kind: Cut, rng: &mut StdRng) -> State {
        let image = {
            let mut s = self.state();
            s.frozen = true;
            s.cut(kind, rng)
        };
        self.unmount();
        image
    }

    fn unmount(&mut self) {
        if let Some(session) = self.session.take()
            && session.umount_and_join().is_err()
        {
            // Something still holds a file open: detach lazily.
            let _ = std::process::Command::new("fusermount3").arg("-uz").arg(&self.mountpoint).status();
        }
    }
}

impl Drop for PowercutFs {
    fn drop(&mut self) {
        self.unmount();
    }
}

impl Fs {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn attr(s: &State, ino: u64) -> Option<FileAttr> {
    let n = s.nodes.get(&ino)?;
    let size = if n.dir { 4096 } else { n.live.len() };
    Some(FileAttr {
        ino: INodeNo(ino),
        size,
        blocks: size.div_ceil(512),
        atime: n.mtime,
        mtime: n.mtime,
        ctime: n.mtime,
        crtime: n.mtime,
        kind: if n.dir { FileType::Directory } else { FileType::RegularFile },
        perm: if n.dir { 0o755 } else { 0o644 },
        nlink: if n.dir { 2 } else { 1 },
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    })
}

/// The state, unless a cut froze it.
macro_rules! live {
    ($self:ident, $reply:ident) => {{
        let s = $self.lock();
        if s.frozen {
            return $reply.error(Errno::EIO);
        }
        s
    }};
}

impl fuser::Filesystem for Fs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let s = live!(self, reply);
        match s.lookup(parent.0, name).and_then(|ino| attr(&s, ino)) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let s = live!(self, reply);
        match attr(&s, ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut s = live!(self, reply);
        if let Some(len) = size
            && !s.set_len(ino.0, len)
        {
            return reply.error(Errno::EISDIR);
        }
        match attr(&s, ino.0) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let mut s = live!(self, reply);
        if s.lookup(parent.0, name).is_some() {
            return reply.error(Errno::EEXIST);
        }
        let ino = s.create(parent.0, name, true);
        match attr(&s, ino) {
            Some(a) => reply.entry(&TTL, &a, Generation(0)),
            None => reply.error(Errno::EIO),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let mut s = live!(self, reply);
        if s.lookup(parent.0, name).is_some() {
            return reply.error(Errno::EEXIST);
        }
        let ino = s.create(parent.0, name, false);
        match attr(&s, ino) {
            Some(a) => reply.created(&TTL, &a, Generation(0), FileHandle(0), FopenFlags::empty()),
            None => reply.error(Errno::EIO),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = live!(self, reply);
        match s.unlink(parent.0, name) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut s = live!(self, reply);
        let Some(ino) = s.lookup(parent.0, name) else { return reply.error(Errno::ENOENT) };
        if s.live_dirs.get(&ino).is_some_and(|d| !d.is_empty()) {
            return reply.error(Errno::ENOTEMPTY);
        }
        s.unlink(parent.0, name);
        reply.ok();
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut s = live!(self, reply);
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return reply.error(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) && s.lookup(newparent.0, newname).is_some() {
            return reply.error(Errno::EEXIST);
        }
        match s.rename(parent.0, name, newparent.0, newname) {
            Some(_) => reply.ok(),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let s = live!(self, reply);
        match s.nodes.get(&ino.0) {
            Some(n) if !n.dir => reply.data(&n.live.read(offset, size as usize)),
            Some(_) => reply.error(Errno::EISDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut s = live!(self, reply);
        if s.write(ino.0, offset, data) {
            reply.written(data.len() as u32);
        } else {
            reply.error(Errno::EISDIR);
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.sync(ino, reply);
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.sync(ino, reply);
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let s = live!(self, reply);
        let Some(entries) = s.live_dirs.get(&ino.0) else { return reply.error(Errno::ENOTDIR) };
        let mut all = vec![(ino.0, FileType::Directory, OsStr::new(".").to_owned())];
        all.push((ino.0, FileType::Directory, OsStr::new("..").to_owned()));
        for (name, &child) in entries {
            let dir = s.nodes.get(&child).is_some_and(|n| n.dir);
            all.push((child, if dir { FileType::Directory } else { FileType::RegularFile }, name.clone()));
        }
        for (i, (child, kind, name)) in all.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        // 64 GiB, nearly all free.
        reply.statfs(1 << 24, 1 << 24, 1 << 24, 1 << 20, 1 << 20, 4096, 255, 4096);
    }
}

impl Fs {
    /// fsync of a file or directory: its pending changes become durable now; the answer
    /// comes after the configured delay, on a thread of its own so other requests go on.
    fn sync(&self, ino: INodeNo, reply: ReplyEmpty) {
        {
            let mut s = live!(self, reply);
            s.fsync(ino.0);
        }
        if self.fsync_delay.is_zero() {
            return reply.ok();
        }
        let delay = self.fsync_delay;
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            reply.ok();
        });
    }
}
