//! The FUSE wire format, as the kernel's include/uapi/linux/fuse.h defines it:
//! opcodes, flags, and the sizes and field offsets of the fixed structs. The
//! protocol uses the host's byte order. Everything that reads or writes a
//! FUSE struct goes through [`Fields`] and [`Out`], so the offsets live here.

/// The protocol version we speak. 7.31 is the oldest kernel protocol whose
/// struct sizes we rely on (Linux 5.4); io_uring needs 7.42 (Linux 6.14).
pub const MAJOR: u32 = 7;
pub const MAX_MINOR: u32 = 45;
pub const MIN_MINOR: u32 = 31;

pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const FORGET: u32 = 2;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const INIT: u32 = 26;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const INTERRUPT: u32 = 36;
    pub const DESTROY: u32 = 38;
    pub const IOCTL: u32 = 39;
    pub const BATCH_FORGET: u32 = 42;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    pub const TMPFILE: u32 = 51;

    /// The opcode fuse.h calls FUSE_`name` (one of the names [`name`] gives).
    pub fn by_name(name: &str) -> Option<u32> {
        (0..64).find(|&op| self::name(op) == Some(name))
    }

    /// The opcode's name as fuse.h spells it, without FUSE_ (for statistics).
    pub fn name(opcode: u32) -> Option<&'static str> {
        Some(match opcode {
            LOOKUP => "LOOKUP",
            FORGET => "FORGET",
            GETATTR => "GETATTR",
            SETATTR => "SETATTR",
            READLINK => "READLINK",
            SYMLINK => "SYMLINK",
            MKNOD => "MKNOD",
            MKDIR => "MKDIR",
            UNLINK => "UNLINK",
            RMDIR => "RMDIR",
            RENAME => "RENAME",
            LINK => "LINK",
            OPEN => "OPEN",
            READ => "READ",
            WRITE => "WRITE",
            STATFS => "STATFS",
            RELEASE => "RELEASE",
            FSYNC => "FSYNC",
            SETXATTR => "SETXATTR",
            GETXATTR => "GETXATTR",
            LISTXATTR => "LISTXATTR",
            REMOVEXATTR => "REMOVEXATTR",
            FLUSH => "FLUSH",
            INIT => "INIT",
            OPENDIR => "OPENDIR",
            READDIR => "READDIR",
            RELEASEDIR => "RELEASEDIR",
            FSYNCDIR => "FSYNCDIR",
            ACCESS => "ACCESS",
            CREATE => "CREATE",
            INTERRUPT => "INTERRUPT",
            DESTROY => "DESTROY",
            IOCTL => "IOCTL",
            BATCH_FORGET => "BATCH_FORGET",
            FALLOCATE => "FALLOCATE",
            READDIRPLUS => "READDIRPLUS",
            RENAME2 => "RENAME2",
            LSEEK => "LSEEK",
            TMPFILE => "TMPFILE",
            _ => return None,
        })
    }
}

/// FUSE_INIT capability bits (bits 32-63 travel in `flags2`).
pub mod init {
    pub const ASYNC_READ: u64 = 1 << 0;
    pub const BIG_WRITES: u64 = 1 << 5;
    pub const DONT_MASK: u64 = 1 << 6;
    pub const DO_READDIRPLUS: u64 = 1 << 13;
    pub const READDIRPLUS_AUTO: u64 = 1 << 14;
    pub const NO_OPEN_SUPPORT: u64 = 1 << 17;
    pub const PARALLEL_DIROPS: u64 = 1 << 18;
    pub const POSIX_ACL: u64 = 1 << 20;
    pub const MAX_PAGES: u64 = 1 << 22;
    pub const CACHE_SYMLINKS: u64 = 1 << 23;
    pub const NO_OPENDIR_SUPPORT: u64 = 1 << 24;
    pub const HANDLE_KILLPRIV_V2: u64 = 1 << 28;
    pub const INIT_EXT: u64 = 1 << 30;
    pub const OVER_IO_URING: u64 = 1 << 41;
}

/// SETATTR `valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
    pub const CTIME: u32 = 1 << 10;
    pub const KILL_SUIDGID: u32 = 1 << 11;
}

pub const FOPEN_DIRECT_IO: u32 = 1 << 0;
pub const FOPEN_KEEP_CACHE: u32 = 1 << 1;
pub const WRITE_KILL_SUIDGID: u32 = 1 << 2;
pub const OPEN_KILL_SUIDGID: u32 = 1 << 0;
pub const FSYNC_FDATASYNC: u32 = 1 << 0;
pub const GETATTR_FH: u32 = 1 << 0;
pub const NOTIFY_INVAL_INODE: i32 = 2;

