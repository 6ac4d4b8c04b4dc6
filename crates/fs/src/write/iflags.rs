//! Inode flags as chattr/lsattr see them (FS_IOC_GETFLAGS / SETFLAGS, the
//! same bits as ext4's i_flags), and the rules immutable and append-only
//! inodes impose on every operation. For FUSE the kernel does not know these
//! flags (its inodes never carry S_IMMUTABLE or S_APPEND), so the checks the
//! VFS makes for ext4 (may_open, may_delete, notify_change, may_write_xattr,
//! vfs_fallocate) are made here, with the same EPERM.

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::inode::{flags as fl, Inode};

/// Bits GETFLAGS shows (ext4's EXT4_FL_USER_VISIBLE).
pub const USER_VISIBLE: u32 = 0x725B_DFFF;
/// Bits SETFLAGS may change (EXT4_FL_USER_MODIFIABLE); other visible bits
/// are kept as they are, as ext4 does (chattr writes back what it read).
pub const USER_MODIFIABLE: u32 = 0x624B_C0FF;
/// Modifiable bits whose change needs work this engine does not do (data
/// journalling, migration between block maps and extents, case folding).
const NOT_CHANGEABLE: u32 = fl::JOURNAL_DATA | fl::EXTENTS | fl::CASEFOLD;
/// Flags a new inode takes from its directory (EXT4_FL_INHERITED without
/// JOURNAL_DATA, which this engine does not honour).
const INHERITED: u32 = fl::SECRM
    | fl::UNRM
    | fl::COMPR
    | fl::SYNC
    | fl::NODUMP
    | fl::NOATIME
    | fl::NOCOMPR
    | fl::NOTAIL
    | fl::DIRSYNC
    | fl::PROJINHERIT;
/// Directory-only flags (ext4_mask_flags).
const DIR_ONLY: u32 = fl::DIRSYNC | fl::TOPDIR | fl::CASEFOLD | fl::PROJINHERIT;

/// The flags that make sense for an inode of this mode (ext4_mask_flags).
pub fn mask_for_mode(mode: u16, flags: u32) -> u32 {
    use ondisk::inode::mode as m;
    match mode & m::S_IFMT {
        m::S_IFDIR => flags,
        m::S_IFREG => flags & !DIR_ONLY,
        _ => flags & (fl::NODUMP | fl::NOATIME),
    }
}

/// Flags a new inode of `mode` inherits from its directory's flags.
pub fn inherited(dir_flags: u32, mode: u16) -> u32 {
    mask_for_mode(mode, dir_flags & INHERITED)
}

/// Data operations (write, fallocate, truncate) work on regular files only:
/// a directory is EISDIR, anything else EINVAL (as the VFS answers).
pub fn regular_file(inode: &Inode) -> Result<()> {
    if inode.is_reg() {
        Ok(())
    } else if inode.is_dir() {
        Err(FsError::IsDir)
    } else {
        Err(FsError::Invalid("not a regular file".into()))
    }
}

/// Whether data may be written at `offset` of `inode`: a regular file, not
/// immutable, and an append-only one only at its end (EPERM otherwise).
pub fn may_write_at(inode: &Inode, offset: u64) -> Result<()> {
    regular_file(inode)?;
    refuse_if(inode, fl::IMMUTABLE)?;
    if inode.has_flag(fl::APPEND) && offset != inode.size() {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// EPERM if the inode has any of `flags` (IMMUTABLE, APPEND).
pub fn refuse_if(inode: &Inode, flags: u32) -> Result<()> {
    if inode.base.flags & flags != 0 {
        return Err(FsError::NotPermitted);
    }
    Ok(())
}

/// Whether writes to this inode must be durable when the call returns
/// (the sync flag; for directories also dirsync).
pub fn wants_sync(inode: &Inode) -> bool {
    let f = inode.base.flags;
    f & fl::SYNC != 0 || (inode.is_dir() && f & fl::DIRSYNC != 0)
}

/// How a file is being opened, for the immutable/append-only checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpenAccess {
    Read,
    /// Write access; `append` when opened with O_APPEND.
    Write {
        append: bool,
    },
}

impl Volume {
    /// The flags FS_IOC_GETFLAGS reports.
    pub fn flags(&self, inode: &Inode) -> u32 {
        let f = inode.base.flags & USER_VISIBLE;
        if inode.is_reg() {
            f & !fl::PROJINHERIT
        } else {
            f
        }
    }

    /// FS_IOC_SETFLAGS. `may_set_immutable`: the caller holds
    /// CAP_LINUX_IMMUTABLE (needed to change IMMUTABLE or APPEND).
    pub fn set_flags(&self, ino: u32, new: u32, may_set_immutable: bool) -> Result<Inode> {
        if new & !USER_VISIBLE != 0 {
            return Err(FsError::Unsupported(format!("inode flags {:#x}", new & !USER_VISIBLE)));
        }
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            let old = inode.base.flags;
            let new = new & USER_MODIFIABLE;
            if mask_for_mode(inode.base.mode, new) != new {
                return Err(FsError::Unsupported("flag not valid for this file type".into()));
            }
            let changed = (old ^ new) & USER_MODIFIABLE;
            if changed & (fl::IMMUTABLE | fl::APPEND) != 0 && !may_set_immutable {
                return Err(FsError::NotPermitted);
            }
            // An immutable inode that stays immutable may not change anything else.
            if old & new & fl::IMMUTABLE != 0 && changed != 0 {
                return Err(FsError::NotPermitted);
            }
            if changed & NOT_CHANGEABLE != 0 {
                return Err(FsError::Unsupported(format!("changing inode flags {:#x}", changed & NOT_CHANGEABLE)));
            }
            inode.set_flags((old & !USER_MODIFIABLE) | new);
            super::ops::touch_ctime(&mut inode);
            self.write_inode(ws, &inode)?;
            Ok(inode)
        })
    }

    /// The checks open(2) makes on an immutable or append-only file:
    /// no write access to the first, write access only with O_APPEND to the
    /// second (O_TRUNC comes as a separate truncate, refused there).
    pub fn check_open(&self, inode: &Inode, access: OpenAccess) -> Result<()> {
        match access {
            OpenAccess::Read => Ok(()),
            OpenAccess::Write { append } => {
                refuse_if(inode, fl::IMMUTABLE)?;
                if !append {
                    refuse_if(inode, fl::APPEND)?;
                }
                Ok(())
            }
        }
    }

    /// Note that the running operation changed an inode that asks for
    /// synchronous updates: the operation commits before it returns.
    pub(super) fn note_sync(&self, ws: &mut WriteState, inode: &Inode) {
        if wants_sync(inode) {
            ws.sync_wanted = true;
        }
    }
}
