//! A mounted session: the INIT handshake, the /dev/fuse workers, and
//! notifications. /dev/fuse always has workers: before the io_uring queues
//! are registered every request comes through it, and afterwards the
//! kernel still sends FORGET and INTERRUPT there.

use crate::abi::{self, init, out_header, Fields, InHeader, IN_HEADER, OUT_HEADER};
use crate::{serve, uring, Handler, InitInfo};
use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What a session has served, for the daemon's statistics.
#[derive(Debug)]
pub struct Counters {
    /// Requests read from /dev/fuse.
    pub dev_requests: AtomicU64,
    /// Requests served from the io_uring queues.
    pub uring_requests: AtomicU64,
    /// io_uring queues registered (one per possible CPU, or none).
    pub uring_queues: AtomicU64,
    /// Queue threads moved between idle and normal priority (`Priority::Adaptive`).
    pub priority_switches: AtomicU64,
    /// Requests by opcode (both transports; opcodes past the table in the last slot).
    pub by_op: [AtomicU64; OPCODE_SLOTS],
    /// Nanoseconds spent serving requests, by opcode as `by_op`: where the
    /// daemon's time goes per kind of request (its waits for the image
    /// included), which a profile of CPU samples does not show.
    pub busy_ns_by_op: [AtomicU64; OPCODE_SLOTS],
    /// Requests whose serving panicked (caught, answered EIO where a reply is due).
    pub panics: AtomicU64,
}

/// Slots of `Counters::by_op`: every opcode we know is below this.
pub const OPCODE_SLOTS: usize = 64;

impl Default for Counters {
    fn default() -> Self {
        Counters {
            dev_requests: AtomicU64::new(0),
            uring_requests: AtomicU64::new(0),
            uring_queues: AtomicU64::new(0),
            priority_switches: AtomicU64::new(0),
            by_op: std::array::from_fn(|_| AtomicU64::new(0)),
            busy_ns_by_op: std::array::from_fn(|_| AtomicU64::new(0)),
            panics: AtomicU64::new(0),
        }
    }
}

impl Counters {
    /// One request of `opcode` served, since `started`.
    pub(crate) fn count(&self, opcode: u32, started: std::time::Instant) {
        let slot = (opcode as usize).min(OPCODE_SLOTS - 1);
        self.by_op[slot].fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.busy_ns_by_op[slot].fetch_add(ns, Ordering::Relaxed);
    }

    /// (opcode name, requests) for every opcode seen.
    pub fn requests_by_op(&self) -> Vec<(String, u64)> {
        Self::by_name(&self.by_op, &self.by_op)
    }

    /// (opcode name, nanoseconds spent serving it) for every opcode seen.
    pub fn busy_ns_by_op(&self) -> Vec<(String, u64)> {
        Self::by_name(&self.by_op, &self.busy_ns_by_op)
    }

    /// `values` of the opcodes `seen` counts, by opcode name.
    fn by_name(seen: &[AtomicU64], values: &[AtomicU64]) -> Vec<(String, u64)> {
        seen.iter()
            .zip(values)
            .enumerate()
            .filter(|(_, (n, _))| n.load(Ordering::Relaxed) > 0)
            .map(|(op, (_, v))| {
                let name = abi::op::name(op as u32).map_or_else(|| format!("OP_{op}"), str::to_owned);
                (name, v.load(Ordering::Relaxed))
            })
            .collect()
    }
}

/// How a session serves requests.
#[derive(Clone, Debug)]
pub struct Config {
    /// /dev/fuse worker threads (each on its own cloned descriptor).
    pub threads: usize,
    /// Largest WRITE the kernel may send, and so the READ size too.
    pub max_write: u32,
    pub max_readahead: u32,
    pub uring: uring::UringConfig,
    pub counters: Arc<Counters>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            threads: 2,
            max_write: 1 << 20,
            max_readahead: 1 << 20,
            uring: uring::UringConfig::default(),
            counters: Arc::default(),
        }
    }
}

