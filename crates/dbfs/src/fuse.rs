//! FUSE requests onto the [`Store`].
//!
//! One SQLite connection serves every request (batched changes are visible only to it), behind
//! one mutex: fuser's worker threads take turns. The kernel checks permissions
//! (`default_permissions`) against the modes and owners we report.
//!
//! Kept in memory, as any FUSE file system keeps them: open counts per inode (a file unlinked
//! while open lives until its last close) and one cursor per open directory, so that a listing
//! continues from the last name it returned (keyset paging) instead of skipping N rows again
//! for every page of a 1.76M-entry directory.

use crate::store::{Attr, DirEntry, SetAttr, Store, StoreError, ROOT, S_IFDIR, S_IFLNK, S_IFMT};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, FopenFlags, Generation, INodeNo, KernelConfig, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};
use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Rows fetched per listing query.
const LIST_PAGE: usize = 512;

/// Where a directory handle's listing stands.
#[derive(Default)]
struct DirCursor {
    /// The offset the next entry has ...
    next_offset: u64,
    /// ... and the name it sorts after.
    last_name: Vec<u8>,
    /// Rows fetched after `last_name` that did not fit the kernel's buffer (a page holds ~40 ARC names).
    pending: VecDeque<DirEntry>,
}

/// Requests served and time spent in the database, per kind of request: where a scan's time goes.
#[derive(Default, Clone, Copy, Debug)]
pub struct OpStat {
    pub count: u64,
    /// Inside the store (SQLite), lock held; excludes waiting for the lock.
    pub db_ns: u64,
}

/// State shared by the FUSE handlers and the daemon's ticker.
pub struct Shared {
    stats: Mutex<std::collections::BTreeMap<&'static str, OpStat>>,
    store: Mutex<Option<Store>>,
    opens: Mutex<HashMap<u64, u64>>,
    dirs: Mutex<HashMap<u64, DirCursor>>,
    next_fh: AtomicU64,
    /// Directory holding the database, for statfs's free space.
    db_dir: PathBuf,
}

impl Shared {
    pub fn new(store: Store, db_dir: PathBuf) -> Arc<Shared> {
        Arc::new(Shared {
            stats: Mutex::new(Default::default()),
            store: Mutex::new(Some(store)),
            opens: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            db_dir,
        })
    }

    fn store(&self) -> MutexGuard<'_, Option<Store>> {
        // A panic in one handler must not take the whole mount down with poisoned locks.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count a request of kind `op` that spent `db_ns` in the database.
    fn count(&self, op: &'static str, db_ns: u64) {
        let mut st = self.stats.lock().unwrap_or_else(|e| e.into_inner());
        let e = st.entry(op).or_default();
        e.count += 1;
        e.db_ns += db_ns;
    }

    /// The counters so far.
    pub fn stats(&self) -> std::collections::BTreeMap<&'static str, OpStat> {
        self.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Run `f` on the store for a request of kind `op`; EIO once it is closed.
    fn with<T>(&self, op: &'static str, f: impl FnOnce(&mut Store) -> Result<T, StoreError>) -> Result<T, Errno> {
        let mut g = self.store();
        let s = g.as_mut().ok_or(Errno::EIO)?;
        let start = std::time::Instant::now();
        let r = f(s);
        drop(g);
        self.count(op, start.elapsed().as_nanos() as u64);
        r.map_err(|e| {
            if e.errno() == libc::EIO {
                eprintln!("dbfs-sqlite: {e}");
            }
            Errno::from_i32(e.errno())
        })
    }

    fn is_open(&self, ino: u64) -> bool {
        self.opens.lock().unwrap_or_else(|e| e.into_inner()).get(&ino).copied().unwrap_or(0) > 0
    }

    /// The daemon's ticker: commit a batch that has waited long enough.
    pub fn tick(&self) {
        if let Some(s) = self.store().as_mut() {
            if let Err(e) = s.tick() {
                eprintln!("dbfs-sqlite: background commit failed: {e}");
            }
        }
    }

