//! File contents: extent- or block-mapped data, inline data, symlink targets.

use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::read_core::ReadCore;
use blockdev::IoClass;
use ondisk::inode::{flags, Inode, I_BLOCK_SIZE};

/// Largest single device request a read is split into.
const MAX_RUN_BLOCKS: u64 = 256;

/// What lseek(2) looks for from an offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// SEEK_DATA: the next byte that was written.
    Data,
    /// SEEK_HOLE: the next byte in a hole (the end of the file is one).
    Hole,
}

impl ReadCore {
    /// lseek(2) with SEEK_DATA or SEEK_HOLE from `offset`: None (ENXIO) at
    /// or past the end of the file, or when no data follows. Unwritten
    /// (preallocated) blocks count as holes, as the kernel's ext4 reports
    /// them once their pages are written back.
    pub fn seek(&self, inode: &Inode, offset: u64, what: Seek) -> Result<Option<u64>> {
        self.with_current(inode, |inode| self.seek_locked(inode, offset, what))
    }

    fn seek_locked(&self, inode: &Inode, offset: u64, what: Seek) -> Result<Option<u64>> {
        let size = inode.size();
        if offset >= size {
            return Ok(None);
        }
        if inode.has_flag(flags::INLINE_DATA) || !inode.is_reg() {
            return Ok(Some(if what == Seek::Data { offset } else { size }));
        }
        let bs = u64::from(self.block_size);
        let end = size.div_ceil(bs);
        let mut l = offset / bs;
        while l < end {
            let m = self.map_block(inode, l, end - l)?;
            let data = matches!(m, Mapping::Mapped { unwritten: false, .. });
            if data == (what == Seek::Data) {
                return Ok(Some((l * bs).max(offset).min(size)));
            }
            l += m.len().max(1);
        }
        Ok(if what == Seek::Hole { Some(size) } else { None })
    }

    /// `f` on `inode` as it is now, under its data lock: on a read-write
    /// volume the caller's copy may predate a change of its map, so it is
    /// read again; a read-only volume's cannot change.
    fn with_current<T>(&self, inode: &Inode, f: impl FnOnce(&Inode) -> Result<T>) -> Result<T> {
        let _map = self.data_lock(inode.ino).read();
        if !self.writable() {
            return f(inode);
        }
        f(&self.inode(inode.ino)?)
    }

    /// Read up to `size` bytes at `offset` (fewer at end of file).
    pub fn read(&self, inode: &Inode, offset: u64, size: usize) -> Result<Vec<u8>> {
        if inode.is_dir() {
            return Err(FsError::IsDir);
        }
        self.with_current(inode, |inode| self.read_locked(inode, offset, size))
    }

    fn read_locked(&self, inode: &Inode, offset: u64, size: usize) -> Result<Vec<u8>> {
        let file_size = inode.size();
        if offset >= file_size || size == 0 {
            return Ok(Vec::new());
        }
        let end = file_size.min(offset.saturating_add(size as u64));
        if inode.has_flag(flags::INLINE_DATA) {
            let data = self.inline_contents(inode)?;
            let avail = data.len() as u64;
            let (s, e) = (offset.min(avail) as usize, end.min(avail) as usize);
            let mut out = data[s..e].to_vec();
            out.resize((end - offset) as usize, 0);
            return Ok(out);
        }
        let bs = u64::from(self.block_size);
        let (first, last) = (offset / bs, (end - 1) / bs);
        let mut buf = vec![0u8; ((last - first + 1) * bs) as usize];
        self.read_blocks(inode, first, &mut buf)?;
        let skip = (offset - first * bs) as usize;
        buf.drain(..skip);
        buf.truncate((end - offset) as usize);
        Ok(buf)
    }

