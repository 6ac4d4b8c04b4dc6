//! Conversions from engine attributes to FUSE's.

use fs::{Stat, Timestamp};
use fusewire::Attr;
use ondisk::dir::ftype;

fn time(t: Timestamp) -> (i64, u32) {
    (t.sec, t.nsec.min(999_999_999))
}

/// The DT_* type readdir reports for an ext4 directory entry's file type.
pub fn dirent_kind(t: u8) -> u32 {
    u32::from(match t {
        ftype::DIR => libc::DT_DIR,
        ftype::SYMLINK => libc::DT_LNK,
        ftype::CHR => libc::DT_CHR,
        ftype::BLK => libc::DT_BLK,
        ftype::FIFO => libc::DT_FIFO,
        ftype::SOCK => libc::DT_SOCK,
        _ => libc::DT_REG,
    })
}

pub fn to_file_attr(s: &Stat, ino: u64) -> Attr {
    Attr {
        ino,
        size: s.size,
        blocks: s.blocks,
        atime: time(s.atime),
        mtime: time(s.mtime),
        ctime: time(s.ctime),
        mode: u32::from(s.mode),
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        rdev: s.rdev,
        blksize: s.blksize,
    }
}

/// Attributes for an entry whose inode cannot be read (used with a zero TTL).
pub fn placeholder(ino: u64, dirent_type: u8) -> Attr {
    // DT_* << 12 is the S_IF* type.
    Attr { ino, mode: dirent_kind(dirent_type) << 12, nlink: 1, blksize: 4096, ..Default::default() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::inode::mode;

    #[test]
    fn times_and_types() {
        assert_eq!(time(Timestamp { sec: -1, nsec: 500_000_000 }), (-1, 500_000_000));
        assert_eq!(time(Timestamp { sec: 10, nsec: 2_000_000_000 }), (10, 999_999_999));
        assert_eq!(placeholder(5, ftype::DIR).mode, u32::from(mode::S_IFDIR));
        assert_eq!(placeholder(5, ftype::SYMLINK).mode, u32::from(mode::S_IFLNK));
        assert_eq!(placeholder(5, ftype::REG).mode, u32::from(mode::S_IFREG));
    }
}
