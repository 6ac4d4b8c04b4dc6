//! Requests: the kernel's bytes turned into typed operations. A request
//! arrives as a header, the opcode's fixed struct, and a payload (names,
//! data): contiguous on /dev/fuse, in separate buffers over io_uring, so the
//! parser takes the two parts apart and both transports share it.

use crate::abi::{fattr, fixed_size, op, Fields, InHeader, FSYNC_FDATASYNC, GETATTR_FH, OPEN_KILL_SUIDGID};
use crate::Errno;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

/// Who asks, about which node.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl From<&InHeader> for Request {
    fn from(h: &InHeader) -> Self {
        Request { opcode: h.opcode, unique: h.unique, nodeid: h.nodeid, uid: h.uid, gid: h.gid, pid: h.pid }
    }
}

/// A time a SETATTR sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTime {
    Now,
    At { sec: i64, nsec: u32 },
}

/// SETATTR's arguments: only the fields `valid` marks are present.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SetAttrIn {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<SetTime>,
    pub mtime: Option<SetTime>,
    pub ctime: Option<(i64, u32)>,
    /// FATTR_KILL_SUIDGID: the change must clear set-user-ID and set-group-ID
    /// (sent with FUSE_HANDLE_KILLPRIV_V2).
    pub kill_suidgid: bool,
}

/// One operation, borrowing names and data from the request buffer.
#[derive(Debug)]
pub enum Op<'a> {
    Lookup {
        name: &'a OsStr,
    },
    GetAttr {
        fh: Option<u64>,
    },
    SetAttr(SetAttrIn),
    ReadLink,
    Symlink {
        name: &'a OsStr,
        target: &'a [u8],
    },
    Mknod {
        name: &'a OsStr,
        mode: u32,
        rdev: u32,
        umask: u32,
    },
    Mkdir {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
    },
    Unlink {
        name: &'a OsStr,
    },
    Rmdir {
        name: &'a OsStr,
    },
    Rename {
        name: &'a OsStr,
        newdir: u64,
        newname: &'a OsStr,
        flags: u32,
    },
    /// The header's node is the new parent; `ino` is the inode linked.
    Link {
        ino: u64,
        newname: &'a OsStr,
    },
    /// `kill_suidgid`: with O_TRUNC, the truncation must clear set-user-ID
    /// and set-group-ID (FUSE_OPEN_KILL_SUIDGID, with FUSE_HANDLE_KILLPRIV_V2).
    Open {
        flags: i32,
        kill_suidgid: bool,
    },
    Read {
        offset: u64,
        size: u32,
    },
    Write {
        offset: u64,
        data: &'a [u8],
        write_flags: u32,
    },
    Statfs,
    Release,
    Fsync {
        datasync: bool,
    },
    FsyncDir {
        datasync: bool,
    },
    SetXattr {
        name: &'a OsStr,
        value: &'a [u8],
        flags: i32,
    },
    GetXattr {
        name: &'a OsStr,
        size: u32,
    },
    ListXattr {
        size: u32,
    },
    RemoveXattr {
        name: &'a OsStr,
    },
    Flush,
    OpenDir,
    ReadDir {
        offset: u64,
        size: u32,
    },
    ReadDirPlus {
        offset: u64,
        size: u32,
    },
    ReleaseDir,
    Access {
        mask: u32,
    },
    Create {
        name: &'a OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
    },
    /// O_TMPFILE in the header's directory: an open file with no name.
    TmpFile {
        mode: u32,
        umask: u32,
        flags: i32,
    },
    Ioctl {
        cmd: u32,
        flags: u32,
        in_data: &'a [u8],
        out_size: u32,
    },
    Fallocate {
        offset: u64,
        length: u64,
        mode: i32,
    },
    Lseek {
        offset: u64,
        whence: u32,
    },
    /// Anything else: answered ENOSYS, which the kernel remembers for most.
    Unsupported(u32),
}

