//! FUSE frontend: turns kernel requests into calls on a [`fs::Volume`].
//!
//! fuser serves requests on several threads at once; the engine below is
//! `Sync`, so handlers call it directly. FUSE inode 1 is the root; ext4's root
//! is inode 2 and inode 1 (bad blocks) is never visible, so only those two swap.

mod attr;
mod caller;
mod ioctl;
mod write;

use fs::{FsError, Volume};
use fuser::{
    AccessFlags, Errno, FileHandle, FopenFlags, Generation, INodeNo, KernelConfig, OpenAccMode, OpenFlags,
    ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyXattr, Request,
};
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

pub use attr::to_file_attr;

/// How the kernel may cache what we tell it.
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// Entries and attributes (a read-only volume cannot change under us).
    pub ttl: Duration,
    /// How reads update access times.
    pub atime: AtimePolicy,
}

/// The mount's access-time option (FUSE leaves atime to the file system).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtimePolicy {
    NoAtime,
    RelAtime,
    StrictAtime,
}

impl Ext4Fuse {
    /// The directory a readdir(plus) lists; the start of a listing is an access.
    fn listing(&self, ino: INodeNo, offset: u64) -> Result<fs::Inode, Errno> {
        let dir = self.inode(ino)?;
        if offset == 0 {
            self.accessed(dir.ino);
            // StepAhead: fetch the listing and what the next steps need at once.
            self.vol.hint_listing(&dir);
        } else {
            self.vol.hint_listing_continues(&dir, offset);
        }
        Ok(dir)
    }

    /// Update an accessed inode's atime as the policy says; failures only log.
    fn accessed(&self, ino: u32) {
        if self.vol.is_read_only() || self.policy.atime == AtimePolicy::NoAtime {
            return;
        }
        match self.vol.touch_atime(ino, self.policy.atime == AtimePolicy::StrictAtime) {
            // The kernel caches attributes: have it ask again (offset -1: attributes only).
            Ok(true) => {
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(fuse_ino(ino), -1, 0);
                }
            }
            Ok(false) => {}
            Err(e) => {
                errno(&e);
            }
        }
    }
}

pub struct Ext4Fuse {
    pub(crate) vol: Arc<Volume>,
    pub(crate) policy: CachePolicy,
    /// Set once the session exists: tells the kernel to drop stale attributes.
    notifier: Arc<std::sync::OnceLock<fuser::Notifier>>,
}


/// ext4 inode number of a FUSE node id.
pub(crate) fn ext4_ino(ino: INodeNo) -> Result<u32, Errno> {
    match ino.0 {
        1 => Ok(fs::ROOT_INO),
        2 => Ok(1), // never handed out; reading it fails cleanly below
        n => u32::try_from(n).map_err(|_| Errno::ENOENT),
    }
}

/// FUSE node id of an ext4 inode number.
pub fn fuse_ino(ino: u32) -> INodeNo {
    match ino {
        fs::ROOT_INO => INodeNo(1),
        1 => INodeNo(2),
        n => INodeNo(u64::from(n)),
    }
}

/// Report a problem on the daemon's log (the kernel log when mounted in the
/// background): one write per line, so that each line stays one record.
pub fn report(msg: impl std::fmt::Display) {
    use std::io::Write;
    let line = format!("ext4lazy: {msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub(crate) fn errno(e: &FsError) -> Errno {
    if e.is_corruption() || matches!(e, FsError::Io { .. }) {
        log::error!("{e}");
        report(e);
    }
    Errno::from_i32(e.errno())
}

impl Ext4Fuse {
    pub fn new(vol: Arc<Volume>, policy: CachePolicy) -> Self {
        Ext4Fuse { vol, policy, notifier: Default::default() }
    }

    /// Where the daemon puts the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fuser::Notifier>> {
        self.notifier.clone()
    }

    pub(crate) fn inode(&self, ino: INodeNo) -> Result<fs::Inode, Errno> {
        let n = ext4_ino(ino)?;
        if n == 1 {
            return Err(Errno::ENOENT);
        }
        self.vol.inode(n).map_err(|e| errno(&e))
    }

    fn lookup_inode(&self, parent: INodeNo, name: &OsStr) -> Result<fs::Inode, Errno> {
        // StepAhead: what the KB says this lookup and the next step read, at once.
        self.vol.hint_lookup(ext4_ino(parent)?, name.as_bytes());
        let dir = self.inode(parent)?;
        match self.vol.lookup(&dir, name.as_bytes()) {
            Ok(Some((ino, _))) => {
                let child = self.vol.inode(ino).map_err(|e| errno(&e))?;
                self.vol.hint_looked_up(&child);
                Ok(child)
            }
            Ok(None) => Err(Errno::ENOENT),
            Err(e) => Err(errno(&e)),
        }
    }

    pub(crate) fn attr(&self, inode: &fs::Inode) -> fuser::FileAttr {
        to_file_attr(&self.vol.stat(inode), fuse_ino(inode.ino))
    }
}