pub const IN_HEADER: usize = 40;
pub const OUT_HEADER: usize = 16;
pub const ATTR: usize = 88;
pub const ENTRY_OUT: usize = 40 + ATTR;
pub const DIRENT: usize = 24;
pub const INIT_IN_MIN: usize = 16;
pub const INIT_OUT: usize = 64;

/// The size of an opcode's fixed argument struct, the part that precedes
/// names and data (the io_uring transport delivers it apart, as `op_in`).
pub fn fixed_size(opcode: u32) -> usize {
    match opcode {
        op::FORGET => 8,
        op::GETATTR => 16,
        op::SETATTR => 88,
        op::MKNOD => 16,
        op::MKDIR => 8,
        op::RENAME => 8,
        op::RENAME2 => 16,
        op::LINK => 8,
        op::OPEN | op::OPENDIR => 8,
        op::READ | op::READDIR | op::READDIRPLUS | op::WRITE => 40,
        op::RELEASE | op::RELEASEDIR | op::FLUSH => 24,
        op::FSYNC | op::FSYNCDIR => 16,
        // Without FUSE_SETXATTR_EXT, which we do not ask for.
        op::SETXATTR => 8,
        op::GETXATTR | op::LISTXATTR => 8,
        op::ACCESS => 8,
        op::CREATE | op::TMPFILE => 16,
        op::INTERRUPT => 8,
        op::IOCTL => 32,
        op::BATCH_FORGET => 8,
        op::FALLOCATE => 32,
        op::LSEEK => 24,
        op::INIT => INIT_IN_MIN,
        _ => 0,
    }
}

/// Reads fixed-offset fields of a struct whose size was checked once.
#[derive(Clone, Copy)]
pub struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    /// `b` must hold at least `size` bytes.
    pub fn new(b: &'a [u8], size: usize) -> Option<Self> {
        (b.len() >= size).then_some(Fields(b))
    }
    pub fn u16(&self, at: usize) -> u16 {
        u16::from_ne_bytes([self.0[at], self.0[at + 1]])
    }
    pub fn u32(&self, at: usize) -> u32 {
        let b = &self.0[at..at + 4];
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }
    pub fn u64(&self, at: usize) -> u64 {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.0[at..at + 8]);
        u64::from_ne_bytes(a)
    }
}

/// Appends struct fields in order.
pub struct Out<'a>(pub &'a mut Vec<u8>);

impl Out<'_> {
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    /// Pad to the next multiple of 8 (FUSE_REC_ALIGN).
    pub fn align8(&mut self) -> &mut Self {
        let n = self.0.len().next_multiple_of(8) - self.0.len();
        self.zeros(n)
    }
}

/// struct fuse_in_header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InHeader {
    pub len: u32,
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
    /// Length of the extensions after the arguments, in 8-byte units.
    pub total_extlen: u16,
}

impl InHeader {
    pub fn parse(b: &[u8]) -> Option<InHeader> {
        let f = Fields::new(b, IN_HEADER)?;
        Some(InHeader {
            len: f.u32(0),
            opcode: f.u32(4),
            unique: f.u64(8),
            nodeid: f.u64(16),
            uid: f.u32(24),
            gid: f.u32(28),
            pid: f.u32(32),
            total_extlen: f.u16(36),
        })
    }

    #[cfg(test)]
    pub fn write(&self, out: &mut Vec<u8>) {
        Out(out)
            .u32(self.len)
            .u32(self.opcode)
            .u64(self.unique)
            .u64(self.nodeid)
            .u32(self.uid)
            .u32(self.gid)
            .u32(self.pid)
            .u16(self.total_extlen)
            .u16(0);
    }
}

/// struct fuse_out_header: `error` is 0 or a negated errno (or a notify code when unique is 0).
pub fn out_header(len: usize, error: i32, unique: u64) -> [u8; OUT_HEADER] {
    let mut h = [0u8; OUT_HEADER];
    h[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_header_round_trip() {
        let h = InHeader {
            len: 52,
            opcode: op::LOOKUP,
            unique: 7,
            nodeid: 1,
            uid: 1000,
            gid: 100,
            pid: 42,
            total_extlen: 0,
        };
        let mut b = Vec::new();
        h.write(&mut b);
        assert_eq!(b.len(), IN_HEADER);
        assert_eq!(InHeader::parse(&b), Some(h));
        assert_eq!(InHeader::parse(&b[..39]), None, "a short header is refused");
    }

    #[test]
    fn out_align() {
        let mut v = vec![1u8; 13];
        Out(&mut v).align8();
        assert_eq!(v.len(), 16);
        Out(&mut v).align8();
        assert_eq!(v.len(), 16);
    }
}
