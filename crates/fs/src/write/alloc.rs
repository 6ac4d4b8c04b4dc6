//! Inode and block allocation.
//!
//! Policy (as ext4's, simplified): a top-level directory goes to the group
//! with the fewest directories among those with at least average free inodes,
//! so top-level trees spread over the disk; other inodes go to their parent's
//! group or the next one with room. Blocks are taken as contiguous runs from a
//! goal (the block after the file's last one), so sequential writes stay
//! sequential on disk. Uninitialised groups get a real bitmap on first use.

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::bitmap::{self, Kind};
use ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};

impl Volume {
    /// First block of inode `ino`'s group: the default goal for its blocks.
    pub(crate) fn inode_group_first_block(&self, ino: u32) -> u64 {
        self.group_first_block((ino - 1) / self.sb.f.inodes_per_group)
    }

    /// Blocks in group `g` (the last group may be short).
    fn group_blocks(&self, g: u32) -> u64 {
        let first = self.group_first_block(g);
        (self.sb.blocks_count() - first).min(u64::from(self.sb.f.blocks_per_group))
    }

    /// The group holding block `blk`. Total on any number (a damaged map's
    /// block below the first data block or past the volume gives the first
    /// or last group): callers estimating from an unchecked extent must not
    /// panic; freeing checks the range itself (`check_owned`).
    pub(crate) fn block_group_of(&self, blk: u64) -> u32 {
        let g = blk.saturating_sub(u64::from(self.sb.f.first_data_block)) / u64::from(self.sb.f.blocks_per_group);
        g.min(u64::from(self.group_count().saturating_sub(1))) as u32
    }

    /// Allocate an inode for a child of `parent`.
    pub(crate) fn alloc_inode(&self, ws: &mut WriteState, parent: u32, is_dir: bool) -> Result<u32> {
        let ngroups = self.group_count();
        let ipg = self.sb.f.inodes_per_group;
        let parent_group = (parent - 1) / ipg;
        let start = if is_dir && parent == ondisk::inode::ROOT_INO { self.orlov_group() } else { parent_group };
        for i in 0..ngroups {
            let g = (start + i) % ngroups;
            let gd = self.group(g);
            if gd.free_inodes_count() == 0 {
                continue;
            }
            let mut block = self.inode_bitmap(g)?;
            let bits = ws.spare.make_mut(&mut block);
            if gd.has_flag(BG_INODE_UNINIT) {
                // Bits past the group's inodes are padding, always set.
                for b in ipg as usize..bits.len() * 8 {
                    bitmap::set(bits, b);
                }
            }
            // Inodes below s_first_ino are reserved (their bits are set by mkfs).
            // (s_first_ino may lie past group 0: then all of it is reserved.)
            let from = if g == 0 { (self.sb.first_ino() as usize - 1).min(ipg as usize) } else { 0 };
            // Start where the last allocation in the group ended: an untar
            // fills groups of 8,192 inodes in order, and scanning from the
            // start each time read ~100 bitmap words per create. The hint is
            // only where to look first (an allocation rolled back leaves it
            // past a free bit): below it is searched when above finds nothing.
            let hint = ws.inode_hints.get(&g).map_or(from, |&h| h.max(from));
            // A free number the kernel still holds lookups of stays unused:
            // its requests on that number must not reach a new inode.
            let held = |idx: usize| self.writer.lookups.holds(g * ipg + idx as u32 + 1);
            let found = free_unheld(bits, hint, ipg as usize, &held).or_else(|| free_unheld(bits, from, hint, &held));
            let Some(idx) = found else { continue };
            ws.inode_hints.insert(g, idx + 1);
            bitmap::set(bits, idx);
            let mut gd = gd;
            gd.lo.flags &= !BG_INODE_UNINIT;
            let free = gd.free_inodes_count() - 1;
            gd.set_free_inodes_count(free);
            if is_dir {
                let dirs = gd.used_dirs_count() + 1;
                gd.set_used_dirs_count(dirs);
            }
            // Keep `itable_unused` below every inode in use (e2fsck checks it);
            // a descriptor's count past the group's inodes counts as none used.
            let used_end = idx as u32 + 1;
            if ipg.saturating_sub(gd.itable_unused()) < used_end {
                let unused = ipg - used_end;
                gd.set_itable_unused(unused);
            }
            let ino = g * ipg + idx as u32 + 1;
            self.zero_lone_inode_block(ws, ino, idx, bits);
            let bitmap_blk = gd.inode_bitmap();
            self.install(ws, bitmap_blk, block);
            self.set_group(ws, g, gd, Some(Kind::Inode));
            return Ok(ino);
        }
        ws.out_of_inodes = true;
        Err(FsError::NoSpace)
    }

