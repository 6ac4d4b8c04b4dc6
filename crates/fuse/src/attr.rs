//! Conversions from engine attributes to FUSE's.

use fs::{Stat, Timestamp};
use fusewire::Attr;
use ondisk::dir::ftype;
use ondisk::inode::mode;

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

/// The classic permission check (used when the kernel does not check for us).
/// Supplementary groups are not known here, so only the primary group counts.
/// `mask`: access(2)'s R_OK, W_OK, X_OK bits.
pub fn may_access(s: &Stat, uid: u32, gid: u32, mask: u32) -> bool {
    let want = mask & 7;
    let perm = u32::from(s.mode);
    if uid == 0 {
        // root may do anything, except execute a file with no execute bit at all.
        return want & 1 == 0 || perm & 0o111 != 0 || s.mode & mode::S_IFMT == mode::S_IFDIR;
    }
    let bits = if uid == s.uid {
        (perm >> 6) & 7
    } else if gid == s.gid {
        (perm >> 3) & 7
    } else {
        perm & 7
    };
    bits & want == want
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_types() {
        assert_eq!(time(Timestamp { sec: -1, nsec: 500_000_000 }), (-1, 500_000_000));
        assert_eq!(time(Timestamp { sec: 10, nsec: 2_000_000_000 }), (10, 999_999_999));
        assert_eq!(placeholder(5, ftype::DIR).mode, u32::from(mode::S_IFDIR));
        assert_eq!(placeholder(5, ftype::SYMLINK).mode, u32::from(mode::S_IFLNK));
        assert_eq!(placeholder(5, ftype::REG).mode, u32::from(mode::S_IFREG));
    }

    #[test]
    fn permission_bits() {
        let s = Stat {
            ino: 12,
            mode: mode::S_IFREG | 0o640,
            nlink: 1,
            uid: 1000,
            gid: 100,
            size: 0,
            blocks: 0,
            atime: Timestamp::default(),
            mtime: Timestamp::default(),
            ctime: Timestamp::default(),
            crtime: None,
            rdev: 0,
            blksize: 4096,
        };
        assert!(may_access(&s, 1000, 1, 6));
        assert!(may_access(&s, 2000, 100, 4));
        assert!(!may_access(&s, 2000, 100, 2));
        assert!(!may_access(&s, 2000, 200, 4));
        assert!(!may_access(&s, 0, 0, 1));
        assert!(may_access(&s, 0, 0, 6));
    }
}
