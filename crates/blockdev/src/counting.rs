//! A pass-through device that counts what the file system asks of the device
//! below it, by I/O class and direction: the figures `ext4lazy bench` reports
//! for ext4lazy on a plain file, where no disk model keeps them.

use crate::{BlockDevice, IoClass, ReadRequest, WriteRequest};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Requests and bytes of one class and direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCount {
    pub requests: u64,
    pub bytes: u64,
}

/// Counts so far: `[class][0 = read, 1 = write]`, classes in [`IoClass::ALL`] order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCounts {
    pub by_class: [[IoCount; 2]; 3],
    pub flushes: u64,
}

impl IoCounts {
    pub fn get(&self, class: IoClass, write: bool) -> IoCount {
        self.by_class[slot(class)][usize::from(write)]
    }
}

fn slot(class: IoClass) -> usize {
    match class {
        IoClass::Journal => 0,
        IoClass::Metadata => 1,
        IoClass::Data => 2,
    }
}

#[derive(Default)]
struct Counter {
    requests: AtomicU64,
    bytes: AtomicU64,
}

/// Wraps a device; every completed request is counted (failed ones are not:
/// they never reached the medium as far as the file system knows).
pub struct CountingDevice {
    inner: Arc<dyn BlockDevice>,
    counters: [[Counter; 2]; 3],
    flushes: AtomicU64,
}

impl CountingDevice {
    pub fn new(inner: Arc<dyn BlockDevice>) -> Self {
        CountingDevice { inner, counters: Default::default(), flushes: AtomicU64::new(0) }
    }

    fn add(&self, class: IoClass, write: bool, bytes: usize) {
        let c = &self.counters[slot(class)][usize::from(write)];
        c.requests.fetch_add(1, Ordering::Relaxed);
        c.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A snapshot of the counts.
    pub fn counts(&self) -> IoCounts {
        let mut out = IoCounts { flushes: self.flushes.load(Ordering::Relaxed), ..Default::default() };
        for (o, c) in out.by_class.iter_mut().zip(self.counters.iter()) {
            for (od, cd) in o.iter_mut().zip(c.iter()) {
                *od =
                    IoCount { requests: cd.requests.load(Ordering::Relaxed), bytes: cd.bytes.load(Ordering::Relaxed) };
            }
        }
        out
    }
}

impl BlockDevice for CountingDevice {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn sector_size(&self) -> u32 {
        self.inner.sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> io::Result<()> {
        self.inner.read_at(offset, buf, class)?;
        self.add(class, false, buf.len());
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> io::Result<()> {
        self.inner.write_at(offset, buf, class)?;
        self.add(class, true, buf.len());
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()?;
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
    fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]], class: IoClass) -> io::Result<()> {
        self.inner.write_gathered_at(offset, bufs, class)?;
        self.add(class, true, bufs.iter().map(|b| b.len()).sum());
        Ok(())
    }
    fn start_writeback(&self, offset: u64, len: u64) {
        self.inner.start_writeback(offset, len)
    }
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        // Keep the batch whole so a model below still reorders it.
        self.inner.read_batch(requests)?;
        for r in requests.iter() {
            self.add(r.class, false, r.buf.len());
        }
        Ok(())
    }
    fn write_batch(&self, requests: &[WriteRequest<'_>]) -> io::Result<()> {
        self.inner.write_batch(requests)?;
        for r in requests {
            self.add(r.class, true, r.len());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileDevice;

    #[test]
    fn counts_by_class_and_direction_and_skips_failures() {
        let f = tempfile::NamedTempFile::new().unwrap();
        f.as_file().set_len(64 * 1024).unwrap();
        let dev = CountingDevice::new(Arc::new(FileDevice::open(f.path(), true).unwrap()));
        let mut buf = vec![0u8; 4096];
        dev.write_at(0, &buf, IoClass::Journal).unwrap();
        dev.write_at(4096, &buf[..1024], IoClass::Metadata).unwrap();
        dev.read_at(8192, &mut buf, IoClass::Data).unwrap();
        let (mut a, mut b) = (vec![0u8; 512], vec![0u8; 2048]);
        let mut batch = [
            ReadRequest { offset: 0, buf: &mut a, class: IoClass::Metadata },
            ReadRequest { offset: 4096, buf: &mut b, class: IoClass::Metadata },
        ];
        dev.read_batch(&mut batch).unwrap();
        dev.flush().unwrap();
        assert!(dev.write_at(1 << 30, &buf, IoClass::Data).is_err());
        let c = dev.counts();
        assert_eq!(c.get(IoClass::Journal, true), IoCount { requests: 1, bytes: 4096 });
        assert_eq!(c.get(IoClass::Metadata, true), IoCount { requests: 1, bytes: 1024 });
        assert_eq!(c.get(IoClass::Data, false), IoCount { requests: 1, bytes: 4096 });
        assert_eq!(c.get(IoClass::Metadata, false), IoCount { requests: 2, bytes: 2560 });
        assert_eq!(c.get(IoClass::Data, true), IoCount::default());
        assert_eq!(c.flushes, 1);
    }
}
