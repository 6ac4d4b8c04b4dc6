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

use anyhow::{Context, Result};
use fs::stepahead::PathHints;
use fs::Volume;
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
        let sock = UnixDatagram::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        // Anyone who may use the mount may hint it; a hint only reads.
        let mode = if allow_other { 0o666 } else { 0o600 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        sock.set_read_timeout(Some(Duration::from_millis(200)))?;
        // Room for bursts while the receiving thread waits for a CPU (a busy
        // machine): the kernel's queue drops what does not fit, unseen.
        let bytes: libc::c_int = RECV_BUFFER;
        // SAFETY: setsockopt on our own socket with an int option value.
        unsafe {
            libc::setsockopt(
                std::os::fd::AsRawFd::as_raw_fd(&sock),
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
        let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
        let receiver = {
            let (stop, vol) = (stop.clone(), vol.clone());
            std::thread::Builder::new().name("hints-recv".into()).spawn(move || {
                let mut buf = vec![0u8; MAX_HINT + 1];
                while !stop.load(Ordering::Relaxed) {
                    match sock.recv(&mut buf) {
                        Ok(n) if n <= MAX_HINT => match tx.try_send(buf[..n].to_vec()) {
                            Ok(()) => {}
                            Err(TrySendError::Full(_)) => vol.note_path_hint_dropped(),
                            Err(TrySendError::Disconnected(_)) => break,
                        },
                        Ok(_) => {} // longer than any path: not from the library
                        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
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
                for hint in rx {
                    if let Some(parts) = components(&mnt, &hint) {
                        vol.hint_path(&parts, &mut state);
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
        let c = |m: &str, h: &str| components(m.as_bytes(), h.as_bytes()).map(|v| v.iter().map(|p| String::from_utf8_lossy(p).into_owned()).collect::<Vec<_>>());
        assert_eq!(c("/mnt/vol", "/mnt/vol/a/b"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(c("/mnt/vol", "/mnt/vol"), Some(vec![]));
        assert_eq!(c("/mnt/vol", "/mnt/vol//a/./b/"), Some(vec!["a".into(), "b".into()]));
        assert_eq!(c("/mnt/vol", "/mnt/volume/a"), None);
        assert_eq!(c("/mnt/vol", "/elsewhere/a"), None);
        assert_eq!(c("/mnt/vol", "/mnt/vol/a/../b"), None, "not normalised: not from the library");
        assert_eq!(c("/", "/a/b"), Some(vec!["a".into(), "b".into()]));
    }
}
