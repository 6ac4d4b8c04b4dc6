//! What a file's extent tree maps: allocation of what is missing, writes
//! into preallocated extents, and freeing ranges (truncate, punch). The
//! tree's own changes are in [`super::extent_tree`].

use super::extent_tree::ExtentPath;
use super::{Split, WriteState};
use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::extent::{Extent, MAX_INIT_LEN};
use ondisk::inode::{flags, Inode};

impl Volume {
    /// Change i_blocks by `delta` file-system blocks.
    pub(crate) fn adjust_blocks(&self, inode: &mut Inode, delta: i64) {
        let per = i64::from(self.block_size() / 512);
        let cur = inode.blocks_512(&self.sb) as i64;
        let new = (cur + delta * per).max(0) as u64;
        inode.remove_flags(flags::HUGE_FILE);
        inode.base.blocks_lo = new as u32;
        inode.base.blocks_hi = (new >> 32) as u16;
    }

    /// Make logical blocks [lblk, lblk + count) of `inode` mapped, allocating
    /// what is missing; returns the runs (lblk, pblk, len, reads as zeros:
    /// newly allocated or preallocated). With `unwritten`, new blocks are
    /// preallocated (fallocate): they read as zeros until written.
    pub(crate) fn ensure_mapped(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        lblk: u64,
        count: u64,
    ) -> Result<Vec<(u64, u64, u64, bool)>> {
        self.map_or_allocate(ws, inode, lblk, count, false)
    }

    pub(crate) fn map_or_allocate(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        lblk: u64,
        count: u64,
        unwritten: bool,
    ) -> Result<Vec<(u64, u64, u64, bool)>> {
        if !inode.has_flag(flags::EXTENTS) {
            return Err(FsError::Unsupported("writing block-mapped (ext2/ext3-style) files".into()));
        }
        let mut out = Vec::new();
        let mut l = lblk;
        let end = lblk + count;
        if end > 1 << 32 {
            return Err(FsError::Invalid("file too large".into()));
        }
        while l < end {
            match self.map_block(inode, l, end - l)? {
                Mapping::Mapped { pblk, len, unwritten: was_unwritten } => {
                    out.push((l, pblk, len, was_unwritten));
                    l += len;
                }
                Mapping::Hole { len } => {
                    let cap = u64::from(MAX_INIT_LEN) - u64::from(unwritten);
                    let want = len.min(end - l).min(cap);
                    let goal = self.alloc_goal(inode, l)?;
                    // Regular files' data looks for a run that holds it;
                    // directories grow a block at a time, as in the kernel
                    // (no EXT4_MB_HINT_DATA).
                    let (pblk, got) = if inode.is_reg() {
                        self.alloc_data_blocks(ws, goal, want)?
                    } else {
                        self.alloc_blocks(ws, goal, want)?
                    };
                    self.adjust_blocks(inode, got as i64);
                    self.insert_extent(
                        ws,
                        inode,
                        Extent { block: l as u32, len: got as u16, start: pblk, uninit: unwritten },
                    )?;
                    out.push((l, pblk, got, true));
                    l += got;
                }
            }
        }
        Ok(out)
    }

    /// Blocks [lblk, lblk + len) now hold written data: preallocated extents
    /// covering them become initialised (split where the range ends inside
    /// one, merged with a written neighbour they continue).
    pub(crate) fn mark_written(&self, ws: &mut WriteState, inode: &mut Inode, lblk: u64, len: u64) -> Result<()> {
        let end = lblk + len;
        let mut at = lblk;
        while at < end {
            let mut path = self.extent_path(inode, at)?;
            let (exts, pos) = path.leaf();
            let from = pos.saturating_sub(1);
            let hit = exts[from..]
                .iter()
                .take_while(|e| u64::from(e.block) < end)
                .position(|e| e.uninit && e.end() > at)
                .map(|i| i + from);
            let Some(i) = hit else {
                // Nothing unwritten in this leaf: on to the next, if the range goes on there.
                match path.next_key() {
                    Some(next) if next > at && next < end => {
                        at = next;
                        continue;
                    }
                    _ => return Ok(()),
                }
            };
            let e = exts[i];
            let (b, x) = (u64::from(e.block), e.end());
            let (lo, hi) = (b.max(at), x.min(end));
            let piece = |from: u64, to: u64, uninit: bool| Extent {
                block: from as u32,
                len: (to - from) as u16,
                start: e.start + (from - b),
                uninit,
            };
            let mut pieces = Vec::with_capacity(3);
            if b < lo {
                pieces.push(piece(b, lo, true));
            }
            pieces.push(piece(lo, hi, false));
            if hi < x {
                pieces.push(piece(hi, x, true));
            }
            self.replace_extent(ws, inode, &mut path, i, &pieces)?;
            // Sequential writes into a preallocation leave one extent, not one per write.
            self.merge_at(ws, inode, hi)?;
            self.merge_at(ws, inode, lo)?;
            at = hi;
        }
        Ok(())
    }