impl<'a> Op<'a> {
    /// The directory entry the request names (LOOKUP, CREATE, UNLINK, ...;
    /// RENAME's old name, LINK's new one), if any.
    pub fn entry_name(&self) -> Option<&'a OsStr> {
        match *self {
            Op::Lookup { name }
            | Op::Symlink { name, .. }
            | Op::Mknod { name, .. }
            | Op::Mkdir { name, .. }
            | Op::Unlink { name }
            | Op::Rmdir { name }
            | Op::Rename { name, .. }
            | Op::Create { name, .. } => Some(name),
            Op::Link { newname, .. } => Some(newname),
            _ => None,
        }
    }
}

/// Split a NUL-terminated name off the front of `b`.
fn name(b: &[u8]) -> Result<(&OsStr, &[u8]), Errno> {
    let end = b.iter().position(|&c| c == 0).ok_or(Errno::EINVAL)?;
    Ok((OsStr::from_bytes(&b[..end]), &b[end + 1..]))
}

fn one_name(b: &[u8]) -> Result<&OsStr, Errno> {
    name(b).map(|(n, _)| n)
}

fn time(sec: u64, nsec: u32) -> (i64, u32) {
    (sec as i64, nsec.min(999_999_999))
}

fn setattr(f: Fields<'_>) -> SetAttrIn {
    let valid = f.u32(0);
    let has = |bit: u32| valid & bit != 0;
    let set_time = |bit: u32, now: u32, sec_at: usize, nsec_at: usize| {
        if has(now) {
            Some(SetTime::Now)
        } else if has(bit) {
            let (sec, nsec) = time(f.u64(sec_at), f.u32(nsec_at));
            Some(SetTime::At { sec, nsec })
        } else {
            None
        }
    };
    SetAttrIn {
        mode: has(fattr::MODE).then(|| f.u32(68)),
        uid: has(fattr::UID).then(|| f.u32(76)),
        gid: has(fattr::GID).then(|| f.u32(80)),
        size: has(fattr::SIZE).then(|| f.u64(16)),
        atime: set_time(fattr::ATIME, fattr::ATIME_NOW, 32, 56),
        mtime: set_time(fattr::MTIME, fattr::MTIME_NOW, 40, 60),
        ctime: has(fattr::CTIME).then(|| time(f.u64(48), f.u32(64))),
        kill_suidgid: has(fattr::KILL_SUIDGID),
    }
}

/// FORGET's lookup count; None when the struct is short.
pub fn forget(fixed: &[u8]) -> Option<u64> {
    Fields::new(fixed, fixed_size(crate::abi::op::FORGET)).map(|f| f.u64(0))
}

/// INTERRUPT's target: the unique id of the request to interrupt.
pub fn interrupt(fixed: &[u8]) -> Option<u64> {
    Fields::new(fixed, fixed_size(crate::abi::op::INTERRUPT)).map(|f| f.u64(0))
}

/// BATCH_FORGET's (nodeid, nlookup) pairs: `count` in the fixed struct, then
/// 16 bytes each; a count beyond the payload is cut to what arrived.
pub fn batch_forget<'a>(fixed: &'a [u8], payload: &'a [u8]) -> impl Iterator<Item = (u64, u64)> + 'a {
    let count = Fields::new(fixed, fixed_size(crate::abi::op::BATCH_FORGET)).map_or(0, |f| f.u32(0) as usize);
    payload.chunks_exact(16).take(count).filter_map(|c| Fields::new(c, 16).map(|f| (f.u64(0), f.u64(8))))
}

