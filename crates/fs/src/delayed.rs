//! Delayed allocation's store (ext4's delalloc): file data written into
//! holes waits here, without blocks, until write-back gives it blocks and
//! sends it to the device (`write/delalloc.rs`). Data of a file deleted or
//! truncated before then is dropped: no allocation, no I/O.
//!
//! Two sizes per file, as the kernel's i_size and i_disksize: `size` is
//! what readers see; `disk_size` is what the on-disk inode records, and
//! never covers data that has not reached the disk, so that a crash shows
//! the file as long as its written data, never a tail of zeros.
//!
//! Readers overlay the blocks kept here on what the device holds
//! ([`Delayed::overlay`]); each block is kept whole (zeros where nothing
//! was written), as a page of the kernel's page cache, shared by reference
//! count so that write-back hands it to the device without a copy.
//!
//! Blocks that leave the store unshared (of a file deleted or truncated
//! before write-back; written ones are still shared with write-back then,
//! and are freed) are kept for the next writes, as the kernel's page allocator
//! keeps free pages: a fresh allocation per block cost the daemon a third of
//! its busy time in Postmark (malloc, and a heap that grew one page at a
//! time: 50,000 `mprotect` calls in 4,000 transactions).

use parking_lot::{Mutex, MutexGuard};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// One file's delayed data.
pub(crate) struct DirtyFile {
    /// Logical block -> its contents (one block each).
    pub(crate) blocks: BTreeMap<u64, Arc<[u8]>>,
    /// The size readers see (i_size).
    pub(crate) size: u64,
    /// The size the on-disk inode records (i_disksize).
    pub(crate) disk_size: u64,
    /// When its oldest block waiting was written.
    pub(crate) since: Instant,
    /// Runs of consecutive blocks waiting.
    runs: u64,
    /// Its extent tree when data was last put.
    shape: TreeShape,
    /// Its share of [`Delayed::tree_blocks`].
    tree: u64,
    /// A mapped block's new contents, waiting to be written in place: the
    /// file's last block, partly filled, that an append rewrote. It goes
    /// out with the first run written back after it, as one request when
    /// that run lands on the next block, as the kernel's write-back sends a
    /// dirty page and the delayed ones behind it in one bio. Written at
    /// once, alone, it was a third of Postmark's data write requests on
    /// `smr-seagate` (docs/results/postmark.md).
    held: Option<(u64, Arc<[u8]>)>,
}

impl DirtyFile {
    /// Whether nothing of it waits to be written.
    fn is_clean(&self) -> bool {
        self.blocks.is_empty() && self.held.is_none()
    }

    /// Its first waiting block outside `start..end` (the held one included).
    fn waiting_outside(&self, start: u64, end: u64) -> Option<u64> {
        let before = self.blocks.range(..start).next().map(|(&l, _)| l);
        let after = self.blocks.range(end..).next().map(|(&l, _)| l);
        let held = self.held.as_ref().map(|&(l, _)| l).filter(|l| !(start..end).contains(l));
        [before, after, held].into_iter().flatten().min()
    }
}

/// What a file's extent tree looked like when data was put into it: its
/// depth, and, at depth 0, the free entries of its root in the inode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TreeShape {
    pub(crate) depth: u16,
    pub(crate) root_room: u16,
}

/// Files kept apart by inode number, each part under its own lock: every
/// inode read asks for its file's size, and with one lock the request
/// threads and write-back queued on it (untar measured 5% slower).
const SHARDS: usize = 16;

type Files = HashMap<u32, DirtyFile>;

/// The delayed data of every file (empty on read-only volumes).
pub(crate) struct Delayed {
    shards: Box<[Mutex<Files>]>,
    /// Blocks waiting, over all files: each is a block reserved on disk.
    /// Changed under the lock of the shard whose file gains or loses them.
    blocks: AtomicU64,
    /// Files tracked, changed likewise: lets every inode read skip the
    /// locks while nothing waits.
    tracked: AtomicUsize,
    /// The extent-tree blocks write-back may need for the waiting blocks,
    /// at worst, over all files (`Delayed::worst_tree`); changed likewise.
    tree: AtomicU64,
    /// Mapped blocks held (`DirtyFile::held`): memory, but no reservation.
    held: AtomicU64,
    /// Extents in half a leaf block.
    half_leaf: u64,
    /// Unshared blocks kept for reuse (contents stale), at most `spare_cap`.
    spare: Mutex<Vec<Arc<[u8]>>>,
    spare_cap: usize,
    block_size: usize,
    /// Writers that found the whole limit waiting and wrote back themselves,
    /// and the nanoseconds they spent at it.
    stalls: AtomicU64,
    stall_ns: AtomicU64,
}

impl Delayed {
    /// `spare_bytes`: at most this much memory kept for reuse once free.
    pub(crate) fn new(block_size: u32, spare_bytes: u64) -> Self {
        Delayed {
            shards: (0..SHARDS).map(|_| Mutex::new(Files::new())).collect(),
            blocks: AtomicU64::new(0),
            tracked: AtomicUsize::new(0),
            tree: AtomicU64::new(0),
            held: AtomicU64::new(0),
            half_leaf: ((u64::from(block_size) - 12) / 12 / 2).max(1),
            spare: Mutex::new(Vec::new()),
            spare_cap: usize::try_from(spare_bytes / u64::from(block_size)).unwrap_or(usize::MAX),
            block_size: block_size as usize,
            stalls: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
        }
    }

