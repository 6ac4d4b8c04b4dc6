//! The daemon's end of StepAhead's full-path hints (issue 7, item 3c).
//!
//! With `-o stepahead`, the daemon binds a Unix datagram socket at
//! `/run/ext4lazy/<fnv1a64 of the mount point, 16 hex digits>.hints`
//! (`crates/preload` computes the same name from /proc/self/mountinfo). Each
//! datagram is one absolute, normalised path a program is about to use. A
//! receiving thread moves them into a bounded queue, dropping (and counting)
//! what does not fit: a hint that waits is soon useless, since the program
//! has gone on without it. One worker takes them in order and prefetches
//! through `Volume::hint_path`. The socket is removed when the mount ends.
//!
//! Any local user may send hints (with `allow_other` the socket is 0666, and
//! nothing here relies on its mode): the socket has SO_PASSCRED, so the
//! kernel attaches each sender's uid and gid to its datagram, and the engine
//! prefetches only what that user could look up itself (`fs::stepahead`,
//! paths.rs). A datagram without them is refused.

use anyhow::{Context, Result};
use fs::stepahead::PathHints;
use fs::Volume;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Hints waiting for the worker: more are dropped. A cold hint takes a few
/// milliseconds on a disk; a program does not wait for it, so a deep queue
/// would only hold paths already translated.
const QUEUE: usize = 64;
/// Socket receive buffer asked for (the kernel caps it at net.core.rmem_max).
/// The count of waiting datagrams has its own cap, net.unix.max_dgram_qlen
/// (see `DGRAM_QUEUE_SYSCTL`), usually the lower of the two.
const RECV_BUFFER: libc::c_int = 4 << 20;
/// How many datagrams the kernel lets wait on a Unix socket; more are refused
/// to the sender (the library drops them, unseen). Per network namespace, read
/// when the socket is made. 10 by default, 512 where systemd sets it.
const DGRAM_QUEUE_SYSCTL: &str = "/proc/sys/net/unix/max_dgram_qlen";
/// Below this, a burst of hints from one busy program outruns the receiving
/// thread: say so once at mount.
const DGRAM_QUEUE_ADVISED: u32 = 512;
/// Longest datagram taken: PATH_MAX.
const MAX_HINT: usize = 4096;

/// FNV-1a, 64 bits (the library's `path::fnv1a64`).
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Where the hint socket of the mount at `mnt` (canonical) lives.
pub fn socket_path(mnt: &Path) -> PathBuf {
    PathBuf::from(format!("/run/ext4lazy/{:016x}.hints", fnv1a64(mnt.as_os_str().as_bytes())))
}

/// The components of `hint` below `mnt`, or None when the hint is not a
/// normalised absolute path on this mount (the library sends only those).
pub fn components<'a>(mnt: &[u8], hint: &'a [u8]) -> Option<Vec<&'a [u8]>> {
    let rest = if mnt == b"/" { hint.strip_prefix(b"/")? } else { hint.strip_prefix(mnt)? };
    if !(rest.is_empty() || rest.starts_with(b"/") || mnt == b"/") {
        return None; // "/mnt/volume" is not below "/mnt/vol"
    }
    let parts: Vec<&[u8]> = rest.split(|&b| b == b'/').filter(|c| !c.is_empty() && *c != b".").collect();
    (!parts.iter().any(|c| *c == b"..")).then_some(parts)
}

/// One datagram as received: its length, and its sender as the kernel
/// vouches for it (None: no credentials came with it).
struct Received {
    len: usize,
    /// Longer than the buffer: not from the library.
    truncated: bool,
    sender: Option<fs::Cred>,
}

