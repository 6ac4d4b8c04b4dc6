//! Reads, or writes, submitted together through io_uring, so that the device
//! below sees them at once, as the kernel's block layer sends a plug's worth
//! of readahead or of write-back: a disk (or a disk model behind a loop
//! device) then orders them by position. Read one by one, a StepAhead
//! prefetch batch reached the drive at queue depth 1 and paid a positioning
//! per run; written one by one, a checkpoint waited for each run in turn.
//!
//! Each thread keeps one ring for its batches (set up at its first batch).
//! Where io_uring is missing or forbidden (an old kernel, a seccomp filter,
//! `kernel.io_uring_disabled`), [`read_all`] says so and the caller reads one
//! by one. The kernel reads into (writes from) a buffer of ours, copied out
//! once every read has completed (filled before the first write): if the
//! ring ever failed with requests in flight, the buffer is leaked rather than
//! freed under them, and the thread stops using io_uring.

use crate::direct::{AlignedBuf, DIRECT_ALIGN};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;

/// Requests in flight at once: a SATA drive's NCQ depth.
const DEPTH: usize = 32;

/// One read: `buf.len()` bytes at `offset` of `fd`; a short read is
/// finished from `rest_fd` (the buffered descriptor: an O_DIRECT one would
/// refuse the caller's unaligned memory).
pub(crate) struct Job<'a> {
    pub fd: RawFd,
    pub rest_fd: RawFd,
    pub offset: u64,
    pub buf: &'a mut [u8],
}

enum Ring {
    Untried,
    Ready(Box<IoUring>),
    Unavailable,
}

thread_local! {
    static RING: RefCell<Ring> = const { RefCell::new(Ring::Untried) };
}

/// One write: `bufs` back to back from `offset` of `fd`; a short write is
/// finished through `rest_fd` (the buffered descriptor).
pub(crate) struct WriteJob<'a> {
    pub fd: RawFd,
    pub rest_fd: RawFd,
    pub offset: u64,
    pub bufs: &'a [&'a [u8]],
}

