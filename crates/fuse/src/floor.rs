//! The transport's floor: a file system that keeps its tree in memory and
//! drops file data, served through the same FUSE transport, with the same
//! capabilities and cache policy as [`crate::Ext4Fuse`], so that the kernel
//! sends it the same requests. Whatever a workload costs on it is what the
//! FUSE round trips cost before any file system work (`-o floor`, for
//! measurement only: docs/results/writepath.md).
//!
//! With a data file (`-o floor=data`) it keeps file data too, each file in a
//! slot of its own in one sparse host file written and read through the
//! host's page cache: what a FUSE server costs that leaves all block
//! placement and write-back to the kernel, the floor of a data workload
//! (Postmark) that reads back what it wrote. It answers lseek,
//! fallocate and O_TMPFILE with ENOSYS, which the kernel then stops sending,
//! and never invalidates attributes for atime as ext4lazy does: a floor for
//! workloads without those (untar, CreateFiles, MakeDirs are).

use crate::serve::{capabilities, HANDLE_FLAGS};
use fusewire::{reply, Attr, DirBuf, Entry, Errno, InitInfo, Op, Request, SetAttrIn, SetTime};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

const ROOT: u64 = 1;

/// Bytes of the data file each node owns, at node id times this: 64 MiB a
/// file, and room for about 260,000 nodes under ext4's 16 TiB file limit.
/// Larger files get EFBIG: the floor is a measuring tool.
const SLOT: u64 = 64 << 20;

/// Where the floor keeps file data (`floor=data`): a sparse host file, or
/// memory in tests.
pub trait FloorData: Send + Sync {
    /// Fill `buf` from `offset`; bytes never written read as zeros.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Forget `len` bytes from `offset`: a hole, nothing left to write back.
    fn punch(&self, offset: u64, len: u64);
    /// `len` bytes from `offset` on stable storage.
    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()>;
}

