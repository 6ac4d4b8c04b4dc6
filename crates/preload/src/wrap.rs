//! The wrapped calls. Each one hints its path, then calls the next definition
//! of the same symbol (libc's), found once with `dlsym(RTLD_NEXT)`.
//!
//! Chosen: the calls that translate a path of an existing name, used by the
//! stepahead suite's workloads and by common tools (coreutils, findutils, tar,
//! shells, Python): the stat family (glibc 2.33+ names and the older
//! `__xstat` ones that binaries built earlier call), `statx`, the open family
//! (with the `_2` fortify variants), `fopen`, `access`/`faccessat`, `opendir`,
//! `utimensat`/`utimes`/`utime`/`lutimes`, `readlink(at)`, `chdir`, `truncate`,
//! `chmod`/`chown` and their `at` forms, `getxattr`/`listxattr` (and `l`
//! forms), and the namespace changes whose parent must be translated first
//! (`mkdir(at)`, `unlink(at)`, `rmdir`, `rename(at)` of the source). Calls on
//! a descriptor alone (`fstat`, `fchmod`, ...) translate nothing: no hint.
//!
//! `open`, `open64`, `openat` and `openat64` are variadic in C (the mode is
//! read only with O_CREAT or O_TMPFILE). Stable Rust cannot define a variadic
//! function, so they are defined with the mode as a fixed last parameter, as
//! preload libraries written in Rust commonly do. That is sound on the
//! x86-64 System V and AArch64 Linux calling conventions, where a variadic
//! integer argument travels in the same register as a named one: when the
//! caller passed no mode we read an unused register and pass that along,
//! and libc ignores it exactly as it would have. Other targets are refused
//! at build time rather than guessed.

#[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
compile_error!(
    "libext4lazy_preload defines variadic open() with a fixed mode argument: only x86-64 and AArch64 Linux are checked"
);

use crate::hint::before;
use libc::{c_char, c_int, c_void, gid_t, mode_t, size_t, ssize_t, uid_t};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The next definition of a symbol, looked up once.
struct Real {
    name: &'static std::ffi::CStr,
    addr: AtomicUsize,
}

impl Real {
    const fn new(name: &'static std::ffi::CStr) -> Self {
        Real { name, addr: AtomicUsize::new(0) }
    }

    fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Relaxed);
        if a != 0 {
            return a;
        }
        // SAFETY: dlsym with a valid handle and a NUL-terminated name.
        let a = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) } as usize;
        self.addr.store(a, Ordering::Relaxed);
        a
    }
}

/// What a call returns when libc has no such symbol (never, on glibc): the
/// call's own failure value, with ENOSYS.
trait Failure {
    fn failure() -> Self;
}
impl Failure for c_int {
    fn failure() -> Self {
        -1
    }
}
impl Failure for ssize_t {
    fn failure() -> Self {
        -1
    }
}
impl<T> Failure for *mut T {
    fn failure() -> Self {
        std::ptr::null_mut()
    }
}

/// `fn name(args) -> ret => (dirfd, path);` becomes the exported wrapper.
macro_rules! wrap {
    ($( fn $name:ident ( $($arg:ident : $ty:ty),* ) -> $ret:ty => ($dirfd:expr, $path:expr); )*) => {$(
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $ret {
            static REAL: Real = Real::new(match std::ffi::CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                Ok(c) => c,
                Err(_) => panic!("symbol names have no NUL"),
            });
            // SAFETY: the path argument is what the program passes to libc.
            unsafe { before($dirfd, $path) };
            let real = REAL.get();
            if real == 0 {
                crate::sys::set_errno(libc::ENOSYS);
                return <$ret as Failure>::failure();
            }
            // SAFETY: the next definition of this very symbol, same signature.
            let f: unsafe extern "C" fn($($ty),*) -> $ret = unsafe { std::mem::transmute(real) };
            unsafe { f($($arg),*) }
        }
    )*};
}

const CWD: c_int = libc::AT_FDCWD;
type P = *const c_char;
type V = *mut c_void;