/// An initialized FUSE connection.
pub struct Session<H: Handler> {
    dev: Arc<File>,
    handler: Arc<H>,
    config: Config,
    /// True when the kernel accepted FUSE over io_uring at INIT.
    uring: bool,
}

/// Tells the kernel to drop what it caches (FUSE notifications).
#[derive(Clone)]
pub struct Notifier(Arc<File>);

impl Notifier {
    /// Forget the attributes of `ino` (`offset` -1) or its cached data from `offset` for `len` bytes (0: to the end).
    pub fn inval_inode(&self, ino: u64, offset: i64, len: i64) -> io::Result<()> {
        let mut arg = Vec::with_capacity(24);
        abi::Out(&mut arg).u64(ino).u64(offset as u64).u64(len as u64);
        let h = out_header(OUT_HEADER + arg.len(), abi::NOTIFY_INVAL_INODE, 0);
        send(&self.0, &h, &arg)
    }
}

fn send(dev: &File, header: &[u8], args: &[u8]) -> io::Result<()> {
    let mut w = dev;
    let n = w.write_vectored(&[IoSlice::new(header), IoSlice::new(args)])?;
    // /dev/fuse takes a reply whole or not at all.
    debug_assert_eq!(n, header.len() + args.len());
    Ok(())
}

/// Reads one message, retrying what the kernel says to retry; None once unmounted.
fn receive(dev: &File, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        let mut r = dev;
        match r.read(buf) {
            // /dev/fuse never reads 0 bytes (it says ENODEV once unmounted);
            // a stream that does has ended (the tests serve a socket).
            Ok(0) => return Ok(None),
            Ok(n) => return Ok(Some(n)),
            Err(e) => match e.raw_os_error() {
                // ENOENT: the request was interrupted before we read it.
                Some(libc::ENOENT) | Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::ENODEV) => return Ok(None),
                _ => return Err(e),
            },
        }
    }
}

fn buffer_size(max_write: u32) -> usize {
    max_write as usize + 4096
}