    /// When new inode `ino` (bit `idx` of its group's `bits`) is the only one
    /// in use in its inode-table block, start the block from zeros instead of
    /// reading it, as the kernel's ext4 does: free inodes' records are never
    /// read, and a fresh volume's inode tables need not even be initialised.
    /// A create in a new block then waits for no device read.
    fn zero_lone_inode_block(&self, ws: &mut WriteState, ino: u32, idx: usize, bits: &[u8]) {
        let per_block = (self.block_size() / u32::from(self.sb.inode_size())) as usize;
        let first = idx / per_block * per_block;
        if (first..first + per_block).any(|i| i != idx && bitmap::test(bits, i)) {
            return;
        }
        let (blk, _) = self.inode_location(ino);
        if self.cache.peek_quiet(blk).is_none() {
            self.install(ws, blk, self.fresh_block());
        }
    }

    /// The group for a new top-level directory.
    fn orlov_group(&self) -> u32 {
        let groups = self.groups.read();
        let n = groups.len() as u64;
        let avg_free: u64 = groups.iter().map(|g| u64::from(g.free_inodes_count())).sum::<u64>() / n.max(1);
        let mut best = 0usize;
        let mut best_key = (u32::MAX, 0u32);
        for (i, g) in groups.iter().enumerate() {
            if u64::from(g.free_inodes_count()) < avg_free || g.free_inodes_count() == 0 {
                continue;
            }
            let key = (g.used_dirs_count(), u32::MAX - g.free_blocks_count());
            if key < best_key {
                best_key = key;
                best = i;
            }
        }
        best as u32
    }

    pub(crate) fn free_inode(&self, ws: &mut WriteState, ino: u32, was_dir: bool) -> Result<()> {
        // Its number may come back for another file: nothing of this one is kept.
        self.tails.forget(ino);
        let ipg = self.sb.f.inodes_per_group;
        let g = (ino - 1) / ipg;
        let idx = ((ino - 1) % ipg) as usize;
        let mut gd = self.group(g);
        let mut block = self.inode_bitmap(g)?;
        if !bitmap::test(&block, idx) {
            // A directory entry or an orphan named an inode the bitmap calls free: damage, not a free.
            return Err(FsError::Format(ondisk::FormatError::corrupt(
                "inode bitmap",
                ondisk::Location::Inode(u64::from(ino)),
                ondisk::Corruption::BadField { field: "freeing an inode that is not in use", value: u64::from(ino) },
            )));
        }
        let Some(free) = gd.free_inodes_count().checked_add(1) else {
            return Err(count_disagrees(g, "free inodes count overflows when an inode is freed", 1));
        };
        let bits = ws.spare.make_mut(&mut block);
        bitmap::clear(bits, idx);
        if let Some(h) = ws.inode_hints.get_mut(&g) {
            *h = (*h).min(idx);
        }
        gd.set_free_inodes_count(free);
        if was_dir {
            let dirs = gd.used_dirs_count().saturating_sub(1);
            gd.set_used_dirs_count(dirs);
        }
        self.install(ws, gd.inode_bitmap(), block);
        self.set_group(ws, g, gd, Some(Kind::Inode));
        self.writer.lookups.freed(ino);
        Ok(())
    }

