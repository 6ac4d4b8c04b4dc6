//! Runs one [`Op`] on a directory tree through plain syscalls (libc), and
//! says what happened: the return value or the errno. Each op opens what it
//! needs and closes it again, so ops are independent of each other and a
//! sequence means the same on any file system, mounted or not.

use crate::op::Op;
use crate::rng::{fill, Fnv};
use std::ffi::CString;
use std::fmt;
use std::path::Path;

/// What a syscall sequence returned: a value (bytes written, a digest of the
/// bytes read, or 0) or the first errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok(u64),
    Err(i32),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }
    pub fn errno(&self) -> Option<i32> {
        match self {
            Outcome::Err(e) => Some(*e),
            Outcome::Ok(_) => None,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Ok(v) => write!(f, "ok {v}"),
            Outcome::Err(e) => write!(f, "{}", errno_name(*e)),
        }
    }
}

pub fn errno_name(e: i32) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::EXDEV => "EXDEV",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::ETXTBSY => "ETXTBSY",
        libc::EFBIG => "EFBIG",
        libc::ENOSPC => "ENOSPC",
        libc::ESPIPE => "ESPIPE",
        libc::EROFS => "EROFS",
        libc::EMLINK => "EMLINK",
        libc::ERANGE => "ERANGE",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENOSYS => "ENOSYS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ELOOP => "ELOOP",
        libc::ENODATA => "ENODATA",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENOTCONN => "ENOTCONN",
        libc::E2BIG => "E2BIG",
        libc::EDQUOT => "EDQUOT",
        libc::EUCLEAN => "EUCLEAN",
        libc::EBADMSG => "EBADMSG",
        libc::ENXIO => "ENXIO",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::ENODEV => "ENODEV",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => return format!("errno{e}"),
    };
    n.to_string()
}

pub(crate) fn cpath(root: &Path, rel: &str) -> CString {
    let mut v = root.as_os_str().as_encoded_bytes().to_vec();
    if !rel.is_empty() {
        v.push(b'/');
        v.extend_from_slice(rel.as_bytes());
    }
    // Generated paths never hold NUL; a replay file could: make it an EINVAL-like path.
    CString::new(v).unwrap_or_else(|_| CString::new("/\u{1}nul-in-path").unwrap_or_default())
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}

fn check(rc: libc::c_int) -> Result<u64, i32> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc as u64)
    }
}

/// An open descriptor closed on drop; the close's own error is ignored (it
/// would only repeat a write error that the op already reported).
struct Fd(libc::c_int);

impl Fd {
    fn open(p: &CString, flags: libc::c_int, mode: u32) -> Result<Fd, i32> {
        // O_NONBLOCK: opening a FIFO must never wait for a peer (regular files ignore it).
        let fd = unsafe { libc::open(p.as_ptr(), flags | libc::O_CLOEXEC | libc::O_NONBLOCK, mode as libc::c_uint) };
        if fd < 0 {
            Err(errno())
        } else {
            Ok(Fd(fd))
        }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        unsafe { libc::close(self.0) };
    }
}

/// Write all of `data` at `off` (or appending); a short write stops at the
/// first error after some bytes and reports the count, as write(2) would.
fn write_all(fd: &Fd, data: &[u8], off: Option<u64>) -> Result<u64, i32> {
    let mut done = 0usize;
    while done < data.len() {
        let rest = &data[done..];
        let n = unsafe {
            match off {
                Some(o) => libc::pwrite(fd.0, rest.as_ptr().cast(), rest.len(), (o + done as u64) as libc::off_t),
                None => libc::write(fd.0, rest.as_ptr().cast(), rest.len()),
            }
        };
        if n < 0 {
            let e = errno();
            return if done == 0 { Err(e) } else { Ok(done as u64) };
        }
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    Ok(done as u64)
}

/// Largest single buffer an op makes; longer writes are written in pieces of
/// the same pattern so that an op can cover gigabytes without the memory.
const CHUNK: u64 = 8 << 20;

fn write_op(root: &Path, path: &str, off: Option<u64>, len: u64, seed: u64) -> Result<u64, i32> {
    let p = cpath(root, path);
    // Alternate read-write and write-only opens: ext4lazy serves the latter with direct I/O.
    let mode = if seed & 1 == 0 { libc::O_RDWR } else { libc::O_WRONLY };
    let flags = mode | if off.is_none() { libc::O_APPEND } else { 0 };
    let fd = Fd::open(&p, flags, 0)?;
    let mut done = 0;
    while done < len {
        let n = (len - done).min(CHUNK);
        let data = fill(seed.wrapping_add(done / CHUNK), n as usize);
        let w = write_all(&fd, &data, off.map(|o| o + done))?;
        done += w;
        if w < n {
            break;
        }
    }
    Ok(done)
}

fn read_op(root: &Path, path: &str, off: u64, len: u64) -> Result<u64, i32> {
    let fd = Fd::open(&cpath(root, path), libc::O_RDONLY, 0)?;
    let mut h = Fnv::default();
    let mut buf = vec![0u8; len.min(CHUNK) as usize];
    let mut done = 0u64;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = unsafe { libc::pread(fd.0, buf.as_mut_ptr().cast(), want, (off + done) as libc::off_t) };
        if n < 0 {
            return Err(errno());
        }
        if n == 0 {
            break;
        }
        h.update(&buf[..n as usize]);
        done += n as u64;
    }
    // Length and digest in one value: both must agree.
    Ok(h.0 ^ done.rotate_left(48))
}

