//! The image opened a second time with O_DIRECT, so that the daemon's reads
//! and writes bypass the host's page cache.
//!
//! Why: ext4lazy keeps its own caches (metadata in the buffer cache, file
//! data in the kernel's FUSE page cache). Buffered I/O on the image would
//! cache every block a second time, under the same memory limit, and would
//! hide cold reads behind the host's cache, as a loop device without
//! `--direct-io` does for the kernel's file systems.
//!
//! O_DIRECT wants offsets and lengths aligned to the file's direct-I/O
//! granule and buffers aligned in memory. Requests whose offset or length is
//! not aligned go through the buffered descriptor instead (the kernel keeps
//! the two coherent: a direct read writes back dirty cached pages of its
//! range first, a direct write drops them); unaligned buffers go through an
//! aligned copy.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Alignment assumed when the kernel does not report one: the largest
/// logical block size of disks in use, so always safe.
const FALLBACK_ALIGN: usize = 4096;

/// A memory alignment every direct-I/O device here accepts (the granules
/// the kernel reports are powers of two up to this).
pub const DIRECT_ALIGN: usize = FALLBACK_ALIGN;

/// Bytes of one bounce copy for a gathered write of unaligned buffers.
const BOUNCE_CHUNK: usize = 1 << 20;
/// Bounce buffers of `BOUNCE_CHUNK` bytes kept for later requests: a fresh
/// one costs zeroing and a page fault per page (the daemon's third-largest
/// cost under Postmark). One per thread that may copy at once is enough.
const SPARE_BOUNCES: usize = 4;

#[derive(Debug)]
pub(crate) struct DirectFd {
    file: File,
    /// Offsets and lengths must be multiples of this.
    offset_align: usize,
    /// Buffers must start at a multiple of this.
    mem_align: usize,
    spare: std::sync::Mutex<Vec<AlignedBuf>>,
}

impl DirectFd {
    /// Open `path` with O_DIRECT. Fails where the file system has no direct
    /// I/O (EINVAL), which the caller reports.
    pub(crate) fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(writable).custom_flags(libc::O_DIRECT).open(path)?;
        let (offset_align, mem_align) = alignment(&file)?;
        let fd = DirectFd { file, offset_align, mem_align, spare: Default::default() };
        // Some file systems take O_DIRECT at open and refuse it at the first
        // request: read one granule now, so that `image_io=direct` fails at
        // mount and `auto` falls back, not the first read of a file.
        let meta = fd.file.metadata()?;
        if meta.len() >= offset_align as u64 || meta.file_type().is_block_device() {
            let mut probe = fd.bounce(offset_align);
            let read = fd.file.read_exact_at(probe.as_mut(), 0);
            fd.give_back(probe);
            read?;
        }
        Ok(fd)
    }

    /// The descriptor a batch may read through (`batch.rs` reads into
    /// memory aligned to DIRECT_ALIGN): None where the device wants more.
    pub(crate) fn batch_fd(&self) -> Option<std::os::fd::RawFd> {
        (self.mem_align <= DIRECT_ALIGN).then(|| self.file.as_raw_fd())
    }

    /// Whether a request at `offset` of `len` bytes may go direct.
    pub(crate) fn takes(&self, offset: u64, len: usize) -> bool {
        offset.is_multiple_of(self.offset_align as u64) && len.is_multiple_of(self.offset_align)
    }

    fn aligned(&self, buf: &[u8]) -> bool {
        (buf.as_ptr() as usize).is_multiple_of(self.mem_align) && buf.len().is_multiple_of(self.mem_align)
    }

    /// An aligned buffer of `len` bytes (contents undefined): a spare one if it fits.
    fn bounce(&self, len: usize) -> AlignedBuf {
        if len > BOUNCE_CHUNK {
            return AlignedBuf::new(len, self.mem_align);
        }
        let spare = self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut b = spare.unwrap_or_else(|| AlignedBuf::new(BOUNCE_CHUNK, self.mem_align));
        b.len = len;
        b
    }

    fn give_back(&self, b: AlignedBuf) {
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        // Only chunk-sized ones (the capacity includes the slack left after
        // aligning the start): a larger one, made for one big request, goes.
        let chunk = BOUNCE_CHUNK..=BOUNCE_CHUNK + self.mem_align;
        if chunk.contains(&b.capacity()) && spare.len() < SPARE_BOUNCES {
            spare.push(b);
        }
    }

    /// How many spare bounce buffers are kept, and the largest one's capacity.
    #[cfg(test)]
    pub(crate) fn spares(&self) -> (usize, usize) {
        let spare = self.spare.lock().unwrap();
        (spare.len(), spare.iter().map(AlignedBuf::capacity).max().unwrap_or(0))
    }

    pub(crate) fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        debug_assert!(self.takes(offset, buf.len()));
        if self.aligned(buf) {
            return self.file.read_exact_at(buf, offset);
        }
        let mut bounce = self.bounce(buf.len());
        let read = self.file.read_exact_at(bounce.as_mut(), offset);
        if read.is_ok() {
            buf.copy_from_slice(bounce.as_mut());
        }
        self.give_back(bounce);
        read
    }

    pub(crate) fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        debug_assert!(self.takes(offset, buf.len()));
        if self.aligned(buf) {
            return self.file.write_all_at(buf, offset);
        }
        // Through the spare chunk-sized copies: a fresh bounce as large as a
        // big write costs a page fault per page (a commit's staging buffer
        // at unmount is tens of MiB).
        self.write_gathered_at(offset, &[buf])
    }

    /// `bufs` back to back from `offset`: one pwritev per IOV_MAX slices when
    /// every slice is aligned, else through aligned copies of up to 1 MiB.
    pub(crate) fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
        // Each slice whole granules too: older kernels refuse a direct
        // vector whose segments are not multiples of the logical block size.
        if bufs.iter().all(|b| self.aligned(b) && b.len().is_multiple_of(self.offset_align)) {
            return crate::file::pwritev_all(&self.file, offset, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        debug_assert!(self.takes(offset, total));
        let mut bounce = self.bounce(total.min(BOUNCE_CHUNK));
        let written = self.copy_out(offset, bufs, bounce.as_mut());
        self.give_back(bounce);
        written
    }

    /// `bufs` from `offset` through `chunk`, one chunkful at a time.
    fn copy_out(&self, offset: u64, bufs: &[&[u8]], chunk: &mut [u8]) -> io::Result<()> {
        let (mut filled, mut at) = (0usize, offset);
        for b in bufs {
            let mut rest = *b;
            while !rest.is_empty() {
                let n = rest.len().min(chunk.len() - filled);
                chunk[filled..filled + n].copy_from_slice(&rest[..n]);
                filled += n;
                rest = &rest[n..];
                if filled == chunk.len() {
                    self.file.write_all_at(chunk, at)?;
                    at += filled as u64;
                    filled = 0;
                }
            }
        }
        if filled > 0 {
            // The tail of an aligned total is itself a multiple of the granule.
            self.file.write_all_at(&chunk[..filled], at)?;
        }
        Ok(())
    }
}