fn io_errno(e: io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

struct Node {
    attr: Attr,
    /// Name -> node id (directories).
    children: BTreeMap<OsString, u64>,
    /// Symbolic link target.
    target: Vec<u8>,
}

struct Tree {
    nodes: HashMap<u64, Node>,
    next: u64,
}

/// The in-memory file system (see the module comment).
pub struct FloorFs {
    tree: Mutex<Tree>,
    ttl: Duration,
    kernel_opens: bool,
    /// File data (`floor=data`), None: dropped.
    data: Option<Box<dyn FloorData>>,
}

fn now() -> (i64, u32) {
    let d = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    (d.as_secs() as i64, d.subsec_nanos())
}

fn node(ino: u64, mode: u32, uid: u32, gid: u32) -> Node {
    let t = now();
    let nlink = if mode & libc::S_IFMT == libc::S_IFDIR { 2 } else { 1 };
    let attr = Attr { ino, mode, nlink, uid, gid, blksize: 4096, atime: t, mtime: t, ctime: t, ..Default::default() };
    Node { attr, children: BTreeMap::new(), target: Vec::new() }
}

fn time(t: SetTime) -> (i64, u32) {
    match t {
        SetTime::Now => now(),
        SetTime::At { sec, nsec } => (sec, nsec),
    }
}

impl FloorFs {
    /// `data`: the file that keeps file data (see the module comment), or
    /// None to drop it.
    pub fn new(ttl: Duration, kernel_opens: bool, data: Option<Box<dyn FloorData>>) -> Self {
        let mut nodes = HashMap::new();
        nodes.insert(ROOT, node(ROOT, libc::S_IFDIR | 0o755, 0, 0));
        FloorFs { tree: Mutex::new(Tree { nodes, next: ROOT + 1 }), ttl, kernel_opens, data }
    }

    /// Where `ino`'s bytes from `offset` to `end` sit in the data file.
    fn slot(ino: u64, offset: u64, end: u64) -> Result<u64, Errno> {
        if end > SLOT {
            return Err(Errno(libc::EFBIG));
        }
        ino.checked_mul(SLOT).and_then(|base| base.checked_add(offset)).ok_or(Errno(libc::EFBIG))
    }

    /// Drop `ino`'s data from `from` on (a truncate, or the file gone), as
    /// a kernel file system drops the cached pages of what it frees.
    fn drop_data(&self, ino: u64, from: u64) {
        if let (Some(f), Ok(at)) = (&self.data, Self::slot(ino, from, from)) {
            f.punch(at, SLOT - from);
        }
    }

    fn entry(&self, attr: Attr) -> Entry {
        Entry { attr, generation: 0, ttl: self.ttl }
    }

    /// Make `name` in `parent`: a new node of `mode` (or `link`, an existing one).
    fn make(&self, req: &Request, name: &OsStr, mode: u32, target: &[u8], link: Option<u64>) -> Result<Attr, Errno> {
        let mut t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
        let dir = t.nodes.get(&req.nodeid).ok_or(Errno::ENOENT)?;
        if dir.children.contains_key(name) {
            return Err(Errno(libc::EEXIST));
        }
        let ino = match link {
            Some(ino) => {
                let n = t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
                n.attr.nlink += 1;
                ino
            }
            None => {
                let ino = t.next;
                t.next += 1;
                let mut n = node(ino, mode, req.uid, req.gid);
                n.target = target.to_vec();
                n.attr.size = target.len() as u64;
                t.nodes.insert(ino, n);
                ino
            }
        };
        let dir = t.nodes.get_mut(&req.nodeid).ok_or(Errno::ENOENT)?;
        dir.children.insert(name.to_owned(), ino);
        if mode & libc::S_IFMT == libc::S_IFDIR {
            dir.attr.nlink += 1;
        }
        t.nodes.get(&ino).map(|n| n.attr).ok_or(Errno::ENOENT)
    }

    fn remove(&self, req: &Request, name: &OsStr) -> Result<(), Errno> {
        let mut t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
        let dir = t.nodes.get_mut(&req.nodeid).ok_or(Errno::ENOENT)?;
        let ino = dir.children.remove(name).ok_or(Errno::ENOENT)?;
        let gone = t.nodes.get_mut(&ino).map(|n| {
            n.attr.nlink = n.attr.nlink.saturating_sub(1);
            n.attr.nlink == 0 || n.attr.mode & libc::S_IFMT == libc::S_IFDIR
        });
        if gone == Some(true) {
            t.nodes.remove(&ino);
            drop(t);
            self.drop_data(ino, 0);
        }
        Ok(())
    }

    fn setattr(&self, ino: u64, s: &SetAttrIn) -> Result<Attr, Errno> {
        let mut t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
        let a = &mut t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?.attr;
        if let Some(m) = s.mode {
            a.mode = (a.mode & libc::S_IFMT) | (m & 0o7777);
        }
        a.uid = s.uid.unwrap_or(a.uid);
        a.gid = s.gid.unwrap_or(a.gid);
        if let Some(size) = s.size {
            if size < a.size {
                self.drop_data(ino, size);
            }
            a.size = size;
        }
        if let Some(at) = s.atime {
            a.atime = time(at);
        }
        if let Some(mt) = s.mtime {
            a.mtime = time(mt);
        }
        a.ctime = s.ctime.unwrap_or_else(now);
        Ok(*a)
    }

    fn attr(&self, ino: u64) -> Result<Attr, Errno> {
        let t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
        t.nodes.get(&ino).map(|n| n.attr).ok_or(Errno::ENOENT)
    }

    fn readdir(&self, ino: u64, offset: u64, mut buf: DirBuf<'_>, plus: bool) -> Result<(), Errno> {
        let t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
        let dir = t.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        for (i, (name, child)) in dir.children.iter().enumerate().skip(offset as usize) {
            let attr = t.nodes.get(child).map(|n| n.attr).unwrap_or_default();
            let dtype = (attr.mode & libc::S_IFMT) >> 12;
            let next = i as u64 + 1;
            let fits = if plus {
                buf.add_plus(&self.entry(attr), next, dtype, name.as_bytes())
            } else {
                buf.add(*child, next, dtype, name.as_bytes())
            };
            if !fits {
                break;
            }
        }
        Ok(())
    }
}

impl fusewire::Handler for FloorFs {
    fn capabilities(&self, _info: &InitInfo) -> u64 {
        capabilities(self.kernel_opens)
    }

    fn handle(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
        let ino = req.nodeid;
        match op {
            Op::Lookup { name } => {
                let attr = {
                    let t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
                    let child = t.nodes.get(&ino).and_then(|d| d.children.get(name)).ok_or(Errno::ENOENT)?;
                    t.nodes.get(child).map(|n| n.attr).ok_or(Errno::ENOENT)?
                };
                reply::entry(out, &self.entry(attr));
            }
            Op::GetAttr { .. } => reply::attr_out(out, self.ttl, &self.attr(ino)?),
            Op::SetAttr(s) => reply::attr_out(out, self.ttl, &self.setattr(ino, &s)?),
            Op::ReadLink => {
                let t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
                out.extend_from_slice(&t.nodes.get(&ino).ok_or(Errno::ENOENT)?.target);
            }
            Op::Symlink { name, target } => {
                reply::entry(out, &self.entry(self.make(req, name, libc::S_IFLNK | 0o777, target, None)?))
            }
            Op::Mknod { name, mode, umask, .. } => {
                reply::entry(out, &self.entry(self.make(req, name, mode & !umask, &[], None)?))
            }
            Op::Mkdir { name, mode, umask } => {
                let mode = libc::S_IFDIR | (mode & !umask & 0o7777);
                reply::entry(out, &self.entry(self.make(req, name, mode, &[], None)?))
            }
            Op::Create { name, mode, umask, .. } => {
                let attr = self.make(req, name, mode & !umask, &[], None)?;
                reply::create(out, &self.entry(attr), 0, HANDLE_FLAGS);
            }
            Op::Link { ino: target, newname } => {
                let mode = self.attr(target)?.mode;
                reply::entry(out, &self.entry(self.make(req, newname, mode, &[], Some(target))?))
            }
            Op::Unlink { name } | Op::Rmdir { name } => self.remove(req, name)?,
            Op::Rename { name, newdir, newname, .. } => {
                let mut t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
                let child = t.nodes.get_mut(&ino).and_then(|d| d.children.remove(name)).ok_or(Errno::ENOENT)?;
                t.nodes.get_mut(&newdir).ok_or(Errno::ENOENT)?.children.insert(newname.to_owned(), child);
            }
            Op::Open { .. } => {
                if self.kernel_opens {
                    return Err(Errno::ENOSYS); // as Ext4Fuse: no OPEN/RELEASE from now on
                }
                reply::open(out, 0, HANDLE_FLAGS);
            }
            Op::Read { offset, size } => {
                let len = self.attr(ino)?.size.saturating_sub(offset).min(u64::from(size));
                out.resize(len as usize, 0);
                if let Some(f) = &self.data {
                    f.read_at(out, Self::slot(ino, offset, offset + len)?).map_err(io_errno)?;
                }
            }
            Op::Write { offset, data, .. } => {
                if let Some(f) = &self.data {
                    let at = Self::slot(ino, offset, offset + data.len() as u64)?;
                    f.write_at(data, at).map_err(io_errno)?;
                }
                let mut t = self.tree.lock().unwrap_or_else(|e| e.into_inner());
                let a = &mut t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?.attr;
                a.size = a.size.max(offset + data.len() as u64);
                a.mtime = now();
                reply::written(out, data.len() as u32);
            }
            Op::Statfs => {
                let s = fusewire::Statfs {
                    blocks: 1 << 30,
                    bfree: 1 << 30,
                    bavail: 1 << 30,
                    files: 1 << 30,
                    ffree: 1 << 30,
                    bsize: 4096,
                    namelen: 255,
                    frsize: 4096,
                };
                reply::statfs(out, &s);
            }
            // As Ext4Fuse: FLUSH, OPENDIR and RELEASEDIR answered ENOSYS stop coming.
            Op::Flush | Op::OpenDir | Op::ReleaseDir => return Err(Errno::ENOSYS),
            Op::Fsync { .. } => {
                if let (Some(f), Ok(at)) = (&self.data, Self::slot(ino, 0, 0)) {
                    // The file's own slot only, as a kernel file system syncs one file.
                    f.sync_range(at, SLOT).map_err(io_errno)?;
                }
            }
            Op::Release | Op::FsyncDir { .. } | Op::Access { .. } | Op::SetXattr { .. } => {}
            Op::GetXattr { .. } | Op::RemoveXattr { .. } => return Err(Errno(libc::ENODATA)),
            Op::ListXattr { size } => {
                if size == 0 {
                    reply::xattr_size(out, 0);
                }
            }
            Op::ReadDir { offset, size } => self.readdir(ino, offset, DirBuf::new(out, size), false)?,
            Op::ReadDirPlus { offset, size } => self.readdir(ino, offset, DirBuf::new(out, size), true)?,
            _ => return Err(Errno::ENOSYS),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusewire::Handler;

    fn req(opcode: u32, nodeid: u64) -> Request {
        Request { opcode, unique: 1, nodeid, uid: 0, gid: 0, pid: 1 }
    }

    #[test]
    fn a_made_tree_is_found_and_removed() {
        use fusewire::abi::op;
        let fs = FloorFs::new(Duration::from_secs(1), false, None);
        let mut out = Vec::new();
        let mk = Op::Mkdir { name: OsStr::new("d"), mode: 0o755, umask: 0 };
        fs.handle(&req(op::MKDIR, ROOT), mk, &mut out).unwrap();
        let d = u64::from_le_bytes(out[..8].try_into().unwrap());
        out.clear();
        let cr = Op::Create { name: OsStr::new("f"), mode: libc::S_IFREG | 0o644, umask: 0, flags: libc::O_WRONLY };
        fs.handle(&req(op::CREATE, d), cr, &mut out).unwrap();
        let f = u64::from_le_bytes(out[..8].try_into().unwrap());
        out.clear();
        let w = Op::Write { offset: 10, data: b"abc", write_flags: 0 };
        fs.handle(&req(op::WRITE, f), w, &mut out).unwrap();
        assert_eq!(fs.attr(f).unwrap().size, 13);
        out.clear();
        fs.handle(&req(op::LOOKUP, d), Op::Lookup { name: OsStr::new("f") }, &mut out).unwrap();
        assert_eq!(u64::from_le_bytes(out[..8].try_into().unwrap()), f);
        fs.handle(&req(op::UNLINK, d), Op::Unlink { name: OsStr::new("f") }, &mut out).unwrap();
        let gone = fs.handle(&req(op::LOOKUP, d), Op::Lookup { name: OsStr::new("f") }, &mut Vec::new());
        assert_eq!(gone, Err(Errno::ENOENT));
        assert!(fs.attr(f).is_err(), "its last link gone: dropped");
    }

    fn serve(fs: &FloorFs, opcode: u32, nodeid: u64, op: Op<'_>) -> Result<Vec<u8>, Errno> {
        let mut out = Vec::new();
        fs.handle(&req(opcode, nodeid), op, &mut out).map(|()| out)
    }

    #[test]
    fn with_a_data_file_bytes_written_read_back_and_truncation_drops_them() {
        use fusewire::abi::op;
        let fs = FloorFs::new(Duration::from_secs(1), false, Some(Box::new(Sparse::default())));
        let cr = Op::Create { name: OsStr::new("f"), mode: libc::S_IFREG | 0o644, umask: 0, flags: libc::O_RDWR };
        let out = serve(&fs, op::CREATE, ROOT, cr).unwrap();
        let f = u64::from_le_bytes(out[..8].try_into().unwrap());
        serve(&fs, op::WRITE, f, Op::Write { offset: 5000, data: b"hello", write_flags: 0 }).unwrap();
        let read = |offset, size| serve(&fs, op::READ, f, Op::Read { offset, size }).unwrap();
        assert_eq!(&read(5000, 100)[..], b"hello", "bytes kept, the reply cut at the size");
        assert_eq!(read(0, 8192)[..5000], [0u8; 5000][..], "a hole reads as zeros");
        let cut = SetAttrIn { size: Some(5002), ..Default::default() };
        serve(&fs, op::SETATTR, f, Op::SetAttr(cut)).unwrap();
        let grow = SetAttrIn { size: Some(5005), ..Default::default() };
        serve(&fs, op::SETATTR, f, Op::SetAttr(grow)).unwrap();
        assert_eq!(&read(5000, 100)[..], b"he\0\0\0", "truncation dropped the bytes past the cut");
        let big = serve(&fs, op::WRITE, f, Op::Write { offset: SLOT - 1, data: b"ab", write_flags: 0 });
        assert_eq!(big, Err(Errno(libc::EFBIG)), "a file outgrowing its slot is refused, not spilled");
    }

    /// Bytes by offset, for the test above.
    #[derive(Default)]
    struct Sparse(Mutex<BTreeMap<u64, u8>>);

    impl FloorData for Sparse {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let m = self.0.lock().unwrap();
            for (i, b) in buf.iter_mut().enumerate() {
                *b = m.get(&(offset + i as u64)).copied().unwrap_or(0);
            }
            Ok(())
        }
        fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
            let mut m = self.0.lock().unwrap();
            for (i, b) in data.iter().enumerate() {
                m.insert(offset + i as u64, *b);
            }
            Ok(())
        }
        fn punch(&self, offset: u64, len: u64) {
            self.0.lock().unwrap().retain(|&k, _| k < offset || k >= offset + len);
        }
        fn sync_range(&self, _offset: u64, _len: u64) -> io::Result<()> {
            Ok(())
        }
    }
}