impl<H: Handler> Session<H> {
    /// Do the INIT handshake on `dev` (a mounted /dev/fuse descriptor).
    pub fn new(dev: OwnedFd, handler: Arc<H>, config: Config) -> io::Result<Session<H>> {
        let dev = Arc::new(File::from(dev));
        let mut buf = vec![0u8; buffer_size(config.max_write)];
        loop {
            let n = receive(&dev, &mut buf)?
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "unmounted during the FUSE handshake"))?;
            let msg = &buf[..n];
            let h =
                InHeader::parse(msg).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "short FUSE message"))?;
            let reply_err = |errno: i32| send(&dev, &out_header(OUT_HEADER, -errno, h.unique), &[]);
            if h.opcode != abi::op::INIT {
                reply_err(libc::EIO)?;
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("FUSE opcode {} before INIT", h.opcode),
                ));
            }
            let body = &msg[IN_HEADER..];
            let Some(f) = Fields::new(body, abi::INIT_IN_MIN) else {
                reply_err(libc::EPROTO)?;
                return Err(io::Error::new(io::ErrorKind::InvalidData, "short FUSE INIT"));
            };
            let (major, minor) = (f.u32(0), f.u32(4));
            if major > abi::MAJOR {
                // The kernel offers a newer protocol: say ours, and it asks again.
                let mut v = Vec::new();
                abi::Out(&mut v).u32(abi::MAJOR).u32(abi::MAX_MINOR);
                send(&dev, &out_header(OUT_HEADER + v.len(), 0, h.unique), &v)?;
                continue;
            }
            if major < abi::MAJOR || minor < abi::MIN_MINOR {
                reply_err(libc::EPROTO)?;
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("the kernel's FUSE protocol {major}.{minor} is older than 7.{}", abi::MIN_MINOR),
                ));
            }
            let mut offered = u64::from(f.u32(12));
            if offered & init::INIT_EXT != 0 && body.len() >= 20 {
                offered |= u64::from(f.u32(16)) << 32;
            }
            let minor = minor.min(abi::MAX_MINOR);
            let info = InitInfo { offered, minor };
            let mut wanted =
                handler.capabilities(&info) | init::ASYNC_READ | init::BIG_WRITES | init::MAX_PAGES | init::INIT_EXT;
            if config.uring.enabled {
                wanted |= init::OVER_IO_URING;
            }
            let flags = wanted & offered;
            let max_readahead = config.max_readahead.min(f.u32(8));
            let max_pages = config.max_write.div_ceil(4096).max(1) as u16;
            let mut out = Vec::with_capacity(abi::INIT_OUT);
            abi::Out(&mut out)
                .u32(abi::MAJOR)
                .u32(minor)
                .u32(max_readahead)
                .u32(flags as u32)
                .u16(16) // max_background
                .u16(12) // congestion_threshold
                .u32(config.max_write)
                .u32(1) // time_gran: nanoseconds
                .u16(max_pages)
                .u16(0) // map_alignment
                .u32((flags >> 32) as u32)
                .u32(0) // max_stack_depth
                .u16(0) // request_timeout
                .zeros(22);
            debug_assert_eq!(out.len(), abi::INIT_OUT);
            send(&dev, &out_header(OUT_HEADER + out.len(), 0, h.unique), &out)?;
            let uring = flags & init::OVER_IO_URING != 0;
            return Ok(Session { dev, handler, config, uring });
        }
    }

    pub fn notifier(&self) -> Notifier {
        Notifier(self.dev.clone())
    }

    /// True when the kernel agreed to FUSE over io_uring.
    pub fn uses_uring(&self) -> bool {
        self.uring
    }

    /// Serve until the file system is unmounted.
    pub fn run(self) -> io::Result<()> {
        let mut workers = Vec::new();
        for i in 0..self.config.threads.max(1) {
            let dev = if i == 0 { self.dev.clone() } else { Arc::new(clone_dev(&self.dev)?) };
            let (h, size, counters) =
                (self.handler.clone(), buffer_size(self.config.max_write), self.config.counters.clone());
            workers.push(
                std::thread::Builder::new()
                    .name(format!("fuse-dev-{i}"))
                    .spawn(move || dev_worker(&*h, &dev, size, &counters))?,
            );
        }
        let queues = if self.uring {
            let payload = buffer_size(self.config.max_write);
            match uring::start(
                self.handler.clone(),
                self.dev.clone(),
                &self.config.uring,
                payload,
                self.config.counters.clone(),
            ) {
                Ok(q) => q,
                Err(e) => {
                    log::warn!("FUSE over io_uring unavailable ({e}); serving through /dev/fuse");
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let mut result = Ok(());
        for w in workers.into_iter().chain(queues) {
            match w.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if result.is_ok() {
                        result = Err(e);
                    }
                }
                Err(_) => result = Err(io::Error::other("a FUSE worker panicked")),
            }
        }
        result
    }
}