/// Turn on SO_PASSCRED: every datagram then carries its sender's pid, uid
/// and gid, filled in by the kernel (a sender may claim only ids it holds).
fn pass_credentials(sock: &UnixDatagram) -> std::io::Result<()> {
    let on: libc::c_int = 1;
    // SAFETY: setsockopt on our own socket with an int option value.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Bind an unbound socket to `path` (std binds only sockets it creates).
fn bind(sock: &UnixDatagram, path: &Path) -> std::io::Result<()> {
    // SAFETY: an all-zero sockaddr_un is valid; the path is copied within sun_path.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "socket path too long"));
    }
    for (d, &b) in addr.sun_path.iter_mut().zip(bytes) {
        *d = b as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: bind with the address above and its length.
    let r = unsafe { libc::bind(sock.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len as libc::socklen_t) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Receive one datagram into `buf` with its sender's credentials.
fn recv_hint(sock: &UnixDatagram, buf: &mut [u8]) -> std::io::Result<Received> {
    // Control buffer: room for one ucred and nothing more, so descriptors a
    // sender attaches (SCM_RIGHTS) do not fit and the kernel drops them
    // (MSG_CTRUNC); any that came anyway are closed below. u64s: aligned
    // for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::ucred>() as u32) } as usize;
    let space = space.min(std::mem::size_of_val(&control));
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: an all-zero msghdr is a valid empty one; the pointers set
    // below point at live buffers of the lengths given.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: recvmsg on our socket with the msghdr above.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut sender = None;
    // SAFETY: the CMSG_* walk stays within msg_controllen, as the kernel
    // filled it; each payload is read unaligned at its declared length.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            let len = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_SOCKET, libc::SCM_CREDENTIALS) if len >= std::mem::size_of::<libc::ucred>() => {
                    let u = std::ptr::read_unaligned(data as *const libc::ucred);
                    sender = Some(fs::Cred { uid: u.uid, gid: u.gid });
                }
                (libc::SOL_SOCKET, libc::SCM_RIGHTS) => {
                    for i in 0..len / std::mem::size_of::<libc::c_int>() {
                        let fd = std::ptr::read_unaligned((data as *const libc::c_int).add(i));
                        drop(OwnedFd::from_raw_fd(fd));
                    }
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Received { len: n as usize, truncated: msg.msg_flags & libc::MSG_TRUNC != 0, sender })
}

/// The running listener; stopping it (drop) joins its threads and removes the socket.
pub struct HintListener {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    path: PathBuf,
}

impl HintListener {
    pub fn start(vol: Arc<Volume>, mnt: &Path, allow_other: bool) -> Result<HintListener> {
        let path = socket_path(mnt);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("{}", dir.display()))?;
        }
        // A socket left by a daemon that was killed.
        let _ = std::fs::remove_file(&path);
        // Credentials on before the name exists: no datagram arrives without them.
        let sock = UnixDatagram::unbound().context("creating the hint socket")?;
        pass_credentials(&sock).context("SO_PASSCRED on the hint socket")?;
        bind(&sock, &path).with_context(|| format!("binding {}", path.display()))?;
        // Anyone who may use the mount may hint it; a hint only reads, and
        // only what its sender could look up (the credentials, not this mode).
        let mode = if allow_other { 0o666 } else { 0o600 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        // Room for bursts while the receiving thread waits for a CPU (a busy
        // machine): the kernel's queue drops what does not fit, unseen.
        let bytes: libc::c_int = RECV_BUFFER;
        // SAFETY: setsockopt on our own socket with an int option value.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &bytes as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if let Some(qlen) = std::fs::read_to_string(DGRAM_QUEUE_SYSCTL).ok().and_then(|s| s.trim().parse::<u32>().ok())
        {
            if qlen < DGRAM_QUEUE_ADVISED {
                fuse::report(format_args!(
                    "path hints: {DGRAM_QUEUE_SYSCTL} is {qlen}, so a program's hints beyond {qlen} waiting \
                     are dropped unseen; {DGRAM_QUEUE_ADVISED} (systemd's default) keeps up with bursts"
                ));
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = sync_channel::<(Vec<u8>, fs::Cred)>(QUEUE);
        let receiver = {
            let (stop, vol) = (stop.clone(), vol.clone());
            std::thread::Builder::new().name("hints-recv".into()).spawn(move || {
                let mut buf = vec![0u8; MAX_HINT + 1];
                while !stop.load(Ordering::Relaxed) {
                    match recv_hint(&sock, &mut buf) {
                        Ok(Received { truncated: true, .. }) => {} // longer than any path: not from the library
                        Ok(Received { len, .. }) if len > MAX_HINT => {}
                        Ok(Received { sender: None, .. }) => vol.note_path_hint_refused(),
                        Ok(Received { len, sender: Some(who), .. }) => match tx.try_send((buf[..len].to_vec(), who)) {
                            Ok(()) => {}
                            Err(TrySendError::Full(_)) => vol.note_path_hint_dropped(),
                            Err(TrySendError::Disconnected(_)) => break,
                        },
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            fuse::report(format_args!("path hints stop: {e}"));
                            break;
                        }
                    }
                }
            })?
        };
        let worker = {
            let mnt = mnt.as_os_str().as_bytes().to_vec();
            std::thread::Builder::new().name("hints".into()).spawn(move || {
                let mut state = PathHints::default();
                for (hint, who) in rx {
                    if let Some(parts) = components(&mnt, &hint) {
                        vol.hint_path(&parts, who, &mut state);
                    }
                }
            })?
        };
        Ok(HintListener { stop, threads: vec![receiver, worker], path })
    }
}

impl Drop for HintListener {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The receiver sees the flag within its read timeout; its end of the
        // queue goes with it, which ends the worker.
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names_match_the_library() {
        // The values crates/preload's path tests check.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(socket_path(Path::new("")), PathBuf::from("/run/ext4lazy/cbf29ce484222325.hints"));
    }

    #[test]
    fn hints_become_components_below_the_mount() {
        let c = |m: &str, h: &str| {
            components(m.as_bytes(), h.as_bytes())
                .map(|v| v.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>())
        };
        assert_eq!(c("/mnt/vol", "/mnt/vol/a/b"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(c("/mnt/vol", "/mnt/vol"), Some(vec![]));
        assert_eq!(c("/mnt/vol", "/mnt/vol//a/./b/"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(c("/mnt/vol", "/mnt/volume/a"), None);
        assert_eq!(c("/mnt/vol", "/elsewhere/a"), None);
        assert_eq!(c("/mnt/vol", "/mnt/vol/a/../b"), None, "not normalised: not from the library");
        assert_eq!(c("/", "/a/b"), Some(vec!["a".into(), "b".into()]));
    }
}
