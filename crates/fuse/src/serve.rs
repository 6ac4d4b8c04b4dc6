//! The FUSE handler: one request in, one reply out. Reading requests are
//! served here; modifying ones in `write`, inode flags in `ioctl`.

use crate::{attr, errno, ext4_ino, fuse_ino, Ext4Fuse};
use fusewire::abi::{init, FOPEN_KEEP_CACHE};
use fusewire::{reply, DirBuf, Errno, InitInfo, Op, PanicReport, Request};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// The FUSE capabilities ext4lazy asks for (also the floor's, `floor.rs`,
/// so that the kernel sends both the same requests). `no_open`: the kernel
/// opens files itself (read-only volumes, `kernel_opens`).
pub(crate) fn capabilities(no_open: bool) -> u64 {
    // readdirplus lets `ls -l` get every attribute with the listing.
    // Round trips dominate a cold traversal: directories need no OPENDIR /
    // RELEASEDIR (we keep no per-handle state for them); on a read-only
    // volume files need no OPEN / RELEASE either (read-write mounts count
    // open handles, for unlinked-but-open files). Symlink targets are cached;
    // lookups and readdirs in one directory may run in parallel.
    let mut caps = init::DO_READDIRPLUS
        | init::READDIRPLUS_AUTO
        | init::NO_OPENDIR_SUPPORT
        | init::CACHE_SYMLINKS
        | init::PARALLEL_DIROPS;
    // POSIX ACLs: the kernel checks permissions with the ACLs we store;
    // we keep the mode in step with them and inherit default ACLs, for
    // which creates must arrive without the umask applied (we apply it
    // when the directory has no default ACL).
    caps |= init::POSIX_ACL | init::DONT_MASK;
    // We clear set-user-ID, set-group-ID and file capabilities on write,
    // truncate and chown ourselves (Volume::drop_privileges), so the
    // kernel need not re-read the mode before every chown nor ask for
    // security.capability on direct writes: about 2 round trips per file
    // of an untar (321,578 -> 275,559 requests).
    caps |= init::HANDLE_KILLPRIV_V2;
    if no_open {
        caps |= init::NO_OPEN_SUPPORT;
    }
    caps
}

impl fusewire::Handler for Ext4Fuse {
    fn capabilities(&self, _info: &InitInfo) -> u64 {
        capabilities(self.vol.is_read_only() || self.policy.kernel_opens)
    }

    fn forget(&self, nodeid: u64, nlookup: u64) {
        self.panic_if_triggered(fusewire::abi::op::FORGET, nodeid);
        let Ok(ino) = ext4_ino(nodeid) else { return };
        self.vol.forgotten(ino, nlookup);
        if self.counts_lookups() {
            if let Err(e) = self.vol.unhold(ino, nlookup) {
                errno(&e);
            }
        }
    }

    fn interrupt(&self, req: &Request, _target: u64) {
        // Requests are served too quickly for interrupts to matter.
        self.panic_if_triggered(req.opcode, req.nodeid);
    }

    fn handle(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
        if let Some(t) = &self.inject {
            if t.matches(req.opcode, req.nodeid, op.entry_name().map(OsStrExt::as_bytes)) {
                return self.serve_armed(req, op, out);
            }
        }
        self.serve_op(req, op, out)
    }

    fn read_into(&self, req: &Request, offset: u64, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
        // A panic armed for this request is served through `handle`.
        if self.inject.as_ref().is_some_and(|t| t.matches(req.opcode, req.nodeid, None)) {
            return None;
        }
        let i = match self.inode(req.nodeid) {
            Ok(i) => i,
            Err(e) => return Some(Err(e)),
        };
        match self.vol.read_into(&i, offset, buf) {
            Ok(None) => None,
            Ok(Some(n)) => {
                self.accessed(i.ino);
                Some(Ok(n))
            }
            Err(e) => Some(Err(errno(&e))),
        }
    }

    fn panicked(&self, r: &PanicReport<'_>) {
        crate::report(panic_line(r, self.vol.failure()));
    }
}

/// One log line for a panic: what was served, where it panicked, what the
/// kernel got, and whether the volume is read-only now.
fn panic_line(r: &PanicReport<'_>, failure: Option<String>) -> String {
    let on = match ext4_ino(r.nodeid) {
        Ok(0) | Err(_) => format!("node {}", r.nodeid),
        Ok(ino) => format!("inode {ino}"),
    };
    let mut line = format!("panic serving {} on {on} (request {}): {}; {}", r.op_name(), r.unique, r.note, r.outcome());
    if let Some(why) = failure {
        line.push_str(&format!("; the volume is read-only: {why}"));
    }
    line
}

