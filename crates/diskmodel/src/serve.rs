//! The image server: a tiny FUSE file system exporting one model device as
//! `DIR/disk.img`, so the kernel's own file systems run on the model through
//! `losetup --direct-io=on DIR/disk.img`.
//!
//! Files in DIR:
//! - `disk.img`: the device (opened with direct I/O so the kernel page cache
//!   does not hide the model; aligned requests only).
//! - `stats.json`: a report ([`crate::Report`]) generated when it is opened;
//!   `emu report` and `emu wait-idle` read it.
//! - `series.json`: the throughput/cache-fill time series so far.
//! - `skip-idle`: opening it lets the drive finish its background work
//!   (cleaning) at once, in model time, instead of in real time
//!   ([`ModelDevice::skip_to_idle`]); `emu wait-idle --skip` opens it once
//!   the host has finished.
//!
//! Request classes: the kernel does not tell FUSE whether a write is journal,
//! metadata or data, so the server derives it from the volume layout
//! ([`crate::layout`]): the ext4 journal and the static metadata of ext4 and
//! XFS are recognised; everything else counts as data.

use crate::device::ModelDevice;
use crate::layout::Layout;
use crate::tracefs::MetaFlags;
use crate::workload::series_points;
use blockdev::{BlockDevice, IoClass};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, INodeNo, LockOwner, OpenFlags, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const INO_DISK: u64 = 2;
const INO_STATS: u64 = 3;
const INO_SERIES: u64 = 4;
const INO_SKIP_IDLE: u64 = 5;
const FILES: [(u64, &str); 4] =
    [(INO_DISK, "disk.img"), (INO_STATS, "stats.json"), (INO_SERIES, "series.json"), (INO_SKIP_IDLE, "skip-idle")];

pub struct ImageServer {
    dev: Arc<ModelDevice>,
    layout: RwLock<Layout>,
    /// The kernel's REQ_META flags of the loop device in front of disk.img.
    meta: Option<MetaFlags>,
    /// Snapshots of the generated files, per open handle.
    snapshots: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
    next_fh: AtomicU64,
    started: SystemTime,
    uid: u32,
    gid: u32,
}

fn io_errno(e: &io::Error) -> Errno {
    match e.kind() {
        io::ErrorKind::InvalidInput => Errno::EINVAL,
        io::ErrorKind::StorageFull => Errno::ENOSPC,
        io::ErrorKind::PermissionDenied => Errno::EPERM,
        _ => Errno::EIO,
    }
}

impl ImageServer {
    pub fn new(dev: Arc<ModelDevice>, meta: Option<MetaFlags>) -> Self {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let server = ImageServer {
            dev,
            layout: RwLock::new(Layout::default()),
            meta,
            snapshots: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            started: SystemTime::now(),
            uid,
            gid,
        };
        server.reload_layout();
        server
    }

    /// Re-read the volume layout from the image (after mkfs wrote a new one).
    fn reload_layout(&self) {
        let l = Layout::probe(|off, buf| read_raw(&self.dev, off, buf));
        if let Ok(mut g) = self.layout.write() {
            *g = l;
        }
    }

    /// Journal by layout first, then the kernel's metadata flag, then the
    /// layout's static metadata, else data.
    fn class_of(&self, offset: u64, len: u64, read: bool) -> IoClass {
        let by_layout = self.layout.read().map(|l| l.class_of(offset, len)).unwrap_or(IoClass::Data);
        // always ask, so that each flagged request is consumed by its own I/O
        let flagged = self.meta.as_ref().is_some_and(|m| m.is_metadata(offset, len, read));
        match by_layout {
            IoClass::Journal => IoClass::Journal,
            _ if flagged => IoClass::Metadata,
            c => c,
        }
    }

    fn generate(&self, ino: u64) -> Vec<u8> {
        match ino {
            INO_STATS => {
                let mut r = serde_json::to_value(self.dev.report()).unwrap_or_default();
                if let Ok(l) = self.layout.read() {
                    r["layout"] = serde_json::Value::String(l.describe());
                }
                r["kernel_meta_flags"] = serde_json::Value::Bool(self.meta.is_some());
                let mut v = serde_json::to_vec_pretty(&r).unwrap_or_default();
                v.push(b'\n');
                v
            }
            INO_SERIES => {
                let (w, b) = self.dev.series();
                let v = serde_json::json!({
                    "model": self.dev.model_name(),
                    "bucket_s": w,
                    "series": series_points(w, &b),
                    "buckets": b,
                });
                let mut v = serde_json::to_vec(&v).unwrap_or_default();
                v.push(b'\n');
                v
            }
            _ => Vec::new(),
        }
    }

    fn attr(&self, ino: u64) -> Option<FileAttr> {
        let (kind, perm, size) = match ino {
            1 => (FileType::Directory, 0o755, 0),
            INO_DISK => (FileType::RegularFile, 0o644, self.dev.size()),
            INO_STATS | INO_SERIES => (FileType::RegularFile, 0o444, self.generate(ino).len() as u64),
            INO_SKIP_IDLE => (FileType::RegularFile, 0o444, 0),
            _ => return None,
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            flags: 0,
            blksize: 4096,
        })
    }
}