impl fuser::Filesystem for Ext4Fuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> io::Result<()> {
        use fuser::InitFlags;
        // readdirplus lets `ls -l` get every attribute with the listing.
        let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        // Round trips dominate a cold traversal: directories need no OPENDIR /
        // RELEASEDIR (we keep no per-handle state for them); on a read-only
        // volume files need no OPEN / RELEASE either (read-write mounts count
        // open handles, for unlinked-but-open files). Symlink targets are cached;
        // lookups and readdirs in one directory may run in parallel.
        let mut caps = InitFlags::FUSE_NO_OPENDIR_SUPPORT | InitFlags::FUSE_CACHE_SYMLINKS | InitFlags::FUSE_PARALLEL_DIROPS;
        // POSIX ACLs: the kernel checks permissions with the ACLs we store;
        // we keep the mode in step with them and inherit default ACLs, for
        // which creates must arrive without the umask applied (we apply it
        // when the directory has no default ACL).
        caps |= InitFlags::FUSE_POSIX_ACL | InitFlags::FUSE_DONT_MASK;
        if self.vol.is_read_only() {
            caps |= InitFlags::FUSE_NO_OPEN_SUPPORT;
        }
        let _ = config.add_capabilities(caps);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.lookup_inode(parent, name) {
            Ok(inode) => reply.entry(&self.policy.ttl, &self.attr(&inode), Generation(u64::from(inode.base.generation))),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.inode(ino) {
            Ok(inode) => reply.attr(&self.policy.ttl, &self.attr(&inode)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.inode(ino).and_then(|i| self.vol.read_link(&i).map_err(|e| errno(&e))) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        if self.vol.is_read_only() {
            // The kernel refuses writes on a read-only mount itself; ENOSYS (with
            // FUSE_NO_OPEN_SUPPORT) stops OPEN/RELEASE round trips for good.
            return reply.error(Errno::ENOSYS);
        }
        match self.inode(ino) {
            Ok(i) if i.is_dir() => reply.error(Errno::EISDIR),
            Ok(i) => {
                let access = match flags.acc_mode() {
                    OpenAccMode::O_RDONLY => fs::OpenAccess::Read,
                    _ => fs::OpenAccess::Write { append: flags.0 & libc::O_APPEND != 0 },
                };
                if let Err(e) = self.vol.check_open(&i, access) {
                    return reply.error(errno(&e));
                }
                if flags.0 & libc::O_TRUNC != 0 && flags.acc_mode() != OpenAccMode::O_RDONLY {
                    let attr = fs::SetAttr { size: Some(0), ..Default::default() };
                    if let Err(e) = self.vol.setattr(i.ino, &attr) {
                        return reply.error(errno(&e));
                    }
                }
                self.vol.opened(i.ino);
                // The page cache keeps file contents across opens (only we change
                // them), so a re-read may never reach us: record the access here.
                if flags.acc_mode() != OpenAccMode::O_WRONLY {
                    self.accessed(i.ino);
                }
                reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE)
            }
            Err(e) => reply.error(e),
        }
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
        match ext4_ino(ino).and_then(|i| self.vol.released(i).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// Nothing is buffered per handle (writes reach the engine at once), so
    /// close has nothing to do: ENOSYS tells the kernel to stop sending FLUSH
    /// for this mount, one round trip less per close.
    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock: fuser::LockOwner, reply: ReplyEmpty) {
        reply.error(Errno::from_i32(libc::ENOSYS))
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.do_sync(reply)
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        self.do_sync(reply)
    }

    fn create(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, _flags: i32, reply: fuser::ReplyCreate) {
        self.do_create(req, parent, name, mode, umask, reply)
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        self.do_mknod(req, parent, name, mode, umask, rdev, reply)
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        self.do_mkdir(req, parent, name, mode, umask, reply)
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &std::path::Path, reply: ReplyEntry) {
        self.do_symlink(req, parent, link_name, target, reply)
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        self.do_link(ino, newparent, newname, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_unlink(parent, name, false, reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        self.do_unlink(parent, name, true, reply)
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        self.do_rename(parent, name, newparent, newname, flags, (req.uid(), req.gid()), reply)
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        write::ignore_write_flags(write_flags);
        self.do_write(ino, offset, data, reply)
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        ctime: Option<std::time::SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        self.do_setattr(ino, mode, uid, gid, size, atime, mtime, ctime, reply)
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
        match self.inode(ino).and_then(|i| self.vol.read(&i, offset, size as usize).map(|d| (i.ino, d)).map_err(|e| errno(&e))) {
            Ok((ino, data)) => {
                reply.data(&data);
                self.accessed(ino);
            }
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // With FUSE_NO_OPENDIR_SUPPORT, ENOSYS tells the kernel to stop sending
        // OPENDIR and RELEASEDIR altogether (readdir checks the inode itself).
        reply.error(Errno::ENOSYS)
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let dir = match self.listing(ino, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let mut full = false;
        let r = self.vol.read_dir(&dir, offset, &mut |e| {
            full = reply.add(fuse_ino(e.ino), e.next, attr::dirent_kind(e.file_type), OsStr::from_bytes(&e.name));
            !full
        });
        if r.is_ok() && !full {
            self.vol.hint_listed(&dir);
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        let dir = match self.listing(ino, offset) {
            Ok(d) => d,
            Err(e) => return reply.error(e),
        };
        let mut full = false;
        let r = self.vol.read_dir(&dir, offset, &mut |e| {
            let generation;
            let (attr, ttl) = match self.vol.inode(e.ino) {
                Ok(child) => {
                    generation = Generation(u64::from(child.base.generation));
                    (self.attr(&child), self.policy.ttl)
                }
                // A damaged child must not hide its siblings: list it with an
                // attribute that expires at once, so stat asks again and gets EIO.
                Err(err) => {
                    errno(&err);
                    generation = Generation(0);
                    (attr::placeholder(fuse_ino(e.ino), e.file_type), Duration::ZERO)
                }
            };
            full = reply.add(fuse_ino(e.ino), e.next, OsStr::from_bytes(&e.name), &ttl, &attr, generation);
            !full
        });
        if r.is_ok() && !full {
            self.vol.hint_listed(&dir);
        }
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, length: u64, mode: i32, reply: ReplyEmpty) {
        // Preallocation, punch hole and zero range, with or without KEEP_SIZE
        // (punching requires it, as the kernel's ext4 does); collapse and
        // insert range are not implemented.
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => fs::Falloc::Allocate,
            libc::FALLOC_FL_PUNCH_HOLE if keep => fs::Falloc::PunchHole,
            libc::FALLOC_FL_PUNCH_HOLE => return reply.error(Errno::EOPNOTSUPP),
            libc::FALLOC_FL_ZERO_RANGE => fs::Falloc::ZeroRange,
            _ => return reply.error(Errno::EOPNOTSUPP),
        };
        match ext4_ino(ino).and_then(|i| self.vol.fallocate(i, offset, length, op, keep).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.vol.statfs();
        reply.statfs(s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.bsize);
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let r = self.inode(ino).and_then(|i| self.vol.get_xattr(&i, name.as_bytes(), req.uid() == 0).map_err(|e| errno(&e)));
        reply_xattr(r, size, reply);
    }

    fn setxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, value: &[u8], flags: i32, _position: u32, reply: ReplyEmpty) {
        let mode = match flags {
            0 => fs::XattrMode::Any,
            libc::XATTR_CREATE => fs::XattrMode::Create,
            libc::XATTR_REPLACE => fs::XattrMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        // Setting an access ACL clears set-group-ID unless the caller may keep it.
        let caller = caller::Caller::of(req);
        let may_keep_sgid = |gid: u32| caller.in_group(gid) || caller.has_cap(caller::CAP_FSETID);
        match ext4_ino(ino).and_then(|i| self.vol.set_xattr_by(i, name.as_bytes(), value, mode, &may_keep_sgid).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match ext4_ino(ino).and_then(|i| self.vol.remove_xattr(i, name.as_bytes()).map_err(|e| errno(&e))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let r = self.inode(ino).and_then(|i| self.vol.list_xattr(&i, req.uid() == 0).map_err(|e| errno(&e)));
        reply_xattr(r, size, reply);
    }

    #[allow(clippy::too_many_arguments)]
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        self.do_ioctl(req, ino, cmd, in_data, reply)
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        match self.inode(ino) {
            Ok(i) => {
                let s = self.vol.stat(&i);
                if mask.contains(AccessFlags::W_OK) && self.vol.is_read_only() {
                    return reply.error(Errno::EROFS);
                }
                if attr::may_access(&s, req.uid(), req.gid(), mask) {
                    reply.ok()
                } else {
                    reply.error(Errno::EACCES)
                }
            }
            Err(e) => reply.error(e),
        }
    }
}

/// getxattr/listxattr protocol: size 0 asks for the length only.
fn reply_xattr(r: Result<Vec<u8>, Errno>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}
