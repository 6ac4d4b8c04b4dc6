//! What every wrapper does before the real call: find the absolute path, and
//! if it is on an ext4lazy mount that takes hints, send it there.

use crate::path::{PathBuf, MAX_PATH};
use crate::{mounts, sys};
use std::cell::Cell;
use std::ffi::CStr;

thread_local! {
    /// Set while this thread is inside a hint: a wrapped call made meanwhile
    /// (by a library we call) goes straight to the real function.
    static BUSY: Cell<bool> = const { Cell::new(false) };
}

/// Hint `path`, relative to `dirfd` (AT_FDCWD: the current directory).
/// Never fails, and leaves errno as it found it.
///
/// # Safety
/// `path` is null or a NUL-terminated string, as the wrapped call requires.
pub unsafe fn before(dirfd: libc::c_int, path: *const libc::c_char) {
    if path.is_null() || BUSY.with(|b| b.replace(true)) {
        return;
    }
    let saved = sys::errno();
    // SAFETY: the caller passes the wrapped call's own path argument.
    hint(dirfd, unsafe { CStr::from_ptr(path) }.to_bytes());
    sys::set_errno(saved);
    BUSY.with(|b| b.set(false));
}

fn hint(dirfd: libc::c_int, path: &[u8]) {
    if !crate::path::worth_hinting(path) {
        return;
    }
    let Some(table) = mounts::current() else { return };
    if table.is_empty() {
        return; // the common case off ext4lazy: one clock read and a load
    }
    let mut full = PathBuf::default();
    if path[0] == b'/' {
        if full.set_joined(b"/", path).is_none() {
            return;
        }
    } else {
        let mut base = [0u8; MAX_PATH];
        let n = if dirfd == libc::AT_FDCWD { sys::getcwd(&mut base) } else { sys::fd_path(dirfd, &mut base) };
        let Some(n) = n else { return };
        if full.set_joined(&base[..n], path).is_none() {
            return;
        }
    }
    if let Some(addr) = table.find(full.as_bytes()) {
        sys::send(addr, &full);
    }
}
