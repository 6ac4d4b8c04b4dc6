//! The FUSE protocol, spoken by ext4lazy's daemon: typed requests
//! ([`request`]), reply structs ([`reply`]), the INIT handshake and the
//! classic /dev/fuse transport ([`session`]), and FUSE over io_uring
//! ([`uring`]), where each CPU has its own request queue served by a thread
//! bound to that CPU, so a request never has to wake another CPU.
//!
//! A file system implements [`Handler`]: one call per request, which appends
//! the reply's arguments to a buffer or returns an errno.

pub mod abi;
pub mod reply;
pub mod request;
pub mod session;
pub mod uring;

pub use reply::{Attr, DirBuf, Entry, Statfs};
pub use request::{Op, Request, SetAttrIn, SetTime};
pub use session::{Config, Counters, Notifier, Session};
pub use uring::{Priority, UringConfig};

/// An error number as the kernel takes it (positive here, negated on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENOTTY: Errno = Errno(libc::ENOTTY);
    pub const EROFS: Errno = Errno(libc::EROFS);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const EPROTO: Errno = Errno(libc::EPROTO);

    pub fn from_i32(e: i32) -> Errno {
        Errno(e)
    }
}

/// What the kernel offered at INIT, and what the file system asks for.
#[derive(Clone, Copy, Debug)]
pub struct InitInfo {
    /// Capabilities the kernel supports (abi::init bits).
    pub offered: u64,
    /// Protocol minor version agreed.
    pub minor: u32,
}

/// A FUSE file system. Called from several threads at once.
pub trait Handler: Send + Sync + 'static {
    /// Capabilities wanted (abi::init bits); only those the kernel offers are used.
    fn capabilities(&self, info: &InitInfo) -> u64;

    /// Serve one request: append the reply's arguments to `out` (empty on
    /// entry) and return Ok, or return the error to send instead.
    fn handle(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno>;

    /// The kernel dropped `nlookup` references to `nodeid` (FORGET and
    /// BATCH_FORGET; no reply). A file system that frees nothing on behalf
    /// of the kernel's references can ignore it.
    fn forget(&self, _nodeid: u64, _nlookup: u64) {}
}

/// Parse and serve one request; None when the opcode takes no reply
/// (FORGET, BATCH_FORGET, INTERRUPT), else the error code for the out header
/// (0 or a negated errno) with the arguments in `out`.
pub(crate) fn serve<H: Handler + ?Sized>(h: &H, header: &abi::InHeader, fixed: &[u8], payload: &[u8], out: &mut Vec<u8>, counters: &Counters) -> Option<i32> {
    use abi::op;
    out.clear();
    counters.count(header.opcode);
    match header.opcode {
        op::FORGET => {
            if let Some(nlookup) = request::forget(fixed) {
                h.forget(header.nodeid, nlookup);
            }
            return None;
        }
        op::BATCH_FORGET => {
            for (nodeid, nlookup) in request::batch_forget(fixed, payload) {
                h.forget(nodeid, nlookup);
            }
            return None;
        }
        // Requests are served too quickly for interrupts to matter.
        op::INTERRUPT => return None,
        // Only sent to fuseblk mounts; nothing to do.
        op::DESTROY => return Some(0),
        // A second INIT on a live session is a protocol error.
        op::INIT => return Some(-libc::EPROTO),
        _ => {}
    }
    // Extensions (security contexts, supplementary groups) follow the
    // arguments; we ask for none, and ignore any.
    let ext = usize::from(header.total_extlen) * 8;
    let payload = &payload[..payload.len().saturating_sub(ext)];
    let req = Request::from(header);
    let result = request::parse(header.opcode, fixed, payload).and_then(|op| match op {
        Op::Unsupported(_) => Err(Errno::ENOSYS),
        op => h.handle(&req, op, out),
    });
    match result {
        Ok(()) => Some(0),
        Err(e) => {
            out.clear();
            Some(-e.0)
        }
    }
}
