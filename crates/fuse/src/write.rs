//! FUSE handlers of modifying requests.

use crate::{errno, fuse_ino, Ext4Fuse};
use fs::{CreateKind, FsError, SetAttr, Timestamp};
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, RenameFlags, ReplyAttr, ReplyCreate, ReplyEmpty, ReplyEntry, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};
use ondisk::inode::mode;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn to_timestamp(t: SystemTime) -> Timestamp {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(e) => {
            let d = e.duration();
            let (mut sec, mut nsec) = (-(d.as_secs() as i64), d.subsec_nanos());
            if nsec > 0 {
                sec -= 1;
                nsec = 1_000_000_000 - nsec;
            }
            Timestamp { sec, nsec }
        }
    }
}

fn now_or(t: TimeOrNow) -> Timestamp {
    match t {
        TimeOrNow::SpecificTime(t) => to_timestamp(t),
        TimeOrNow::Now => to_timestamp(SystemTime::now()),
    }
}

impl Ext4Fuse {
    /// Owner and permission bits of a new inode: the caller's uid; the
    /// parent's group and set-group-ID bit when the parent has it (BSD
    /// semantics that ext4 follows for setgid directories).
    fn new_owner(&self, req: &Request, parent: INodeNo, perm: u16, is_dir: bool) -> Result<(u16, u32, u32), Errno> {
        let dir = self.inode(parent)?;
        let mut perm = perm & 0o7777;
        let mut gid = req.gid();
        if dir.base.mode & mode::S_ISGID != 0 {
            gid = dir.gid();
            if is_dir {
                perm |= mode::S_ISGID;
            }
        }
        Ok((perm, req.uid(), gid))
    }

    /// `perm` as the caller asked (FUSE_DONT_MASK): the engine applies
    /// `umask` unless the directory's default ACL replaces it.
    fn make(&self, req: &Request, parent: INodeNo, name: &OsStr, kind: CreateKind, perm: u16, umask: u32) -> Result<fs::Inode, Errno> {
        let pino = crate::ext4_ino(parent)?;
        let is_dir = kind == CreateKind::Dir;
        let (perm, uid, gid) = self.new_owner(req, parent, perm, is_dir)?;
        let umask = (umask & 0o777) as u16;
        self.vol.create_masked(pino, name.as_bytes(), kind, perm, umask, uid, gid).map_err(|e| errno(&e))
    }

    fn reply_entry(&self, r: Result<fs::Inode, Errno>, reply: ReplyEntry) {
        match r {
            Ok(i) => reply.entry(&self.policy.ttl, &self.attr(&i), Generation(u64::from(i.base.generation))),
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn do_mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, m: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let perm = (m & 0o7777) as u16;
        let kind = match (m as u16) & mode::S_IFMT {
            mode::S_IFREG | 0 => CreateKind::File,
            mode::S_IFIFO => CreateKind::Fifo,
            mode::S_IFSOCK => CreateKind::Socket,
            mode::S_IFCHR => CreateKind::Char(rdev),
            mode::S_IFBLK => CreateKind::Block(rdev),
            _ => return reply.error(Errno::EINVAL),
        };
        self.reply_entry(self.make(req, parent, name, kind, perm, umask), reply)
    }

    pub(crate) fn do_mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, m: u32, umask: u32, reply: ReplyEntry) {
        let perm = (m & 0o7777) as u16;
        self.reply_entry(self.make(req, parent, name, CreateKind::Dir, perm, umask), reply)
    }

    pub(crate) fn do_symlink(&self, req: &Request, parent: INodeNo, name: &OsStr, target: &Path, reply: ReplyEntry) {
        let kind = CreateKind::Symlink(target.as_os_str().as_bytes().to_vec());
        self.reply_entry(self.make(req, parent, name, kind, 0o777, 0), reply)
    }

    pub(crate) fn do_create(&self, req: &Request, parent: INodeNo, name: &OsStr, m: u32, umask: u32, reply: ReplyCreate) {
        let perm = (m & 0o7777) as u16;
        match self.make(req, parent, name, CreateKind::File, perm, umask) {
            Ok(i) => {
                self.vol.opened(i.ino);
                reply.created(&self.policy.ttl, &self.attr(&i), Generation(u64::from(i.base.generation)), FileHandle(0), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn do_link(&self, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let r = (|| {
            let i = crate::ext4_ino(ino)?;
            let p = crate::ext4_ino(newparent)?;
            self.vol.link(i, p, newname.as_bytes()).map_err(|e| errno(&e))
        })();
        self.reply_entry(r, reply)
    }

    pub(crate) fn do_unlink(&self, parent: INodeNo, name: &OsStr, dir: bool, reply: ReplyEmpty) {
        let r = crate::ext4_ino(parent).and_then(|p| {
            let res = if dir { self.vol.rmdir(p, name.as_bytes()) } else { self.vol.unlink(p, name.as_bytes()) };
            res.map_err(|e| errno(&e))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// `owner`: the caller's uid and gid, for the whiteout RENAME_WHITEOUT leaves.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_rename(&self, parent: INodeNo, name: &OsStr, newparent: INodeNo, newname: &OsStr, flags: RenameFlags, owner: (u32, u32), reply: ReplyEmpty) {
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let exchange = flags.contains(RenameFlags::RENAME_EXCHANGE);
        let whiteout = flags.contains(RenameFlags::RENAME_WHITEOUT);
        if exchange && (noreplace || whiteout) {
            return reply.error(Errno::EINVAL);
        }
        let r = (|| {
            let p = crate::ext4_ino(parent)?;
            let np = crate::ext4_ino(newparent)?;
            let (name, newname) = (name.as_bytes(), newname.as_bytes());
            if whiteout {
                return self.vol.rename_whiteout(p, name, np, newname, noreplace, owner.0, owner.1).map_err(|e| errno(&e));
            }
            self.vol.rename(p, name, np, newname, noreplace, exchange).map_err(|e| errno(&e))
        })();
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn do_write(&self, ino: INodeNo, offset: u64, data: &[u8], reply: ReplyWrite) {
        match crate::ext4_ino(ino).and_then(|i| self.vol.write(i, offset, data).map_err(|e| errno(&e))) {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(e),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_setattr(
        &self,
        ino: INodeNo,
        m: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        reply: ReplyAttr,
    ) {
        let is_now = |t: &Option<TimeOrNow>| matches!(t, None | Some(TimeOrNow::Now));
        let attr = SetAttr {
            times_now: is_now(&atime) && is_now(&mtime),
            mode: m.map(|m| (m & 0o7777) as u16),
            uid,
            gid,
            size,
            atime: atime.map(now_or),
            mtime: mtime.map(now_or),
            ctime: ctime.map(to_timestamp),
        };
        match crate::ext4_ino(ino).and_then(|i| self.vol.setattr(i, &attr).map_err(|e| errno(&e))) {
            Ok(i) => reply.attr(&self.policy.ttl, &self.attr(&i)),
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn do_sync(&self, reply: ReplyEmpty) {
        match self.vol.sync() {
            Ok(()) | Err(FsError::ReadOnly) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

pub(crate) fn ignore_write_flags(_: WriteFlags) {}

#[allow(dead_code)]
fn _ino(i: u32) -> INodeNo {
    fuse_ino(i)
}