    /// [`Self::read`] into `buf` (a transport's reply buffer: a direct read
    /// of the image lands in it, with no copy on the way): the bytes read,
    /// up to `buf.len()`. None when the request does not start on a block or
    /// its last block would not fit in `buf`, or the file keeps its data
    /// inline: the caller uses [`Self::read`] then.
    pub fn read_into(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<Option<usize>> {
        if inode.is_dir() {
            return Err(FsError::IsDir);
        }
        if !offset.is_multiple_of(u64::from(self.block_size)) {
            return Ok(None);
        }
        self.with_current(inode, |inode| self.read_into_locked(inode, offset, buf))
    }

    fn read_into_locked(&self, inode: &Inode, offset: u64, buf: &mut [u8]) -> Result<Option<usize>> {
        let bs = u64::from(self.block_size);
        let file_size = inode.size();
        if offset >= file_size || buf.is_empty() {
            return Ok(Some(0));
        }
        if inode.has_flag(flags::INLINE_DATA) {
            return Ok(None);
        }
        let end = file_size.min(offset.saturating_add(buf.len() as u64));
        let blocks = (end - offset).div_ceil(bs);
        let Some(dst) = buf.get_mut(..(blocks * bs) as usize) else { return Ok(None) };
        self.read_blocks(inode, offset / bs, dst)?;
        Ok(Some((end - offset) as usize))
    }

    /// Logical blocks `first..` of `inode` into `buf` (whole blocks): mapped
    /// runs from the device, holes and unwritten blocks as zeros, then the
    /// journal's newer copies and the data waiting for write-back on top.
    fn read_blocks(&self, inode: &Inode, first: u64, buf: &mut [u8]) -> Result<()> {
        let bs = u64::from(self.block_size);
        let last = first + buf.len() as u64 / bs - 1;
        let mut l = first;
        while l <= last {
            let want = (last + 1 - l).min(MAX_RUN_BLOCKS);
            let m = self.map_block(inode, l, want)?;
            let len = m.len().min(want);
            debug_assert!(len > 0);
            let off = ((l - first) * bs) as usize;
            let dst = &mut buf[off..off + (len * bs) as usize];
            if let Mapping::Mapped { pblk, unwritten: false, .. } = m {
                // A file's last block may be kept from its last write (`tails.rs`).
                let (rest, last_block) = dst.split_at_mut(((len - 1) * bs) as usize);
                let kept = self.tails.read(inode.ino, l + len - 1, pblk + len - 1, last_block);
                let from_device = if kept { rest } else { &mut dst[..] };
                if !from_device.is_empty() {
                    self.dev
                        .read_at(pblk * bs, from_device, IoClass::Data)
                        .map_err(|e| FsError::io(format!("reading data of inode {} at block {pblk}", inode.ino), e))?;
                }
                if !self.overlay.is_empty() {
                    for i in 0..len {
                        let o = (i * bs) as usize;
                        self.overlay.apply(&*self.dev, pblk + i, &mut dst[o..o + bs as usize])?;
                    }
                }
            } else {
                dst.fill(0);
            }
            l += len;
        }
        // Data written and not yet given blocks (holes on disk) is in memory.
        self.delayed.overlay(inode.ino, first, buf);
        Ok(())
    }

    /// The whole contents of an inline-data inode: i_block, then system.data.
    pub(crate) fn inline_contents(&self, inode: &Inode) -> Result<Vec<u8>> {
        let mut data = inode.base.block[..I_BLOCK_SIZE].to_vec();
        data.extend_from_slice(&self.inline_data_xattr(inode)?);
        data.truncate(inode.size() as usize);
        Ok(data)
    }

    /// The target of a symbolic link.
    pub fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        if !inode.is_symlink() {
            return Err(FsError::Invalid("not a symbolic link".into()));
        }
        let size = inode.size();
        if size > u64::from(self.block_size) {
            return Err(FsError::Format(ondisk::FormatError::corrupt(
                "symlink",
                ondisk::Location::Inode(u64::from(inode.ino)),
                ondisk::Corruption::BadField { field: "size", value: size },
            )));
        }
        if self.is_fast_symlink(inode) {
            return Ok(inode.base.block[..size as usize].to_vec());
        }
        self.read(inode, 0, size as usize)
    }

    /// Fast symlinks keep the target in i_block: no extents, no inline flag and no data blocks.
    fn is_fast_symlink(&self, inode: &Inode) -> bool {
        if inode.has_flag(flags::EXTENTS) || inode.has_flag(flags::INLINE_DATA) {
            return false;
        }
        let xattr_blocks = if inode.file_acl() != 0 { u64::from(self.block_size / 512) } else { 0 };
        inode.size() < I_BLOCK_SIZE as u64 && inode.blocks_512(&self.sb).saturating_sub(xattr_blocks) == 0
    }
}
