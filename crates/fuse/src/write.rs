//! FUSE handlers of modifying requests.

use crate::{errno, Ext4Fuse};
use fs::{CreateKind, FsError, SetAttr, Timestamp};
use fusewire::abi::WRITE_KILL_SUIDGID;
use fusewire::{reply, Errno, Op, Request, SetAttrIn, SetTime};
use ondisk::inode::mode;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{SystemTime, UNIX_EPOCH};

fn now() -> Timestamp {
    let d = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

fn set_time(t: SetTime) -> Timestamp {
    match t {
        SetTime::At { sec, nsec } => Timestamp { sec, nsec },
        SetTime::Now => now(),
    }
}

impl Ext4Fuse {
    /// Serve a modifying request.
    pub(crate) fn modify(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
        let ino = req.nodeid;
        match op {
            Op::Create { name, mode, umask, .. } => {
                let i = self.make(req, ino, name, CreateKind::File, (mode & 0o7777) as u16, umask)?;
                self.opened(i.ino);
                reply::create(out, &self.entry_out(&i), 0, crate::serve::HANDLE_FLAGS);
            }
            Op::TmpFile { mode, umask, .. } => {
                let (perm, uid, gid) = self.new_owner(req, ino, (mode & 0o7777) as u16, false)?;
                let pino = crate::ext4_ino(ino)?;
                let i = self.vol.create_tmpfile(pino, perm, (umask & 0o777) as u16, uid, gid).map_err(|e| errno(&e))?;
                self.opened(i.ino);
                reply::create(out, &self.entry_out(&i), 0, 0);
            }
            Op::Mknod { name, mode, rdev, umask } => {
                reply::entry(out, &self.entry_out(&self.mknod(req, ino, name, mode, umask, rdev)?))
            }
            Op::Mkdir { name, mode, umask } => {
                let i = self.make(req, ino, name, CreateKind::Dir, (mode & 0o7777) as u16, umask)?;
                reply::entry(out, &self.entry_out(&i));
            }
            Op::Symlink { name, target } => {
                let i = self.make(req, ino, name, CreateKind::Symlink(target.to_vec()), 0o777, 0)?;
                reply::entry(out, &self.entry_out(&i));
            }
            Op::Link { ino: target, newname } => {
                let i = self
                    .vol
                    .link(crate::ext4_ino(target)?, crate::ext4_ino(ino)?, newname.as_bytes())
                    .map_err(|e| errno(&e))?;
                reply::entry(out, &self.entry_out(&i));
            }
            Op::Unlink { name } => self.vol.unlink(crate::ext4_ino(ino)?, name.as_bytes()).map_err(|e| errno(&e))?,
            Op::Rmdir { name } => self.vol.rmdir(crate::ext4_ino(ino)?, name.as_bytes()).map_err(|e| errno(&e))?,
            Op::Rename { name, newdir, newname, flags } => {
                // The whiteout is a new inode in the source directory: a
                // set-group-ID directory gives it its group, as any create.
                let owner = if flags & libc::RENAME_WHITEOUT != 0 {
                    let (_, uid, gid) = self.new_owner(req, ino, 0, false)?;
                    (uid, gid)
                } else {
                    (req.uid, req.gid)
                };
                self.rename(ino, name, newdir, newname, flags, owner)?
            }
            Op::Write { offset, data, write_flags } => {
                let i = crate::ext4_ino(ino)?;
                // KILLPRIV_V2: a write drops the file capability, and set-user-ID /
                // set-group-ID when the kernel says the writer lacks CAP_FSETID.
                self.vol.drop_privileges(i, write_flags & WRITE_KILL_SUIDGID != 0).map_err(|e| errno(&e))?;
                let n = self.vol.write(i, offset, data).map_err(|e| errno(&e))?;
                reply::written(out, n as u32);
            }
            Op::SetAttr(a) => {
                let i = self.setattr(ino, &a)?;
                reply::attr_out(out, self.policy.ttl, &self.attr(&i));
            }
            Op::Fallocate { offset, length, mode } => self.fallocate(ino, offset, length, mode)?,
            Op::SetXattr { name, value, flags } => self.setxattr(req, ino, name, value, flags)?,
            Op::RemoveXattr { name } => {
                self.vol.remove_xattr(crate::ext4_ino(ino)?, name.as_bytes()).map_err(|e| errno(&e))?
            }
            _ => return Err(Errno::ENOSYS),
        }
        Ok(())
    }

    /// Owner and permission bits of a new inode: the caller's uid; the
    /// parent's group and set-group-ID bit when the parent has it (BSD
    /// semantics that ext4 follows for setgid directories).
    fn new_owner(&self, req: &Request, parent: u64, perm: u16, is_dir: bool) -> Result<(u16, u32, u32), Errno> {
        let dir = self.inode(parent)?;
        let mut perm = perm & 0o7777;
        let mut gid = req.gid;
        if dir.base.mode & mode::S_ISGID != 0 {
            gid = dir.gid();
            if is_dir {
                perm |= mode::S_ISGID;
            }
        }
        Ok((perm, req.uid, gid))
    }

    /// `perm` as the caller asked (FUSE_DONT_MASK): the engine applies
    /// `umask` unless the directory's default ACL replaces it.
    fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: CreateKind,
        perm: u16,
        umask: u32,
    ) -> Result<fs::Inode, Errno> {
        let pino = crate::ext4_ino(parent)?;
        let is_dir = kind == CreateKind::Dir;
        let (perm, uid, gid) = self.new_owner(req, parent, perm, is_dir)?;
        let umask = (umask & 0o777) as u16;
        self.vol.create_masked(pino, name.as_bytes(), kind, perm, umask, uid, gid).map_err(|e| errno(&e))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        m: u32,
        umask: u32,
        rdev: u32,
    ) -> Result<fs::Inode, Errno> {
        let perm = (m & 0o7777) as u16;
        let kind = match (m as u16) & mode::S_IFMT {
            mode::S_IFREG | 0 => CreateKind::File,
            mode::S_IFIFO => CreateKind::Fifo,
            mode::S_IFSOCK => CreateKind::Socket,
            mode::S_IFCHR => CreateKind::Char(rdev),
            mode::S_IFBLK => CreateKind::Block(rdev),
            _ => return Err(Errno::EINVAL),
        };
        self.make(req, parent, name, kind, perm, umask)
    }

    /// `owner`: the caller's uid and gid, for the whiteout RENAME_WHITEOUT leaves.
    #[allow(clippy::too_many_arguments)]
    fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        owner: (u32, u32),
    ) -> Result<(), Errno> {
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        let whiteout = flags & libc::RENAME_WHITEOUT != 0;
        if exchange && (noreplace || whiteout) {
            return Err(Errno::EINVAL);
        }
        {
            let p = crate::ext4_ino(parent)?;
            let np = crate::ext4_ino(newparent)?;
            let (name, newname) = (name.as_bytes(), newname.as_bytes());
            if whiteout {
                return self
                    .vol
                    .rename_whiteout(p, name, np, newname, noreplace, owner.0, owner.1)
                    .map_err(|e| errno(&e));
            }
            self.vol.rename(p, name, np, newname, noreplace, exchange).map_err(|e| errno(&e))
        }
    }

    fn setattr(&self, ino: u64, a: &SetAttrIn) -> Result<fs::Inode, Errno> {
        let is_now = |t: &Option<SetTime>| matches!(t, None | Some(SetTime::Now));
        let attr = SetAttr {
            times_now: is_now(&a.atime) && is_now(&a.mtime),
            mode: a.mode.map(|m| (m & 0o7777) as u16),
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            atime: a.atime.map(set_time),
            mtime: a.mtime.map(set_time),
            ctime: a.ctime.map(|(sec, nsec)| Timestamp { sec, nsec }),
        };
        let i = crate::ext4_ino(ino)?;
        let inode = self.vol.setattr(i, &attr).map_err(|e| errno(&e))?;
        // KILLPRIV_V2: a truncation or a change of owner drops the file
        // capability, and set-user-ID / set-group-ID when the kernel asks
        // (always for chown, for truncate when the caller lacks CAP_FSETID).
        if (a.kill_suidgid || a.size.is_some() || a.uid.is_some() || a.gid.is_some())
            && self.vol.drop_privileges(i, a.kill_suidgid).map_err(|e| errno(&e))?
        {
            return self.vol.inode(i).map_err(|e| errno(&e));
        }
        Ok(inode)
    }

    fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<(), Errno> {
        // Preallocation, punch hole and zero range, with or without KEEP_SIZE
        // (punching requires it, as the kernel's ext4 does); collapse and
        // insert range are not implemented.
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let op = match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => fs::Falloc::Allocate,
            libc::FALLOC_FL_PUNCH_HOLE if keep => fs::Falloc::PunchHole,
            libc::FALLOC_FL_ZERO_RANGE => fs::Falloc::ZeroRange,
            _ => return Err(Errno::EOPNOTSUPP),
        };
        self.vol.fallocate(crate::ext4_ino(ino)?, offset, length, op, keep).map_err(|e| errno(&e))
    }

    fn setxattr(&self, req: &Request, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> Result<(), Errno> {
        let mode = match flags {
            0 => fs::XattrMode::Any,
            libc::XATTR_CREATE => fs::XattrMode::Create,
            libc::XATTR_REPLACE => fs::XattrMode::Replace,
            _ => return Err(Errno::EINVAL),
        };
        // Setting an access ACL clears set-group-ID unless the caller may keep it.
        let caller = crate::caller::Caller::of(req);
        let may_keep_sgid = |gid: u32| caller.in_group(gid) || caller.has_cap(crate::caller::CAP_FSETID);
        self.vol
            .set_xattr_by(crate::ext4_ino(ino)?, name.as_bytes(), value, mode, &may_keep_sgid)
            .map_err(|e| errno(&e))
    }

    pub(crate) fn do_sync(&self) -> Result<(), Errno> {
        match self.vol.sync() {
            Ok(()) | Err(FsError::ReadOnly) => Ok(()),
            Err(e) => Err(errno(&e)),
        }
    }
}
