//! Delayed allocation, the write-back policy for file data (ext4's
//! delalloc): a write into a hole reserves its blocks and leaves its data in
//! memory (`crate::delayed`); write-back later allocates one run of blocks
//! for each run of waiting data, sends the data out, and maps it in one
//! operation. A file deleted or truncated before then never costs a block
//! or an I/O, and a file written in many small pieces gets one extent.
//!
//! When data goes out: `data_expire=` (5 s) after it was written, once more
//! than half of `delalloc_mb=` waits (the background tick), at once when a
//! writer finds all of it waiting (back-pressure), and before anything that
//! needs it on disk (sync and fsync, unmount, fallocate, SEEK_DATA/HOLE).
//!
//! An append rewrites the file's last block, partly filled and already
//! mapped: that block's new contents wait too (`DirtyFile::held`), and go
//! out in one request with the appended blocks when these land right after
//! it, as the kernel's write-back sends the dirty page and the delayed ones
//! behind it together.
//!
//! Space: each waiting block is counted against the free blocks at write
//! time, so a full disk is reported to the writer, never found at
//! write-back. Beside the data, the extent-tree blocks its write-back may
//! need at worst are held back (`Delayed::worst_tree`), and the kernel's
//! reserve (2% of the volume, at most 4096 blocks). Other allocations
//! leave all of these alone. As free space runs low beside the waiting
//! data, delayed allocation steps aside the way the kernel's does
//! (ext4_nonda_switch): from half of the free blocks waiting, a writer first
//! sends everything out; from two thirds, or where the reservation would
//! refuse a write, the write allocates its blocks at once; a write refused
//! while data waits is retried once that data is out, so the worst case
//! held back for the tree never costs the writer room the volume has.
//!
//! Ordering: write-back's data goes through the device like any other
//! data write, and reaches the disk before the commit of the operation that
//! maps it (ordered mode, `blockdev::DataWriteback`). The inode on disk
//! keeps a size its written data reaches (`delayed.rs`).

use super::iflags::{may_write_at, wants_sync};
use super::ops::touch;
use super::WriteState;
use crate::bmap::Mapping;
use crate::delayed::TreeShape;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::extent;
use ondisk::inode::{flags, Inode};
use ondisk::superblock::feature;
use parking_lot::RwLock;
use std::sync::Arc;
use std::time::Instant;

/// At most this many files, and this many blocks, go out in one write-back
/// operation (fewer blocks with a small journal: `writeback_inos`).
const BATCH_FILES: usize = 32;
const BATCH_BLOCKS: usize = 64;

/// A small file's waiting data: (inode, first logical block, its blocks).
type SmallFile = (u32, u64, Vec<Arc<[u8]>>);

impl Volume {
    /// Whether writes into holes of `inode` wait in memory: on when
    /// `delalloc_mb=` is, for extent-mapped regular files without inline
    /// data (those keep their bytes in the inode) and without the sync flag
    /// (whose data must be on disk when the write returns).
    pub(super) fn delays(&self, inode: &Inode) -> bool {
        self.opts.delalloc_bytes > 0
            && inode.is_reg()
            && inode.has_flag(flags::EXTENTS)
            && !inode.has_flag(flags::INLINE_DATA)
            && !wants_sync(inode)
    }

    /// Whether a write ending at `end` into an empty file makes it an
    /// inline one (an inline_data volume, and it fits in the inode): the
    /// kernel writes such files into the inode, not through delalloc.
    fn goes_inline(&self, inode: &Inode, end: u64) -> Result<bool> {
        if !self.sb.has_incompat(feature::incompat::INLINE_DATA) || !self.is_empty_file(inode) {
            return Ok(false);
        }
        let others = self.xattrs_without_inline_data(inode)?;
        Ok(end <= super::inline::inline_capacity(inode, &others) as u64)
    }

