//! stat(2) attributes of an inode.

use crate::read_core::ReadCore;
use ondisk::inode::{mode, Inode, Timestamp};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ino: u32,
    /// Type and permission bits, as in `st_mode`.
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    /// 512-byte units.
    pub blocks: u64,
    pub atime: Timestamp,
    pub mtime: Timestamp,
    pub ctime: Timestamp,
    pub crtime: Option<Timestamp>,
    pub rdev: u32,
    pub blksize: u32,
}

impl ReadCore {
    pub fn stat(&self, inode: &Inode) -> Stat {
        let ft = inode.file_type();
        let rdev = if ft == mode::S_IFCHR || ft == mode::S_IFBLK { inode.rdev() } else { 0 };
        // As the kernel (ext4_file_getattr, regular files only): inline data counts its bytes as used sectors, so tools
        // (tar, rsync) do not take a small inline file for a sparse one.
        let inline = if inode.is_reg() && inode.has_flag(ondisk::inode::flags::INLINE_DATA) {
            inode.size().div_ceil(512)
        } else {
            0
        };
        // ... and blocks reserved for delayed data count as used (ext4_getattr's i_reserved_data_blocks).
        let delayed =
            if inode.is_reg() { self.delayed.file_blocks(inode.ino) * u64::from(self.block_size / 512) } else { 0 };
        Stat {
            ino: inode.ino,
            mode: inode.base.mode,
            nlink: u32::from(inode.links_count()),
            uid: inode.uid(),
            gid: inode.gid(),
            size: inode.size(),
            blocks: inode.blocks_512(&self.sb) + inline + delayed,
            atime: inode.atime(),
            mtime: inode.mtime(),
            ctime: inode.ctime(),
            crtime: inode.crtime(),
            rdev,
            blksize: self.block_size,
        }
    }
}
