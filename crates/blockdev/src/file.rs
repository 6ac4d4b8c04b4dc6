//! A block device backed by a regular file or a raw block device node.

use crate::batch;
use crate::direct::DirectFd;
use crate::{check_request, BlockDevice, IoClass, ReadRequest, WriteRequest};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Slices one pwritev takes at most (Linux's UIO_MAXIOV).
const IOV_MAX: usize = 1024;

/// pread/pwrite on an image file (or /dev/sdX). Safe to share between threads:
/// positional I/O has no shared cursor.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    size: u64,
    writable: bool,
    /// The same file opened with O_DIRECT ([`FileDevice::open_direct`]):
    /// aligned requests go through it and bypass the host's page cache.
    direct: Option<DirectFd>,
}

impl FileDevice {
    /// Open `path` read-only or read-write. The size is the file's length, or
    /// for a block device node, its capacity (found by seeking to the end).
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open {}: {e}", path.display())))?;
        let size = device_size(&file)?;
        Ok(FileDevice { file, path: path.to_path_buf(), size, writable, direct: None })
    }

    /// Open `path` as [`FileDevice::open`] does, with its reads and writes
    /// going around the host's page cache (O_DIRECT; `direct.rs` says why).
    /// Fails where the file system offers no direct I/O.
    pub fn open_direct(path: &Path, writable: bool) -> io::Result<Self> {
        let mut dev = Self::open(path, writable)?;
        let direct = DirectFd::open(path, writable)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot open {} for direct I/O: {e}", path.display())))?;
        dev.direct = Some(direct);
        Ok(dev)
    }

    /// The direct descriptor, if this request may use it.
    fn direct_for(&self, offset: u64, len: usize) -> Option<&DirectFd> {
        self.direct.as_ref().filter(|d| d.takes(offset, len))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A write of `len` bytes at `offset` is allowed: the device is writable and the request fits.
    fn check_write(&self, offset: u64, len: usize) -> io::Result<()> {
        if !self.writable {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "device opened read-only"));
        }
        check_request(self.size, self.sector_size(), offset, len)
    }

    /// The open file, e.g. to take an advisory lock on it.
    pub fn file(&self) -> &File {
        &self.file
    }
}

/// Write `bufs` back to back from `offset`, IOV_MAX slices per pwritev,
/// resuming after short writes.
pub(crate) fn pwritev_all(file: &File, mut offset: u64, bufs: &[&[u8]]) -> io::Result<()> {
    use std::io::IoSlice;
    use std::os::fd::AsRawFd;
    let mut slices: Vec<IoSlice<'_>> = bufs.iter().map(|b| IoSlice::new(b)).collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        let n = rest.len().min(IOV_MAX);
        // SAFETY: IoSlice is ABI-compatible with iovec (std guarantees it);
        // the n slices are valid for the whole call.
        let r = unsafe {
            libc::pwritev(
                file.as_raw_fd(),
                rest.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                offset as libc::off_t,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        offset += r as u64;
        IoSlice::advance_slices(&mut rest, r as usize);
    }
    Ok(())
}

fn device_size(file: &File) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    let meta = file.metadata()?;
    if meta.is_file() {
        return Ok(meta.len());
    }
    // Block device nodes report a zero length; their end is their size.
    let mut f = file;
    f.seek(SeekFrom::End(0))
}

