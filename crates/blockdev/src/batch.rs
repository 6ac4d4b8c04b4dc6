//! Reads submitted together through io_uring, so that the device below sees
//! them at once, as the kernel's block layer sends a plug's worth of
//! readahead: a disk (or a disk model behind a loop device) then orders them
//! by position. Read one by one, a StepAhead prefetch batch reached the drive
//! at queue depth 1 and paid a positioning per run.
//!
//! Each thread keeps one ring for its batches (set up at its first batch).
//! Where io_uring is missing or forbidden (an old kernel, a seccomp filter,
//! `kernel.io_uring_disabled`), [`read_all`] says so and the caller reads one
//! by one. The kernel reads into a buffer of ours, copied out once every read
//! has completed: if the ring ever failed with reads in flight, the buffer
//! is leaked rather than freed under them, and the thread stops using io_uring.

use crate::direct::{AlignedBuf, DIRECT_ALIGN};
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::io;
use std::os::fd::RawFd;
use std::os::unix::fs::FileExt;

/// Reads in flight at once: a SATA drive's NCQ depth.
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

/// Read every job, up to [`DEPTH`] in flight. Ok(false): io_uring is not
/// available on this thread and nothing was read. An error is the first
/// failed read's.
pub(crate) fn read_all(jobs: &mut [Job<'_>]) -> io::Result<bool> {
    RING.with(|cell| {
        let mut ring = cell.borrow_mut();
        if let Ring::Untried = *ring {
            *ring = match reads_ring() {
                Some(r) => Ring::Ready(Box::new(r)),
                None => Ring::Unavailable,
            };
        }
        let Ring::Ready(r) = &mut *ring else { return Ok(false) };
        match run(r, jobs) {
            Ok(()) => Ok(true),
            Err(Failure::Read(e)) => Err(e),
            Err(Failure::Ring) => {
                // Reads may still be in flight into the leaked buffer: the
                // ring is never used (nor closed) again. The jobs' own
                // buffers were never handed out, so the caller reads them
                // one by one.
                if let Ring::Ready(r) = std::mem::replace(&mut *ring, Ring::Unavailable) {
                    std::mem::forget(r);
                }
                Ok(false)
            }
        }
    })
}

/// A ring that can read: setup may succeed on kernels (5.1-5.5) or sandboxes
/// (gVisor) that refuse IORING_OP_READ itself, which would fail every read.
fn reads_ring() -> Option<IoUring> {
    let ring = IoUring::new(DEPTH as u32).ok()?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe).ok()?;
    probe.is_supported(opcode::Read::CODE).then_some(ring)
}

enum Failure {
    /// A read failed; the ring is fine.
    Read(io::Error),
    /// Waiting on the ring failed with reads in flight.
    Ring,
}

/// Where each job's bytes land in one aligned buffer (O_DIRECT wants
/// aligned memory): (start, len) per job and the total.
fn layout(jobs: &[Job<'_>]) -> (Vec<(usize, usize)>, usize) {
    let mut at = 0;
    let places = jobs
        .iter()
        .map(|j| {
            let place = (at, j.buf.len());
            at = (at + j.buf.len()).next_multiple_of(DIRECT_ALIGN);
            place
        })
        .collect();
    (places, at)
}

fn run(ring: &mut IoUring, jobs: &mut [Job<'_>]) -> Result<(), Failure> {
    let (places, total) = layout(jobs);
    let mut buf = AlignedBuf::new(total, DIRECT_ALIGN);
    let base = buf.as_mut().as_mut_ptr();
    // Bytes each job got; short reads are finished with pread below.
    let mut got = vec![0usize; jobs.len()];
    let mut first_error: Option<io::Error> = None;
    let (mut next, mut in_flight, mut failed_waits) = (0, 0usize, 0u32);
    while next < jobs.len() || in_flight > 0 {
        while next < jobs.len() && in_flight < DEPTH && first_error.is_none() {
            let (at, len) = places[next];
            // A single read is at most i32::MAX bytes; the rest is finished below.
            let len = len.min(i32::MAX as usize) as u32;
            // SAFETY (of the pointer): inside `buf`, which outlives every read
            // submitted here (it is leaked if the ring fails with reads in flight).
            let target = unsafe { base.add(at) };
            let sqe = opcode::Read::new(types::Fd(jobs[next].fd), target, len)
                .offset(jobs[next].offset)
                .build()
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
            break; // a read failed: nothing more was submitted and nothing is left
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
                std::mem::forget(buf);
                return Err(Failure::Ring);
            }
        }
        for cqe in ring.completion() {
            in_flight -= 1;
            let i = cqe.user_data() as usize;
            match cqe.result() {
                n if n >= 0 => got[i] = n as usize,
                e => {
                    first_error.get_or_insert(io::Error::from_raw_os_error(-e));
                }
            }
        }
    }
    if let Some(e) = first_error {
        return Err(Failure::Read(e));
    }
    let bytes = buf.as_slice();
    for ((j, &(at, len)), &n) in jobs.iter_mut().zip(&places).zip(&got) {
        let n = n.min(len);
        j.buf[..n].copy_from_slice(&bytes[at..at + n]);
        if n < len {
            // A short read (a signal, end of file, 2 GiB): the rest as a plain read.
            pread_exact(j.rest_fd, &mut j.buf[n..], j.offset + n as u64).map_err(Failure::Read)?;
        }
    }
    Ok(())
}

fn pread_exact(fd: RawFd, buf: &mut [u8], offset: u64) -> io::Result<()> {
    // SAFETY: borrows the caller's open descriptor for this one read;
    // ManuallyDrop keeps it from being closed.
    let file = std::mem::ManuallyDrop::new(unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) });
    file.read_exact_at(buf, offset)
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
}
