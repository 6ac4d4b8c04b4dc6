//! The floor's data file (`-o floor=data`, fuse::FloorFs): a sparse file
//! beside the image, written and read through the host's page cache, so
//! that the host kernel alone decides when the bytes go out. It is removed
//! when the floor lets go of it, at the end of serving.

use anyhow::{bail, Context, Result};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub struct HostFile {
    file: File,
    path: PathBuf,
}

impl HostFile {
    /// An empty data file beside `image`, which must be an image file: on
    /// the same device path as the image, the floor's data I/O compares
    /// with a volume's.
    pub fn create_beside(image: &Path) -> Result<Self> {
        if !std::fs::metadata(image).with_context(|| format!("reading {}", image.display()))?.is_file() {
            bail!("floor=data needs an image file, not a device: its data goes to a file beside it");
        }
        let mut path = image.as_os_str().to_owned();
        path.push(".floor-data");
        let path = PathBuf::from(path);
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .with_context(|| format!("creating the floor's data file {}", path.display()))?;
        Ok(HostFile { file, path })
    }
}

impl Drop for HostFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl fuse::FloorData for HostFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64)? {
                0 => break,
                n => done += n,
            }
        }
        // Past the file's end: zeros, as a hole.
        buf[done..].fill(0);
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn punch(&self, offset: u64, len: u64) {
        // SAFETY: a plain syscall on our own descriptor. A failure leaves the
        // bytes in place, which only costs the measurement some I/O.
        unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
    }

    fn sync_range(&self, offset: u64, len: u64) -> io::Result<()> {
        let how = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: a plain syscall on our own descriptor.
        let r =
            unsafe { libc::sync_file_range(self.file.as_raw_fd(), offset as libc::off64_t, len as libc::off64_t, how) };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}