    /// Count a writer's stall of `took` (back-pressure).
    pub(crate) fn count_stall(&self, took: std::time::Duration) {
        self.stalls.fetch_add(1, Ordering::Relaxed);
        self.stall_ns.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// (stalls, seconds stalled) so far.
    pub(crate) fn stalls(&self) -> (u64, f64) {
        (self.stalls.load(Ordering::Relaxed), self.stall_ns.load(Ordering::Relaxed) as f64 / 1e9)
    }

    /// Keep the unshared ones of `blocks` for reuse, up to the cap; the
    /// others are freed. Called under a shard's lock (shard, then spare).
    fn recycle(&self, blocks: impl IntoIterator<Item = Arc<[u8]>>) {
        let mut spare = self.spare.lock();
        for mut b in blocks {
            if spare.len() >= self.spare_cap {
                break;
            }
            if b.len() == self.block_size && Arc::get_mut(&mut b).is_some() {
                spare.push(b);
            }
        }
    }

    /// Free the blocks kept for reuse (nothing waits: the memory goes back).
    pub(crate) fn release_spare(&self) {
        let gone = std::mem::take(&mut *self.spare.lock());
        drop(gone);
    }

    /// Blocks kept for reuse.
    #[cfg(test)]
    fn spare_blocks(&self) -> usize {
        self.spare.lock().len()
    }

    /// The shard that holds `ino`, locked.
    fn shard(&self, ino: u32) -> MutexGuard<'_, Files> {
        self.shards[ino as usize % SHARDS].lock()
    }