impl Ext4Fuse {
    /// Serve one request (what `handle` does unless a panic is injected).
    pub(crate) fn serve_op(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
        let ino = req.nodeid;
        match op {
            Op::Lookup { name } => {
                let inode = self.lookup_inode(ino, name)?;
                reply::entry(out, &self.entry_out(&inode));
            }
            Op::GetAttr { .. } => {
                let inode = self.inode(ino)?;
                reply::attr_out(out, self.policy.ttl, &self.attr(&inode));
            }
            Op::ReadLink => {
                let i = self.inode(ino)?;
                out.extend_from_slice(&self.vol.read_link(&i).map_err(|e| errno(&e))?);
            }
            Op::Open { flags, kill_suidgid } => self.open(ino, flags, kill_suidgid, out)?,
            // Nothing is buffered per handle (writes reach the engine at once),
            // so close has nothing to do: ENOSYS tells the kernel to stop
            // sending FLUSH for this mount, one round trip less per close.
            Op::Flush => return Err(Errno::ENOSYS),
            Op::Release => self.released(ino)?,
            Op::Fsync { .. } | Op::FsyncDir { .. } => self.do_sync()?,
            Op::Read { offset, size } => {
                let i = self.inode(ino)?;
                out.extend_from_slice(&self.vol.read(&i, offset, size as usize).map_err(|e| errno(&e))?);
                self.accessed(i.ino);
            }
            // With FUSE_NO_OPENDIR_SUPPORT, ENOSYS tells the kernel to stop sending
            // OPENDIR and RELEASEDIR altogether (readdir checks the inode itself).
            Op::OpenDir | Op::ReleaseDir => return Err(Errno::ENOSYS),
            Op::ReadDir { offset, size } => self.readdir(req, ino, offset, DirBuf::new(out, size), false)?,
            Op::ReadDirPlus { offset, size } => self.readdir(req, ino, offset, DirBuf::new(out, size), true)?,
            Op::Statfs => {
                let s = self.vol.statfs();
                let st = fusewire::Statfs {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize,
                    namelen: s.namelen,
                    frsize: s.bsize,
                };
                reply::statfs(out, &st);
            }
            Op::GetXattr { name, size } => {
                let i = self.inode(ino)?;
                reply_xattr(self.vol.get_xattr(&i, name.as_bytes(), req.uid == 0).map_err(|e| errno(&e))?, size, out)?;
            }
            Op::ListXattr { size } => {
                let i = self.inode(ino)?;
                reply_xattr(self.vol.list_xattr(&i, req.uid == 0).map_err(|e| errno(&e))?, size, out)?;
            }
            Op::Access { mask } => self.access(req, ino, mask)?,
            Op::Ioctl { cmd, in_data, .. } => {
                let data = self.flag_ioctl(req, ino, cmd, in_data)?;
                reply::ioctl(out, 0, &data);
            }
            Op::Lseek { offset, whence } => {
                // The kernel answers SEEK_SET/CUR/END itself; only these two come here.
                let what = match whence as i32 {
                    libc::SEEK_DATA => fs::Seek::Data,
                    libc::SEEK_HOLE => fs::Seek::Hole,
                    _ => return Err(Errno::EINVAL),
                };
                let i = self.inode(ino)?;
                let to = self.vol.seek(&i, offset, what).map_err(|e| errno(&e))?.ok_or(Errno(libc::ENXIO))?;
                reply::lseek(out, to);
            }
            Op::Unsupported(_) => return Err(Errno::ENOSYS),
            op => {
                // Allocations that would take root's reserved blocks ask who this is.
                let _who = fs::requester::Serving::as_requester(crate::caller::requester(req));
                self.modify(req, op, out)?
            }
        }
        Ok(())
    }
}

/// How a file handle is opened: always through the kernel's page cache
/// (only FOPEN_KEEP_CACHE: only we change file contents, so the cache stays
/// valid across opens). Direct handles (FOPEN_DIRECT_IO) for writers were
/// faster (untar, Postmark: docs/results/postmark.md) but lose written
/// data: the kernel flushes and drops a page before a direct write, a
/// store through a shared mapping of the file faults it back in with the
/// old bytes, and that page's write-back later overwrites what the direct
/// write stored (tests/system/test_mmap_coherence.py: 214 of 2,000 files).
pub(crate) const HANDLE_FLAGS: u32 = FOPEN_KEEP_CACHE;