/// A second descriptor on the same connection (FUSE_DEV_IOC_CLONE): each
/// worker reads its own, so reads do not queue behind one another.
fn clone_dev(dev: &File) -> io::Result<File> {
    const FUSE_DEV_IOC_CLONE: libc::c_ulong = 0x8004_e500;
    let new = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse")?;
    let mut fd = dev.as_raw_fd() as u32;
    // SAFETY: a valid descriptor and a pointer to a u32, as the ioctl takes.
    let r = unsafe { libc::ioctl(new.as_raw_fd(), FUSE_DEV_IOC_CLONE as _, &mut fd) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(new)
}

fn dev_worker<H: Handler>(h: &H, dev: &File, size: usize, counters: &Counters) -> io::Result<()> {
    let mut buf = vec![0u8; size];
    let mut out = Vec::with_capacity(size);
    while let Some(n) = receive(dev, &mut buf)? {
        counters.dev_requests.fetch_add(1, Ordering::Relaxed);
        let msg = &buf[..n];
        let Some(header) = InHeader::parse(msg) else {
            log::error!("FUSE: short message of {n} bytes");
            continue;
        };
        let body = &msg[IN_HEADER..(header.len as usize).clamp(IN_HEADER, n)];
        let fixed = abi::fixed_size(header.opcode).min(body.len());
        let Some(error) = serve(h, &header, &body[..fixed], &body[fixed..], &mut out, counters) else { continue };
        let reply = out_header(OUT_HEADER + out.len(), error, header.unique);
        if let Err(e) = send(dev, &reply, &out) {
            match e.raw_os_error() {
                // The request was interrupted and is gone; or we are unmounted.
                Some(libc::ENOENT) => {}
                Some(libc::ENODEV) => return Ok(()),
                _ => log::error!("FUSE: reply to opcode {} failed: {e}", header.opcode),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{message, Fragile, FRAGILE};
    use std::os::fd::FromRawFd;

    #[test]
    fn counters_keep_requests_and_time_by_opcode() {
        let c = Counters::default();
        let earlier = std::time::Instant::now() - std::time::Duration::from_millis(3);
        c.count(abi::op::READ, earlier);
        c.count(abi::op::READ, std::time::Instant::now());
        c.count(999, std::time::Instant::now());
        let reqs = c.requests_by_op();
        assert!(reqs.contains(&("READ".to_string(), 2)), "{reqs:?}");
        assert_eq!(reqs.len(), 2, "an unknown opcode lands in the last slot: {reqs:?}");
        let busy = c.busy_ns_by_op();
        let read = busy.iter().find(|(op, _)| op == "READ").map(|&(_, ns)| ns);
        assert!(read.is_some_and(|ns| ns >= 3_000_000), "the 3 ms counted: {busy:?}");
        assert_eq!(busy.len(), reqs.len(), "the same opcodes in both");
    }

    /// A connected pair of packet sockets: one message per read, as /dev/fuse.
    fn packet_pair() -> (File, File) {
        let mut fds = [0i32; 2];
        // SAFETY: socketpair fills two new descriptors, which we then own.
        let r =
            unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0, "socketpair: {}", io::Error::last_os_error());
        // SAFETY: as above.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    /// The next reply's (error, unique); fails instead of waiting forever.
    fn reply(kernel: &mut File) -> (i32, u64) {
        let tv = libc::timeval { tv_sec: 5, tv_usec: 0 };
        // SAFETY: a valid socket and option value.
        unsafe {
            libc::setsockopt(
                kernel.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        let mut b = [0u8; 256];
        let n = kernel.read(&mut b).expect("a reply within 5 s");
        let f = abi::Fields::new(&b[..n], OUT_HEADER).expect("a whole out header");
        (f.u32(4) as i32, f.u64(8))
    }

    #[test]
    fn a_dev_worker_answers_a_panic_with_eio_and_serves_on() {
        let (mut kernel, dev) = packet_pair();
        let h = Arc::new(Fragile::default());
        let counters = Arc::new(Counters::default());
        let worker = {
            let (h, counters) = (h.clone(), counters.clone());
            std::thread::spawn(move || dev_worker(&*h, &dev, buffer_size(1 << 16), &counters))
        };
        kernel.write_all(&message(abi::op::GETATTR, 1, FRAGILE, &[0; 16], &[])).unwrap();
        assert_eq!(reply(&mut kernel), (-libc::EIO, 1));
        // FORGET takes no reply, panic or not: the next reply is the next request's.
        kernel.write_all(&message(abi::op::FORGET, 2, FRAGILE, &1u64.to_ne_bytes(), &[])).unwrap();
        kernel.write_all(&message(abi::op::GETATTR, 3, 1, &[0; 16], &[])).unwrap();
        assert_eq!(reply(&mut kernel), (0, 3));
        drop(kernel);
        worker.join().expect("the worker survived").expect("and ended cleanly");
        assert_eq!(counters.panics.load(Ordering::Relaxed), 2);
        assert_eq!(h.reports.lock().unwrap().len(), 2);
    }
}
