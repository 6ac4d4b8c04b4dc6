//! The FUSE protocol, spoken by ext4lazy's daemon: typed requests
//! ([`request`]), reply structs ([`reply`]), the INIT handshake and the
//! classic /dev/fuse transport ([`session`]), and FUSE over io_uring
//! ([`uring`]), where each CPU has its own request queue served by a thread
//! bound to that CPU, so a request never has to wake another CPU.
//!
//! A file system implements [`Handler`]: one call per request, which appends
//! the reply's arguments to a buffer or returns an errno. A panic in it is
//! caught at the request boundary on either transport ([`panics`]): the
//! request is answered EIO and the thread serves on.

pub mod abi;
pub mod panics;
pub mod reply;
pub mod request;
pub mod session;
pub mod uring;

pub use panics::PanicNote;
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

    /// READ of `buf.len()` bytes at `offset` (at most the size asked for),
    /// into `buf`, which the transport sends as it is: Some(the bytes read),
    /// or None to have the request served through [`Handler::handle`]
    /// instead (the default). The io_uring transport offers its payload
    /// buffer, aligned to a page, so that a direct read of the backing store
    /// lands where the kernel takes the reply from, with no copy.
    fn read_into(&self, _req: &Request, _offset: u64, _buf: &mut [u8]) -> Option<Result<usize, Errno>> {
        None
    }

    /// The kernel dropped `nlookup` references to `nodeid` (FORGET and
    /// BATCH_FORGET; no reply). A file system that frees nothing on behalf
    /// of the kernel's references can ignore it.
    fn forget(&self, _nodeid: u64, _nlookup: u64) {}

    /// The kernel asks to interrupt request `target` (INTERRUPT, which
    /// `req` is; no reply). Requests that are served quickly can ignore it.
    fn interrupt(&self, _req: &Request, _target: u64) {}

    /// Serving a request panicked. It has been answered EIO (or not at all,
    /// when its opcode takes no reply) and the thread goes on serving; say
    /// so where the daemon's messages go. The default writes one line to stderr.
    fn panicked(&self, report: &PanicReport<'_>) {
        panics::eprint_line(&format!("fusewire: {report}"));
    }
}

/// A request whose serving panicked, for [`Handler::panicked`].
#[derive(Clone, Copy, Debug)]
pub struct PanicReport<'a> {
    pub opcode: u32,
    pub nodeid: u64,
    pub unique: u64,
    pub note: &'a PanicNote,
    /// Whether the kernel was answered (EIO); false for the opcodes that take no reply.
    pub answered: bool,
}

impl PanicReport<'_> {
    /// The opcode's name as fuse.h spells it (without FUSE_), or its number.
    pub fn op_name(&self) -> String {
        abi::op::name(self.opcode).map_or_else(|| format!("OP_{}", self.opcode), str::to_owned)
    }

    /// What the kernel got: "answered EIO" or "no reply (the opcode takes none)".
    pub fn outcome(&self) -> &'static str {
        if self.answered {
            "answered EIO"
        } else {
            "not answered (the opcode takes no reply)"
        }
    }
}

impl std::fmt::Display for PanicReport<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "panic serving {} (node {}, request {}): {}; {}",
            self.op_name(),
            self.nodeid,
            self.unique,
            self.note,
            self.outcome()
        )
    }
}

/// Whether an opcode's request expects a reply: FORGET, BATCH_FORGET and
/// INTERRUPT take none, and a reply to them would be an error.
pub fn takes_reply(opcode: u32) -> bool {
    !matches!(opcode, abi::op::FORGET | abi::op::BATCH_FORGET | abi::op::INTERRUPT)
}

/// Parse and serve one request; None when the opcode takes no reply
/// (FORGET, BATCH_FORGET, INTERRUPT), else the error code for the out header
/// (0 or a negated errno) with the arguments in `out`. A panic anywhere in
/// it is caught here, on both transports: EIO, or still no reply.
pub(crate) fn serve<H: Handler + ?Sized>(
    h: &H,
    header: &abi::InHeader,
    fixed: &[u8],
    payload: &[u8],
    out: &mut Vec<u8>,
    counters: &Counters,
) -> Option<i32> {
    out.clear();
    let started = std::time::Instant::now();
    let reply = match panics::catch(|| dispatch(h, header, fixed, payload, out)) {
        Ok(reply) => reply,
        Err(note) => panicked(h, header, &note, out, counters),
    };
    counters.count(header.opcode, started);
    reply
}

