//! Attributes: setattr (mode, owner, size, times) and atime updates.

use super::iflags::{refuse_if, regular_file};
use super::now;
use super::ops::touch;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::inode::{flags, mode, Inode, TimeField, Timestamp};

/// Attribute changes (setattr); `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct SetAttr {
    pub mode: Option<u16>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<Timestamp>,
    pub mtime: Option<Timestamp>,
    pub ctime: Option<Timestamp>,
    /// The times given are "now" (utimes with no times), which an
    /// append-only file allows; explicit times it refuses.
    pub times_now: bool,
}

impl Volume {
    /// Change attributes; a size change truncates or extends (sparsely).
    pub fn setattr(&self, ino: u32, attr: &SetAttr) -> Result<Inode> {
        let _map = attr.size.is_some().then(|| self.data_lock(ino).write());
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            // notify_change and truncate: an immutable inode changes in no way,
            // an append-only one only takes "now" times.
            refuse_if(&inode, flags::IMMUTABLE)?;
            let explicit_times = (attr.atime.is_some() || attr.mtime.is_some()) && !attr.times_now;
            if attr.mode.is_some() || attr.uid.is_some() || attr.gid.is_some() || attr.size.is_some() || explicit_times
            {
                refuse_if(&inode, flags::APPEND)?;
            }
            if let Some(m) = attr.mode {
                inode.base.mode = (inode.base.mode & mode::S_IFMT) | (m & 0o7777);
                self.chmod_acl(ws, &mut inode)?;
            }
            if let Some(uid) = attr.uid {
                inode.set_uid(uid);
            }
            if let Some(gid) = attr.gid {
                inode.set_gid(gid);
            }
            if let Some(size) = attr.size {
                // vfs_truncate: directories EISDIR, anything else but a regular file EINVAL.
                regular_file(&inode)?;
                if size > self.max_file_size() {
                    return Err(FsError::FileTooBig); // inode_newsize_ok
                }
                self.convert_inline_file(ws, &mut inode)?;
                self.resize(ws, &mut inode, size)?;
                if attr.mtime.is_none() {
                    touch(&mut inode, true);
                }
            }
            if let Some(t) = attr.atime {
                inode.set_time(TimeField::Access, t);
            }
            if let Some(t) = attr.mtime {
                inode.set_time(TimeField::Modify, t);
            }
            inode.set_time(TimeField::Change, attr.ctime.unwrap_or_else(now));
            self.write_inode(ws, &inode)?;
            Ok(inode)
        })
    }

    /// Record an access (read of a file, listing of a directory) under the
    /// mount's atime policy: `relatime` (the default) updates when atime is not
    /// newer than mtime or ctime, or is more than a day old; `strict` always.
    /// Returns whether atime changed.
    pub fn touch_atime(&self, ino: u32, strict: bool) -> Result<bool> {
        if self.writer.state.is_none() {
            return Ok(false);
        }
        let inode = self.inode(ino)?;
        if inode.has_flag(flags::NOATIME) {
            return Ok(false);
        }
        let (a, m, c) = (inode.atime(), inode.mtime(), inode.ctime());
        let t = now();
        let due = strict || a <= m || a <= c || t.sec - a.sec >= 24 * 3600;
        if !due {
            return Ok(false);
        }
        let r = self.atomic(|ws| {
            let mut inode = self.inode(ino)?; // re-read under the lock
            inode.set_time(TimeField::Access, t);
            self.write_inode(ws, &inode)?;
            ws.sync_wanted = false; // the sync flag is about contents, not access times
            Ok(true)
        });
        match r {
            Err(FsError::ReadOnly) => Ok(false), // turned read-only: reads go on
            r => r,
        }
    }
}