/// Read bytes of the image without going through the model's timing (for
/// probing the layout); tolerates short images.
fn read_raw(dev: &ModelDevice, off: u64, buf: &mut [u8]) -> bool {
    dev.read_untimed(off, buf).is_ok()
}

impl Filesystem for ImageServer {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if u64::from(parent) != 1 {
            return reply.error(Errno::ENOENT);
        }
        match FILES.iter().find(|(_, n)| OsStr::new(n) == name).and_then(|(i, _)| self.attr(*i)) {
            Some(a) => reply.entry(&Duration::ZERO, &a, fuser::Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr(u64::from(ino)) {
            Some(a) => reply.attr(&Duration::ZERO, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let ino = u64::from(ino);
        // the device has a fixed size: only a no-op truncate is accepted
        if let Some(s) = size {
            if ino != INO_DISK || s != self.dev.size() {
                return reply.error(Errno::EPERM);
            }
        }
        match self.attr(ino) {
            Some(a) => reply.attr(&Duration::ZERO, &a),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = u64::from(ino);
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        match ino {
            INO_DISK => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
            INO_SKIP_IDLE => {
                self.dev.skip_to_idle();
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            INO_STATS | INO_SERIES => {
                let data = Arc::new(self.generate(ino));
                if let Ok(mut s) = self.snapshots.lock() {
                    s.insert(fh, data);
                }
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
            }
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if let Ok(mut s) = self.snapshots.lock() {
            s.remove(&u64::from(fh));
        }
        reply.ok();
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match u64::from(ino) {
            INO_DISK => {
                let dev_size = self.dev.size();
                if offset >= dev_size {
                    return reply.data(&[]);
                }
                let len = (size as u64).min(dev_size - offset) as usize;
                let mut buf = vec![0u8; len];
                let class = self.class_of(offset, len as u64, true);
                match self.dev.read_at(offset, &mut buf, class) {
                    Ok(()) => reply.data(&buf),
                    Err(e) => reply.error(io_errno(&e)),
                }
            }
            INO_SKIP_IDLE => reply.data(&[]),
            INO_STATS | INO_SERIES => {
                let snap = self.snapshots.lock().ok().and_then(|s| s.get(&u64::from(fh)).cloned());
                let data = snap.unwrap_or_else(|| Arc::new(self.generate(u64::from(ino))));
                let start = (offset as usize).min(data.len());
                let end = (start + size as usize).min(data.len());
                reply.data(&data[start..end]);
            }
            _ => reply.error(Errno::ENOENT),
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
        if u64::from(ino) != INO_DISK {
            return reply.error(Errno::EACCES);
        }
        let len = data.len() as u64;
        if offset.checked_add(len).is_none_or(|e| e > self.dev.size()) {
            return reply.error(Errno::ENOSPC);
        }
        let class = self.class_of(offset, len, false);
        match self.dev.write_at(offset, data, class) {
            Ok(()) => {
                // mkfs rewrites the superblock area: learn the new layout
                if offset < 128 << 10 {
                    self.reload_layout();
                }
                reply.written(data.len() as u32)
            }
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        match self.dev.flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(io_errno(&e)),
        }
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        reply.ok();
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if u64::from(ino) == 1 {
            reply.opened(FileHandle(0), FopenFlags::empty())
        } else {
            reply.error(Errno::ENOTDIR)
        }
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        if u64::from(ino) != 1 {
            return reply.error(Errno::ENOTDIR);
        }
        let mut entries = vec![(1u64, FileType::Directory, "."), (1, FileType::Directory, "..")];
        entries.extend(FILES.iter().map(|&(i, n)| (i, FileType::RegularFile, n)));
        for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let blocks = self.dev.size() / 4096;
        reply.statfs(blocks, 0, 0, FILES.len() as u64, 0, 4096, 255, 4096);
    }
}

/// Mount the server on `dir` in this process and block until unmounted.
/// `on_ready` runs once the mount is live. With `meta_flags`, request classes
/// also use the kernel's metadata flag seen through tracefs
/// ([`crate::tracefs`]); without root or tracefs the server goes on without
/// it (stats.json says `"kernel_meta_flags": false`).
pub fn serve_foreground(
    dev: Arc<ModelDevice>,
    dir: &std::path::Path,
    meta_flags: bool,
    on_ready: impl FnOnce(),
) -> io::Result<()> {
    let image = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()).join("disk.img");
    let meta = if meta_flags {
        match MetaFlags::start(&image) {
            Ok(m) => Some(m),
            Err(e) => {
                eprintln!("ext4lazy emu serve: no kernel metadata flags ({e}); classes come from the layout only");
                None
            }
        }
    } else {
        None
    };
    let server = ImageServer::new(Arc::clone(&dev), meta);
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("ext4lazy-emu".to_string()),
        fuser::MountOption::Subtype("ext4lazy-emu".to_string()),
        fuser::MountOption::RW,
        fuser::MountOption::NoAtime,
    ];
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        cfg.acl = fuser::SessionACL::All;
    }
    cfg.n_threads = Some(8);
    cfg.clone_fd = true;
    let session = fuser::spawn_mount(server, dir, &cfg)?;
    on_ready();
    let r = session.join();
    dev.flush_trace();
    r
}

/// Seconds since the Unix epoch (for file names and logs).
pub fn epoch_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