/// A READ served into `buf`, the transport's reply buffer, through
/// [`Handler::read_into`]: Some((the out header's error, the reply's
/// length)), or None when the handler takes the usual way ([`serve`]
/// then). A panic is caught and answered EIO, as in [`serve`].
pub(crate) fn serve_read_into<H: Handler + ?Sized>(
    h: &H,
    header: &abi::InHeader,
    fixed: &[u8],
    buf: &mut [u8],
    counters: &Counters,
) -> Option<(i32, usize)> {
    let Ok(Op::Read { offset, size }) = request::parse(header.opcode, fixed, &[]) else { return None };
    let req = Request::from(header);
    let size = (size as usize).min(buf.len());
    let started = std::time::Instant::now();
    let outcome = match panics::catch(|| h.read_into(&req, offset, &mut buf[..size])) {
        Ok(None) => return None,
        Ok(Some(result)) => Ok(result),
        Err(note) => Err(note),
    };
    counters.count(header.opcode, started);
    Some(match outcome {
        Ok(Ok(n)) => (0, n.min(size)),
        Ok(Err(e)) => (-e.0, 0),
        Err(note) => (panicked(h, header, &note, &mut Vec::new(), counters).unwrap_or(-libc::EIO), 0),
    })
}

/// After a panic: count and report it, and answer EIO where a reply is due.
fn panicked<H: Handler + ?Sized>(
    h: &H,
    header: &abi::InHeader,
    note: &PanicNote,
    out: &mut Vec<u8>,
    counters: &Counters,
) -> Option<i32> {
    out.clear();
    counters.panics.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let answered = takes_reply(header.opcode);
    let report = PanicReport { opcode: header.opcode, nodeid: header.nodeid, unique: header.unique, note, answered };
    // The reply must not depend on the report: a panic in it is caught too.
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.panicked(&report))).is_err() {
        panics::eprint_line(&format!("fusewire: {report}"));
    }
    answered.then_some(-libc::EIO)
}