impl Ext4Fuse {
    fn open(&self, ino: u64, flags: i32, kill_suidgid: bool, out: &mut Vec<u8>) -> Result<(), Errno> {
        if self.vol.is_read_only() || self.policy.kernel_opens {
            // ENOSYS (with FUSE_NO_OPEN_SUPPORT) stops OPEN/RELEASE round trips
            // for good. The kernel refuses writes on a read-only mount itself;
            // with kernel_opens the engine refuses them at write time.
            return Err(Errno::ENOSYS);
        }
        let i = self.inode(ino)?;
        if i.is_dir() {
            return Err(Errno::EISDIR);
        }
        // The kernel may still hold a number whose file lost its last name
        // while nothing had it open (an O_PATH descriptor, a cached inode):
        // that inode is freed, and there is nothing to open.
        if i.links_count() == 0 && !self.vol.has_handles(i.ino) {
            return Err(Errno::ENOENT);
        }
        let acc = flags & libc::O_ACCMODE;
        let access = match acc {
            libc::O_RDONLY => fs::OpenAccess::Read,
            _ => fs::OpenAccess::Write { append: flags & libc::O_APPEND != 0 },
        };
        self.vol.check_open(&i, access).map_err(|e| errno(&e))?;
        if flags & libc::O_TRUNC != 0 && acc != libc::O_RDONLY {
            let attr = fs::SetAttr { size: Some(0), ..Default::default() };
            self.vol.setattr(i.ino, &attr).map_err(|e| errno(&e))?;
            self.vol.drop_privileges(i.ino, kill_suidgid).map_err(|e| errno(&e))?;
        }
        self.opened(i.ino);
        // The page cache keeps file contents across opens (only we change
        // them), so a re-read may never reach us: record the access here.
        if acc != libc::O_WRONLY {
            self.accessed(i.ino);
        }
        reply::open(out, 0, HANDLE_FLAGS);
        Ok(())
    }

    fn readdir(&self, req: &Request, ino: u64, offset: u64, mut buf: DirBuf<'_>, plus: bool) -> Result<(), Errno> {
        let dir = self.listing(fs::Cred { uid: req.uid, gid: req.gid }, ino, offset)?;
        let mut full = false;
        // readdirplus translates every name it lists (the kernel looks none
        // of them up): each counts as served from memory when nothing was
        // read since the previous one, the directory block included.
        let mut reads = fs::ReadCore::reads_here();
        let r = self.vol.scan_dir(&dir, offset, &mut |e| {
            let dtype = attr::dirent_kind(e.file_type);
            let added = if !plus {
                buf.add(fuse_ino(e.ino), e.next, dtype, e.name)
            } else {
                let child = self.vol.inode(e.ino);
                let now = fs::ReadCore::reads_here();
                if e.name != b"." && e.name != b".." {
                    self.vol.count_translation(now == reads);
                }
                reads = now;
                let entry = match &child {
                    Ok(child) => self.entry(child),
                    // A damaged child must not hide its siblings: list it with an
                    // attribute that expires at once, so stat asks again and gets EIO.
                    Err(err) => {
                        errno(err);
                        fusewire::Entry {
                            attr: attr::placeholder(fuse_ino(e.ino), e.file_type),
                            generation: 0,
                            ttl: Duration::ZERO,
                        }
                    }
                };
                let added = buf.add_plus(&entry, e.next, dtype, e.name);
                // The kernel counts a lookup for every entry it takes but "."
                // and "..", a placeholder's too.
                if added && e.name != b"." && e.name != b".." {
                    match &child {
                        Ok(child) => self.handed_out(child),
                        Err(_) => self.vol.looked_up(e.ino),
                    }
                }
                added
            };
            full = !added;
            added
        });
        if r.is_ok() && !full {
            self.vol.hint_listed(&dir);
        }
        r.map_err(|e| errno(&e))
    }

    fn access(&self, req: &Request, ino: u64, mask: u32) -> Result<(), Errno> {
        let i = self.inode(ino)?;
        if mask & libc::W_OK as u32 != 0 && self.vol.is_read_only() {
            return Err(Errno::EROFS);
        }
        // Supplementary groups are not in the request: only the primary group counts.
        let who = fs::acl::Cred { uid: req.uid, gid: req.gid };
        if self.vol.permits(&i, who, (mask & 7) as u16) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }
}

/// getxattr/listxattr protocol: size 0 asks for the length only.
fn reply_xattr(v: Vec<u8>, size: u32, out: &mut Vec<u8>) -> Result<(), Errno> {
    if size == 0 {
        reply::xattr_size(out, v.len() as u32);
    } else if v.len() > size as usize {
        return Err(Errno::ERANGE);
    } else {
        out.extend_from_slice(&v);
    }
    Ok(())
}
