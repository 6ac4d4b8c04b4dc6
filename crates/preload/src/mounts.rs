//! Which ext4lazy mounts take hints: a table read from /proc/self/mountinfo,
//! re-read at most once a second, published without locks.
//!
//! No lock anywhere: a fork while another thread refreshes must not leave the
//! child stuck. A refresh builds a new table in fresh memory (mmap: no malloc,
//! which may be what a signal handler interrupted) and swaps a pointer; a
//! replaced table is never freed, since another thread may still be reading it.
//! Tables are replaced only when the mounts actually changed (a page or two each).

use crate::path::{self, SOCKET_NAME_LEN};
use crate::sys;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Mounts a table holds (hint mounts and mounts nested inside them).
pub const MAX_MOUNTS: usize = 32;
/// Longest mount point taken; longer ones are not hinted.
pub const MAX_POINT: usize = 256;
const REFRESH_NS: u64 = 1_000_000_000;

#[derive(Clone, Copy)]
pub struct Mount {
    point: [u8; MAX_POINT],
    point_len: usize,
    /// Whether the mount takes hints: false for a mount nested in a hint
    /// mount (another file system there: no hints for its paths).
    /// (A bool and not an Option: a table starts as zeroed memory.)
    hints: bool,
    /// `sockaddr_un` of the daemon's hint socket, when `hints`.
    addr: libc::sockaddr_un,
}

impl Mount {
    pub fn point(&self) -> &[u8] {
        &self.point[..self.point_len]
    }
}

pub struct Table {
    len: usize,
    mounts: [Mount; MAX_MOUNTS],
}

impl Table {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mounts(&self) -> &[Mount] {
        &self.mounts[..self.len]
    }

    /// The mount `path` (absolute, normalised) is on, if it is one taking
    /// hints: the longest mount point containing it decides.
    pub fn find(&self, path: &[u8]) -> Option<&libc::sockaddr_un> {
        let best = self.mounts().iter().filter(|m| path::is_under(path, m.point())).max_by_key(|m| m.point_len)?;
        best.hints.then_some(&best.addr)
    }

    fn same_as(&self, other: &Table) -> bool {
        self.len == other.len
            && self.mounts().iter().zip(other.mounts()).all(|(a, b)| a.point() == b.point() && a.hints == b.hints)
    }

    /// Fill from mountinfo text: every ext4lazy-like mount whose socket
    /// exists (`has_socket`), then every mount below one of them.
    pub fn fill(&mut self, mountinfo: &[u8], has_socket: &dyn Fn(&[u8; SOCKET_NAME_LEN]) -> bool) {
        self.len = 0;
        let mut point = [0u8; MAX_POINT];
        // Pass 1: hint mounts. A later mount on the same point hides an earlier one.
        for line in mountinfo.split(|&b| b == b'\n') {
            let Some((field, fstype)) = path::mountinfo_line(line) else { continue };
            let Some(n) = path::unescape_mountinfo(field, &mut point) else { continue };
            let p = &point[..n];
            self.remove(p);
            if path::may_be_ext4lazy(fstype) {
                let sock = path::socket_path(p);
                if has_socket(&sock) {
                    self.push(p, Some(sockaddr(&sock)));
                }
            }
        }
        // Pass 2: what is mounted inside them is another file system.
        for line in mountinfo.split(|&b| b == b'\n') {
            let Some((field, _)) = path::mountinfo_line(line) else { continue };
            let Some(n) = path::unescape_mountinfo(field, &mut point) else { continue };
            let p = &point[..n];
            let inside = self.mounts().iter().any(|m| m.hints && m.point() != p && path::is_under(p, m.point()));
            if inside && !self.mounts().iter().any(|m| m.point() == p) {
                self.push(p, None);
            }
        }
    }

    fn remove(&mut self, p: &[u8]) {
        if let Some(i) = self.mounts().iter().position(|m| m.point() == p) {
            self.mounts.copy_within(i + 1..self.len, i);
            self.len -= 1;
        }
    }

    fn push(&mut self, p: &[u8], addr: Option<libc::sockaddr_un>) {
        if self.len == MAX_MOUNTS {
            return;
        }
        let m = &mut self.mounts[self.len];
        m.point[..p.len()].copy_from_slice(p);
        m.point_len = p.len();
        m.hints = addr.is_some();
        if let Some(a) = addr {
            m.addr = a;
        }
        self.len += 1;
    }
}