    /// Allocate up to `max` contiguous blocks, as close after `goal` as possible.
    /// Returns (first block, count >= 1).
    pub(crate) fn alloc_blocks(&self, ws: &mut WriteState, goal: u64, max: u64) -> Result<(u64, u64)> {
        self.alloc_blocks_within(ws, goal, max, false, false)
    }

    /// Blocks for a regular file's data, as [`Self::alloc_blocks`], but a
    /// free run that holds the whole request comes first (see
    /// [`Self::alloc_blocks_within`]).
    pub(crate) fn alloc_data_blocks(&self, ws: &mut WriteState, goal: u64, max: u64) -> Result<(u64, u64)> {
        self.alloc_blocks_within(ws, goal, max, false, true)
    }

    /// One block for an extent-tree node: it may take the kernel's reserve,
    /// which is kept for such blocks (the kernel's EXT4_MB_USE_RESERVED), so
    /// that on a volume full to the reserve a punch or a truncate that
    /// splits an extent still finds one.
    pub(crate) fn alloc_tree_block(&self, ws: &mut WriteState, goal: u64) -> Result<u64> {
        self.alloc_blocks_within(ws, goal, 1, true, false).map(|(b, _)| b)
    }

    /// `data`: the blocks are a regular file's data.
    fn alloc_blocks_within(
        &self,
        ws: &mut WriteState,
        goal: u64,
        max: u64,
        tree: bool,
        data: bool,
    ) -> Result<(u64, u64)> {
        debug_assert!(max > 0);
        // Write-back takes the blocks reserved for delayed data; anything
        // else leaves them alone (`delalloc.rs`).
        let max = if ws.claiming_delayed {
            max
        } else {
            match self.unreserved_free_blocks(tree, max) {
                0 => return Err(FsError::NoSpace),
                room => max.min(room),
            }
        };
        // A file's data first looks, in the goal's group and the few after
        // it, for a free run that holds all of it (up to 8 MiB, and never
        // more than a group), as mballoc does: the first hole after the goal
        // would split a new file over the gaps deleted files left. The run
        // that continues the file at its goal is always taken. Then, or for
        // anything else, the first free run from the goal.
        let whole = max.min(WHOLE_RUN_CAP).min(u64::from(self.sb.f.blocks_per_group)) as usize;
        if data && whole > 1 {
            if let Some(found) = self.find_blocks(ws, goal, max, whole, WHOLE_RUN_GROUPS)? {
                return Ok(found);
            }
        }
        self.find_blocks(ws, goal, max, 1, u32::MAX)?.ok_or(FsError::NoSpace)
    }