/// The direct-I/O granules of `file`: (offset, memory). The kernel reports
/// them through statx (STATX_DIOALIGN, for regular files since 6.1 and block
/// devices since 6.11); otherwise a block device's logical block size, else 4096.
fn alignment(file: &File) -> io::Result<(usize, usize)> {
    // SAFETY: statx fills the zeroed struct we own; the empty path with
    // AT_EMPTY_PATH names the descriptor itself.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(file.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_DIOALIGN, &mut stx) };
    if r == 0 && stx.stx_mask & libc::STATX_DIOALIGN != 0 {
        let (off, mem) = (stx.stx_dio_offset_align as usize, stx.stx_dio_mem_align as usize);
        if off == 0 {
            return Err(io::Error::new(io::ErrorKind::Unsupported, "the file system has no direct I/O for this file"));
        }
        return Ok((off, mem.max(1)));
    }
    if file.metadata()?.file_type().is_block_device() {
        let mut size: libc::c_int = 0;
        // SAFETY: BLKSSZGET writes one int through the pointer we pass.
        if unsafe { libc::ioctl(file.as_raw_fd(), libc::BLKSSZGET, &mut size) } == 0 && size > 0 {
            return Ok((size as usize, size as usize));
        }
    }
    Ok((FALLBACK_ALIGN, FALLBACK_ALIGN))
}

/// A zeroed buffer of `len` bytes starting at a multiple of `align`, carved
/// out of a slightly larger allocation (no unsafe allocation needed). A
/// caller that fills one with [`DIRECT_ALIGN`] writes it without a copy.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn new(len: usize, align: usize) -> Self {
        let storage = vec![0u8; len + align];
        let start = storage.as_ptr().align_offset(align);
        AlignedBuf { storage, start, len }
    }

    /// The most `len` may be.
    pub fn capacity(&self) -> usize {
        self.storage.len() - self.start
    }

    /// Use `len` bytes of it (at most its capacity).
    pub fn set_len(&mut self, len: usize) {
        assert!(len <= self.capacity(), "AlignedBuf of {} bytes cannot hold {len}", self.capacity());
        self.len = len;
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl AsMut<[u8]> for AlignedBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}