    /// The shard that holds `ino`, locked, or None while no file waits.
    fn shard_if_any(&self, ino: u32) -> Option<MutexGuard<'_, Files>> {
        (self.tracked.load(Ordering::Acquire) > 0).then(|| self.shard(ino))
    }

    fn gained(&self, n: u64) {
        self.blocks.fetch_add(n, Ordering::AcqRel);
    }

    fn lost(&self, n: u64) {
        let before = self.blocks.fetch_sub(n, Ordering::AcqRel);
        debug_assert!(before >= n, "delayed block count below zero: {before} - {n}");
    }

    /// `ino`'s file in `files` (its shard, locked), tracked from now if it
    /// was not: `disk_size` is then its inode's size, and `shape` its tree's.
    fn track<'a>(&self, files: &'a mut Files, ino: u32, disk_size: u64, shape: TreeShape) -> &'a mut DirtyFile {
        files.entry(ino).or_insert_with(|| {
            self.tracked.fetch_add(1, Ordering::AcqRel);
            DirtyFile {
                blocks: BTreeMap::new(),
                size: disk_size,
                disk_size,
                since: Instant::now(),
                runs: 0,
                shape,
                tree: 0,
                held: None,
            }
        })
    }

    /// Remove `ino`'s file from `files` (its shard, locked), if tracked.
    fn remove(&self, files: &mut Files, ino: u32) -> Option<DirtyFile> {
        let f = files.remove(&ino)?;
        self.tracked.fetch_sub(1, Ordering::AcqRel);
        self.tree.fetch_sub(f.tree, Ordering::AcqRel);
        if f.held.is_some() {
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        Some(f)
    }

    /// The extent-tree blocks the write-back of `blocks` blocks waiting in
    /// `runs` runs, of a file whose tree is `shape`, may need at worst.
    /// Each block may become an extent of its own (free space in one-block
    /// pieces): none when that many still fit in the root in the inode;
    /// otherwise each run goes into the tree at its own place, a place
    /// splits one leaf plus one for each half a leaf of extents put there,
    /// each split may climb every level, and the root may grow one. Holding
    /// back less lost data at unmount: one leaf per file, or one per half a
    /// leaf of blocks, where single blocks went into thousands of full
    /// leaves of a deep tree (tests/system/test_full_volume_writeback.py);
    /// holding back this for small files too refused mkdir and fallocate on
    /// a volume with 26 MiB free while 2,470 files of one block waited.
    fn worst_tree(&self, runs: u64, blocks: u64, shape: TreeShape) -> u64 {
        if blocks == 0 || (shape.depth == 0 && blocks <= u64::from(shape.root_room)) {
            return 0;
        }
        (u64::from(shape.depth) + 2) * (runs + blocks.div_ceil(self.half_leaf))
    }

    /// What `ino` would have once logical blocks `first..=last` all wait,
    /// its tree being `shape`: (blocks new, its runs, the tree blocks held
    /// back over all files). Read under its shard's lock.
    fn if_put(&self, files: &Files, ino: u32, first: u64, last: u64, shape: TreeShape) -> (u64, u64, u64) {
        let span = last - first + 1;
        let Some(f) = files.get(&ino) else {
            return (span, 1, self.tree_blocks() + self.worst_tree(1, span, shape));
        };
        let new = span - f.blocks.range(first..=last).count() as u64;
        // first..=last becomes one run with the runs beside it.
        let runs = f.runs + 1 - runs_touching(&f.blocks, first.saturating_sub(1), last.saturating_add(1));
        let tree = self.tree_blocks() - f.tree + self.worst_tree(runs, f.blocks.len() as u64 + new, shape);
        (new, runs, tree)
    }

    /// Set `f`'s share of the tree blocks to what its waiting data needs.
    fn retally(&self, f: &mut DirtyFile) {
        let now = self.worst_tree(f.runs, f.blocks.len() as u64, f.shape);
        if now >= f.tree {
            self.tree.fetch_add(now - f.tree, Ordering::AcqRel);
        } else {
            self.tree.fetch_sub(f.tree - now, Ordering::AcqRel);
        }
        f.tree = now;
        debug_assert!(
            f.blocks.len() > 4096 || f.runs == runs_touching(&f.blocks, 0, u64::MAX),
            "run count {} drifted",
            f.runs
        );
    }

    /// Take blocks `a..b` of `f` out (those waiting), keeping its run count.
    fn take_range(&self, f: &mut DirtyFile, a: u64, b: u64) -> Vec<Arc<[u8]>> {
        debug_assert!(a < b);
        // The runs around a..b become those of a - 1 and b, if they wait.
        let touching = runs_touching(&f.blocks, a.saturating_sub(1), b);
        let keys: Vec<u64> = f.blocks.range(a..b).map(|(&l, _)| l).collect();
        let gone: Vec<Arc<[u8]>> = keys.iter().filter_map(|l| f.blocks.remove(l)).collect();
        let stays = u64::from(a > 0 && f.blocks.contains_key(&(a - 1))) + u64::from(f.blocks.contains_key(&b));
        debug_assert!(f.runs + stays >= touching, "run count {} below {touching} - {stays}", f.runs);
        f.runs = (f.runs + stays).saturating_sub(touching);
        self.retally(f);
        self.lost(gone.len() as u64);
        gone
    }

    /// Blocks waiting over all files (each has a block reserved for it).
    pub(crate) fn blocks(&self) -> u64 {
        self.blocks.load(Ordering::Acquire)
    }

    /// The extent-tree blocks their write-back may need, at worst.
    pub(crate) fn tree_blocks(&self) -> u64 {
        self.tree.load(Ordering::Acquire)
    }

    /// What a put of `len` bytes at `offset` into `ino`, whose tree is
    /// `shape`, would leave waiting over all files: (blocks, tree blocks).
    /// For a caller deciding before it puts.
    pub(crate) fn held_if_put(&self, ino: u32, offset: u64, len: u64, shape: TreeShape) -> (u64, u64) {
        let bs = self.block_size as u64;
        if len == 0 {
            return (self.blocks(), self.tree_blocks());
        }
        let files = self.shard(ino);
        let (new, _, tree) = self.if_put(&files, ino, offset / bs, (offset + len - 1) / bs, shape);
        (self.blocks() + new, tree)
    }

    /// Bytes waiting over all files, the held mapped blocks included.
    pub(crate) fn bytes(&self) -> u64 {
        (self.blocks() + self.held.load(Ordering::Acquire)) * self.block_size as u64
    }

    /// Whether `ino` has data waiting or a size the disk does not have yet.
    pub(crate) fn has(&self, ino: u32) -> bool {
        self.shard_if_any(ino).is_some_and(|files| files.contains_key(&ino))
    }

    /// The size readers see for `ino`, when it differs from its inode's.
    pub(crate) fn size(&self, ino: u32) -> Option<u64> {
        self.shard_if_any(ino)?.get(&ino).map(|f| f.size)
    }

    /// Blocks of `ino` waiting (they count in its st_blocks, as the
    /// kernel counts reserved delalloc blocks).
    pub(crate) fn file_blocks(&self, ino: u32) -> u64 {
        self.shard_if_any(ino).and_then(|files| files.get(&ino).map(|f| f.blocks.len() as u64)).unwrap_or(0)
    }

    /// Whether logical block `lblk` of `ino` is waiting here.
    pub(crate) fn holds_block(&self, ino: u32, lblk: u64) -> bool {
        self.shard_if_any(ino).is_some_and(|files| files.get(&ino).is_some_and(|f| f.blocks.contains_key(&lblk)))
    }

    /// Copy `data` into `ino` from byte `offset`, each block not waiting
    /// yet created (zeros where nothing was written). `disk_size`: the
    /// inode's on-disk size, for a file not tracked yet; `shape`: its
    /// extent tree's. `room`: the blocks the waiting data and its tree
    /// blocks (`tree_blocks`) may take over all files; when the new ones
    /// would pass it, nothing changes and None comes back. Returns the new
    /// blocks (each one more reserved), for [`Self::unput`].
    pub(crate) fn put(
        &self,
        ino: u32,
        disk_size: u64,
        offset: u64,
        data: &[u8],
        shape: TreeShape,
        room: u64,
    ) -> Option<Vec<u64>> {
        let bs = self.block_size as u64;
        if data.is_empty() {
            return Some(Vec::new());
        }
        let (first, last) = (offset / bs, (offset + data.len() as u64 - 1) / bs);
        let mut files = self.shard(ino);
        let (new, runs, tree) = self.if_put(&files, ino, first, last, shape);
        if new > 0 && self.blocks() + new + tree > room {
            return None;
        }
        let mut fresh = {
            let mut spare = self.spare.lock();
            let keep = spare.len().saturating_sub(new as usize);
            spare.split_off(keep)
        };
        let file = self.track(&mut files, ino, disk_size, shape);
        if file.is_clean() {
            file.since = Instant::now();
        }
        let mut made = Vec::with_capacity(new as usize);
        for l in first..=last {
            let lo = (l * bs).max(offset);
            let hi = ((l + 1) * bs).min(offset + data.len() as u64);
            let part = &data[(lo - offset) as usize..(hi - offset) as usize];
            let range = (lo - l * bs) as usize..(hi - l * bs) as usize;
            match file.blocks.entry(l) {
                Entry::Vacant(v) => {
                    let block = match fresh.pop() {
                        Some(mut b) => {
                            // Unshared when kept (`recycle`); fill it whole: its contents are stale.
                            let buf = Arc::get_mut(&mut b).expect("a spare block is unshared");
                            buf[..range.start].fill(0);
                            buf[range.clone()].copy_from_slice(part);
                            buf[range.end..].fill(0);
                            b
                        }
                        // A whole new block: one copy, no zeros first.
                        None if part.len() == self.block_size => Arc::from(part),
                        None => {
                            let mut b = vec![0u8; self.block_size];
                            b[range].copy_from_slice(part);
                            Arc::from(b)
                        }
                    };
                    v.insert(block);
                    made.push(l);
                }
                // Shared only while write-back sends it out, under the file's data lock: unique here.
                Entry::Occupied(o) => Arc::make_mut(o.into_mut())[range].copy_from_slice(part),
            }
        }
        debug_assert_eq!(made.len() as u64, new);
        if new > 0 {
            file.runs = runs;
            file.shape = shape;
            self.retally(file);
        }
        self.gained(new);
        if !fresh.is_empty() {
            self.recycle(fresh);
        }
        Some(made)
    }

    /// Take back the blocks `put` just made (the write failed after it).
    pub(crate) fn unput(&self, ino: u32, made: &[u64]) {
        let mut files = self.shard(ino);
        let Some(f) = files.get_mut(&ino) else { return };
        // `made` ascends: take it out a run at a time.
        let mut rest = made;
        while let Some(&a) = rest.first() {
            let n = rest.iter().zip(a..).take_while(|(&l, want)| l == *want).count();
            let gone = self.take_range(f, a, a + n as u64);
            self.recycle(gone);
            rest = &rest[n..];
        }
    }

    /// The inode `ino` is written with size `size`: readers see it; the
    /// disk sees at most what it saw (a truncate below lowers both), or all
    /// of it once nothing waits (the file is forgotten then). Returns the
    /// size to record on disk; None for a file not tracked.
    pub(crate) fn sizes_at_write(&self, ino: u32, size: u64) -> Option<u64> {
        let mut files = self.shard_if_any(ino)?;
        let f = files.get_mut(&ino)?;
        if f.is_clean() {
            self.remove(&mut files, ino);
            return Some(size);
        }
        f.size = size;
        f.disk_size = f.disk_size.min(size);
        Some(f.disk_size)
    }

    /// The disk may record `disk_size` for `ino` (a truncate or an
    /// extension without data: nothing waits below it that matters).
    pub(crate) fn set_disk_size(&self, ino: u32, disk_size: u64) {
        if let Some(f) = self.shard(ino).get_mut(&ino) {
            f.disk_size = disk_size;
        }
    }

    /// Copy the blocks of `ino` waiting in logical blocks
    /// `first..first + buf.len() / block size` over `buf`.
    pub(crate) fn overlay(&self, ino: u32, first: u64, buf: &mut [u8]) {
        let Some(files) = self.shard_if_any(ino) else { return };
        let Some(f) = files.get(&ino) else { return };
        let bs = self.block_size;
        let n = (buf.len() / bs) as u64;
        let held = f.held.as_ref().filter(|(l, _)| (first..first + n).contains(l)).map(|(l, b)| (l, b));
        for (&l, b) in f.blocks.range(first..first + n).chain(held) {
            let at = ((l - first) as usize) * bs;
            buf[at..at + bs].copy_from_slice(b);
        }
    }

    /// The first waiting run of `ino` at or after logical block `from`:
    /// (first block, its blocks' contents), at most `max` blocks long.
    /// The blocks are shared, not copied.
    pub(crate) fn run_from(&self, ino: u32, from: u64, max: u64) -> Option<(u64, Vec<Arc<[u8]>>)> {
        let files = self.shard(ino);
        let f = files.get(&ino)?;
        let mut it = f.blocks.range(from..);
        let (&start, first) = it.next()?;
        let mut run = vec![Arc::clone(first)];
        for (&l, b) in it {
            if l != start + run.len() as u64 || run.len() as u64 >= max {
                break;
            }
            run.push(Arc::clone(b));
        }
        Some((start, run))
    }

    /// All of `ino`'s waiting data, when it is one run of at most `max`
    /// blocks: (first block, the blocks, shared). None for a file with more,
    /// or in pieces, or none.
    pub(crate) fn small_file(&self, ino: u32, max: usize) -> Option<(u64, Vec<Arc<[u8]>>)> {
        let files = self.shard(ino);
        let f = files.get(&ino)?;
        let (&first, _) = f.blocks.first_key_value()?;
        let (&last, _) = f.blocks.last_key_value()?;
        if f.blocks.len() > max || last - first + 1 != f.blocks.len() as u64 {
            return None;
        }
        Some((first, f.blocks.values().cloned().collect()))
    }

    /// The on-disk size once blocks `start..start + len` of `ino` are on
    /// disk (see [`Self::written`]), without changing anything; None for a
    /// file not tracked.
    pub(crate) fn disk_size_after(&self, ino: u32, start: u64, len: u64) -> Option<u64> {
        let files = self.shard(ino);
        let f = files.get(&ino)?;
        let end = start + len;
        Some(disk_size_reached(f, self.block_size as u64, end, f.waiting_outside(start, end)))
    }

    /// Blocks `start..start + len` of `ino` reached the disk: drop them,
    /// and let the on-disk size cover them (up to the size readers see).
    /// Returns the new on-disk size, and whether the file is done (nothing
    /// waits and both sizes agree; it is forgotten).
    pub(crate) fn written(&self, ino: u32, start: u64, len: u64) -> Option<(u64, bool)> {
        let mut files = self.shard(ino);
        let bs = self.block_size as u64;
        let f = files.get_mut(&ino)?;
        let gone = self.take_range(f, start, start + len);
        let done = f.is_clean();
        f.disk_size = disk_size_reached(f, bs, start + len, f.waiting_outside(0, 0));
        let disk_size = f.disk_size;
        if done {
            self.remove(&mut files, ino);
        }
        self.recycle(gone);
        Some((disk_size, done))
    }

    /// Drop every block of `ino` from logical block `from` on (a truncate,
    /// or `from` 0 when the file is freed); returns how many were dropped.
    /// Partial data in the block holding the new end is the caller's to zero.
    pub(crate) fn drop_from(&self, ino: u32, from: u64) -> u64 {
        let mut files = self.shard(ino);
        let Some(f) = files.get_mut(&ino) else { return 0 };
        if f.held.as_ref().is_some_and(|&(l, _)| l >= from) {
            f.held = None;
            self.held.fetch_sub(1, Ordering::AcqRel);
        }
        let gone = self.take_range(f, from, u64::MAX);
        let n = gone.len() as u64;
        self.recycle(gone);
        n
    }

    /// Zero bytes `from..` of waiting or held block `lblk` of `ino` (the
    /// block a truncate ends inside); whether it is held (the disk's copy
    /// is then older and needs no zeroing: this one replaces it).
    pub(crate) fn zero_tail(&self, ino: u32, lblk: u64, from: usize) -> bool {
        let Some(mut files) = self.shard_if_any(ino) else { return false };
        let Some(f) = files.get_mut(&ino) else { return false };
        if let Some(b) = f.blocks.get_mut(&lblk) {
            Arc::make_mut(b)[from..].fill(0);
        }
        match &mut f.held {
            Some((l, b)) if *l == lblk => {
                Arc::make_mut(b)[from..].fill(0);
                true
            }
            _ => false,
        }
    }

    /// Hold `block` as the new contents of mapped block `lblk` of `ino`
    /// (`DirtyFile::held`); `disk_size`: the inode's on-disk size, for a
    /// file not tracked yet. Returns what was held before, for
    /// [`Self::unhold`]; the caller has written out any other block held.
    pub(crate) fn hold(&self, ino: u32, disk_size: u64, lblk: u64, block: Vec<u8>) -> Option<(u64, Arc<[u8]>)> {
        debug_assert_eq!(block.len(), self.block_size);
        let mut files = self.shard(ino);
        let file = self.track(&mut files, ino, disk_size, TreeShape::default());
        debug_assert!(!file.blocks.contains_key(&lblk), "a held block is mapped, a waiting one is not");
        debug_assert!(file.held.as_ref().is_none_or(|&(l, _)| l == lblk), "one held block per file");
        if file.is_clean() {
            file.since = Instant::now();
        }
        let before = file.held.replace((lblk, Arc::from(block)));
        if before.is_none() {
            self.held.fetch_add(1, Ordering::AcqRel);
        }
        before
    }

    /// Put back what [`Self::hold`] replaced (the write failed after it).
    pub(crate) fn unhold(&self, ino: u32, before: Option<(u64, Arc<[u8]>)>) {
        let mut files = self.shard(ino);
        let Some(f) = files.get_mut(&ino) else { return };
        match (f.held.is_some(), before.is_some()) {
            (true, false) => self.held.fetch_sub(1, Ordering::AcqRel),
            (false, true) => self.held.fetch_add(1, Ordering::AcqRel),
            _ => 0,
        };
        f.held = before;
    }

    /// The block of `ino` held (`DirtyFile::held`): (logical block, contents, shared).
    pub(crate) fn held(&self, ino: u32) -> Option<(u64, Arc<[u8]>)> {
        self.shard_if_any(ino)?.get(&ino)?.held.clone()
    }

    /// Copy the contents held for block `lblk` of `ino` into `dst` (one
    /// block); false when that block is not held.
    pub(crate) fn held_copy(&self, ino: u32, lblk: u64, dst: &mut [u8]) -> bool {
        let Some(files) = self.shard_if_any(ino) else { return false };
        match files.get(&ino).and_then(|f| f.held.as_ref()) {
            Some((l, b)) if *l == lblk => {
                dst.copy_from_slice(b);
                true
            }
            _ => false,
        }
    }

    /// The block held for `lblk` of `ino` reached the device: no longer
    /// held, and the on-disk size may cover it (as [`Self::written`]); the
    /// file is forgotten when nothing of it waits any more.
    pub(crate) fn held_written(&self, ino: u32, lblk: u64) {
        let mut files = self.shard(ino);
        let Some(f) = files.get_mut(&ino).filter(|f| f.held.as_ref().is_some_and(|&(l, _)| l == lblk)) else {
            return;
        };
        f.held = None;
        self.held.fetch_sub(1, Ordering::AcqRel);
        f.disk_size = disk_size_reached(f, self.block_size as u64, lblk + 1, f.waiting_outside(0, 0));
        if f.is_clean() {
            self.remove(&mut files, ino);
        }
    }

    /// Forget `ino` (freed; its blocks dropped first); returns the blocks dropped.
    pub(crate) fn forget(&self, ino: u32) -> u64 {
        let Some(mut files) = self.shard_if_any(ino) else { return 0 };
        let Some(f) = self.remove(&mut files, ino) else { return 0 };
        let n = f.blocks.len() as u64;
        self.lost(n);
        self.recycle(f.blocks.into_values());
        n
    }

    /// Files with data waiting, oldest first, with when their data began to wait.
    pub(crate) fn files_by_age(&self) -> Vec<(u32, Instant)> {
        let mut v: Vec<(u32, Instant)> = Vec::new();
        for shard in self.shards.iter() {
            v.extend(shard.lock().iter().map(|(&i, f)| (i, f.since)));
        }
        v.sort_by_key(|&(i, t)| (t, i));
        v
    }
}