fn sockaddr(path: &[u8; SOCKET_NAME_LEN]) -> libc::sockaddr_un {
    // SAFETY: sockaddr_un is plain data; all zeroes is valid.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, &s) in a.sun_path.iter_mut().zip(path.iter()) {
        *d = s as libc::c_char;
    }
    a
}

static CURRENT: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());
static LAST_REFRESH: AtomicU64 = AtomicU64::new(0);

/// The current table (re-read when a second has passed), or None when it
/// cannot be read at all.
pub fn current() -> Option<&'static Table> {
    let now = sys::coarse_now_ns();
    let last = LAST_REFRESH.load(Ordering::Relaxed);
    let cur = CURRENT.load(Ordering::Acquire);
    // Exactly one thread (the one that moves the stamp) re-reads.
    if (cur.is_null() || now.wrapping_sub(last) >= REFRESH_NS)
        && LAST_REFRESH.compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        refresh(cur);
    }
    let cur = CURRENT.load(Ordering::Acquire);
    // SAFETY: tables are never freed once published (module comment).
    unsafe { cur.as_ref() }
}

fn refresh(old: *mut Table) {
    let Some(fresh) = sys::Mapping::new(std::mem::size_of::<Table>()) else { return };
    let Some(text) = sys::read_mountinfo() else { return };
    // SAFETY: the mapping is zeroed, aligned to a page and big enough; all
    // zeroes is a valid (empty) Table.
    let table = unsafe { &mut *(fresh.ptr() as *mut Table) };
    table.fill(text.bytes(), &|sock| sys::exists(sock));
    // SAFETY: published tables are never freed.
    if let Some(old_table) = unsafe { old.as_ref() } {
        if old_table.same_as(table) {
            return; // `fresh` is unmapped on drop
        }
    }
    if CURRENT.compare_exchange(old, fresh.ptr() as *mut Table, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        fresh.leak();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(info: &str, sockets: &[&str]) -> Box<Table> {
        // SAFETY: all zeroes is an empty table.
        let mut t: Box<Table> = Box::new(unsafe { std::mem::zeroed() });
        let socks: Vec<_> = sockets.iter().map(|m| path::socket_path(m.as_bytes())).collect();
        t.fill(info.as_bytes(), &|s| socks.contains(s));
        t
    }

    const INFO: &str = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
        40 22 0:50 / /mnt/a rw - fuse.ext4lazy /img/a rw\n\
        41 22 0:51 / /mnt/b rw - fuse /img/b rw\n\
        42 22 0:52 / /mnt/c rw - fuse.ext4lazy /img/c rw\n\
        43 40 0:53 / /mnt/a/inner rw - tmpfs tmpfs rw\n\
        44 22 0:54 / /mnt/ssh rw - fuse.sshfs host: rw\n";

    #[test]
    fn only_mounts_with_a_hint_socket_take_hints() {
        let t = table(INFO, &["/mnt/a", "/mnt/b", "/mnt/ssh"]);
        assert!(t.find(b"/mnt/a/x/y").is_some());
        assert!(t.find(b"/mnt/b").is_some(), "a mount without subtype (type fuse) with a socket");
        assert!(t.find(b"/mnt/c/x").is_none(), "no socket: mounted without stepahead");
        assert!(t.find(b"/mnt/ssh/x").is_none(), "another FUSE file system");
        assert!(t.find(b"/home/x").is_none());
        assert!(t.find(b"/mnt/ab").is_none());
    }

    #[test]
    fn a_mount_nested_in_a_hint_mount_takes_none() {
        let t = table(INFO, &["/mnt/a"]);
        assert!(t.find(b"/mnt/a/inner/f").is_none());
        assert!(t.find(b"/mnt/a/inner2/f").is_some());
    }

    #[test]
    fn a_later_mount_on_the_same_point_hides_the_earlier() {
        let info = format!("{INFO}50 22 0:60 / /mnt/a rw - ext4 /dev/sdb rw\n");
        let t = table(&info, &["/mnt/a"]);
        assert!(t.find(b"/mnt/a/x").is_none());
        assert!(table("", &[]).is_empty());
    }

    #[test]
    fn the_socket_address_names_the_mounts_socket() {
        let t = table(INFO, &["/mnt/a"]);
        let a = t.find(b"/mnt/a/f").unwrap();
        let name: Vec<u8> = a.sun_path.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
        assert_eq!(name, path::socket_path(b"/mnt/a").to_vec());
    }
}