    /// Blocks an allocation other than write-back's may take: the free ones
    /// less those reserved for waiting data, the tree blocks its write-back
    /// may need and, unless it is for a `tree` node, the kernel's reserve.
    /// Without them, other allocations (directories, xattrs, preallocation)
    /// could take the volume down to exactly the waiting blocks, and the
    /// first tree block write-back then needed left one of them without a
    /// block: data lost at unmount (opfuzz enospc, lazy, seed 1).
    /// Root's reserve is held back too, from requesters that may not take
    /// it (`requester.rs`); who asks is looked at only when `want` blocks
    /// would not fit beside it.
    pub(crate) fn unreserved_free_blocks(&self, tree: bool, want: u64) -> u64 {
        let reserve = if tree { 0 } else { self.kernel_reserve_blocks() };
        let held = self.delayed.blocks() + self.delayed.tree_blocks() + reserve;
        let room = self.free_counts().0.saturating_sub(held);
        let roots = self.sb.r_blocks_count();
        if tree || room < roots.saturating_add(want) && self.requester_may_take_root_reserve() {
            room
        } else {
            room.saturating_sub(roots)
        }
    }

    /// Whether the request being served may take the blocks reserved for
    /// root (the kernel's rule: `requester.rs`).
    fn requester_may_take_root_reserve(&self) -> bool {
        let (resuid, resgid) = (u32::from(self.sb.f.def_resuid), u32::from(self.sb.f.def_resgid));
        crate::requester::may_take_root_reserve(resuid, resgid)
    }

    /// Whether a write of `len` bytes at `offset` into holes of `inode`
    /// should allocate its blocks at once instead of waiting (the kernel's
    /// ext4_nonda_switch): two thirds of the free blocks would wait, or the
    /// reservation would refuse it.
    fn space_is_low(&self, inode: &Inode, offset: u64, len: u64) -> bool {
        let free = self.free_counts().0;
        let (waiting, tree) = self.delayed.held_if_put(inode.ino, offset, len, tree_shape(inode));
        2 * free < 3 * waiting || waiting + tree + self.kernel_reserve_blocks() > free
    }

    /// Whether writers should send all waiting data out before they write
    /// (the kernel's writeback at low free space): half of the free blocks wait.
    fn space_runs_short(&self) -> bool {
        let waiting = self.delayed.blocks();
        waiting > 0 && self.free_counts().0 < 2 * waiting
    }

    /// Write `data` at `offset` of `inode` (as read under its data lock):
    /// the runs over holes wait in memory, the runs over mapped blocks are
    /// written in place (`write_piece`). Called under the file's data lock;
    /// None when the file does not delay (the caller writes it the old way).
    pub(super) fn write_delayed(&self, inode: &Inode, offset: u64, data: &[u8]) -> Result<Option<usize>> {
        let ino = inode.ino;
        if !self.delays(inode) || self.goes_inline(inode, offset + data.len() as u64)? {
            return Ok(None);
        }
        let bs = u64::from(self.block_size());
        if self.space_is_low(inode, offset, data.len() as u64) {
            // Its own waiting data goes out first: the write then finds
            // every block it covers mapped or a hole on disk.
            self.writeback_locked(ino)?;
            return Ok(Some(self.write_in_pieces(ino, offset, data)?));
        }
        let mut done = 0usize;
        let mut current = None;
        while done < data.len() {
            let at = offset + done as u64;
            let lblk = at / bs;
            let last = (offset + data.len() as u64 - 1) / bs;
            // The run of blocks from `lblk` that are all holes or all mapped,
            // in the map as the pieces before left it (a piece may write
            // the file's waiting data back, or mark preallocated blocks written).
            let inode = current.as_ref().unwrap_or(inode);
            let mapping = self.map_block(inode, lblk, last - lblk + 1)?;
            let run_end = ((lblk + mapping.len().max(1)) * bs).min(offset + data.len() as u64);
            let piece = &data[done..done + (run_end - at) as usize];
            let r = match mapping {
                Mapping::Hole { .. } => self.put_delayed(ino, at, piece),
                Mapping::Mapped { pblk, unwritten, .. } => {
                    self.write_mapped(ino, inode.size(), at, piece, pblk, unwritten)
                }
            };
            match r {
                Ok(n) => {
                    done += n;
                    if n < piece.len() {
                        break; // cut short at the largest file size
                    }
                }
                Err(_) if done > 0 => break,
                Err(e) => return Err(e),
            }
            if done < data.len() {
                match self.inode(ino) {
                    Ok(i) => current = Some(i),
                    Err(_) => break, // a short write: what is done stays done
                }
            }
        }
        Ok(Some(done))
    }