/// Read every job, up to [`DEPTH`] in flight. Ok(false): io_uring is not
/// available on this thread and nothing was read. An error is the first
/// failed read's.
pub(crate) fn read_all(jobs: &mut [Job<'_>]) -> io::Result<bool> {
    let spans: Vec<Span> = jobs.iter().map(|j| Span { fd: j.fd, offset: j.offset, len: j.buf.len() }).collect();
    with_ring(OnRingLoss::FallBack, |ring| {
        let (places, total) = layout(&spans);
        let mut buf = AlignedBuf::new(total, DIRECT_ALIGN);
        let got = submit_all(ring, &spans, &places, &mut buf, Direction::Read)?;
        let bytes = buf.as_slice();
        for ((j, &(at, len)), &n) in jobs.iter_mut().zip(&places).zip(&got) {
            let n = n.min(len);
            j.buf[..n].copy_from_slice(&bytes[at..at + n]);
            if n < len {
                // A short read (a signal, end of file, 2 GiB): the rest as a plain read.
                pread_exact(j.rest_fd, &mut j.buf[n..], j.offset + n as u64).map_err(Failure::Io)?;
            }
        }
        Ok(())
    })
}

/// Write every job, up to [`DEPTH`] in flight, in any order (the jobs must
/// not overlap). Ok(false): io_uring is not available on this thread and
/// nothing was written. An error is the first failed write's, or the ring's
/// if it failed with writes in flight; the others may have landed or not,
/// as with any writes before a flush.
pub(crate) fn write_all(jobs: &[WriteJob<'_>]) -> io::Result<bool> {
    let spans: Vec<Span> =
        jobs.iter().map(|j| Span { fd: j.fd, offset: j.offset, len: j.bufs.iter().map(|b| b.len()).sum() }).collect();
    with_ring(OnRingLoss::Fail, |ring| {
        let (places, total) = layout(&spans);
        let mut buf = AlignedBuf::new(total, DIRECT_ALIGN);
        let bytes = buf.as_mut();
        for (j, &(at, _)) in jobs.iter().zip(&places) {
            let mut to = at;
            for b in j.bufs {
                bytes[to..to + b.len()].copy_from_slice(b);
                to += b.len();
            }
        }
        let done = submit_all(ring, &spans, &places, &mut buf, Direction::Write)?;
        let bytes = buf.as_slice();
        for ((j, &(at, len)), &n) in jobs.iter().zip(&places).zip(&done) {
            if n < len {
                // A short write (a signal, 2 GiB): the rest as a plain write.
                pwrite_all(j.rest_fd, &bytes[at + n..at + len], j.offset + n as u64).map_err(Failure::Io)?;
            }
        }
        Ok(())
    })
}

/// What a batch does when the ring fails with requests in flight.
#[derive(Clone, Copy, PartialEq)]
enum OnRingLoss {
    /// Say Ok(false): the caller reads one by one (a read landing late
    /// only fills a leaked buffer).
    FallBack,
    /// Fail: a write still in flight could land after a newer write of the
    /// same block, which the caller must not then issue.
    Fail,
}

/// Run `f` on this thread's ring (set up at its first batch). Ok(false):
/// no ring here (nothing was done), or, with [`OnRingLoss::FallBack`], it
/// failed under `f` with requests in flight. Either way it is never used
/// again after a failure, and the caller does the batch one request at a time.
fn with_ring(on_loss: OnRingLoss, f: impl FnOnce(&mut IoUring) -> Result<(), Failure>) -> io::Result<bool> {
    RING.with(|cell| {
        let mut ring = cell.borrow_mut();
        if let Ring::Untried = *ring {
            *ring = match batch_ring() {
                Some(r) => Ring::Ready(Box::new(r)),
                None => Ring::Unavailable,
            };
        }
        let Ring::Ready(r) = &mut *ring else { return Ok(false) };
        match f(r) {
            Ok(()) => Ok(true),
            Err(Failure::Io(e)) => Err(e),
            Err(Failure::Ring) => {
                // Requests may still be in flight on the leaked buffer: the
                // ring is never used (nor closed) again. The jobs' own
                // buffers were never handed out.
                if let Ring::Ready(r) = std::mem::replace(&mut *ring, Ring::Unavailable) {
                    std::mem::forget(r);
                }
                match on_loss {
                    OnRingLoss::FallBack => Ok(false),
                    OnRingLoss::Fail => Err(io::Error::other("io_uring failed with writes in flight")),
                }
            }
        }
    })
}

/// A ring that can read and write: setup may succeed on kernels (5.1-5.5)
/// or sandboxes (gVisor) that refuse IORING_OP_READ or _WRITE themselves,
/// which would fail every request.
fn batch_ring() -> Option<IoUring> {
    let ring = IoUring::new(DEPTH as u32).ok()?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).ok()?;
    (probe.is_supported(opcode::Read::CODE) && probe.is_supported(opcode::Write::CODE)).then_some(ring)
}

enum Failure {
    /// A request failed; the ring is fine.
    Io(io::Error),
    /// Waiting on the ring failed with requests in flight.
    Ring,
}

/// One request of a batch, whichever way it goes.
struct Span {
    fd: RawFd,
    offset: u64,
    len: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Read,
    Write,
}

/// Where each request's bytes lie in one aligned buffer (O_DIRECT wants
/// aligned memory): (start, len) per request and the total.
fn layout(spans: &[Span]) -> (Vec<(usize, usize)>, usize) {
    let mut at = 0;
    let places = spans
        .iter()
        .map(|s| {
            let place = (at, s.len);
            at = (at + s.len).next_multiple_of(DIRECT_ALIGN);
            place
        })
        .collect();
    (places, at)
}

/// Submit every span, up to [`DEPTH`] in flight, reading into or writing
/// from its place in `buf`; returns the bytes each got (short ones are the
/// caller's to finish). After a failure nothing more is submitted. If the
/// ring fails with requests in flight, `buf` is leaked (they may still use it).
fn submit_all(
    ring: &mut IoUring,
    spans: &[Span],
    places: &[(usize, usize)],
    buf: &mut AlignedBuf,
    dir: Direction,
) -> Result<Vec<usize>, Failure> {
    let base = buf.as_mut().as_mut_ptr();
    let mut got = vec![0usize; spans.len()];
    let mut first_error: Option<io::Error> = None;
    let (mut next, mut in_flight, mut failed_waits) = (0, 0usize, 0u32);
    while next < spans.len() || in_flight > 0 {
        while next < spans.len() && in_flight < DEPTH && first_error.is_none() {
            let (at, len) = places[next];
            // A single request is at most i32::MAX bytes; the rest is finished by the caller.
            let len = len.min(i32::MAX as usize) as u32;
            // SAFETY (of the pointer): inside `buf`, which outlives every
            // request submitted here (it is leaked if the ring fails with
            // requests in flight).
            let at_ptr = unsafe { base.add(at) };
            let fd = types::Fd(spans[next].fd);
            let sqe = match dir {
                Direction::Read => opcode::Read::new(fd, at_ptr, len).offset(spans[next].offset).build(),
                Direction::Write => opcode::Write::new(fd, at_ptr, len).offset(spans[next].offset).build(),
            }
            .user_data(next as u64);
            // SAFETY: the entry's buffer stays valid until its completion (above);
            // at most DEPTH entries are queued, the ring's size.
            if unsafe { ring.submission().push(&sqe) }.is_err() {
                break;
            }
            next += 1;
            in_flight += 1;
        }
        if in_flight == 0 {
            break; // a request failed: nothing more was submitted and nothing is left
        }
        match ring.submit_and_wait(1) {
            Ok(_) => failed_waits = 0,
            // Transient (EBUSY: completions to reap first, done below).
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY))
                    && failed_waits < 1000 =>
            {
                failed_waits += 1;
                std::thread::yield_now();
            }
            Err(_) => {
                std::mem::forget(std::mem::replace(buf, AlignedBuf::new(0, DIRECT_ALIGN)));
                return Err(Failure::Ring);
            }
        }
        for cqe in ring.completion() {
            in_flight -= 1;
            let i = cqe.user_data() as usize;
            match cqe.result() {
                n if n >= 0 => got[i] = n as usize,
                // Transient (some kernels let EAGAIN through for O_DIRECT):
                // nothing done, so the caller's short-request path does all
                // of it with a plain pread or pwrite.
                e if matches!(-e, libc::EAGAIN | libc::EINTR | libc::ECANCELED) => got[i] = 0,
                e => {
                    first_error.get_or_insert(io::Error::from_raw_os_error(-e));
                }
            }
        }
    }
    match first_error {
        Some(e) => Err(Failure::Io(e)),
        None => Ok(got),
    }
}