    /// The search of [`Self::alloc_blocks_within`]: the first free run at or
    /// after `goal` of at least `min_run` blocks (or fewer where the goal
    /// itself is free), in at most `groups` groups; None when there is none.
    fn find_blocks(
        &self,
        ws: &mut WriteState,
        goal: u64,
        max: u64,
        min_run: usize,
        groups: u32,
    ) -> Result<Option<(u64, u64)>> {
        let ngroups = self.group_count();
        let goal = if goal < u64::from(self.sb.f.first_data_block) || goal >= self.sb.blocks_count() {
            u64::from(self.sb.f.first_data_block)
        } else {
            goal
        };
        let g0 = self.block_group_of(goal);
        for i in 0..=ngroups.min(groups) {
            let g = (g0 + i) % ngroups;
            let gd = self.group(g);
            // min_run >= 1: a full group is passed over too.
            if (gd.free_blocks_count() as usize) < min_run {
                continue;
            }
            let gfirst = self.group_first_block(g);
            let limit = self.group_blocks(g) as usize;
            let from = if i == 0 { (goal - gfirst) as usize } else { 0 };
            let mut block = self.block_bitmap(g)?;
            // A new file's goal is its group's start: the search would read
            // every bitmap word of the files before it (~270 a file in an
            // untar). Every bit below the hint is set, so the first free block
            // from `from` is the first from the hint; the search below it only
            // runs if that ever did not hold.
            let hint = ws.block_hints.get(&g).copied().unwrap_or(0);
            let start = hint.max(from);
            let found = bitmap::find_zero(&block, start, limit).or_else(|| bitmap::find_zero(&block, from, start));
            debug_assert!(
                bitmap::find_zero(&block, 0, hint.min(limit)).is_none(),
                "a free block below group {g}'s hint {hint}"
            );
            debug_assert_eq!(found, bitmap::find_zero(&block, from, limit), "the hint changed the block found");
            let Some(mut at) = found else { continue };
            // Runs too short for `min_run` are passed over.
            let want = max.min(u64::from(u32::MAX)) as usize;
            let mut passed_over = false;
            let run = loop {
                let run = bitmap::zero_run(&block, at, limit, want);
                if run >= min_run || (i == 0 && at == from) {
                    break run;
                }
                passed_over = true;
                match bitmap::find_zero(&block, at + run, limit) {
                    Some(a) => at = a,
                    None => break 0,
                }
            };
            if run == 0 {
                continue;
            }
            // The descriptor's count must cover what the bitmap shows free.
            let Some(free) = gd.free_blocks_count().checked_sub(run as u32) else {
                return Err(count_disagrees(g, "free blocks count below a free run in the block bitmap", run));
            };
            // A bitmap that shows the group's own metadata free is damaged: the
            // kernel refuses such an allocation too ("overlap fs metadata").
            self.check_owned(gfirst + at as u64, run as u64, 0, "block bitmap")?;
            if from <= hint && at >= start && !passed_over {
                // Found from the hint: the bits from it to the run were set.
                ws.block_hints.insert(g, at + run);
            }
            let bits = ws.spare.make_mut(&mut block);
            for b in at..at + run {
                bitmap::set(bits, b);
            }
            let first = gfirst + at as u64;
            let mut gd = gd;
            gd.lo.flags &= !BG_BLOCK_UNINIT;
            gd.set_free_blocks_count(free);
            self.install(ws, gd.block_bitmap(), block);
            self.set_group(ws, g, gd, Some(Kind::Block));
            debug_assert!(first + run as u64 <= self.sb.blocks_count());
            return Ok(Some((first, run as u64)));
        }
        Ok(None)
    }

    /// Free `len` blocks from `start`: they become free when the running
    /// transaction commits (see [`super::Deferred`]).
    pub(crate) fn free_blocks(&self, ws: &mut WriteState, start: u64, len: u64) -> Result<()> {
        // A damaged map or bitmap must fail this operation, not the commit
        // that applies the free: check the range, the bitmaps' checksums, and
        // that every block is in use.
        self.check_owned(start, len, 0, "freed block range")?;
        let mut b = start;
        while b < start + len {
            let g = self.block_group_of(b);
            let gfirst = self.group_first_block(g);
            let gend = (gfirst + self.group_blocks(g)).min(start + len);
            let bits = self.block_bitmap(g)?;
            if let Some(x) = (b..gend).find(|&x| !bitmap::test(&bits, (x - gfirst) as usize)) {
                return Err(FsError::Format(ondisk::FormatError::corrupt(
                    "block bitmap",
                    ondisk::Location::Block(x),
                    ondisk::Corruption::BadField { field: "freeing a block that is not in use", value: x },
                )));
            }
            ws.freed.groups.insert(g, ());
            ws.freed.desc_blocks.insert(self.desc_block_of(g), ());
            b = gend;
        }
        // Freed already in this transaction (two maps claim the block): the
        // runs pending are disjoint, so only the last one starting below our
        // end can overlap us.
        let end = start + len;
        if let Some((&s, &l)) = ws.pending_frees.range(..end).next_back() {
            if s + l > start {
                return Err(FsError::Format(ondisk::FormatError::corrupt(
                    "block map",
                    ondisk::Location::Block(start.max(s)),
                    ondisk::Corruption::BadField {
                        field: "block freed twice (claimed by two maps)",
                        value: start.max(s),
                    },
                )));
            }
        }
        ws.pending_frees.insert(start, len);
        ws.deferred.push(super::Deferred::Free { start, len });
        Ok(())
    }

