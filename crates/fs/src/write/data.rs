//! File data: write (in pieces that fit a transaction), fallocate, and the
//! size changes of truncate.

use super::iflags::{may_write_at, refuse_if, regular_file};
use super::ops::touch;
use super::{Split, WriteState};
use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::inode::{flags, Inode};

/// What `fallocate` does to its range (FALLOC_FL_* modes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0: preallocate.
    Allocate,
    /// FALLOC_FL_PUNCH_HOLE.
    PunchHole,
    /// FALLOC_FL_ZERO_RANGE.
    ZeroRange,
}

impl Volume {
    /// Write a whole data block, block `lblk` of `ino`, at physical block `pblk`.
    pub(super) fn write_data(&self, ino: u32, lblk: u64, pblk: u64, data: &[u8]) -> Result<()> {
        let bs = u64::from(self.block_size());
        self.tails.forget_range(ino, lblk, 1);
        self.dev
            .write_at(pblk * bs, data, IoClass::Data)
            .map_err(|e| FsError::io(format!("writing data block {pblk}"), e))
    }

    /// What block `lblk` of `ino`, mapped at `pblk`, holds now, into `buf`
    /// (one block): its new contents held for write-back (`delayed.rs`),
    /// the copy kept of a file's last block (`tails.rs`), else the device.
    /// For a write that keeps part of the block.
    pub(super) fn read_old_block(&self, ino: u32, lblk: u64, pblk: u64, buf: &mut [u8], why: &str) -> Result<()> {
        if self.delayed.held_copy(ino, lblk, buf) || self.tails.read(ino, lblk, pblk, buf) {
            return Ok(());
        }
        let bs = u64::from(self.block_size());
        self.dev.read_at(pblk * bs, buf, IoClass::Data).map_err(|e| FsError::io(why.to_string(), e))
    }

    /// Write `data` at `offset` of a regular file; returns the bytes written.
    ///
    /// Into fragmented free space every block of a write may land in another
    /// group, and a write bigger than `Writer::piece_blocks` could then need
    /// more than a transaction holds: it goes in pieces, each an operation of
    /// its own (a commit may come between them), as the kernel's writeback
    /// restarts its handle. Readers wait for the whole write (the data lock);
    /// a crash may keep a prefix of it, as the kernel's may. An error after a
    /// piece is done makes a short write.
    pub fn write(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        if data.is_empty() {
            return Ok(0);
        }
        match self.write_once(ino, offset, data) {
            Err(FsError::NoSpace) if self.freed_room_by_writeback()? => self.write_once(ino, offset, data),
            r => r,
        }
    }

    /// [`Volume::write`] without its one retry.
    fn write_once(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        // Room first: with too much data waiting, some goes out before this
        // write takes more, so a failed write-back refuses this write (nothing
        // of it taken) rather than failing one whose data was already taken.
        // No data lock is held here: write-back may take any file's.
        self.delalloc_backpressure()?;
        let delayed = {
            let _map = self.data_lock(ino).write();
            let inode = self.inode(ino)?;
            self.zero_past_end_before(&inode, offset)?;
            self.write_delayed(&inode, offset, data)?
        };
        if let Some(n) = delayed {
            return Ok(n);
        }
        let _map = self.data_lock(ino).write();
        // A file that no longer delays (chattr +S) may still have data
        // waiting: it goes out first. Otherwise the write below maps the
        // waiting blocks' holes with its own data, and the older waiting
        // copy wins: readers see it over the new bytes, and its write-back
        // overwrites them (the new bytes were lost; found by a review).
        self.writeback_locked(ino)?;
        self.write_in_pieces(ino, offset, data)
    }

    /// A write starting past the block the end of file lies in leaves that
    /// block's bytes past the old end inside the file: zero them on disk
    /// first, as the kernel zeroes the end-of-file page when a file grows.
    /// Write paths never leave anything but zeros there; a write that failed
    /// after its data landed, or a crash, may.
    fn zero_past_end_before(&self, inode: &Inode, offset: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let old = inode.size();
        if inode.is_reg() && !inode.has_flag(flags::INLINE_DATA) && offset / bs > old / bs && !old.is_multiple_of(bs) {
            self.zero_tail(inode, old)?;
        }
        Ok(())
    }