/// Borrow the caller's open descriptor `fd` for one plain request;
/// ManuallyDrop keeps it from being closed.
fn borrowed(fd: RawFd) -> std::mem::ManuallyDrop<std::fs::File> {
    // SAFETY: the caller keeps `fd` open for the duration of the request.
    std::mem::ManuallyDrop::new(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

fn pwrite_all(fd: RawFd, buf: &[u8], offset: u64) -> io::Result<()> {
    borrowed(fd).write_all_at(buf, offset)
}

fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    borrowed(fd).read_exact_at(buf, offset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_gets_its_bytes_in_any_size_and_order() {
        let f = tempfile::NamedTempFile::new().unwrap();
        let data: Vec<u8> = (0..(1u32 << 20)).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        std::fs::write(f.path(), &data).unwrap();
        let file = std::fs::File::open(f.path()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // More jobs than the ring holds, of odd sizes and offsets, out of order.
        let spans: Vec<(u64, usize)> =
            (0..100u64).map(|i| ((i * 7919) % 1000 * 1000 + i, 1 + (i as usize * 37) % 5000)).collect();
        let mut bufs: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0; n]).collect();
        let mut jobs: Vec<Job<'_>> =
            spans.iter().zip(bufs.iter_mut()).map(|(&(offset, _), buf)| Job { fd, rest_fd: fd, offset, buf }).collect();
        if !read_all(&mut jobs).unwrap() {
            eprintln!("io_uring unavailable here: nothing to check");
            return;
        }
        drop(jobs);
        for (&(offset, n), buf) in spans.iter().zip(&bufs) {
            assert_eq!(&buf[..], &data[offset as usize..offset as usize + n], "at {offset}");
        }
        // Past the end: the short read is finished by a plain read, which fails.
        let mut tail = vec![0u8; 8192];
        let mut jobs = [Job { fd, rest_fd: fd, offset: (1 << 20) - 4096, buf: &mut tail }];
        assert_eq!(read_all(&mut jobs).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        // A read error is reported, and the ring still serves the next batch.
        let mut one = vec![0u8; 16];
        assert!(read_all(&mut [Job { fd: -1, rest_fd: -1, offset: 0, buf: &mut one }]).is_err());
        assert!(read_all(&mut [Job { fd, rest_fd: fd, offset: 5, buf: &mut one }]).unwrap());
        assert_eq!(&one[..], &data[5..21]);
    }

    #[test]
    fn every_write_lands_in_any_size_and_order() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(1 << 20).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(f.path()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        // More jobs than the ring holds, of odd sizes, gathered from two
        // pieces each, at disjoint offsets given out of order.
        let jobs_data: Vec<(u64, Vec<u8>, Vec<u8>)> = (0..100u64)
            .map(|i| {
                let slot = (i * 37) % 100; // a permutation of 0..100
                let n = 1 + (i as usize * 53) % 4000;
                (slot * 10_000, vec![i as u8; n / 2], vec![!(i as u8); n - n / 2])
            })
            .collect();
        let pieces: Vec<[&[u8]; 2]> = jobs_data.iter().map(|(_, a, b)| [&a[..], &b[..]]).collect();
        let jobs: Vec<WriteJob<'_>> = jobs_data
            .iter()
            .zip(&pieces)
            .map(|((offset, _, _), bufs)| WriteJob { fd, rest_fd: fd, offset: *offset, bufs })
            .collect();
        if !write_all(&jobs).unwrap() {
            eprintln!("io_uring unavailable here: nothing to check");
            return;
        }
        let back = std::fs::read(f.path()).unwrap();
        for (offset, a, b) in &jobs_data {
            let at = *offset as usize;
            assert_eq!(&back[at..at + a.len()], &a[..], "at {offset}");
            assert_eq!(&back[at + a.len()..at + a.len() + b.len()], &b[..], "at {offset}");
        }
        // A failed write is reported, and the ring still serves the next batch.
        let one: [&[u8]; 1] = [b"sixteen bytes..."];
        assert!(write_all(&[WriteJob { fd: -1, rest_fd: -1, offset: 0, bufs: &one }]).is_err());
        assert!(write_all(&[WriteJob { fd, rest_fd: fd, offset: 7, bufs: &one }]).unwrap());
        assert_eq!(&std::fs::read(f.path()).unwrap()[7..23], one[0]);
    }
}