fn dispatch<H: Handler + ?Sized>(
    h: &H,
    header: &abi::InHeader,
    fixed: &[u8],
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Option<i32> {
    use abi::op;
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
        op::INTERRUPT => {
            if let Some(target) = request::interrupt(fixed) {
                h.interrupt(&Request::from(header), target);
            }
            return None;
        }
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

/// A handler that panics on request, and request bytes, for the tests of
/// both the boundary and the transports.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use std::sync::Mutex;

    /// Requests on this node (and FORGETs of it, INTERRUPTs of this request) panic.
    pub const FRAGILE: u64 = 13;

    /// (opcode, answered, the note's message and place) of each panic reported.
    #[derive(Default)]
    pub struct Fragile {
        pub reports: Mutex<Vec<(u32, bool, PanicNote)>>,
    }

    impl Handler for Fragile {
        fn capabilities(&self, _info: &InitInfo) -> u64 {
            0
        }
        fn handle(&self, req: &Request, _op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
            out.extend_from_slice(b"half a reply");
            assert_ne!(req.nodeid, FRAGILE, "node {} is fragile", req.nodeid);
            out.clear();
            out.extend_from_slice(&req.unique.to_ne_bytes());
            Ok(())
        }
        fn forget(&self, nodeid: u64, _nlookup: u64) {
            assert_ne!(nodeid, FRAGILE, "forgetting node {nodeid}");
        }
        fn interrupt(&self, _req: &Request, target: u64) {
            assert_ne!(target, FRAGILE, "interrupting request {target}");
        }
        fn panicked(&self, r: &PanicReport<'_>) {
            self.reports.lock().unwrap_or_else(|e| e.into_inner()).push((r.opcode, r.answered, r.note.clone()));
        }
    }

    /// One request as /dev/fuse delivers it: header, fixed struct, payload.
    pub fn message(opcode: u32, unique: u64, nodeid: u64, fixed: &[u8], payload: &[u8]) -> Vec<u8> {
        let len = (abi::IN_HEADER + fixed.len() + payload.len()) as u32;
        let mut m = Vec::new();
        abi::InHeader { len, opcode, unique, nodeid, ..Default::default() }.write(&mut m);
        m.extend_from_slice(fixed);
        m.extend_from_slice(payload);
        m
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{Fragile, FRAGILE};
    use super::*;
    use abi::op;

    fn serve_one(
        h: &Fragile,
        opcode: u32,
        nodeid: u64,
        fixed: &[u8],
        payload: &[u8],
        counters: &Counters,
    ) -> (Option<i32>, Vec<u8>) {
        let header = abi::InHeader { opcode, unique: 99, nodeid, ..Default::default() };
        let mut out = Vec::new();
        let r = serve(h, &header, fixed, payload, &mut out, counters);
        (r, out)
    }

    #[test]
    fn a_panic_is_answered_eio_and_reported_with_its_place() {
        let (h, c) = (Fragile::default(), Counters::default());
        let (r, out) = serve_one(&h, op::GETATTR, FRAGILE, &[0; 16], &[], &c);
        assert_eq!(r, Some(-libc::EIO));
        assert!(out.is_empty(), "half a reply is never sent");
        let reports = h.reports.lock().unwrap();
        let (opcode, answered, note) = &reports[0];
        assert_eq!((*opcode, *answered), (op::GETATTR, true));
        assert!(note.message.contains("node 13 is fragile"), "{note:?}");
        assert!(note.location.as_deref().is_some_and(|l| l.starts_with(concat!(file!(), ":"))), "{note:?}");
        assert_eq!(c.panics.load(std::sync::atomic::Ordering::Relaxed), 1);
    }

    #[test]
    fn requests_without_a_reply_get_none_after_a_panic_either() {
        let (h, c) = (Fragile::default(), Counters::default());
        let mut pairs = Vec::new();
        abi::Out(&mut pairs).u64(FRAGILE).u64(1);
        let mut count = Vec::new();
        abi::Out(&mut count).u32(1).u32(0);
        assert_eq!(serve_one(&h, op::FORGET, FRAGILE, &1u64.to_ne_bytes(), &[], &c).0, None);
        assert_eq!(serve_one(&h, op::BATCH_FORGET, 0, &count, &pairs, &c).0, None);
        assert_eq!(serve_one(&h, op::INTERRUPT, 0, &FRAGILE.to_ne_bytes(), &[], &c).0, None);
        let reports = h.reports.lock().unwrap();
        let seen: Vec<(u32, bool)> = reports.iter().map(|(o, a, _)| (*o, *a)).collect();
        assert_eq!(seen, [(op::FORGET, false), (op::BATCH_FORGET, false), (op::INTERRUPT, false)]);
        assert_eq!(c.panics.load(std::sync::atomic::Ordering::Relaxed), 3);
    }

    #[test]
    fn the_handler_serves_on_after_a_panic() {
        let (h, c) = (Fragile::default(), Counters::default());
        assert_eq!(serve_one(&h, op::LOOKUP, FRAGILE, &[], b"name\0", &c).0, Some(-libc::EIO));
        let (r, out) = serve_one(&h, op::LOOKUP, 1, &[], b"name\0", &c);
        assert_eq!((r, out), (Some(0), 99u64.to_ne_bytes().to_vec()));
    }

    #[test]
    fn exactly_the_opcodes_without_a_reply_get_none() {
        let (h, c) = (Fragile::default(), Counters::default());
        for opcode in 0..64 {
            let fixed = vec![0u8; abi::fixed_size(opcode)];
            let (r, _) = serve_one(&h, opcode, 1, &fixed, b"a\0b\0", &c);
            assert_eq!(r.is_some(), takes_reply(opcode), "opcode {opcode}");
        }
    }

    /// Serves READs into the caller's buffer: sevens, one byte short; node
    /// FRAGILE panics, node 0 declines.
    struct Reader(Fragile);

    impl Handler for Reader {
        fn capabilities(&self, _info: &InitInfo) -> u64 {
            0
        }
        fn handle(&self, req: &Request, op: Op<'_>, out: &mut Vec<u8>) -> Result<(), Errno> {
            self.0.handle(req, op, out)
        }
        fn read_into(&self, req: &Request, offset: u64, buf: &mut [u8]) -> Option<Result<usize, Errno>> {
            assert_ne!(req.nodeid, FRAGILE, "node {} is fragile", req.nodeid);
            if req.nodeid == 0 {
                return None;
            }
            assert_eq!(offset, 4096);
            buf.fill(7);
            Some(Ok(buf.len() - 1))
        }
        fn panicked(&self, r: &PanicReport<'_>) {
            self.0.panicked(r)
        }
    }

    #[test]
    fn a_read_is_served_into_the_transports_buffer_counted_and_caught() {
        let (h, c) = (Reader(Fragile::default()), Counters::default());
        let mut fixed = Vec::new();
        abi::Out(&mut fixed).u64(0).u64(4096).u32(100).u32(0).u64(0).u32(0).u32(0);
        let header = |nodeid| abi::InHeader { opcode: op::READ, unique: 5, nodeid, ..Default::default() };
        let mut buf = vec![0u8; 4096];
        assert_eq!(serve_read_into(&h, &header(3), &fixed, &mut buf, &c), Some((0, 99)), "no more than asked");
        assert!(buf[..100].iter().all(|&b| b == 7) && buf[100] == 0, "only the size asked for is touched");
        assert_eq!(serve_read_into(&h, &header(FRAGILE), &fixed, &mut buf, &c), Some((-libc::EIO, 0)));
        assert_eq!(h.0.reports.lock().unwrap().len(), 1, "the panic is reported");
        assert_eq!(serve_read_into(&h, &header(0), &fixed, &mut buf, &c), None, "declined: served as usual");
        let getattr = abi::InHeader { opcode: op::GETATTR, ..header(3) };
        assert_eq!(serve_read_into(&h, &getattr, &[0; 16], &mut buf, &c), None, "only READ");
    }
}