/// Parse one request. `fixed` holds at least the opcode's fixed struct
/// ([`fixed_size`]); `payload` what follows it, extensions removed.
pub fn parse<'a>(opcode: u32, fixed: &'a [u8], payload: &'a [u8]) -> Result<Op<'a>, Errno> {
    let f = Fields::new(fixed, fixed_size(opcode)).ok_or(Errno::EINVAL)?;
    Ok(match opcode {
        op::LOOKUP => Op::Lookup { name: one_name(payload)? },
        op::GETATTR => Op::GetAttr { fh: (f.u32(0) & GETATTR_FH != 0).then(|| f.u64(8)) },
        op::SETATTR => Op::SetAttr(setattr(f)),
        op::READLINK => Op::ReadLink,
        op::SYMLINK => {
            let (name, rest) = name(payload)?;
            Op::Symlink { name, target: one_name(rest)?.as_bytes() }
        }
        op::MKNOD => Op::Mknod { name: one_name(payload)?, mode: f.u32(0), rdev: f.u32(4), umask: f.u32(8) },
        op::MKDIR => Op::Mkdir { name: one_name(payload)?, mode: f.u32(0), umask: f.u32(4) },
        op::UNLINK => Op::Unlink { name: one_name(payload)? },
        op::RMDIR => Op::Rmdir { name: one_name(payload)? },
        op::RENAME | op::RENAME2 => {
            let (name, rest) = name(payload)?;
            let flags = if opcode == op::RENAME2 { f.u32(8) } else { 0 };
            Op::Rename { name, newdir: f.u64(0), newname: one_name(rest)?, flags }
        }
        op::LINK => Op::Link { ino: f.u64(0), newname: one_name(payload)? },
        op::OPEN => Op::Open { flags: f.u32(0) as i32, kill_suidgid: f.u32(4) & OPEN_KILL_SUIDGID != 0 },
        op::READ => Op::Read { offset: f.u64(8), size: f.u32(16) },
        op::READDIR => Op::ReadDir { offset: f.u64(8), size: f.u32(16) },
        op::READDIRPLUS => Op::ReadDirPlus { offset: f.u64(8), size: f.u32(16) },
        op::WRITE => {
            let size = f.u32(16) as usize;
            let data = payload.get(..size).ok_or(Errno::EINVAL)?;
            Op::Write { offset: f.u64(8), data, write_flags: f.u32(20) }
        }
        op::STATFS => Op::Statfs,
        op::RELEASE => Op::Release,
        op::RELEASEDIR => Op::ReleaseDir,
        op::FSYNC => Op::Fsync { datasync: f.u32(8) & FSYNC_FDATASYNC != 0 },
        op::FSYNCDIR => Op::FsyncDir { datasync: f.u32(8) & FSYNC_FDATASYNC != 0 },
        op::SETXATTR => {
            let (name, rest) = name(payload)?;
            let value = rest.get(..f.u32(0) as usize).ok_or(Errno::EINVAL)?;
            Op::SetXattr { name, value, flags: f.u32(4) as i32 }
        }
        op::GETXATTR => Op::GetXattr { name: one_name(payload)?, size: f.u32(0) },
        op::LISTXATTR => Op::ListXattr { size: f.u32(0) },
        op::REMOVEXATTR => Op::RemoveXattr { name: one_name(payload)? },
        op::FLUSH => Op::Flush,
        op::OPENDIR => Op::OpenDir,
        op::ACCESS => Op::Access { mask: f.u32(0) },
        op::CREATE => Op::Create { name: one_name(payload)?, flags: f.u32(0) as i32, mode: f.u32(4), umask: f.u32(8) },
        op::TMPFILE => Op::TmpFile { flags: f.u32(0) as i32, mode: f.u32(4), umask: f.u32(8) },
        op::IOCTL => {
            let in_size = f.u32(24) as usize;
            let in_data = payload.get(..in_size).ok_or(Errno::EINVAL)?;
            Op::Ioctl { flags: f.u32(8), cmd: f.u32(12), in_data, out_size: f.u32(28) }
        }
        op::FALLOCATE => Op::Fallocate { offset: f.u64(8), length: f.u64(16), mode: f.u32(24) as i32 },
        op::LSEEK => Op::Lseek { offset: f.u64(8), whence: f.u32(16) },
        other => Op::Unsupported(other),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Out;

    #[test]
    fn names_and_data() {
        let op = parse(op::LOOKUP, &[], b"hello\0").unwrap();
        assert!(matches!(op, Op::Lookup { name } if name == "hello"));
        let op = parse(op::SYMLINK, &[], b"link\0/target/path\0").unwrap();
        assert!(matches!(op, Op::Symlink { name, target } if name == "link" && target == b"/target/path"));
        let mut fixed = Vec::new();
        Out(&mut fixed).u64(5).u32(0).u32(0);
        let op = parse(op::RENAME2, &fixed, b"a\0b\0").unwrap();
        assert!(matches!(op, Op::Rename { name, newdir: 5, newname, flags: 0 } if name == "a" && newname == "b"));
        assert_eq!(parse(op::LOOKUP, &[], b"no-nul").unwrap_err(), Errno::EINVAL);
    }

    #[test]
    fn forget_counts_stop_at_the_struct_and_payload() {
        let mut fixed = Vec::new();
        Out(&mut fixed).u32(3).u32(0);
        let mut payload = Vec::new();
        Out(&mut payload).u64(12).u64(1).u64(13).u64(40).u64(14).u64(2).u64(15).u64(9);
        assert_eq!(batch_forget(&fixed, &payload).collect::<Vec<_>>(), vec![(12, 1), (13, 40), (14, 2)]);
        assert_eq!(
            batch_forget(&fixed, &payload[..20]).collect::<Vec<_>>(),
            vec![(12, 1)],
            "a cut payload ends the list"
        );
        assert_eq!(batch_forget(&fixed[..4], &payload).count(), 0, "a short struct yields nothing");
        assert_eq!(forget(&payload[..8]), Some(12));
        assert_eq!(forget(&payload[..7]), None);
    }

    #[test]
    fn write_takes_exactly_its_size() {
        let mut fixed = Vec::new();
        Out(&mut fixed).u64(0).u64(4096).u32(3).u32(0).u64(0).u32(0).u32(0);
        let op = parse(op::WRITE, &fixed, b"abcdef").unwrap();
        assert!(matches!(op, Op::Write { offset: 4096, data: b"abc", .. }));
        assert_eq!(parse(op::WRITE, &fixed, b"ab").unwrap_err(), Errno::EINVAL, "short data is refused");
        assert_eq!(parse(op::WRITE, &fixed[..20], b"abc").unwrap_err(), Errno::EINVAL, "short struct is refused");
    }

    #[test]
    fn setattr_fields_follow_valid() {
        let mut b = Vec::new();
        let valid = fattr::MODE | fattr::SIZE | fattr::MTIME | fattr::ATIME_NOW | fattr::KILL_SUIDGID;
        // valid, padding, fh, size, lock_owner, atime, mtime, ctime, atimensec, mtimensec, ctimensec, mode, unused4, uid, gid, unused5
        Out(&mut b)
            .u32(valid)
            .u32(0)
            .u64(0)
            .u64(77)
            .u64(0)
            .u64(1)
            .u64(1_000)
            .u64(3)
            .u32(2)
            .u32(500)
            .u32(4)
            .u32(0o100644)
            .u32(0)
            .u32(9)
            .u32(9)
            .u32(0);
        assert_eq!(b.len(), 88);
        let Op::SetAttr(s) = parse(op::SETATTR, &b, &[]).unwrap() else { panic!() };
        assert_eq!(s.mode, Some(0o100644));
        assert_eq!(s.size, Some(77));
        assert_eq!(s.atime, Some(SetTime::Now));
        assert_eq!(s.mtime, Some(SetTime::At { sec: 1_000, nsec: 500 }));
        assert_eq!((s.uid, s.gid, s.ctime), (None, None, None));
        assert!(s.kill_suidgid);
    }
}