    /// Commit, checkpoint and close the database (at unmount).
    pub fn close(&self) -> Result<(), StoreError> {
        match self.store().take() {
            Some(s) => s.close(),
            None => Ok(()),
        }
    }
}

pub struct DbFs {
    shared: Arc<Shared>,
    ttl: Duration,
    /// OPEN is answered ENOSYS: the kernel opens files itself, and its
    /// lookup counts (not open handles) keep unlinked files alive.
    kernel_opens: bool,
}

impl DbFs {
    pub fn new(shared: Arc<Shared>, ttl: Duration, kernel_opens: bool) -> DbFs {
        DbFs { shared, ttl, kernel_opens }
    }
}

fn ino_of(i: INodeNo) -> u64 {
    i.0
}

fn system_time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

fn to_ns(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(e) => -(e.duration().as_nanos().min(i64::MAX as u128) as i64),
    }
}

fn time_or_now(t: TimeOrNow) -> i64 {
    match t {
        TimeOrNow::SpecificTime(t) => to_ns(t),
        TimeOrNow::Now => crate::store::now_ns(),
    }
}

fn kind(mode: u32) -> FileType {
    match mode & S_IFMT {
        S_IFDIR => FileType::Directory,
        S_IFLNK => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: system_time(a.atime_ns),
        mtime: system_time(a.mtime_ns),
        ctime: system_time(a.ctime_ns),
        crtime: system_time(a.ctime_ns),
        kind: kind(a.mode),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl DbFs {
    fn entry(&self, r: Result<Attr, Errno>, reply: ReplyEntry) {
        match r {
            Ok(a) => {
                self.handed_out(&a);
                reply.entry(&self.ttl, &file_attr(&a), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// With kernel_opens, an entry sent for a regular file is a lookup the
    /// kernel holds until FORGET.
    fn handed_out(&self, a: &Attr) {
        if self.kernel_opens && a.mode & S_IFMT == libc::S_IFREG {
            self.hold(a.ino, 1);
        }
    }

    fn hold(&self, ino: u64, n: u64) {
        *self.shared.opens.lock().unwrap_or_else(|e| e.into_inner()).entry(ino).or_insert(0) += n;
    }

    /// Drop `n` references to `ino`; frees it with the last if it is unlinked.
    fn unhold(&self, op: &'static str, ino: u64, n: u64) -> Result<(), Errno> {
        let last = {
            let mut opens = self.shared.opens.lock().unwrap_or_else(|e| e.into_inner());
            match opens.get_mut(&ino) {
                Some(held) if *held > n => {
                    *held -= n;
                    false
                }
                Some(_) => {
                    opens.remove(&ino);
                    true
                }
                None => false,
            }
        };
        if last {
            self.shared.with(op, |s| s.forget_orphan(ino))
        } else {
            self.shared.count(op, 0);
            Ok(())
        }
    }

    fn empty(r: Result<(), Errno>, reply: ReplyEmpty) {
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Owner of a new inode: the caller, with the parent's group if the parent is set-group-ID.
    fn new_owner(&self, s: &Store, req: &Request, parent: u64, mode: u32) -> Result<(u32, u32, u32), StoreError> {
        let p = s.getattr(parent)?;
        let mut mode = mode;
        let mut gid = req.gid();
        if p.mode & libc::S_ISGID != 0 {
            gid = p.gid;
            if mode & S_IFMT == S_IFDIR {
                mode |= libc::S_ISGID;
            }
        }
        Ok((mode, req.uid(), gid))
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        target: Option<&[u8]>,
    ) -> Result<Attr, Errno> {
        self.shared.with("create", |s| {
            let (mode, uid, gid) = self.new_owner(s, req, ino_of(parent), mode)?;
            s.create(ino_of(parent), name.as_bytes(), mode, uid, gid, target)
        })
    }

    /// A handle was opened (OPEN, CREATE); with kernel_opens the lookups
    /// alone count (an open handle pins the kernel's inode until FORGET).
    fn opened(&self, ino: u64) {
        if !self.kernel_opens {
            self.hold(ino, 1);
        }
    }
}

impl fuser::Filesystem for DbFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        use fuser::InitFlags;
        // Lookups in one directory may run in parallel (they queue on our lock anyway).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config.set_max_readahead(128 << 10);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.shared.close() {
            eprintln!("dbfs-sqlite: closing the database: {e}");
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        if self.kernel_opens {
            if let Err(e) = self.unhold("forget", ino_of(ino), nlookup) {
                eprintln!("dbfs-sqlite: freeing inode {}: errno {e:?}", ino_of(ino));
            }
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        self.entry(self.shared.with("lookup", |s| s.lookup(ino_of(parent), name.as_bytes())), reply)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.shared.with("getattr", |s| s.getattr(ino_of(ino))) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr { mode, uid, gid, size, atime_ns: atime.map(time_or_now), mtime_ns: mtime.map(time_or_now) };
        match self.shared.with("setattr", |s| s.setattr(ino_of(ino), &set)) {
            Ok(a) => reply.attr(&self.ttl, &file_attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.shared.with("readlink", |s| s.readlink(ino_of(ino))) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let m = mode & !umask & (S_IFMT | 0o7777);
        let m = if m & S_IFMT == 0 { m | libc::S_IFREG } else { m };
        self.entry(self.make(req, parent, name, m, None), reply)
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.entry(self.make(req, parent, name, S_IFDIR | (mode & !umask & 0o7777), None), reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        self.entry(self.make(req, parent, link_name, S_IFLNK | 0o777, Some(target.as_os_str().as_bytes())), reply)
    }

    fn link(&self, _req: &Request, _ino: INodeNo, _newparent: INodeNo, _newname: &OsStr, reply: ReplyEntry) {
        // One row per name and inode, as DBFS: no hard links.
        self.shared.count("link", 0);
        reply.error(Errno::EPERM)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let shared = &self.shared;
        Self::empty(shared.with("unlink", |s| s.unlink(ino_of(parent), name.as_bytes(), |i| shared.is_open(i))), reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        Self::empty(self.shared.with("rmdir", |s| s.rmdir(ino_of(parent), name.as_bytes())), reply)
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
        if flags.contains(RenameFlags::RENAME_EXCHANGE) || flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let shared = &self.shared;
        let r = shared.with("rename", |s| {
            s.rename(ino_of(parent), name.as_bytes(), ino_of(newparent), newname.as_bytes(), noreplace, |i| {
                shared.is_open(i)
            })
        });
        Self::empty(r, reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.kernel_opens {
            // The kernel then stops sending OPEN and RELEASE for good.
            self.shared.count("open", 0);
            return reply.error(Errno::ENOSYS);
        }
        match self.shared.with("open", |s| s.getattr(ino_of(ino))) {
            Ok(a) if a.is_dir() => reply.error(Errno::EISDIR),
            Ok(a) => {
                self.opened(a.ino);
                reply.opened(FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
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
        _lock: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        match self.shared.with("read", |s| s.read(ino_of(ino), offset, size)) {
            Ok(d) => reply.data(&d),
            Err(e) => reply.error(e),
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
        _lock: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.shared.with("write", |s| s.write(ino_of(ino), offset, data)) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    /// Nothing is buffered per handle: ENOSYS stops FLUSH requests for this mount.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: fuser::LockOwner, reply: ReplyEmpty) {
        self.shared.count("flush", 0);
        reply.error(Errno::ENOSYS)
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if self.kernel_opens {
            self.shared.count("release", 0);
            return reply.ok();
        }
        let r = self.unhold("release", ino_of(ino), 1);
        Self::empty(r, reply)
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        Self::empty(self.shared.with("fsync", |s| s.sync()), reply)
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.shared.with("opendir", |s| s.getattr(ino_of(ino))) {
            Ok(a) if !a.is_dir() => reply.error(Errno::ENOTDIR),
            Ok(_) => {
                let fh = self.shared.next_fh.fetch_add(1, Ordering::Relaxed);
                self.shared.dirs.lock().unwrap_or_else(|e| e.into_inner()).insert(fh, DirCursor::default());
                reply.opened(FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    /// Offsets: "." is 0 -> 1, ".." 1 -> 2, then the entries in name order, 3, 4, ...
    fn readdir(&self, _req: &Request, ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let dir = ino_of(ino);
        let mut offset = offset;
        if offset == 0 {
            if reply.add(INodeNo(dir), 1, FileType::Directory, ".") {
                return reply.ok();
            }
            offset = 1;
        }
        if offset == 1 {
            let parent = match self.shared.with("readdir", |s| s.parent_of(dir)) {
                Ok(p) => p,
                Err(e) => return reply.error(e),
            };
            if reply.add(INodeNo(parent), 2, FileType::Directory, "..") {
                return reply.ok();
            }
            offset = 2;
        }
        // Continue where the handle stopped (its last name and the rows fetched but not yet returned) when the
        // kernel asks for that offset; anywhere else (seekdir), position by counting once.
        let (mut after, mut pending) = {
            let mut dirs = self.shared.dirs.lock().unwrap_or_else(|e| e.into_inner());
            match dirs.get_mut(&fh.0) {
                Some(c) if c.next_offset == offset && offset > 2 => {
                    (Some(std::mem::take(&mut c.last_name)), std::mem::take(&mut c.pending))
                }
                _ => (None, VecDeque::new()),
            }
        };
        let mut fresh = after.is_none();
        loop {
            if pending.is_empty() {
                let page = self.shared.with("readdir", |s| {
                    if fresh {
                        s.list_from(dir, offset - 2, LIST_PAGE)
                    } else {
                        s.list(dir, after.as_deref(), LIST_PAGE)
                    }
                });
                fresh = false;
                match page {
                    Ok(p) if p.is_empty() => break,
                    Ok(p) => pending.extend(p),
                    Err(e) => return reply.error(e),
                }
            }
            let Some(e) = pending.pop_front() else { break };
            if reply.add(INodeNo(e.ino), offset + 1, kind(e.mode), OsStr::from_bytes(&e.name)) {
                pending.push_front(e);
                self.remember(fh, offset, after.unwrap_or_default(), pending);
                return reply.ok();
            }
            offset += 1;
            after = Some(e.name);
        }
        self.remember(fh, offset, after.unwrap_or_default(), VecDeque::new());
        reply.ok()
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.shared.dirs.lock().unwrap_or_else(|e| e.into_inner()).remove(&fh.0);
        self.shared.count("releasedir", 0);
        reply.ok()
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        Self::empty(self.shared.with("fsyncdir", |s| s.sync()), reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let used = match self.shared.with("statfs", |s| s.usage()) {
            Ok(u) => u,
            Err(e) => return reply.error(e),
        };
        // Space: the database's own plus what the host file system has left for it.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        let path = std::ffi::CString::new(self.shared.db_dir.as_os_str().as_bytes()).unwrap_or_default();
        // SAFETY: statvfs fills the struct we own from a NUL-terminated path.
        let (free, avail) = if unsafe { libc::statvfs(path.as_ptr(), &mut st) } == 0 {
            (st.f_bfree * st.f_frsize / 4096, st.f_bavail * st.f_frsize / 4096)
        } else {
            (0, 0)
        };
        let files = 1u64 << 32;
        reply.statfs(used.bytes / 4096 + free, free, avail, files, files.saturating_sub(used.inodes), 4096, 255, 4096)
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let m = libc::S_IFREG | (mode & !umask & 0o7777);
        match self.make(req, parent, name, m, None) {
            Ok(a) => {
                self.opened(a.ino);
                self.handed_out(&a);
                reply.created(&self.ttl, &file_attr(&a), Generation(0), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }
}

impl DbFs {
    fn remember(&self, fh: FileHandle, next_offset: u64, last_name: Vec<u8>, pending: VecDeque<DirEntry>) {
        if let Some(c) = self.shared.dirs.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&fh.0) {
            c.next_offset = next_offset;
            c.last_name = last_name;
            c.pending = pending;
        }
    }
}

/// The root's inode number as FUSE sees it (FUSE's root is 1, as ours).
pub const FUSE_ROOT: u64 = ROOT;