    /// Clear `len` blocks from `start` in the bitmaps (may span groups).
    pub(crate) fn release_blocks(&self, ws: &mut WriteState, start: u64, len: u64) -> Result<()> {
        let mut b = start;
        let end = start + len;
        while b < end {
            let g = self.block_group_of(b);
            let gfirst = self.group_first_block(g);
            let gend = (gfirst + self.group_blocks(g)).min(end);
            let mut gd = self.group(g);
            let Some(free) = gd.free_blocks_count().checked_add((gend - b) as u32) else {
                return Err(count_disagrees(
                    g,
                    "free blocks count overflows when blocks are freed",
                    (gend - b) as usize,
                ));
            };
            let mut block = self.block_bitmap(g)?;
            let bits = ws.spare.make_mut(&mut block);
            for x in b..gend {
                debug_assert!(bitmap::test(bits, (x - gfirst) as usize), "freeing free block {x}");
                bitmap::clear(bits, (x - gfirst) as usize);
            }
            if let Some(h) = ws.block_hints.get_mut(&g) {
                *h = (*h).min((b - gfirst) as usize);
            }
            gd.lo.flags &= !BG_BLOCK_UNINIT;
            gd.set_free_blocks_count(free);
            self.install(ws, gd.block_bitmap(), block);
            self.set_group(ws, g, gd, Some(Kind::Block));
            b = gend;
        }
        Ok(())
    }

    /// A block stops being metadata: no cached or pending copy of it may ever
    /// be written over what it holds next, and the journal must not replay it.
    pub(crate) fn forget_meta(&self, ws: &mut WriteState, blk: u64) {
        self.note_block(ws, blk);
        self.cache.remove(blk);
        ws.running.revoke(blk);
        // Its committed copies are dropped at commit: until then a crash
        // brings the block back as metadata.
        ws.deferred.push(super::Deferred::Forget(blk));
    }

    /// Free a block that held metadata.
    pub(crate) fn free_meta_block(&self, ws: &mut WriteState, blk: u64) -> Result<()> {
        self.forget_meta(ws, blk);
        self.free_blocks(ws, blk, 1)
    }
}

/// The longest free run a file's data insists on before it takes a shorter
/// one (8 MiB of 4 KiB blocks).
const WHOLE_RUN_CAP: u64 = 2048;

/// Groups after the goal's that the search for a whole run looks into:
/// on an aged volume of thousands of groups with no run long enough,
/// searching them all took 2.4x the time of a 2 GiB write (review).
const WHOLE_RUN_GROUPS: u32 = 16;

/// First clear bit in `from..limit` for which `held` is false.
fn free_unheld(bits: &[u8], from: usize, limit: usize, held: &dyn Fn(usize) -> bool) -> Option<usize> {
    let mut at = from;
    while let Some(i) = bitmap::find_zero(bits, at, limit) {
        if !held(i) {
            return Some(i);
        }
        at = i + 1;
    }
    None
}

/// A group descriptor whose free count contradicts its bitmap: damage the
/// kernel reports as "block bitmap and bg descriptor inconsistent". Refused
/// before anything changes, so no count wraps around.
fn count_disagrees(g: u32, field: &'static str, value: usize) -> FsError {
    FsError::Format(ondisk::FormatError::corrupt(
        "group descriptor",
        ondisk::Location::Group(g),
        ondisk::Corruption::BadField { field, value: value as u64 },
    ))
}