wrap! {
    // stat family (glibc >= 2.33 exports these; older binaries call __xstat & co.)
    fn stat(path: P, buf: V) -> c_int => (CWD, path);
    fn lstat(path: P, buf: V) -> c_int => (CWD, path);
    fn stat64(path: P, buf: V) -> c_int => (CWD, path);
    fn lstat64(path: P, buf: V) -> c_int => (CWD, path);
    fn fstatat(dirfd: c_int, path: P, buf: V, flags: c_int) -> c_int => (dirfd, path);
    fn fstatat64(dirfd: c_int, path: P, buf: V, flags: c_int) -> c_int => (dirfd, path);
    fn __xstat(ver: c_int, path: P, buf: V) -> c_int => (CWD, path);
    fn __lxstat(ver: c_int, path: P, buf: V) -> c_int => (CWD, path);
    fn __xstat64(ver: c_int, path: P, buf: V) -> c_int => (CWD, path);
    fn __lxstat64(ver: c_int, path: P, buf: V) -> c_int => (CWD, path);
    fn __fxstatat(ver: c_int, dirfd: c_int, path: P, buf: V, flags: c_int) -> c_int => (dirfd, path);
    fn __fxstatat64(ver: c_int, dirfd: c_int, path: P, buf: V, flags: c_int) -> c_int => (dirfd, path);
    fn statx(dirfd: c_int, path: P, flags: c_int, mask: libc::c_uint, buf: V) -> c_int => (dirfd, path);
    // open family (variadic mode: see the module comment)
    fn open(path: P, flags: c_int, mode: mode_t) -> c_int => (CWD, path);
    fn open64(path: P, flags: c_int, mode: mode_t) -> c_int => (CWD, path);
    fn openat(dirfd: c_int, path: P, flags: c_int, mode: mode_t) -> c_int => (dirfd, path);
    fn openat64(dirfd: c_int, path: P, flags: c_int, mode: mode_t) -> c_int => (dirfd, path);
    fn __open_2(path: P, flags: c_int) -> c_int => (CWD, path);
    fn __open64_2(path: P, flags: c_int) -> c_int => (CWD, path);
    fn __openat_2(dirfd: c_int, path: P, flags: c_int) -> c_int => (dirfd, path);
    fn __openat64_2(dirfd: c_int, path: P, flags: c_int) -> c_int => (dirfd, path);
    fn creat(path: P, mode: mode_t) -> c_int => (CWD, path);
    fn creat64(path: P, mode: mode_t) -> c_int => (CWD, path);
    fn fopen(path: P, mode: P) -> *mut libc::FILE => (CWD, path);
    fn fopen64(path: P, mode: P) -> *mut libc::FILE => (CWD, path);
    fn opendir(path: P) -> *mut libc::DIR => (CWD, path);
    // permission checks, times, links
    fn access(path: P, mode: c_int) -> c_int => (CWD, path);
    fn faccessat(dirfd: c_int, path: P, mode: c_int, flags: c_int) -> c_int => (dirfd, path);
    fn utimensat(dirfd: c_int, path: P, times: *const libc::timespec, flags: c_int) -> c_int => (dirfd, path);
    fn utimes(path: P, times: *const libc::timeval) -> c_int => (CWD, path);
    fn lutimes(path: P, times: *const libc::timeval) -> c_int => (CWD, path);
    fn utime(path: P, times: *const c_void) -> c_int => (CWD, path);
    fn readlink(path: P, buf: *mut c_char, size: size_t) -> ssize_t => (CWD, path);
    fn readlinkat(dirfd: c_int, path: P, buf: *mut c_char, size: size_t) -> ssize_t => (dirfd, path);
    fn chdir(path: P) -> c_int => (CWD, path);
    fn truncate(path: P, len: libc::off_t) -> c_int => (CWD, path);
    fn truncate64(path: P, len: libc::off64_t) -> c_int => (CWD, path);
    fn chmod(path: P, mode: mode_t) -> c_int => (CWD, path);
    fn fchmodat(dirfd: c_int, path: P, mode: mode_t, flags: c_int) -> c_int => (dirfd, path);
    fn chown(path: P, uid: uid_t, gid: gid_t) -> c_int => (CWD, path);
    fn lchown(path: P, uid: uid_t, gid: gid_t) -> c_int => (CWD, path);
    fn fchownat(dirfd: c_int, path: P, uid: uid_t, gid: gid_t, flags: c_int) -> c_int => (dirfd, path);
    fn getxattr(path: P, name: P, value: V, size: size_t) -> ssize_t => (CWD, path);
    fn lgetxattr(path: P, name: P, value: V, size: size_t) -> ssize_t => (CWD, path);
    fn listxattr(path: P, list: *mut c_char, size: size_t) -> ssize_t => (CWD, path);
    fn llistxattr(path: P, list: *mut c_char, size: size_t) -> ssize_t => (CWD, path);
    // namespace changes: their parent directory is translated first
    fn mkdir(path: P, mode: mode_t) -> c_int => (CWD, path);
    fn mkdirat(dirfd: c_int, path: P, mode: mode_t) -> c_int => (dirfd, path);
    fn unlink(path: P) -> c_int => (CWD, path);
    fn unlinkat(dirfd: c_int, path: P, flags: c_int) -> c_int => (dirfd, path);
    fn rmdir(path: P) -> c_int => (CWD, path);
    fn rename(old: P, new: P) -> c_int => (CWD, old);
    fn renameat(olddir: c_int, old: P, newdir: c_int, new: P) -> c_int => (olddir, old);
    fn renameat2(olddir: c_int, old: P, newdir: c_int, new: P, flags: libc::c_uint) -> c_int => (olddir, old);
}
