//! The system calls the library makes for itself, made directly (never through
//! the libc functions it wraps, so it cannot recurse) and without malloc.

use crate::path::{PathBuf, MAX_PATH, SOCKET_NAME_LEN};
use std::sync::atomic::{AtomicU64, Ordering};

/// CLOCK_MONOTONIC_COARSE in nanoseconds (through the vDSO: no system call).
pub fn coarse_now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// Anonymous memory, unmapped on drop unless leaked.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    pub fn new(len: usize) -> Option<Mapping> {
        // SAFETY: a fresh private anonymous mapping; checked for failure.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        (p != libc::MAP_FAILED).then_some(Mapping { ptr: p as *mut u8, len })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Keep the memory for the life of the process.
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, not referenced after this.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Text read into a mapping.
pub struct Text {
    map: Mapping,
    len: usize,
}

impl Text {
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the first `len` bytes of the mapping were written by read().
        unsafe { std::slice::from_raw_parts(self.map.ptr, self.len) }
    }
}

/// Most of /proc/self/mountinfo read (thousands of mounts); pages not
/// touched cost nothing.
const MOUNTINFO_MAX: usize = 4 << 20;

pub fn read_mountinfo() -> Option<Text> {
    let map = Mapping::new(MOUNTINFO_MAX)?;
    // SAFETY: raw syscalls on a NUL-terminated constant and our own buffer.
    unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/proc/self/mountinfo".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        ) as i32;
        if fd < 0 {
            return None;
        }
        let mut len = 0usize;
        loop {
            let n = libc::syscall(libc::SYS_read, fd, map.ptr.add(len), MOUNTINFO_MAX - len);
            if n <= 0 || len + n as usize >= MOUNTINFO_MAX {
                if n > 0 {
                    len += n as usize;
                }
                break;
            }
            len += n as usize;
        }
        libc::syscall(libc::SYS_close, fd);
        Some(Text { map, len })
    }
}

/// Whether the socket file exists.
pub fn exists(path: &[u8; SOCKET_NAME_LEN]) -> bool {
    let mut z = [0u8; SOCKET_NAME_LEN + 1];
    z[..SOCKET_NAME_LEN].copy_from_slice(path);
    // SAFETY: NUL-terminated path in our buffer.
    unsafe { libc::syscall(libc::SYS_faccessat, libc::AT_FDCWD, z.as_ptr(), libc::F_OK, 0) == 0 }
}

/// The current directory into `out`; its length.
pub fn getcwd(out: &mut [u8; MAX_PATH]) -> Option<usize> {
    // SAFETY: the kernel writes at most MAX_PATH bytes; returns the length with the NUL.
    let n = unsafe { libc::syscall(libc::SYS_getcwd, out.as_mut_ptr(), MAX_PATH) };
    (n > 1).then(|| n as usize - 1)
}

/// The path a directory descriptor stands for (/proc/self/fd/N), into `out`.
pub fn fd_path(fd: i32, out: &mut [u8; MAX_PATH]) -> Option<usize> {
    let mut link = [0u8; 32];
    let prefix = b"/proc/self/fd/";
    link[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let (mut v, mut nd) = (u32::try_from(fd).ok()?, 0);
    loop {
        digits[nd] = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..nd {
        link[prefix.len() + i] = digits[nd - 1 - i];
    }
    // SAFETY: NUL-terminated link path (zeroed buffer), output buffer we own.
    let n = unsafe { libc::syscall(libc::SYS_readlinkat, libc::AT_FDCWD, link.as_ptr(), out.as_mut_ptr(), MAX_PATH) };
    (n > 0 && (n as usize) < MAX_PATH).then_some(n as usize)
}

/// The library's datagram socket: (descriptor << 32) | low 32 bits of its
/// inode, or u64::MAX before the first. The inode is checked before each use:
/// a program may have closed the descriptor and reused its number.
static SOCKET: AtomicU64 = AtomicU64::new(u64::MAX);

fn socket_inode(fd: i32) -> Option<u32> {
    // SAFETY: fstat of a descriptor number into our own buffer; a closed or
    // foreign descriptor just fails or shows another inode.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st) } == 0;
    (ok && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some(st.st_ino as u32)
}

/// The socket to send on, and whether it is the published one (kept) or a
/// one-off made while another thread published its own (closed after use).
fn socket() -> Option<(i32, bool)> {
    let cur = SOCKET.load(Ordering::Acquire);
    if cur != u64::MAX {
        let fd = (cur >> 32) as i32;
        if socket_inode(fd) == Some(cur as u32) {
            return Some((fd, true));
        }
    }
    // SAFETY: a new socket we own; close-on-exec, never blocks.
    let fd = unsafe {
        libc::syscall(libc::SYS_socket, libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0)
    } as i32;
    if fd < 0 {
        return None;
    }
    let Some(ino) = socket_inode(fd) else {
        close(fd);
        return None;
    };
    let new = (u64::from(fd as u32) << 32) | u64::from(ino);
    let published = SOCKET.compare_exchange(cur, new, Ordering::AcqRel, Ordering::Acquire).is_ok();
    Some((fd, published))
}

fn close(fd: i32) {
    // SAFETY: a descriptor this library made and nobody else knows.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// Send `path` to the daemon at `addr` without waiting: a full queue drops it.
pub fn send(addr: &libc::sockaddr_un, path: &PathBuf) {
    let Some((fd, published)) = socket() else { return };
    let p = path.as_bytes();
    // SAFETY: sendto with our buffer and a complete sockaddr_un.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            p.as_ptr(),
            p.len(),
            libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            addr as *const libc::sockaddr_un,
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if !published {
        close(fd);
    }
}

/// errno, saved before the hint and put back after it: the real call's errno
/// is the only one the program sees.
pub fn errno() -> i32 {
    // SAFETY: glibc's thread-local errno.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: i32) {
    // SAFETY: glibc's thread-local errno.
    unsafe { *libc::__errno_location() = e };
}