impl BlockDevice for FileDevice {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8], _class: IoClass) -> io::Result<()> {
        check_request(self.size, self.sector_size(), offset, buf.len())?;
        match self.direct_for(offset, buf.len()) {
            Some(d) => d.read_at(offset, buf),
            None => self.file.read_exact_at(buf, offset),
        }
    }

    /// Submitted together through io_uring where the host has it (`batch.rs`),
    /// else one by one.
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> io::Result<()> {
        if requests.len() > 1 {
            for r in requests.iter() {
                check_request(self.size, self.sector_size(), r.offset, r.buf.len())?;
            }
            let buffered = self.file.as_raw_fd();
            let mut jobs: Vec<batch::Job<'_>> = requests
                .iter_mut()
                .map(|r| batch::Job {
                    fd: self.direct_for(r.offset, r.buf.len()).and_then(DirectFd::batch_fd).unwrap_or(buffered),
                    rest_fd: buffered,
                    offset: r.offset,
                    buf: &mut *r.buf,
                })
                .collect();
            if batch::read_all(&mut jobs)? {
                return Ok(());
            }
        }
        for r in requests.iter_mut() {
            self.read_at(r.offset, r.buf, r.class)?;
        }
        Ok(())
    }

    /// The requests an O_DIRECT image takes directly are submitted together
    /// through io_uring where the host has it (`batch.rs`), then the others
    /// one by one: never a buffered write beside a direct one in flight,
    /// which the kernel does not keep coherent. Through the host's page
    /// cache a batch gains nothing over plain writes (they are copies into
    /// memory), so a buffered image writes one by one.
    fn write_batch(&self, requests: &[WriteRequest<'_>]) -> io::Result<()> {
        for r in requests {
            self.check_write(r.offset, r.len())?;
        }
        let direct_fd = |r: &WriteRequest<'_>| self.direct_for(r.offset, r.len()).and_then(DirectFd::batch_fd);
        let buffered = self.file.as_raw_fd();
        let jobs: Vec<batch::WriteJob<'_>> = requests
            .iter()
            .filter_map(|r| {
                Some(batch::WriteJob { fd: direct_fd(r)?, rest_fd: buffered, offset: r.offset, bufs: &r.bufs })
            })
            .collect();
        // After a batch has completed, only the requests it did not take are left.
        let batched = jobs.len() > 1 && batch::write_all(&jobs)?;
        for r in requests.iter().filter(|r| !batched || direct_fd(r).is_none()) {
            self.write_gathered_at(r.offset, &r.bufs, r.class)?;
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, buf: &[u8], _class: IoClass) -> io::Result<()> {
        self.check_write(offset, buf.len())?;
        match self.direct_for(offset, buf.len()) {
            Some(d) => d.write_at(offset, buf),
            None => self.file.write_all_at(buf, offset),
        }
    }

    fn write_gathered_at(&self, offset: u64, bufs: &[&[u8]], _class: IoClass) -> io::Result<()> {
        let total = bufs.iter().map(|b| b.len()).sum();
        self.check_write(offset, total)?;
        match self.direct_for(offset, total) {
            Some(d) => d.write_gathered_at(offset, bufs),
            None => pwritev_all(&self.file, offset, bufs),
        }
    }

    fn start_writeback(&self, offset: u64, len: u64) {
        use std::os::fd::AsRawFd;
        if self.writable {
            // SAFETY: a plain syscall on our own descriptor. Only a hint: its
            // failure (EINVAL on odd files, say) changes nothing but timing.
            unsafe {
                libc::sync_file_range(
                    self.file.as_raw_fd(),
                    offset as libc::off64_t,
                    len as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                )
            };
        }
    }

    fn flush(&self) -> io::Result<()> {
        if self.writable {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read_back() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(1 << 20).unwrap();
        let dev = FileDevice::open(tmp.path(), true).unwrap();
        assert_eq!(dev.size(), 1 << 20);
        let data = vec![0xabu8; 4096];
        dev.write_at(8192, &data, IoClass::Data).unwrap();
        dev.flush().unwrap();
        let mut back = vec![0u8; 4096];
        dev.read_at(8192, &mut back, IoClass::Data).unwrap();
        assert_eq!(back, data);
        assert!(dev.read_at(1 << 20, &mut back, IoClass::Data).is_err());
    }

    #[test]
    fn read_only_device_refuses_writes() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(4096).unwrap();
        let dev = FileDevice::open(tmp.path(), false).unwrap();
        let err = dev.write_at(0, &[0u8; 512], IoClass::Metadata).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn a_gathered_write_lands_back_to_back_beyond_one_pwritev() {
        let tmp = tempfile::NamedTempFile::new().unwrap();
        tmp.as_file().set_len(4 << 20).unwrap();
        let dev = FileDevice::open(tmp.path(), true).unwrap();
        // More slices than one pwritev takes, each with its own fill.
        let blocks: Vec<Vec<u8>> = (0..IOV_MAX + 300).map(|i| vec![(i % 251) as u8; 512]).collect();
        let slices: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
        dev.write_gathered_at(4096, &slices, IoClass::Data).unwrap();
        let mut back = vec![0u8; blocks.len() * 512];
        dev.read_at(4096, &mut back, IoClass::Data).unwrap();
        assert_eq!(back, blocks.concat());
        assert!(dev.write_gathered_at(4 << 20, &slices[..1], IoClass::Data).is_err(), "past the end");
    }

    /// A device on a file beside the sources, which are on a disk (/tmp may
    /// be a tmpfs without O_DIRECT).
    fn direct_device(len: u64) -> (tempfile::NamedTempFile, FileDevice) {
        let tmp = tempfile::NamedTempFile::new_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        tmp.as_file().set_len(len).unwrap();
        let dev = FileDevice::open_direct(tmp.path(), true).expect("direct I/O on the build directory's file system");
        (tmp, dev)
    }

    #[test]
    fn a_batch_writes_what_single_writes_write_direct_or_not() {
        for direct in [false, true] {
            let (_tmp, dev) = if direct {
                direct_device(1 << 20)
            } else {
                let tmp = tempfile::NamedTempFile::new().unwrap();
                tmp.as_file().set_len(1 << 20).unwrap();
                let dev = FileDevice::open(tmp.path(), true).unwrap();
                (tmp, dev)
            };
            // Aligned runs (direct I/O) and an unaligned one (buffered), gathered.
            let blocks: Vec<Vec<u8>> = (0..12).map(|i| vec![i as u8 + 1; 4096]).collect();
            let odd = vec![0xeeu8; 1536]; // whole sectors, not whole granules: the buffered descriptor
            let requests = vec![
                WriteRequest { offset: 40960, bufs: vec![&blocks[0][..], &blocks[1][..]], class: IoClass::Metadata },
                WriteRequest { offset: 0, bufs: vec![&blocks[2][..]], class: IoClass::Metadata },
                WriteRequest { offset: 4096 * 20 + 512, bufs: vec![&odd[..]], class: IoClass::Metadata },
                WriteRequest {
                    offset: 4096 * 30,
                    bufs: blocks[3..12].iter().map(|b| &b[..]).collect(),
                    class: IoClass::Data,
                },
            ];
            dev.write_batch(&requests).unwrap();
            for r in &requests {
                let mut back = vec![0u8; r.len()];
                dev.read_at(r.offset, &mut back, r.class).unwrap();
                assert!(back == r.bufs.concat(), "direct {direct}, at {}", r.offset);
            }
            let past = [WriteRequest { offset: 1 << 20, bufs: vec![&blocks[0][..]], class: IoClass::Data }];
            assert!(dev.write_batch(&past).is_err(), "past the end");
        }
    }

    #[test]
    fn direct_io_round_trips_aligned_and_unaligned_buffers() {
        let (_tmp, dev) = direct_device(1 << 20);
        // A buffer one byte into its allocation is aligned to nothing: it goes
        // through a bounce copy, both ways.
        let mut storage = vec![0u8; 8192 + 1];
        let odd = &mut storage[1..];
        odd.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 253) as u8);
        dev.write_at(4096, odd, IoClass::Data).unwrap();
        let mut back = vec![0u8; 8192 + 1];
        dev.read_at(4096, &mut back[1..], IoClass::Data).unwrap();
        assert_eq!(&back[1..], &storage[1..]);
        let direct = dev.direct.as_ref().unwrap();
        assert_eq!(direct.spares().0, 1, "one bounce buffer, kept for the next request");
        dev.read_at(4096, &mut back[1..], IoClass::Data).unwrap();
        assert_eq!(direct.spares().0, 1, "and used again");
        // A page-aligned buffer goes straight through.
        let mut page = crate::direct::AlignedBuf::new(4096, 4096);
        page.as_mut().fill(0x5a);
        dev.write_at(65536, page.as_mut(), IoClass::Data).unwrap();
        let mut got = vec![0u8; 4096];
        dev.read_at(65536, &mut got, IoClass::Data).unwrap();
        assert!(got.iter().all(|&b| b == 0x5a));
    }

    /// A batch mixing direct requests (aligned, in unaligned memory) and
    /// ones of sector-aligned sizes reads what single reads read.
    #[test]
    fn a_batch_reads_what_single_reads_read() {
        let (_tmp, dev) = direct_device(1 << 20);
        let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
        dev.write_at(0, &pattern, IoClass::Data).unwrap();
        let spans = [(65536u64, 8192usize), (4096, 4096), (512, 1536), (900 << 10, 12288), (0, 4096)];
        let mut storage: Vec<Vec<u8>> = spans.iter().map(|&(_, n)| vec![0u8; n + 1]).collect();
        let mut reqs: Vec<ReadRequest<'_>> = spans
            .iter()
            .zip(storage.iter_mut())
            .map(|(&(offset, _), s)| ReadRequest { offset, buf: &mut s[1..], class: IoClass::Metadata })
            .collect();
        dev.read_batch(&mut reqs).unwrap();
        drop(reqs);
        for (&(offset, n), s) in spans.iter().zip(&storage) {
            assert_eq!(&s[1..], &pattern[offset as usize..offset as usize + n], "at {offset}");
        }
        let mut past = vec![0u8; 4096];
        let mut reqs = [
            ReadRequest { offset: 1 << 20, buf: &mut past, class: IoClass::Metadata },
            ReadRequest { offset: 0, buf: &mut vec![0u8; 4096], class: IoClass::Metadata },
        ];
        assert!(dev.read_batch(&mut reqs).is_err(), "past the end");
    }

    #[test]
    fn a_bounce_buffer_made_for_one_big_request_is_not_kept() {
        let (_tmp, dev) = direct_device(32 << 20);
        let mut storage = vec![0u8; (16 << 20) + 1];
        dev.read_at(0, &mut storage[1..], IoClass::Data).unwrap();
        let (kept, largest) = dev.direct.as_ref().unwrap().spares();
        assert!(kept == 0 || largest < 2 << 20, "a 16 MiB bounce buffer was kept ({largest} bytes)");
    }

    #[test]
    fn a_big_unaligned_write_goes_through_the_spare_chunks() {
        let (_tmp, dev) = direct_device(8 << 20);
        let mut storage = vec![0u8; (5 << 20) + 4096 + 1];
        let odd = &mut storage[1..];
        odd.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
        let odd = &odd[..5 << 20];
        dev.write_at(4096, odd, IoClass::Journal).unwrap();
        let mut back = vec![0u8; 5 << 20];
        dev.read_at(4096, &mut back, IoClass::Journal).unwrap();
        assert!(back == odd, "the bytes written are read back");
        let (kept, largest) = dev.direct.as_ref().unwrap().spares();
        assert!(kept == 1 && largest < 2 << 20, "one chunk-sized copy, reused ({kept} of {largest} bytes)");
    }

    #[test]
    fn direct_and_buffered_requests_see_each_other() {
        let (_tmp, dev) = direct_device(1 << 20);
        // 512 bytes at 512 is below most direct-I/O granules: buffered. The
        // direct read of the whole block must see it, and the buffered read
        // of a direct write must see that.
        dev.write_at(0, &[1u8; 4096], IoClass::Metadata).unwrap();
        dev.write_at(512, &[2u8; 512], IoClass::Metadata).unwrap();
        let mut block = vec![0u8; 4096];
        dev.read_at(0, &mut block, IoClass::Metadata).unwrap();
        assert!(block[..512].iter().all(|&b| b == 1));
        assert!(block[512..1024].iter().all(|&b| b == 2));
        assert!(block[1024..].iter().all(|&b| b == 1));
        dev.write_at(0, &[3u8; 4096], IoClass::Metadata).unwrap();
        let mut sector = vec![0u8; 512];
        dev.read_at(512, &mut sector, IoClass::Metadata).unwrap();
        assert!(sector.iter().all(|&b| b == 3));
    }

    #[test]
    fn a_direct_gathered_write_of_small_unaligned_slices_lands_in_order() {
        let (_tmp, dev) = direct_device(4 << 20);
        // 2,300 slices of 1 KiB (2.2 MiB): more than one bounce chunk.
        let blocks: Vec<Vec<u8>> = (0..2300).map(|i| vec![(i % 251) as u8; 1024]).collect();
        let slices: Vec<&[u8]> = blocks.iter().map(|b| b.as_slice()).collect();
        dev.write_gathered_at(4096, &slices, IoClass::Data).unwrap();
        let mut back = vec![0u8; blocks.len() * 1024];
        dev.read_at(4096, &mut back, IoClass::Data).unwrap();
        assert_eq!(back, blocks.concat());
    }
}