    /// `data` at `offset`, written as it goes (blocks allocated now), in
    /// pieces that fit a transaction; under the file's data lock. An error
    /// after a piece is done makes a short write.
    pub(super) fn write_in_pieces(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        let bs = u64::from(self.block_size());
        let piece = self.writer.piece_blocks.saturating_mul(bs);
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            // Pieces end on block boundaries: no block is shared by two.
            let room = (piece - at % bs).min((data.len() - done) as u64) as usize;
            match self.write_piece(ino, at, &data[done..done + room]) {
                Ok(n) => {
                    done += n;
                    if n < room {
                        break; // cut short at the largest file size
                    }
                }
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
        }
        Ok(done)
    }

    /// One operation of [`Volume::write`], under the file's data lock.
    pub(super) fn write_piece(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            // The kernel writes only regular files (a symlink's target is no data to write into).
            may_write_at(&inode, offset)?;
            // As generic_write_checks: nothing at or past the largest size, a
            // short write up to it.
            let max = self.max_file_size();
            if offset >= max {
                return Err(FsError::FileTooBig);
            }
            let data = &data[..data.len().min((max - offset) as usize)];
            // Small files stay in their inode on an inline_data volume (the times first: it writes the inode;
            // when it declines, the path below sets them again).
            touch(&mut inode, true);
            if self.write_inline(ws, &mut inode, offset, data)? {
                return Ok(data.len());
            }
            self.convert_inline_file(ws, &mut inode)?;
            let bs = u64::from(self.block_size());
            let end = offset + data.len() as u64;
            let first = offset / bs;
            let last = (end - 1) / bs;
            debug_assert!(
                self.delayed.held(ino).is_none_or(|(l, _)| !(first..=last).contains(&l)),
                "a block held for write-back is written out before a write over it"
            );
            let runs = self.ensure_mapped(ws, &mut inode, first, last - first + 1)?;
            // Bytes at or past the old end of file read as zeros whatever the
            // block holds there: they are never read back, only zeroed.
            let old_size = inode.size();
            let mut preallocated = Vec::new();
            for (lblk, pblk, len, fresh) in runs {
                if fresh {
                    preallocated.push((lblk, len));
                }
                // Bytes of `data` that fall into this run.
                let run_start = lblk * bs;
                let run_end = (lblk + len) * bs;
                let lo = offset.max(run_start);
                let hi = end.min(run_end);
                // Blocks the data covers whole go from `data` itself; a block it
                // covers in part is built: zeros around the data, then, for
                // blocks already written, what the disk holds there before the
                // old end of file (read-modify-write of the first/last block).
                let n = (run_end - run_start) as usize;
                let (lo_off, hi_off) = ((lo - run_start) as usize, (hi - run_start) as usize);
                let keep_end = old_size.saturating_sub(run_start).min(n as u64) as usize;
                let bsz = bs as usize;
                debug_assert!(lo_off < bsz && hi_off + bsz > n, "a run holds only blocks the data touches");
                // Built in `b` (one block): the write's second request needs no allocation.
                let edge = |k: usize, b: &mut Vec<u8>| -> Result<()> {
                    let (b_lo, b_hi) = (k * bsz, (k + 1) * bsz);
                    let (d_lo, d_hi) = (lo_off.max(b_lo), hi_off.min(b_hi));
                    let keep_hi = keep_end.min(b_hi);
                    let at = (run_start as usize + d_lo) - offset as usize;
                    let part = &data[at..at + (d_hi - d_lo)];
                    b.resize(bsz, 0);
                    if !fresh && (d_lo.min(keep_hi) > b_lo || keep_hi > d_hi) {
                        // Old bytes to keep: read the block, zero what lies past the old end of file.
                        self.read_old_block(ino, lblk + k as u64, pblk + k as u64, b, "reading for a partial write")?;
                        b[keep_hi.max(b_lo) - b_lo..].fill(0);
                    } else {
                        b.fill(0);
                    }
                    b[d_lo - b_lo..d_hi - b_lo].copy_from_slice(part);
                    Ok(())
                };
                let last = n / bsz - 1;
                // Only the run's first and last blocks can be partial (one block may be both).
                let partial = |k: usize| (k == 0 && lo_off > 0) || (k == last && hi_off < n);
                let [head_buf, tail_buf] = &mut ws.edge_blocks;
                let head = partial(0);
                let tail = last > 0 && partial(last);
                if head {
                    edge(0, head_buf)?;
                }
                if tail {
                    edge(last, tail_buf)?;
                }
                let whole_lo = if head { bsz } else { 0 };
                let whole_hi = if partial(last) { last * bsz } else { n };
                let mut pieces: Vec<&[u8]> = Vec::with_capacity(3);
                if head {
                    pieces.push(head_buf);
                }
                if whole_lo < whole_hi {
                    let at = (run_start as usize + whole_lo) - offset as usize;
                    pieces.push(&data[at..at + (whole_hi - whole_lo)]);
                }
                if tail {
                    pieces.push(tail_buf);
                }
                self.tails.forget_range(ino, lblk, len);
                self.dev
                    .write_gathered_at(pblk * bs, &pieces, IoClass::Data)
                    .map_err(|e| FsError::io(format!("writing data at block {pblk}"), e))?;
                // The file's new last block, when partly filled, was built in an
                // edge buffer (data covering a block whole reaches past it).
                let new_size = end.max(old_size);
                if !new_size.is_multiple_of(bs) {
                    let end_blk = new_size / bs;
                    if end_blk == lblk && head {
                        self.tails.remember(ino, end_blk, pblk, head_buf);
                    } else if end_blk == lblk + last as u64 && tail {
                        self.tails.remember(ino, end_blk, pblk + last as u64, tail_buf);
                    }
                }
            }
            // Data is on disk: preallocated extents under it now read as written.
            for (lblk, len) in preallocated {
                self.mark_written(ws, &mut inode, lblk, len)?;
            }
            if end > inode.size() {
                inode.set_size(end);
            }
            touch(&mut inode, true);
            self.write_inode(ws, &inode)?;
            Ok(data.len())
        })
    }

    /// fallocate(2): preallocate (blocks that read as zeros: unwritten
    /// extents), punch a hole (free the blocks; the size never changes), or
    /// zero a range (as ext4: whole blocks become unwritten extents, the
    /// partial blocks at its ends are zeroed in place). `keep_size`
    /// (FALLOC_FL_KEEP_SIZE) keeps the size when the range ends past it.
    pub fn fallocate(&self, ino: u32, offset: u64, len: u64, mode: Falloc, keep_size: bool) -> Result<()> {
        let _map = self.data_lock(ino).write();
        // Delayed data goes out first: the range's map is then the whole truth.
        self.writeback_locked(ino)?;
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            regular_file(&inode)?;
            // vfs_fallocate: nothing on immutable files, only preallocation on append-only ones.
            refuse_if(&inode, flags::IMMUTABLE)?;
            if mode != Falloc::Allocate {
                refuse_if(&inode, flags::APPEND)?;
            }
            self.convert_inline_file(ws, &mut inode)?;
            if inode.has_flag(flags::INLINE_DATA) || !inode.has_flag(flags::EXTENTS) {
                return Err(FsError::Unsupported("fallocate needs an extent-mapped file".into()));
            }
            let bs = u64::from(self.block_size());
            if len == 0 {
                return Err(FsError::Invalid("empty range".into()));
            }
            // vfs_fallocate: a range past the largest file is EFBIG.
            let end = offset.checked_add(len).filter(|&e| e <= self.max_file_size()).ok_or(FsError::FileTooBig)?;
            // Whole blocks inside [offset, end), and the blocks it only touches.
            let (first, last) = (offset / bs, (end - 1) / bs);
            let (whole_lo, whole_hi) = (offset.div_ceil(bs), end / bs);
            match mode {
                Falloc::Allocate => {
                    self.map_or_allocate(ws, &mut inode, first, last - first + 1, true)?;
                }
                // The partial blocks are zeroed on the device, which no roll
                // back undoes: last, once what may fail (ENOSPC splitting or
                // allocating extents) has not. The kernel keeps its cached
                // pages when the call fails, so a failed call must change
                // nothing.
                Falloc::PunchHole => {
                    if whole_lo < whole_hi {
                        self.unmap_range(ws, &mut inode, whole_lo, whole_hi, &mut Split::Punch)?;
                    }
                    self.zero_partial_blocks(&inode, offset, end)?;
                }
                Falloc::ZeroRange => {
                    if whole_lo < whole_hi {
                        self.unmap_range(ws, &mut inode, whole_lo, whole_hi, &mut Split::Punch)?;
                    }
                    self.map_or_allocate(ws, &mut inode, first, last - first + 1, true)?;
                    self.zero_partial_blocks(&inode, offset, end)?;
                }
            }
            let grows = mode != Falloc::PunchHole && !keep_size && end > inode.size();
            if grows {
                inode.set_size(end);
            }
            // ext4_fallocate calls file_modified(): mtime and ctime change in
            // every mode, plain preallocation inside the size too.
            touch(&mut inode, true);
            self.write_inode(ws, &inode)
        })
    }

    /// Zero the bytes of [offset, end) that lie in blocks the range covers
    /// only partly, where those blocks hold written data (holes and unwritten
    /// extents read as zeros already).
    pub(super) fn zero_partial_blocks(&self, inode: &Inode, offset: u64, end: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let mut edges =
            vec![(offset / bs, offset % bs, if offset / bs == (end - 1) / bs { end - offset / bs * bs } else { bs })];
        if !end.is_multiple_of(bs) && (end - 1) / bs != offset / bs {
            edges.push(((end - 1) / bs, 0, end % bs));
        }
        for (lblk, lo, hi) in edges {
            if lo == 0 && hi == bs {
                continue; // a whole block: unmapped by the caller
            }
            if let Mapping::Mapped { pblk, unwritten: false, .. } = self.map_block(inode, lblk, 1)? {
                let mut buf = vec![0u8; bs as usize];
                self.read_old_block(inode.ino, lblk, pblk, &mut buf, "reading a block to zero part of it")?;
                buf[lo as usize..hi as usize].fill(0);
                self.tails.forget_range(inode.ino, lblk, 1);
                self.dev
                    .write_at(pblk * bs, &buf, IoClass::Data)
                    .map_err(|e| FsError::io(format!("zeroing part of block {pblk}"), e))?;
            }
        }
        Ok(())
    }

    pub(super) fn resize(&self, ws: &mut WriteState, inode: &mut Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        let old = inode.size();
        if self.delayed.has(inode.ino) {
            // Delayed data past the new end is dropped, the block it ends
            // inside zeroed past it; the disk may record the new size (as
            // the kernel's setattr sets i_disksize).
            if size < old {
                self.delayed.drop_from(inode.ino, size.div_ceil(bs));
                if !size.is_multiple_of(bs) {
                    self.delayed.zero_tail(inode.ino, size / bs, (size % bs) as usize);
                }
            }
            self.delayed.set_disk_size(inode.ino, size);
        }
        if size < old {
            // The final size first: a truncate that commits partway (`split`)
            // is on the orphan list with it, and the next mount truncates to it.
            inode.set_size(size);
            // An unlinked file still open is on the orphan list already.
            let mut split = Split::orphan(inode.links_count() == 0);
            self.truncate_blocks(ws, inode, size.div_ceil(bs), &mut split)?;
            self.end_split(ws, inode, split);
            self.zero_tail(inode, size)?;
        } else if size > old && !inode.has_flag(flags::INLINE_DATA) {
            // Truncate up: bytes past the old end read as zeros (the kernel's
            // setattr zeroes the end-of-file block's tail too).
            self.zero_tail(inode, old)?;
        }
        inode.set_size(size);
        Ok(())
    }

    /// Zero the rest of the block a new end of file `size` falls inside, so
    /// that a later extension reads zeros there.
    pub(super) fn zero_tail(&self, inode: &Inode, size: u64) -> Result<()> {
        let bs = u64::from(self.block_size());
        if !size.is_multiple_of(bs) {
            let lblk = size / bs;
            if let crate::bmap::Mapping::Mapped { pblk, unwritten: false, .. } = self.map_block(inode, lblk, 1)? {
                // Held for write-back: zeroed there, it replaces the disk's copy.
                if self.delayed.zero_tail(inode.ino, lblk, (size % bs) as usize) {
                    return Ok(());
                }
                let mut buf = vec![0u8; bs as usize];
                self.read_old_block(inode.ino, lblk, pblk, &mut buf, "reading the last block")?;
                buf[(size % bs) as usize..].fill(0);
                self.write_data(inode.ino, lblk, pblk, &buf)?;
                // The new end of file: kept as an append's would be (`tails.rs`).
                self.tails.remember(inode.ino, lblk, pblk, &buf);
            }
        }
        Ok(())
    }
}