    /// Merge the extent starting at `lblk` into the one before it, where
    /// both are in one leaf and can be one extent.
    fn merge_at(&self, ws: &mut WriteState, inode: &mut Inode, lblk: u64) -> Result<()> {
        let mut path = self.extent_path(inode, lblk)?;
        let (exts, pos) = path.leaf();
        if pos > 0 && u64::from(exts[pos - 1].block) == lblk {
            self.merge_left(ws, inode, &mut path, pos - 1)?;
        }
        Ok(())
    }

    /// Where to look for blocks for logical block `lblk`: right after the block
    /// mapped just before it, else the start of the inode's group.
    fn alloc_goal(&self, inode: &Inode, lblk: u64) -> Result<u64> {
        if lblk > 0 {
            if let Mapping::Mapped { pblk, .. } = self.map_block(inode, lblk - 1, 1)? {
                return Ok(pblk + 1);
            }
        }
        Ok(self.inode_group_first_block(inode.ino))
    }

    /// Free every block at logical block >= `from` and drop it from the tree.
    pub(crate) fn truncate_blocks(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        from: u64,
        split: &mut Split,
    ) -> Result<()> {
        if !inode.has_flag(flags::EXTENTS) {
            return self.truncate_indirect(ws, inode, from, split);
        }
        self.unmap_range(ws, inode, from, u64::MAX, split)
    }