/// Runs of consecutive blocks of `blocks` with a block in `lo..=hi`.
fn runs_touching(blocks: &BTreeMap<u64, Arc<[u8]>>, lo: u64, hi: u64) -> u64 {
    let mut n = 0;
    let mut prev: Option<u64> = None;
    for (&l, _) in blocks.range(lo..=hi) {
        if prev.is_none_or(|p| p + 1 != l) {
            n += 1;
        }
        prev = Some(l);
    }
    n
}

/// The on-disk size of `f` once its data up to logical block `end` is on
/// disk and `next` is its first block still waiting (None: nothing waits):
/// it may cover the written run, but no block still waiting; with nothing
/// waiting, the whole file.
fn disk_size_reached(f: &DirtyFile, bs: u64, end: u64, next: Option<u64>) -> u64 {
    match next {
        None => f.size,
        Some(l) => f.disk_size.max((end * bs).min(l * bs).min(f.size)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tree `depth` deep with no room in the inode's root.
    fn deep(depth: u16) -> TreeShape {
        TreeShape { depth, root_room: 0 }
    }

    #[test]
    fn put_overlay_and_written_keep_the_counts_and_the_sizes() {
        let d = Delayed::new(1024, 0);
        assert_eq!(d.put(7, 100, 3 * 1024 + 10, b"abc", deep(0), 10), Some(vec![3]));
        assert_eq!(d.put(7, 100, 3 * 1024 + 20, b"de", deep(0), 10), Some(vec![]), "the same block again: not new");
        assert_eq!(d.put(7, 100, 4 * 1024, b"z", deep(0), 10), Some(vec![4]));
        assert_eq!(d.blocks(), 2);
        assert_eq!(d.sizes_at_write(7, 4097), Some(100), "the disk keeps its size");
        assert_eq!(d.size(7), Some(4097));
        let mut buf = vec![0xffu8; 3 * 1024];
        d.overlay(7, 2, &mut buf);
        assert!(buf[..1024].iter().all(|&b| b == 0xff), "block 2 is not waiting");
        assert_eq!(&buf[1024 + 10..1024 + 13], b"abc");
        assert_eq!(&buf[1024 + 20..1024 + 22], b"de");
        assert_eq!(buf[1024], 0, "zeros where nothing was written");
        assert_eq!(buf[2048], b'z');
        let (start, run) = d.run_from(7, 0, 16).unwrap();
        assert_eq!((start, run.len()), (3, 2));
        assert_eq!(d.disk_size_after(7, 3, 1), Some(4096));
        assert_eq!(d.disk_size_after(7, 4, 1), Some(3072), "block 3 still waits: up to it (a hole before)");
        assert_eq!(d.disk_size_after(7, 3, 2), Some(4097));
        // Block 3 written: the disk size may reach the start of block 4 only.
        assert_eq!(d.written(7, 3, 1), Some((4096, false)));
        assert_eq!(d.written(7, 4, 1), Some((4097, true)), "all written: forgotten");
        assert_eq!(d.blocks(), 0);
        assert!(!d.has(7));
    }

    #[test]
    fn a_held_block_is_read_bounds_the_disk_size_and_goes_with_truncate() {
        let d = Delayed::new(1024, 0);
        // File 7: 1500 bytes on disk; an append rewrote block 1 and went on into block 2.
        assert_eq!(d.hold(7, 1500, 1, vec![b'h'; 1024]), None);
        d.put(7, 1500, 2048, b"z", deep(0), 10).unwrap();
        assert_eq!(d.sizes_at_write(7, 2049), Some(1500), "the disk keeps its size");
        assert_eq!((d.blocks(), d.bytes()), (1, 2 * 1024), "held: memory, no reservation");
        assert_eq!(d.file_blocks(7), 1, "a held block is counted in i_blocks already");
        let mut buf = vec![0u8; 3 * 1024];
        d.overlay(7, 0, &mut buf);
        assert!(buf[..1024].iter().all(|&b| b == 0) && buf[1024..2048].iter().all(|&b| b == b'h'));
        assert_eq!(buf[2048], b'z');
        let mut one = vec![0u8; 1024];
        assert!(d.held_copy(7, 1, &mut one) && !d.held_copy(7, 2, &mut one));
        // Block 2 written first: the disk size stops at the held block.
        assert_eq!(d.disk_size_after(7, 2, 1), Some(1500));
        // The held block written: up to the run still waiting.
        d.held_written(7, 1);
        assert_eq!(d.disk_size_after(7, 2, 1), Some(2049));
        assert_eq!(d.written(7, 2, 1), Some((2049, true)));
        assert!(!d.has(7));
        // Only a held block: the file is tracked, and forgotten once it is written.
        d.hold(8, 100, 0, vec![1; 1024]);
        assert_eq!(d.sizes_at_write(8, 300), Some(100));
        d.held_written(8, 0);
        assert!(!d.has(8) && d.bytes() == 0);
        // A truncate inside it zeroes it; one below it drops it; unhold puts back.
        d.hold(9, 100, 1, vec![5; 1024]);
        assert!(d.zero_tail(9, 1, 10));
        d.overlay(9, 1, &mut one);
        assert!(one[..10].iter().all(|&b| b == 5) && one[10..].iter().all(|&b| b == 0));
        let before = d.hold(9, 100, 1, vec![6; 1024]);
        d.unhold(9, before);
        d.overlay(9, 1, &mut one);
        assert_eq!(one[0], 5, "unhold put the older contents back");
        assert_eq!(d.drop_from(9, 1), 0);
        assert!(d.held(9).is_none() && d.bytes() == 0);
        assert_eq!(d.sizes_at_write(9, 1024), Some(1024), "nothing waits: forgotten, the whole size on disk");
        d.hold(10, 0, 3, vec![1; 1024]);
        d.forget(10);
        assert_eq!(d.bytes(), 0);
    }

    #[test]
    fn the_tree_held_back_follows_the_runs_and_the_depth() {
        let d = Delayed::new(1024, 0); // half a leaf: 42 extents
                                       // Every other block: 10 runs of one, into a tree 2 deep (4 levels at worst).
        for l in 0..10 {
            d.put(1, 0, 2 * l * 1024, b"x", deep(2), 1000).unwrap();
        }
        assert_eq!(d.tree_blocks(), 4 * (10 + 1));
        // The gaps filled: one run of 19.
        for l in 0..9 {
            d.put(1, 0, (2 * l + 1) * 1024, b"y", deep(2), 1000).unwrap();
        }
        assert_eq!(d.tree_blocks(), 4 * (1 + 1));
        // Blocks 5..8 written back: two runs are left.
        d.written(1, 5, 3);
        assert_eq!(d.tree_blocks(), 4 * (2 + 1));
        // A truncate to 3 blocks: one run.
        assert_eq!(d.drop_from(1, 3), 13);
        assert_eq!(d.tree_blocks(), 4 * (1 + 1));
        // A second file, new (depth 0); a write refused by the room takes nothing.
        d.put(2, 0, 0, &[1u8; 3000], deep(0), 1000).unwrap();
        assert_eq!(d.tree_blocks(), 8 + 2 * (1 + 1));
        let used = d.blocks() + d.tree_blocks();
        assert_eq!(d.put(2, 0, 10 * 1024, b"z", deep(0), used + 2), None, "a block and a new run: 3 more");
        assert_eq!(d.put(2, 0, 10 * 1024, b"z", deep(0), used + 3).map(|m| m.len()), Some(1));
        d.unput(2, &[10]);
        assert_eq!(d.blocks() + d.tree_blocks(), used, "unput gives it all back");
        assert_eq!(d.forget(1), 3);
        assert_eq!(d.tree_blocks(), 2 * (1 + 1));
        d.written(2, 0, 3);
        assert_eq!((d.tree_blocks(), d.blocks()), (0, 0));
    }

    #[test]
    fn blocks_that_fit_in_the_roots_free_entries_hold_back_no_tree() {
        let d = Delayed::new(4096, 0); // half a leaf: 170 extents
        let root = TreeShape { depth: 0, root_room: 3 };
        for l in [0, 2, 4] {
            d.put(1, 0, l * 4096, b"x", root, 100).unwrap();
        }
        assert_eq!(d.tree_blocks(), 0, "three extents at most, three free entries");
        d.put(1, 0, 6 * 4096, b"x", root, 100).unwrap();
        assert_eq!(d.tree_blocks(), 2 * (4 + 1), "a fourth may not fit: a leaf, and what may climb");
        assert_eq!(d.held_if_put(2, 0, 4096, root), (5, 2 * (4 + 1)), "a one-block file beside it: no more");
        d.written(1, 0, 1);
        assert_eq!(d.tree_blocks(), 0, "three left");
    }

    #[test]
    fn truncate_and_forget_give_back_their_blocks() {
        let d = Delayed::new(1024, 0);
        for l in 0..10 {
            d.put(1, 0, l * 1024, b"x", deep(0), 100);
        }
        d.sizes_at_write(1, 10 * 1024);
        assert_eq!(d.drop_from(1, 8), 2);
        assert_eq!(d.blocks(), 8);
        assert_eq!(d.sizes_at_write(1, 5000), Some(0), "blocks wait: the disk keeps 0");
        d.zero_tail(1, 4, 5000 - 4096);
        let mut buf = vec![0u8; 1024];
        d.overlay(1, 4, &mut buf);
        assert_eq!(buf[0], b'x');
        assert!(buf[5000 - 4096..].iter().all(|&b| b == 0));
        assert_eq!(d.forget(1), 8);
        assert_eq!(d.blocks(), 0);
        assert_eq!(d.size(1), None);
        // A truncate that drops every block: the file is forgotten at its
        // inode's write, which records the whole size.
        d.put(3, 0, 5 * 1024, b"q", deep(0), 100);
        assert_eq!(d.drop_from(3, 0), 1);
        assert_eq!(d.sizes_at_write(3, 100), Some(100));
        assert!(!d.has(3));
    }

    #[test]
    fn a_run_stops_at_a_gap_and_at_its_limit() {
        let d = Delayed::new(512, 0);
        for l in [0, 1, 2, 5, 6] {
            d.put(2, 0, l * 512, b"y", deep(0), 100);
        }
        assert_eq!(d.run_from(2, 0, 2).map(|(s, r)| (s, r.len())), Some((0, 2)));
        assert_eq!(d.run_from(2, 1, 16).map(|(s, r)| (s, r.len())), Some((1, 2)));
        assert_eq!(d.run_from(2, 3, 16).map(|(s, r)| (s, r.len())), Some((5, 2)));
        assert_eq!(d.run_from(2, 7, 16), None);
    }

    #[test]
    fn a_write_over_several_blocks_keeps_its_bytes_and_stops_at_the_limit() {
        let d = Delayed::new(512, 0);
        let data: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8 + 1).collect();
        // Bytes 100..1600: blocks 0 to 3, the first and last in part.
        assert_eq!(d.put(9, 0, 100, &data, deep(0), 8), Some(vec![0, 1, 2, 3]));
        assert_eq!(d.put(9, 0, 2048, b"x", deep(0), 8), None, "a fifth block and its tree blocks pass the room");
        assert_eq!((d.blocks(), d.file_blocks(9)), (4, 4), "a refused write changes nothing");
        assert_eq!(d.put(9, 0, 1000, b"over", deep(0), 8), Some(vec![]), "rewriting waiting blocks needs no room");
        let mut buf = vec![0xffu8; 2048];
        d.overlay(9, 0, &mut buf);
        let mut want = vec![0u8; 2048];
        want[100..1600].copy_from_slice(&data);
        want[1000..1004].copy_from_slice(b"over");
        assert_eq!(buf, want);
        d.unput(9, &[2, 3]);
        assert_eq!(d.blocks(), 2);
    }

    #[test]
    fn freed_blocks_are_reused_whole_and_never_while_shared() {
        let d = Delayed::new(512, 3 * 512);
        for l in 0..5 {
            d.put(4, 0, l * 512, &[7u8; 512], deep(0), 100);
        }
        let (_, shared) = d.run_from(4, 0, 1).unwrap(); // block 0 still out at the device
        assert_eq!(d.forget(4), 5);
        assert_eq!(d.spare_blocks(), 3, "kept up to the cap, the shared one never");
        drop(shared);
        // A partial write into a reused block: stale bytes gone, zeros around.
        assert_eq!(d.put(5, 0, 10, b"ab", deep(0), 100), Some(vec![0]));
        assert_eq!(d.spare_blocks(), 2);
        let mut buf = vec![0xffu8; 512];
        d.overlay(5, 0, &mut buf);
        let mut want = vec![0u8; 512];
        want[10..12].copy_from_slice(b"ab");
        assert_eq!(buf, want);
        assert_eq!(d.drop_from(5, 0), 1);
        assert_eq!(d.spare_blocks(), 3);
        d.release_spare();
        assert_eq!(d.spare_blocks(), 0);
    }
}
