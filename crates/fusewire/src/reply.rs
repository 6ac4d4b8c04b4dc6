//! Replies: the argument structs a handler appends after the out header.
//! A handler gets an empty buffer and appends one reply with these
//! functions; the transport adds the header.

use crate::abi::{Out, ATTR, DIRENT, ENTRY_OUT};
use std::time::Duration;

/// struct fuse_attr: what stat(2) shows. `mode` carries the file type bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub size: u64,
    pub blocks: u64,
    pub atime: (i64, u32),
    pub mtime: (i64, u32),
    pub ctime: (i64, u32),
    pub mode: u32,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

fn attr(out: &mut Vec<u8>, a: &Attr) {
    let start = out.len();
    Out(out)
        .u64(a.ino)
        .u64(a.size)
        .u64(a.blocks)
        .u64(a.atime.0 as u64)
        .u64(a.mtime.0 as u64)
        .u64(a.ctime.0 as u64)
        .u32(a.atime.1)
        .u32(a.mtime.1)
        .u32(a.ctime.1)
        .u32(a.mode)
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u32(a.rdev)
        .u32(a.blksize)
        .u32(0);
    debug_assert_eq!(out.len() - start, ATTR);
}

/// A name's node for LOOKUP, MKNOD, MKDIR, SYMLINK, LINK (and CREATE's first half).
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub attr: Attr,
    pub generation: u64,
    pub ttl: Duration,
}

/// struct fuse_entry_out.
pub fn entry(out: &mut Vec<u8>, e: &Entry) {
    let start = out.len();
    let (s, ns) = (e.ttl.as_secs(), e.ttl.subsec_nanos());
    Out(out).u64(e.attr.ino).u64(e.generation).u64(s).u64(s).u32(ns).u32(ns);
    attr(out, &e.attr);
    debug_assert_eq!(out.len() - start, ENTRY_OUT);
}

/// struct fuse_attr_out.
pub fn attr_out(out: &mut Vec<u8>, ttl: Duration, a: &Attr) {
    Out(out).u64(ttl.as_secs()).u32(ttl.subsec_nanos()).u32(0);
    attr(out, a);
}

/// struct fuse_open_out.
pub fn open(out: &mut Vec<u8>, fh: u64, open_flags: u32) {
    Out(out).u64(fh).u32(open_flags).u32(0);
}

/// CREATE: an entry, then the open file.
pub fn create(out: &mut Vec<u8>, e: &Entry, fh: u64, open_flags: u32) {
    entry(out, e);
    open(out, fh, open_flags);
}

/// struct fuse_write_out.
pub fn written(out: &mut Vec<u8>, size: u32) {
    Out(out).u32(size).u32(0);
}

/// struct fuse_statfs_out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

pub fn statfs(out: &mut Vec<u8>, s: &Statfs) {
    Out(out)
        .u64(s.blocks)
        .u64(s.bfree)
        .u64(s.bavail)
        .u64(s.files)
        .u64(s.ffree)
        .u32(s.bsize)
        .u32(s.namelen)
        .u32(s.frsize)
        .u32(0)
        .zeros(24);
}

/// GETXATTR/LISTXATTR asked with size 0: struct fuse_getxattr_out.
pub fn xattr_size(out: &mut Vec<u8>, size: u32) {
    Out(out).u32(size).u32(0);
}

/// struct fuse_ioctl_out, then the output data.
pub fn ioctl(out: &mut Vec<u8>, result: i32, data: &[u8]) {
    Out(out).u32(result as u32).u32(0).u32(0).u32(0).bytes(data);
}

/// struct fuse_lseek_out.
pub fn lseek(out: &mut Vec<u8>, offset: u64) {
    Out(out).u64(offset);
}

/// READDIR and READDIRPLUS replies: records until the kernel's buffer is full.
pub struct DirBuf<'a> {
    out: &'a mut Vec<u8>,
    limit: usize,
}

impl<'a> DirBuf<'a> {
    /// `size`: the buffer size the request gave.
    pub fn new(out: &'a mut Vec<u8>, size: u32) -> Self {
        let limit = out.len() + size as usize;
        DirBuf { out, limit }
    }

    fn fits(&self, record: usize) -> bool {
        self.out.len() + record.next_multiple_of(8) <= self.limit
    }

    fn dirent(&mut self, ino: u64, next: u64, dtype: u32, name: &[u8]) {
        Out(self.out).u64(ino).u64(next).u32(name.len() as u32).u32(dtype).bytes(name).align8();
    }

    /// struct fuse_dirent; `next` is the offset that resumes after this one.
    /// False (and nothing added) when the buffer is full.
    pub fn add(&mut self, ino: u64, next: u64, dtype: u32, name: &[u8]) -> bool {
        if !self.fits(DIRENT + name.len()) {
            return false;
        }
        self.dirent(ino, next, dtype, name);
        true
    }

    /// struct fuse_direntplus: the entry (as LOOKUP would answer), then the dirent.
    pub fn add_plus(&mut self, e: &Entry, next: u64, dtype: u32, name: &[u8]) -> bool {
        if !self.fits(ENTRY_OUT + DIRENT + name.len()) {
            return false;
        }
        entry(self.out, e);
        self.dirent(e.attr.ino, next, dtype, name);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_kernel() {
        let e = Entry { attr: Attr::default(), generation: 0, ttl: Duration::from_millis(1500) };
        let mut v = Vec::new();
        entry(&mut v, &e);
        assert_eq!(v.len(), 128);
        assert_eq!(&v[16..24], &1u64.to_ne_bytes(), "entry_valid seconds");
        assert_eq!(&v[32..36], &500_000_000u32.to_ne_bytes(), "entry_valid_nsec");
        v.clear();
        attr_out(&mut v, Duration::ZERO, &Attr::default());
        assert_eq!(v.len(), 104);
        v.clear();
        statfs(&mut v, &Statfs::default());
        assert_eq!(v.len(), 80);
        v.clear();
        create(&mut v, &e, 0, 0);
        assert_eq!(v.len(), 144);
    }

    #[test]
    fn directory_records_align_and_stop_when_full() {
        let mut v = Vec::new();
        let mut d = DirBuf::new(&mut v, 64);
        assert!(d.add(12, 1, 8, b"a"));
        assert!(d.add(13, 2, 8, b"bcdefghi"));
        assert!(!d.add(14, 3, 8, b"x"), "64 bytes hold two records of 32");
        assert_eq!(v.len(), 64);
        assert_eq!(&v[16..20], &1u32.to_ne_bytes(), "namelen");
        let mut v = Vec::new();
        let mut d = DirBuf::new(&mut v, 200);
        let e = Entry { attr: Attr { ino: 5, ..Default::default() }, generation: 1, ttl: Duration::ZERO };
        assert!(d.add_plus(&e, 1, 4, b"dir"));
        assert!(!d.add_plus(&e, 2, 4, b"dir2"));
        assert_eq!(v.len(), 128 + 32);
    }
}
