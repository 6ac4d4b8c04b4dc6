//! Conversions from engine attributes to FUSE's.

use fs::{Stat, Timestamp};
use fuser::{AccessFlags, FileAttr, FileType, INodeNo};
use ondisk::dir::ftype;
use ondisk::inode::mode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub fn to_system_time(t: Timestamp) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec.min(999_999_999))
    } else {
        // Negative seconds with positive nanoseconds: go back, then forward.
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(u64::from(t.nsec.min(999_999_999)))
    }
}

pub fn file_kind(m: u16) -> FileType {
    match m & mode::S_IFMT {
        mode::S_IFDIR => FileType::Directory,
        mode::S_IFLNK => FileType::Symlink,
        mode::S_IFCHR => FileType::CharDevice,
        mode::S_IFBLK => FileType::BlockDevice,
        mode::S_IFIFO => FileType::NamedPipe,
        mode::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn dirent_kind(t: u8) -> FileType {
    match t {
        ftype::DIR => FileType::Directory,
        ftype::SYMLINK => FileType::Symlink,
        ftype::CHR => FileType::CharDevice,
        ftype::BLK => FileType::BlockDevice,
        ftype::FIFO => FileType::NamedPipe,
        ftype::SOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub fn to_file_attr(s: &Stat, ino: INodeNo) -> FileAttr {
    FileAttr {
        ino,
        size: s.size,
        blocks: s.blocks,
        atime: to_system_time(s.atime),
        mtime: to_system_time(s.mtime),
        ctime: to_system_time(s.ctime),
        crtime: to_system_time(s.crtime.unwrap_or_default()),
        kind: file_kind(s.mode),
        perm: s.mode & 0o7777,
        nlink: s.nlink,
        uid: s.uid,
        gid: s.gid,
        rdev: s.rdev,
        blksize: s.blksize,
        flags: 0,
    }
}

/// Attributes for an entry whose inode cannot be read (used with a zero TTL).
pub fn placeholder(ino: INodeNo, dirent_type: u8) -> FileAttr {
    FileAttr {
        ino,
        size: 0,
        blocks: 0,
        atime: UNIX_EPOCH,
        mtime: UNIX_EPOCH,
        ctime: UNIX_EPOCH,
        crtime: UNIX_EPOCH,
        kind: dirent_kind(dirent_type),
        perm: 0,
        nlink: 1,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// The classic permission check (used when the kernel does not check for us).
/// Supplementary groups are not known here, so only the primary group counts.
pub fn may_access(s: &Stat, uid: u32, gid: u32, mask: AccessFlags) -> bool {
    let want = (if mask.contains(AccessFlags::R_OK) { 4 } else { 0 })
        | (if mask.contains(AccessFlags::W_OK) { 2 } else { 0 })
        | (if mask.contains(AccessFlags::X_OK) { 1 } else { 0 });
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
    fn times_before_and_after_epoch() {
        let t = to_system_time(Timestamp { sec: -1, nsec: 500_000_000 });
        assert_eq!(UNIX_EPOCH.duration_since(t).unwrap(), Duration::from_millis(500));
        let t = to_system_time(Timestamp { sec: 10, nsec: 1 });
        assert_eq!(t.duration_since(UNIX_EPOCH).unwrap(), Duration::new(10, 1));
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
        assert!(may_access(&s, 1000, 1, AccessFlags::R_OK | AccessFlags::W_OK));
        assert!(may_access(&s, 2000, 100, AccessFlags::R_OK));
        assert!(!may_access(&s, 2000, 100, AccessFlags::W_OK));
        assert!(!may_access(&s, 2000, 200, AccessFlags::R_OK));
        assert!(!may_access(&s, 0, 0, AccessFlags::X_OK));
        assert!(may_access(&s, 0, 0, AccessFlags::R_OK | AccessFlags::W_OK));
    }
}