    /// One operation: `data` at `offset`, all of it over holes, into memory;
    /// the inode takes the new size and times. ENOSPC when its new blocks
    /// do not fit in what is free and not reserved.
    fn put_delayed(&self, ino: u32, offset: u64, data: &[u8]) -> Result<usize> {
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            may_write_at(&inode, offset)?;
            let max = self.max_file_size();
            if offset >= max {
                return Err(FsError::FileTooBig);
            }
            let data = &data[..data.len().min((max - offset) as usize)];
            // The data and the tree blocks its write-back may need fit
            // beside the kernel's reserve (`Delayed::put` counts both).
            // Root's reserve too, unless the requester may take it: asked
            // only when the data would not fit beside it.
            let room = self.free_counts().0.saturating_sub(self.kernel_reserve_blocks());
            let roots = self.sb.r_blocks_count();
            let disk_size = inode.size(); // no overlay yet when the file is new here
            let put = |room| self.delayed.put(ino, disk_size, offset, data, tree_shape(&inode), room);
            let made = put(room.saturating_sub(roots))
                .or_else(|| (roots > 0 && self.requester_may_take_root_reserve()).then(|| put(room)).flatten())
                .ok_or(FsError::NoSpace)?;
            let end = offset + data.len() as u64;
            if end > inode.size() {
                inode.set_size(end);
            }
            touch(&mut inode, true);
            if let Err(e) = self.write_inode(ws, &inode) {
                self.delayed.unput(ino, &made);
                return Err(e);
            }
            Ok(data.len())
        })
    }

    /// `data` at `offset` of `ino` (`size` long now), all of it over blocks
    /// mapped from `pblk` (`unwritten`: preallocated). An append that rewrites part of
    /// the file's last block holds the new block in memory, to go out with
    /// the blocks appended after it (`DirtyFile::held`); any other write
    /// goes to the device now, after the block held, if it covers it.
    fn write_mapped(&self, ino: u32, size: u64, offset: u64, data: &[u8], pblk: u64, unwritten: bool) -> Result<usize> {
        let bs = u64::from(self.block_size());
        let (lblk, end) = (offset / bs, offset + data.len() as u64);
        let held = self.delayed.held(ino).map(|(l, _)| l);
        let one_block = (end - 1) / bs == lblk;
        if one_block && !unwritten && (held == Some(lblk) || end > size) {
            if held.is_some_and(|l| l != lblk) {
                self.write_back_held(ino)?;
            }
            return self.put_held(ino, lblk, pblk, offset, data);
        }
        if unwritten && self.delayed.has(ino) {
            // Preallocated blocks it writes may lie past what the disk's
            // size may cover while data before them waits: that data goes
            // first, or the disk would hold written extents past its size.
            self.writeback_locked(ino)?;
        } else if held.is_some_and(|l| (lblk..end.div_ceil(bs)).contains(&l)) {
            self.write_back_held(ino)?;
        }
        self.write_in_pieces(ino, offset, data)
    }

    /// One operation: `data` at `offset`, inside block `lblk` of `ino`
    /// (mapped at `pblk`, written), into the block held for it; the inode
    /// takes the new size and times. The disk keeps its size until the
    /// block goes out.
    fn put_held(&self, ino: u32, lblk: u64, pblk: u64, offset: u64, data: &[u8]) -> Result<usize> {
        self.atomic(|ws| {
            let mut inode = self.inode(ino)?;
            may_write_at(&inode, offset)?;
            let bs = u64::from(self.block_size());
            let mut block = vec![0u8; bs as usize];
            self.read_old_block(ino, lblk, pblk, &mut block, "reading the last block for an append")?;
            // Bytes at or past the end of file read as zeros, whatever the block holds there.
            let keep = inode.size().saturating_sub(lblk * bs).min(bs) as usize;
            block[keep..].fill(0);
            let at = (offset - lblk * bs) as usize;
            block[at..at + data.len()].copy_from_slice(data);
            self.tails.forget_range(ino, lblk, 1);
            // For a file not tracked yet, its inode's size is the disk's.
            let before = self.delayed.hold(ino, inode.size(), lblk, block);
            let end = offset + data.len() as u64;
            if end > inode.size() {
                inode.set_size(end);
            }
            touch(&mut inode, true);
            if let Err(e) = self.write_inode(ws, &inode) {
                self.delayed.unhold(ino, before);
                return Err(e);
            }
            Ok(data.len())
        })
    }

    /// Send `ino`'s held block out on its own (one operation): the inode
    /// records the size its written data reaches before the store lets go
    /// of the file: in between, a getattr (no data lock) would read the old
    /// size, and the kernel's next O_APPEND write would land there (a
    /// review's appends racing stat lost data).
    fn write_back_held(&self, ino: u32) -> Result<()> {
        self.atomic(|ws| {
            let inode = self.inode(ino)?;
            let Some((lblk, block)) = self.delayed.held(ino) else { return Ok(()) };
            let pblk = self.held_block_home(&inode, lblk)?;
            self.write_held(&inode, lblk, pblk, &[block])?;
            let disk_size = self.delayed.disk_size_after(ino, lblk, 1).unwrap_or(inode.size());
            self.write_inode_as(ws, &inode, disk_size)?;
            self.delayed.held_written(ino, lblk);
            Ok(())
        })
    }

    /// Where block `lblk` of `inode`, held, lives: mapped and written, as
    /// when it was held (every path that would unmap or move it writes it
    /// out or drops it first).
    fn held_block_home(&self, inode: &Inode, lblk: u64) -> Result<u64> {
        match self.map_block(inode, lblk, 1)? {
            Mapping::Mapped { pblk, unwritten: false, .. } => Ok(pblk),
            m => {
                let what = format!("inode {}: block {lblk} held for write-back is no longer mapped", inode.ino);
                debug_assert!(false, "{what}: {m:?}");
                Err(FsError::io(what, std::io::Error::other(format!("{m:?}"))))
            }
        }
    }

    /// Write `blocks` at `pblk`: the block held for `lblk` of `inode`, then
    /// any delayed blocks that follow it on disk; the held block is kept as
    /// the file's last block when it is (`tails.rs`). The caller tells the
    /// store (`Delayed::held_written`).
    fn write_held(&self, inode: &Inode, lblk: u64, pblk: u64, blocks: &[Arc<[u8]>]) -> Result<()> {
        let (ino, bs) = (inode.ino, u64::from(self.block_size()));
        self.tails.forget_range(ino, lblk, 1);
        self.dev
            .write_blocks_at(pblk * bs, blocks, IoClass::Data)
            .map_err(|e| FsError::io(format!("writing data at block {pblk}"), e))?;
        if inode.size().div_ceil(bs) == lblk + 1 && !inode.size().is_multiple_of(bs) {
            self.tails.remember(ino, lblk, pblk, &blocks[0]);
        }
        Ok(())
    }

    /// Send all of `ino`'s waiting data out. Called under its data lock.
    pub(crate) fn writeback_locked(&self, ino: u32) -> Result<()> {
        let runs = self.write_back_runs(ino);
        // A held block with no run after it goes out alone; so does one
        // whose run failed (it needs no room: it must not go down with it).
        let held = if self.delayed.held(ino).is_some() { self.write_back_held(ino) } else { Ok(()) };
        runs.and(held)
    }

    /// Send `ino`'s waiting runs out, one operation each, in block order.
    fn write_back_runs(&self, ino: u32) -> Result<()> {
        let most = self.writer.piece_blocks.clamp(1, 1 << 15);
        let mut from = 0;
        while let Some((start, run)) = self.delayed.run_from(ino, from, most) {
            let len = run.len() as u64;
            let mapped = self.atomic(|ws| self.map_delayed_run(ws, ino, start, &run))?;
            // Our references go first: `written` keeps for reuse only the
            // blocks nobody else holds (a streaming write otherwise freed and
            // allocated every block, and the heap grew and faulted page by page).
            drop(run);
            if mapped {
                self.delayed.written(ino, start, len);
            }
            from = start + len;
        }
        Ok(())
    }

    /// Inside an operation: give `run`, the waiting blocks of `ino` from
    /// logical block `start`, their blocks, send them to the device, and
    /// map them; the inode records the size the written data reaches.
    /// False when the file was freed meanwhile (its data dropped).
    fn map_delayed_run(&self, ws: &mut WriteState, ino: u32, start: u64, run: &[Arc<[u8]>]) -> Result<bool> {
        // Freed meanwhile (its last name and handle gone): dropped, nothing to map.
        if !self.delayed.holds_block(ino, start) {
            return Ok(false);
        }
        if crate::inject::no_room_for(ino) {
            return Err(FsError::NoSpace);
        }
        ws.claiming_delayed = true;
        let bs = u64::from(self.block_size());
        let len = run.len() as u64;
        let mut inode = self.inode(ino)?;
        // The file's last block, when partly filled, is kept in memory (`tails.rs`).
        let size = inode.size();
        let end_blk = (!size.is_multiple_of(bs)).then_some(size / bs);
        let held = match self.delayed.held(ino) {
            Some((l, b)) => Some((l, self.held_block_home(&inode, l)?, b)),
            None => None,
        };
        let segments = self.ensure_mapped(ws, &mut inode, start, len)?;
        // The held block goes out with the run when the run lands right after it.
        let run_follows = |l: u64, p: u64| segments.first().is_some_and(|&(lb, pb, ..)| lb == l + 1 && pb == p + 1);
        let joined = match held {
            Some((l, p, b)) if run_follows(l, p) => Some((l, p, b)),
            Some((l, p, b)) => {
                self.write_held(&inode, l, p, &[b])?;
                // The run still waits: the store keeps the file.
                self.delayed.held_written(ino, l);
                None
            }
            None => None,
        };
        for (lblk, pblk, n, fresh) in segments {
            let k = (lblk - start) as usize;
            let blocks = &run[k..k + n as usize];
            self.tails.forget_range(ino, lblk, n);
            match &joined {
                Some((l, p, b)) if lblk == start => {
                    let both: Vec<Arc<[u8]>> = std::iter::once(b.clone()).chain(blocks.iter().cloned()).collect();
                    self.write_held(&inode, *l, *p, &both)?;
                    self.delayed.held_written(ino, *l);
                }
                _ => self
                    .dev
                    .write_blocks_at(pblk * bs, blocks, IoClass::Data)
                    .map_err(|e| FsError::io(format!("writing delayed data at block {pblk}"), e))?,
            }
            if let Some(e) = end_blk.filter(|e| (lblk..lblk + n).contains(e)) {
                self.tails.remember(ino, e, pblk + (e - lblk), &run[k + (e - lblk) as usize]);
            }
            if fresh {
                self.mark_written(ws, &mut inode, lblk, n)?;
            }
        }
        let disk_size = self.delayed.disk_size_after(ino, start, len).unwrap_or(inode.size());
        self.write_inode_as(ws, &inode, disk_size)?;
        // The store learns the new on-disk size now, not when `written` drops
        // the blocks after this operation: an inode write in between (a
        // chmod, an atime, on another thread) would otherwise record the old
        // one, and once the blocks were dropped readers saw it too: fsstress
        // found files cut back to an earlier size with their last blocks
        // mapped past the end. Should this operation be undone, the size may
        // cover blocks not mapped yet, which read as zeros until they are.
        self.delayed.set_disk_size(ino, disk_size);
        Ok(true)
    }

    /// Send out the data of `files`, in order. Small files (all their data
    /// one short run) go out several to an operation: each operation takes
    /// the write lock, which the request threads wait for, and an untar's
    /// write-back is one small file after another. A file whose data is long
    /// or in pieces goes out on its own, holding only its own data lock; a
    /// batch ends at a file whose data lock is busy.
    fn writeback_inos(&self, files: &[u32]) -> Result<()> {
        // A batch costs at most what one piece of a long write-back may
        // (`Writer::piece_blocks`, sized so that a piece fits in the journal
        // beside a running transaction at its commit limit): each of its
        // blocks may take a bitmap and a descriptor, each file an inode-table
        // block and an extent leaf; so half a piece, and never more than
        // BATCH_BLOCKS.
        let cap = usize::try_from(self.writer.piece_blocks / 2).unwrap_or(usize::MAX).clamp(1, BATCH_BLOCKS);
        let mut rest = files;
        while let Some((&first, _)) = rest.split_first() {
            let mut locks: Vec<&RwLock<()>> = Vec::new();
            let mut guards = Vec::new();
            let mut batch: Vec<SmallFile> = Vec::new();
            let mut blocks = 0;
            let mut taken = 0;
            for &ino in rest {
                if batch.len() >= BATCH_FILES || blocks >= cap {
                    break;
                }
                let lock = self.data_lock(ino);
                if !locks.iter().any(|l| std::ptr::eq(*l, lock)) {
                    // Only the first lock is waited for: holding one, never wait for another.
                    let guard = if ino == first { Some(lock.write()) } else { lock.try_write() };
                    let Some(guard) = guard else { break };
                    locks.push(lock);
                    guards.push(guard);
                }
                match self.delayed.small_file(ino, cap) {
                    Some((start, run)) if batch.is_empty() || blocks + run.len() <= cap => {
                        blocks += run.len();
                        batch.push((ino, start, run));
                    }
                    // Over the batch's budget: the first of the next batch.
                    Some(_) => break,
                    // Long or in pieces (or gone: nothing to do then): on its
                    // own. An empty batch means this is its first file, whose
                    // lock is the only one held.
                    None if batch.is_empty() => {
                        self.writeback_locked(ino)?;
                        taken += 1;
                        break;
                    }
                    None => break,
                }
                taken += 1;
            }
            rest = &rest[taken.max(1)..];
            if batch.is_empty() {
                continue;
            }
            let mapped = self.atomic(|ws| {
                let mut mapped = Vec::with_capacity(batch.len());
                for (ino, start, run) in &batch {
                    mapped.push(self.map_delayed_run(ws, *ino, *start, run)?);
                }
                Ok(mapped)
            });
            match mapped {
                Ok(mapped) => {
                    // Our references go first (see `writeback_locked`).
                    let done: Vec<_> =
                        batch.drain(..).map(|(ino, start, run)| (ino, start, run.len() as u64)).collect();
                    for ((ino, start, len), m) in done.into_iter().zip(mapped) {
                        if m {
                            self.delayed.written(ino, start, len);
                        }
                    }
                }
                // A device error turned the volume read-only: say so, not EROFS.
                Err(e) if self.failure().is_some() => return Err(e),
                // Undone whole: each file again on its own, which says which one fails.
                Err(_) => {
                    for (ino, _, _) in &batch {
                        self.writeback_locked(*ino)?;
                    }
                }
            }
            drop(guards);
        }
        Ok(())
    }

    /// lseek(2) SEEK_DATA / SEEK_HOLE ([`crate::read_core::ReadCore::seek`]),
    /// with the file's delayed data written back first: the answer comes
    /// from its block map.
    pub fn seek(&self, inode: &Inode, offset: u64, what: crate::file::Seek) -> Result<Option<u64>> {
        if self.writer.state.is_some() {
            self.writeback_file(inode.ino)?;
        }
        crate::read_core::ReadCore::seek(self, inode, offset, what)
    }

    /// A rename that replaces a file by one with delayed data sends that
    /// data out first (the kernel's auto_da_alloc): the write-a-copy,
    /// rename-it-over idiom then never leaves an empty file after a crash
    /// where the old one was.
    pub(super) fn write_back_before_replace(
        &self,
        parent: u32,
        name: &[u8],
        newparent: u32,
        newname: &[u8],
    ) -> Result<()> {
        if self.delayed.bytes() == 0 {
            return Ok(());
        }
        // A lookup that fails is the rename's to report.
        let found = |dir: u32, n: &[u8]| self.inode(dir).ok().and_then(|d| self.lookup(&d, n).ok().flatten());
        if let (Some((src, _)), Some(_)) = (found(parent, name), found(newparent, newname)) {
            self.writeback_file(src)?;
        }
        Ok(())
    }

    /// Send `ino`'s waiting data out (takes its data lock).
    pub fn writeback_file(&self, ino: u32) -> Result<()> {
        if !self.delayed.has(ino) {
            return Ok(());
        }
        let _map = self.data_lock(ino).write();
        self.writeback_locked(ino)
    }

    /// Send out the data of every file that was waiting when called
    /// (oldest first) whose data began to wait before `cutoff` (None: all).
    pub(crate) fn writeback_files(&self, cutoff: Option<Instant>) -> Result<()> {
        let files: Vec<u32> = self
            .delayed
            .files_by_age()
            .into_iter()
            .take_while(|&(_, since)| cutoff.is_none_or(|c| since < c))
            .map(|(ino, _)| ino)
            .collect();
        self.writeback_inos(&files)
    }

    /// Send out every file's waiting data, oldest first, one file at a
    /// time, going on past files that fail (their data stays waiting).
    pub(crate) fn writeback_each_file(&self) {
        for (ino, _) in self.delayed.files_by_age() {
            if self.writeback_file(ino).is_err() && self.failure().is_some() {
                return; // read-only now: nothing more can go out
            }
        }
    }

    /// Write back, oldest files first, until no more than `target` bytes wait.
    pub(crate) fn writeback_down_to(&self, target: u64) -> Result<()> {
        let files = self.delayed.files_by_age();
        let bs = u64::from(self.block_size());
        // The oldest files whose blocks bring the total down to `target`.
        let mut over = self.delayed.bytes().saturating_sub(target);
        let mut oldest = Vec::new();
        for (ino, _) in files {
            if over == 0 {
                break;
            }
            over = over.saturating_sub(self.delayed.file_blocks(ino).max(1) * bs);
            oldest.push(ino);
        }
        self.writeback_inos(&oldest)
    }

    /// Before a write (no data lock held): a writer that finds the whole
    /// `delalloc_mb=` waiting writes back the oldest half itself, and one
    /// that finds half of the free blocks waiting writes back all of it.
    pub(super) fn delalloc_backpressure(&self) -> Result<()> {
        let limit = self.opts.delalloc_bytes;
        let target = if self.space_runs_short() {
            0
        } else if limit > 0 && self.delayed.bytes() > limit {
            limit / 2
        } else {
            return Ok(());
        };
        self.stall_writing_back_to(target)
    }

    /// After a write refused for room (no data lock held): whether data was
    /// waiting, now sent out, so that the write may be tried once more with
    /// the room its worst-case tree blocks held back given back.
    pub(super) fn freed_room_by_writeback(&self) -> Result<bool> {
        if self.delayed.blocks() == 0 {
            return Ok(false);
        }
        self.stall_writing_back_to(0)?;
        Ok(true)
    }

    /// A writer writes back until at most `target` bytes wait, and the time
    /// it waited counts as a stall.
    fn stall_writing_back_to(&self, target: u64) -> Result<()> {
        let began = Instant::now();
        self.writeback_down_to(target)?;
        self.delayed.count_stall(began.elapsed());
        Ok(())
    }

    /// The background tick's share: data older than `data_expire=`, then
    /// the oldest files while more than half of `delalloc_mb=` waits.
    pub(crate) fn delalloc_tick(&self) -> Result<()> {
        if self.delayed.bytes() == 0 {
            self.delayed.release_spare();
            return Ok(());
        }
        if let Some(cutoff) = Instant::now().checked_sub(self.opts.data_expire) {
            self.writeback_files(Some(cutoff))?;
        }
        let half = self.opts.delalloc_bytes / 2;
        if self.delayed.bytes() > half {
            self.writeback_down_to(half)?;
        }
        Ok(())
    }
}

/// `inode`'s extent tree as the delayed store counts it: its depth, and the
/// free entries of its root when that holds the extents itself (at most the
/// four i_block has room for, whatever a damaged header claims).
fn tree_shape(inode: &Inode) -> TreeShape {
    const ROOT_ENTRIES: u16 = 4;
    match extent::peek_header(&inode.base.block) {
        Some(h) if h.depth == 0 => TreeShape { depth: 0, root_room: h.max.min(ROOT_ENTRIES).saturating_sub(h.entries) },
        Some(h) => TreeShape { depth: h.depth, root_room: 0 },
        None => TreeShape::default(),
    }
}