fn fsync_op(root: &Path, path: &str) -> Result<u64, i32> {
    let p = cpath(root, path);
    let fd = Fd::open(&p, libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK, 0)?;
    check(unsafe { libc::fsync(fd.0) })
}

fn ts(ns: i64) -> libc::timespec {
    libc::timespec { tv_sec: ns.div_euclid(1_000_000_000) as libc::time_t, tv_nsec: ns.rem_euclid(1_000_000_000) as _ }
}

/// Run `op` on the tree at `root`. [`Op::Remount`] is the driver's and does nothing here.
pub fn apply(root: &Path, op: &Op) -> Outcome {
    let r = run(root, op);
    match r {
        Ok(v) => Outcome::Ok(v),
        Err(e) => Outcome::Err(e),
    }
}

fn run(root: &Path, op: &Op) -> Result<u64, i32> {
    let at = libc::AT_FDCWD;
    match op {
        Op::Create { path, mode } => {
            let _fd = Fd::open(&cpath(root, path), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY, *mode)?;
            Ok(0)
        }
        Op::Mkdir { path, mode } => check(unsafe { libc::mkdir(cpath(root, path).as_ptr(), *mode) }),
        Op::Mkfifo { path, mode } => check(unsafe { libc::mkfifo(cpath(root, path).as_ptr(), *mode) }),
        Op::Write { path, off, len, seed } => write_op(root, path, Some(*off), *len, *seed),
        Op::Append { path, len, seed } => write_op(root, path, None, *len, *seed),
        Op::Read { path, off, len } => read_op(root, path, *off, *len),
        Op::Truncate { path, size } => {
            check(unsafe { libc::truncate(cpath(root, path).as_ptr(), *size as libc::off_t) })
        }
        Op::Fallocate { path, mode, off, len } => {
            let fd = Fd::open(&cpath(root, path), libc::O_RDWR, 0)?;
            check(unsafe { libc::fallocate(fd.0, *mode, *off as libc::off_t, *len as libc::off_t) })
        }
        Op::Rename { from, to, flags } => {
            let (a, b) = (cpath(root, from), cpath(root, to));
            check(unsafe { libc::renameat2(at, a.as_ptr(), at, b.as_ptr(), *flags) })
        }
        Op::Link { from, to } => {
            let (a, b) = (cpath(root, from), cpath(root, to));
            check(unsafe { libc::linkat(at, a.as_ptr(), at, b.as_ptr(), 0) })
        }
        Op::Unlink { path } => check(unsafe { libc::unlink(cpath(root, path).as_ptr()) }),
        Op::Rmdir { path } => check(unsafe { libc::rmdir(cpath(root, path).as_ptr()) }),
        Op::Symlink { target, path } => {
            // The target is not relative to the root: it is stored as given.
            let t = CString::new(target.as_bytes()).map_err(|_| libc::EINVAL)?;
            check(unsafe { libc::symlink(t.as_ptr(), cpath(root, path).as_ptr()) })
        }
        Op::SetXattr { path, name, len, seed, flags } => {
            let n = CString::new(name.as_bytes()).map_err(|_| libc::EINVAL)?;
            let v = fill(*seed, *len as usize);
            check(unsafe {
                libc::lsetxattr(cpath(root, path).as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), *flags as i32)
            })
        }
        Op::RemoveXattr { path, name } => {
            let n = CString::new(name.as_bytes()).map_err(|_| libc::EINVAL)?;
            check(unsafe { libc::lremovexattr(cpath(root, path).as_ptr(), n.as_ptr()) })
        }
        Op::Chmod { path, mode } => check(unsafe { libc::chmod(cpath(root, path).as_ptr(), *mode) }),
        Op::Chown { path, uid, gid } => check(unsafe { libc::lchown(cpath(root, path).as_ptr(), *uid, *gid) }),
        Op::Utimes { path, atime, mtime } => {
            let t = [ts(*atime), ts(*mtime)];
            check(unsafe { libc::utimensat(at, cpath(root, path).as_ptr(), t.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) })
        }
        Op::Fsync { path } => fsync_op(root, path),
        Op::Remount => Ok(0),
    }
}