    /// Free the blocks mapped at logical blocks [from, to) and drop them from
    /// the tree, splitting an extent the range ends inside (truncate, punch).
    /// One leaf at a time, and in a leaf one extent at a time: the cost is
    /// that of the leaves the range covers. Before each extent is freed, a
    /// cut (`split`) commits what is done if the extent's frees might not fit
    /// in the running transaction; the leaf is written first without the
    /// extents freed so far, so that each cut leaves a whole tree.
    pub(crate) fn unmap_range(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        from: u64,
        to: u64,
        split: &mut Split,
    ) -> Result<()> {
        debug_assert!(inode.has_flag(flags::EXTENTS));
        let mut at = from;
        'leaves: while at < to {
            let mut path = self.extent_path(inode, at)?;
            let (exts, pos) = path.leaf();
            let next = path.next_key();
            let first = pos.saturating_sub(1);
            // A range inside one extent splits it in two: an insertion.
            if let Some(&e) = exts.get(first).filter(|e| u64::from(e.block) < from && e.end() > to) {
                let start = e.start + (from - u64::from(e.block));
                // The insertion may split every node on the path and grow the tree.
                if self.txn_full(ws, self.free_credits(start, to - from, path.depth()) + 3 * (path.depth() as u64 + 2))
                {
                    self.split_here(ws, inode, split)?;
                    continue 'leaves;
                }
                self.free_range(ws, inode, start, to - from)?;
                let piece = |lo: u64, hi: u64| Extent {
                    block: lo as u32,
                    len: (hi - lo) as u16,
                    start: e.start + (lo - u64::from(e.block)),
                    uninit: e.uninit,
                };
                let pieces = [piece(u64::from(e.block), from), piece(to, e.end())];
                return self.replace_extent(ws, inode, &mut path, first, &pieces);
            }
            // Otherwise extents only lose blocks or go: this leaf changes alone.
            let exts = exts.to_vec();
            let old_first = exts.first().map(|e| e.block);
            let mut kept = Vec::with_capacity(exts.len());
            let mut changed = false;
            for (i, &e) in exts.iter().enumerate() {
                let (b, x) = (u64::from(e.block), e.end());
                if x <= from || b >= to {
                    kept.push(e);
                    continue;
                }
                let (lo, hi) = (b.max(from), x.min(to));
                if self.txn_full(ws, self.free_credits(e.start + (lo - b), hi - lo, path.depth())) {
                    if changed {
                        kept.extend_from_slice(&exts[i..]);
                        self.store_leaf(ws, inode, &mut path, kept, old_first)?;
                    }
                    self.split_here(ws, inode, split)?;
                    // On from this extent, found again: the tree above may have changed.
                    continue 'leaves;
                }
                changed = true;
                self.free_range(ws, inode, e.start + (lo - b), hi - lo)?;
                let piece = |lo: u64, hi: u64| Extent {
                    block: lo as u32,
                    len: (hi - lo) as u16,
                    start: e.start + (lo - b),
                    uninit: e.uninit,
                };
                if b < lo {
                    kept.push(piece(b, lo));
                }
                if hi < x {
                    kept.push(piece(hi, x));
                }
            }
            if changed {
                self.store_leaf(ws, inode, &mut path, kept, old_first)?;
            }
            match next {
                Some(n) if n > at => at = n,
                _ => break,
            }
        }
        self.shrink(ws, inode)
    }

    /// Make `kept` the path's leaf: write it (and the keys above it if its
    /// first extent changed), or free it if it is empty.
    fn store_leaf(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        kept: Vec<Extent>,
        old_first: Option<u32>,
    ) -> Result<()> {
        let first_changed = kept.first().map(|e| e.block) != old_first;
        *path.leaf_mut() = kept;
        path.levels.last_mut().expect("a path is never empty").node.sync_count();
        let k = path.depth();
        self.removed(ws, inode, path, k, first_changed)
    }

    /// Blocks that freeing [start, start + len) may add to a transaction: a
    /// bitmap and a descriptor block for each group the range spans (applied
    /// at commit), and the extent tree's nodes on a path of `depth` below
    /// the root and the inode's block.
    fn free_credits(&self, start: u64, len: u64, depth: usize) -> u64 {
        let (g0, g1) = (self.block_group_of(start), self.block_group_of(start + len.max(1) - 1));
        let groups = u64::from(g1 - g0) + 1;
        let descs = self.desc_block_of(g1) - self.desc_block_of(g0) + 1;
        groups + descs + depth as u64 + 1
    }

    /// Free `len` blocks from `start` that `inode` mapped.
    fn free_range(&self, ws: &mut WriteState, inode: &mut Inode, start: u64, len: u64) -> Result<()> {
        if inode.is_dir() {
            // Directory blocks are metadata: drop cached/journalled copies and revoke them.
            for blk in start..start + len {
                self.forget_meta(ws, blk);
            }
        }
        self.free_blocks(ws, start, len)?;
        self.adjust_blocks(inode, -(len as i64));
        Ok(())
    }

    /// Block-mapped files can be freed entirely (unlink) but not shortened yet.
    /// A big one is freed over several transactions (`split`): before each
    /// block is freed a cut may come, and every pointer to a block already
    /// freed is zero by then, in the inode (written at the cut) and in the
    /// indirect blocks above it (written first): each cut leaves a map of
    /// blocks still in use.
    fn truncate_indirect(&self, ws: &mut WriteState, inode: &mut Inode, from: u64, split: &mut Split) -> Result<()> {
        if from != 0 {
            return Err(FsError::Unsupported("shortening block-mapped (ext2/ext3-style) files".into()));
        }
        let per = u64::from(self.block_size() / 4);
        let mut path = Vec::new();
        for i in 0..15 {
            let p = u64::from(ondisk::bytes::le32(&inode.base.block, i * 4));
            if p == 0 {
                continue;
            }
            let levels = match i {
                0..=11 => 0,
                12 => 1,
                13 => 2,
                _ => 3,
            };
            self.free_indirect(ws, inode, p, levels, per, split, &mut path)?;
            ondisk::bytes::put_le32(&mut inode.base.block, i * 4, 0);
        }
        Ok(())
    }

    /// Free the subtree at `blk`, `levels` of indirect blocks above its data.
    /// `path`: the indirect blocks above it, each as it is now (the pointers
    /// to children freed already zeroed), written at a cut.
    #[allow(clippy::too_many_arguments)]
    fn free_indirect(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        blk: u64,
        levels: u32,
        per: u64,
        split: &mut Split,
        path: &mut Vec<(u64, Vec<u8>)>,
    ) -> Result<()> {
        self.check_block(blk, "indirect block")?;
        // This block's bitmap and descriptor, the path's blocks, the inode's.
        if self.txn_full(ws, path.len() as u64 + 3) {
            for (b, data) in path.iter() {
                self.install(ws, *b, data.clone());
            }
            self.split_here(ws, inode, split)?;
        }
        if levels > 0 {
            path.push((blk, self.meta(blk)?.to_vec()));
            for i in 0..per as usize {
                let child = u64::from(ondisk::bytes::le32(&path[path.len() - 1].1, i * 4));
                if child != 0 {
                    self.free_indirect(ws, inode, child, levels - 1, per, split, path)?;
                    let last = path.len() - 1;
                    ondisk::bytes::put_le32(&mut path[last].1, i * 4, 0);
                }
            }
            path.pop();
            self.free_meta_block(ws, blk)?;
        } else {
            self.free_blocks(ws, blk, 1)?;
        }
        self.adjust_blocks(inode, -1);
        Ok(())
    }
}
