//! The block device layer: what every storage backend offers the file system.
//!
//! Everything above this layer (buffer cache, journal, file system) talks to a
//! `dyn BlockDevice`; below it sit the plain file device, the disk models and
//! fault injection. Requests are byte-addressed but callers keep them aligned
//! to the device's `sector_size()`; devices reject misaligned or out-of-range
//! requests with `InvalidInput` rather than corrupting anything.

mod batch;
mod counting;
mod direct;
pub mod fault;
mod file;
mod writeback;

pub use counting::{CountingDevice, IoCount, IoCounts};
pub use direct::{AlignedBuf, DIRECT_ALIGN};
pub use fault::FaultDevice;
pub use file::FileDevice;
pub use writeback::DataWriteback;

use std::io;
use std::sync::Arc;

/// What a request carries, as the file system knows it. Devices use it only to
/// account and trace (the models report totals by class); it never changes
/// where the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IoClass {
    /// Blocks inside the jbd2 journal (descriptors, logged copies, commits, revokes).
    Journal,
    /// File-system metadata at its static location (superblock, bitmaps, inodes,
    /// directory and extent blocks, xattr blocks).
    Metadata,
    /// File contents.
    Data,
}

impl IoClass {
    pub const ALL: [IoClass; 3] = [IoClass::Journal, IoClass::Metadata, IoClass::Data];

    pub fn name(self) -> &'static str {
        match self {
            IoClass::Journal => "journal",
            IoClass::Metadata => "metadata",
            IoClass::Data => "data",
        }
    }
}

/// One read in a batch submitted with [`BlockDevice::read_batch`].
#[derive(Debug)]
pub struct ReadRequest<'a> {
    pub offset: u64,
    pub buf: &'a mut [u8],
    pub class: IoClass,
}

/// One write in a batch submitted with [`BlockDevice::write_batch`]: `bufs`
/// back to back from `offset`.
#[derive(Debug)]
pub struct WriteRequest<'a> {
    pub offset: u64,
    pub bufs: Vec<&'a [u8]>,
    pub class: IoClass,
}

impl WriteRequest<'_> {
    pub fn len(&self) -> usize {
        self.bufs.iter().map(|b| b.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A random-access block device. Implementations are shared between many
/// threads (FUSE serves requests concurrently), so every method takes `&self`.
pub trait BlockDevice: Send + Sync {
    /// Capacity in bytes.
    fn size(&self) -> u64;

    /// Smallest unit of I/O; offsets and lengths must be multiples of it.
    fn sector_size(&self) -> u32 {
        512
    }

    /// Read `buf.len()` bytes at `offset`. A short device is an error, never a partial read.
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()>;

    /// Write `buf` at `offset`. Not durable until [`BlockDevice::flush`] returns.
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()>;

    /// Make every completed write durable (a cache flush / FUA barrier).
    fn flush(&self) -> io::Result<()>;

    /// Write `bufs` back to back from `offset` as one request: a write-out of
    /// many cached blocks without first copying them into one buffer. The
    /// default copies them into one and calls [`BlockDevice::write_at`].
    fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]], class: IoClass) -> io::Result<()> {
        self.write_at(offset, &bufs.concat(), class)
    }

    /// Write whole blocks of file data back to back from `offset`, given
    /// by reference count: a device that keeps data in memory for a while
    /// (`DataWriteback`) keeps these, without a copy. The default is a
    /// gathered write of them.
    fn write_blocks_at(&self, offset: u64, blocks: &[Arc<[u8]>], class: IoClass) -> io::Result<()> {
        let bufs: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
        self.write_gathered_at(offset, &bufs, class)
    }

    /// A hint: completed writes in `[offset, offset + len)` may start on
    /// their way to the medium now, so that a later flush has less to wait
    /// for. Nothing becomes durable by it; the default does nothing.
    fn start_writeback(&self, _offset: u64, _len: u64) {}

    /// Submit several reads at once so the device may serve them in any order
    /// (a disk model reorders them by positioning time, as NCQ does). The
    /// default serves them one by one; all must succeed.
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        for r in requests.iter_mut() {
            self.read_at(r.offset, r.buf, r.class)?;
        }
        Ok(())
    }

    /// Submit several writes at once, so that the device may have them all
    /// in flight and serve them in any order (the block layer's plug, a
    /// drive's queue). The requests must not overlap. Not durable until
    /// [`BlockDevice::flush`]; on an error, which of them landed is unknown,
    /// as for any writes before a flush. The default writes them one by one.
    fn write_batch(&self, requests: &[WriteRequest<'_>]) -> io::Result<()> {
        for r in requests {
            self.write_gathered_at(r.offset, &r.bufs, r.class)?;
        }
        Ok(())
    }
}

impl<T: BlockDevice + ?Sized> BlockDevice for Arc<T> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn sector_size(&self) -> u32 {
        (**self).sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        (**self).read_at(offset, buf, class)
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        (**self).write_at(offset, buf, class)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]], class: IoClass) -> io::Result<()> {
        (**self).write_gathered_at(offset, bufs, class)
    }
    fn write_blocks_at(&self, offset: u64, blocks: &[Arc<[u8]>], class: IoClass) -> io::Result<()> {
        (**self).write_blocks_at(offset, blocks, class)
    }
    fn start_writeback(&self, offset: u64, len: u64) {
        (**self).start_writeback(offset, len)
    }
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        (**self).read_batch(requests)
    }
    fn write_batch(&self, requests: &[WriteRequest<'_>]) -> io::Result<()> {
        (**self).write_batch(requests)
    }
}

/// Check that a request lies inside the device and is sector aligned; every
/// device calls this first so that a bad request never touches the medium.
pub fn check_request(dev_size: u64, sector: u32, offset: u64, len: usize) -> io::Result<()> {
    let sector = u64::from(sector);
    let len = len as u64;
    if !offset.is_multiple_of(sector) || !len.is_multiple_of(sector) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("request at byte {offset} of {len} bytes is not aligned to {sector}-byte sectors"),
        ));
    }
    match offset.checked_add(len) {
        Some(end) if end <= dev_size => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("request at byte {offset} of {len} bytes goes past the device end ({dev_size} bytes)"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_request_rejects_misaligned_and_out_of_range() {
        assert!(check_request(4096, 512, 0, 4096).is_ok());
        assert!(check_request(4096, 512, 512, 512).is_ok());
        assert!(check_request(4096, 512, 1, 512).is_err());
        assert!(check_request(4096, 512, 0, 100).is_err());
        assert!(check_request(4096, 512, 3584, 1024).is_err());
        assert!(check_request(4096, 512, u64::MAX - 511, 512).is_err());
    }
}
