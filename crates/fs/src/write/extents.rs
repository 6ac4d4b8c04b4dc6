//! Changing extent trees.
//!
//! The common cases are done in place: an append that extends the file's last
//! extent, and an insertion into a leaf with room. Anything structural (a full
//! leaf, a new first extent of a leaf, truncation) rebuilds the tree from its
//! list of extents: simple to get right, and rare (once per ~340 new extents
//! with 4 KiB blocks).

use super::WriteState;
use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::extent::{self, Extent, ExtentHeader, ExtentIndex, ExtentNode, MAX_INIT_LEN};
use ondisk::inode::{flags, Inode, I_BLOCK_SIZE};
use ondisk::Location;

/// Entries that fit in the root (i_block): (60 - 12) / 12.
const ROOT_MAX: u16 = 4;

/// One level of the path from the root to a leaf.
struct Level {
    /// None for the root (in the inode).
    blk: Option<u64>,
    node: ExtentNode,
}

impl Volume {
    fn node_capacity(&self) -> u16 {
        ((self.block_size() as usize - extent::HEADER_SIZE - 4) / extent::ENTRY_SIZE) as u16
    }

    fn inode_seed(&self, inode: &Inode) -> Option<u32> {
        self.sb.has_metadata_csum().then(|| Inode::csum_seed(&self.sb, inode.ino, inode.base.generation))
    }

    /// Path from the root to the leaf that covers (or would cover) `lblk`.
    fn extent_path(&self, inode: &Inode, lblk: u64) -> Result<Vec<Level>> {
        let mut path = vec![Level { blk: None, node: ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))? }];
        let seed = self.inode_seed(inode);
        loop {
            let last = path.last().expect("path is never empty");
            let ExtentNode::Index(h, idx) = &last.node else { return Ok(path) };
            let depth = h.depth;
            let i = idx.partition_point(|e| u64::from(e.block) <= lblk).max(1) - 1;
            let blk = idx.get(i).map(|e| e.leaf).ok_or_else(|| corrupt(inode, "empty index node"))?;
            let data = self.meta(blk)?;
            if let Some(seed) = seed {
                extent::verify_block_checksum(&data, seed, Location::Block(blk))?;
            }
            let node = ExtentNode::parse(&data, Location::Block(blk))?;
            if node.header().depth + 1 != depth {
                return Err(corrupt(inode, "extent depth"));
            }
            path.push(Level { blk: Some(blk), node });
        }
    }

    /// Visit the tree in order: `on_block` for every index/leaf block, `on_leaf`
    /// for every leaf's extents. Depth must drop by one per level (no loops).
    fn walk_tree(&self, inode: &Inode, on_block: &mut dyn FnMut(u64), on_leaf: &mut dyn FnMut(&[Extent])) -> Result<()> {
        let seed = self.inode_seed(inode);
        let root = ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))?;
        let mut stack = vec![root];
        let mut visited = 0usize;
        // Depth-first, children pushed in reverse so they pop in order.
        while let Some(node) = stack.pop() {
            match node {
                ExtentNode::Leaf(_, exts) => on_leaf(&exts),
                ExtentNode::Index(h, idx) => {
                    let mut children = Vec::with_capacity(idx.len());
                    for e in idx {
                        visited += 1;
                        if visited > 1 << 22 {
                            return Err(corrupt(inode, "extent tree too large"));
                        }
                        on_block(e.leaf);
                        let data = self.meta(e.leaf)?;
                        if let Some(seed) = seed {
                            extent::verify_block_checksum(&data, seed, Location::Block(e.leaf))?;
                        }
                        let child = ExtentNode::parse(&data, Location::Block(e.leaf))?;
                        if child.header().depth + 1 != h.depth {
                            return Err(corrupt(inode, "extent depth"));
                        }
                        children.push(child);
                    }
                    stack.extend(children.into_iter().rev());
                }
            }
        }
        Ok(())
    }

    /// Every extent of the file, in logical order.
    pub(crate) fn collect_extents(&self, inode: &Inode) -> Result<Vec<Extent>> {
        let mut out: Vec<Extent> = Vec::new();
        self.walk_tree(inode, &mut |_| {}, &mut |exts| out.extend_from_slice(exts))?;
        if out.windows(2).any(|w| w[0].end() > u64::from(w[1].block)) {
            return Err(corrupt(inode, "extents overlap or are out of order"));
        }
        Ok(out)
    }

    /// Every block of the tree itself (index and leaf blocks, not data).
    fn tree_blocks(&self, inode: &Inode) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        self.walk_tree(inode, &mut |b| out.push(b), &mut |_| {})?;
        Ok(out)
    }

    /// Add extent `e` (which overlaps nothing) to the file's tree.
    pub(crate) fn insert_extent(&self, ws: &mut WriteState, inode: &mut Inode, e: Extent) -> Result<()> {
        debug_assert!(inode.has_flag(flags::EXTENTS));
        let mut path = self.extent_path(inode, u64::from(e.block))?;
        let is_root = path.len() == 1;
        let cap = if is_root { ROOT_MAX } else { self.node_capacity() };
        let mut done = false;
        if let ExtentNode::Leaf(h, exts) = &mut path.last_mut().expect("leaf").node {
            let i = exts.partition_point(|x| x.block < e.block);
            debug_assert!(i == exts.len() || e.end() <= u64::from(exts[i].block), "overlapping extent");
            let limit = u32::from(MAX_INIT_LEN) - u32::from(e.uninit);
            if i > 0 {
                // Extend the extent to the left when both are contiguous on disk.
                let p = &mut exts[i - 1];
                if p.end() == u64::from(e.block)
                    && p.start + u64::from(p.len) == e.start
                    && p.uninit == e.uninit
                    && u32::from(p.len) + u32::from(e.len) <= limit
                {
                    p.len += e.len;
                    done = true;
                }
            }
            // A new first entry of a non-root leaf would change its parent's key: rebuild instead.
            if !done && exts.len() < usize::from(cap) && (i > 0 || is_root) {
                exts.insert(i, e);
                h.entries = exts.len() as u16;
                done = true;
            }
        }
        if done {
            return self.store_level(ws, inode, path.last().expect("leaf"));
        }
        let mut all = self.collect_extents(inode)?;
        let i = all.partition_point(|x| x.block < e.block);
        all.insert(i, e);
        self.rebuild_tree(ws, inode, &all)
    }

    /// Write one modified node back: the root into the inode (the caller writes
    /// the inode), other nodes into their block with a fresh checksum.
    fn store_level(&self, ws: &mut WriteState, inode: &mut Inode, level: &Level) -> Result<()> {
        match level.blk {
            None => {
                let mut root = [0u8; I_BLOCK_SIZE];
                level.node.write(&mut root);
                inode.base.block = root;
                Ok(())
            }
            Some(blk) => {
                let mut data = self.fresh_block();
                level.node.write(&mut data);
                if let Some(seed) = self.inode_seed(inode) {
                    extent::set_block_checksum(&mut data, seed);
                }
                self.install(ws, blk, data);
                Ok(())
            }
        }
    }

    /// Replace the whole tree by one built from `exts` (sorted, non-overlapping).
    pub(crate) fn rebuild_tree(&self, ws: &mut WriteState, inode: &mut Inode, exts: &[Extent]) -> Result<()> {
        let old = self.tree_blocks(inode)?;
        for b in &old {
            self.free_meta_block(ws, *b)?;
        }
        self.adjust_blocks(inode, -(old.len() as i64));
        let generation = 0;
        let cap = usize::from(self.node_capacity());
        // Level 0: leaves; then index levels until the root can hold them.
        let mut level: Vec<ExtentNode> = if exts.len() <= usize::from(ROOT_MAX) {
            Vec::new()
        } else {
            exts.chunks(cap)
                .map(|c| ExtentNode::Leaf(ExtentHeader { entries: c.len() as u16, max: cap as u16, depth: 0, generation }, c.to_vec()))
                .collect()
        };
        let mut depth = 0u16;
        let goal = exts.first().map_or(0, |e| e.start);
        while level.len() > usize::from(ROOT_MAX) || (depth == 0 && !level.is_empty()) {
            // Store this level's nodes in new blocks; the next level indexes them.
            let mut index = Vec::with_capacity(level.len());
            for node in &level {
                let (blk, _) = self.alloc_blocks(ws, goal, 1)?;
                self.adjust_blocks(inode, 1);
                let first = match node {
                    ExtentNode::Leaf(_, v) => v.first().map_or(0, |e| e.block),
                    ExtentNode::Index(_, v) => v.first().map_or(0, |e| e.block),
                };
                let mut data = self.fresh_block();
                node.write(&mut data);
                if let Some(seed) = self.inode_seed(inode) {
                    extent::set_block_checksum(&mut data, seed);
                }
                self.install(ws, blk, data);
                index.push(ExtentIndex { block: first, leaf: blk });
            }
            depth += 1;
            if index.len() <= usize::from(ROOT_MAX) {
                level = vec![ExtentNode::Index(ExtentHeader { entries: index.len() as u16, max: ROOT_MAX, depth, generation }, index)];
                break;
            }
            level = index
                .chunks(cap)
                .map(|c| ExtentNode::Index(ExtentHeader { entries: c.len() as u16, max: cap as u16, depth, generation }, c.to_vec()))
                .collect();
        }
        if depth > extent::MAX_DEPTH {
            return Err(FsError::NoSpace);
        }
        let root = match level.pop() {
            Some(node @ ExtentNode::Index(..)) => node,
            _ => ExtentNode::Leaf(ExtentHeader { entries: exts.len() as u16, max: ROOT_MAX, depth: 0, generation }, exts.to_vec()),
        };
        let mut buf = [0u8; I_BLOCK_SIZE];
        root.write(&mut buf);
        inode.base.block = buf;
        Ok(())
    }

    /// Change i_blocks by `delta` file-system blocks.
    pub(crate) fn adjust_blocks(&self, inode: &mut Inode, delta: i64) {
        let per = i64::from(self.block_size() / 512);
        let cur = inode.blocks_512(&self.sb) as i64;
        let new = (cur + delta * per).max(0) as u64;
        inode.base.flags &= !flags::HUGE_FILE;
        inode.base.blocks_lo = new as u32;
        inode.base.blocks_hi = (new >> 32) as u16;
    }

    /// Make logical blocks [lblk, lblk + count) of `inode` mapped, allocating
    /// what is missing; returns the runs (lblk, pblk, len, reads as zeros:
    /// newly allocated or preallocated). With `unwritten`, new blocks are
    /// preallocated (fallocate): they read as zeros until written.
    pub(crate) fn ensure_mapped(&self, ws: &mut WriteState, inode: &mut Inode, lblk: u64, count: u64) -> Result<Vec<(u64, u64, u64, bool)>> {
        self.map_or_allocate(ws, inode, lblk, count, false)
    }

    pub(crate) fn map_or_allocate(&self, ws: &mut WriteState, inode: &mut Inode, lblk: u64, count: u64, unwritten: bool) -> Result<Vec<(u64, u64, u64, bool)>> {
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
                    let (pblk, got) = self.alloc_blocks(ws, goal, want)?;
                    self.adjust_blocks(inode, got as i64);
                    self.insert_extent(ws, inode, Extent { block: l as u32, len: got as u16, start: pblk, uninit: unwritten })?;
                    out.push((l, pblk, got, true));
                    l += got;
                }
            }
        }
        Ok(out)
    }

    /// Blocks [lblk, lblk + len) now hold written data: preallocated extents
    /// covering them become initialised (split where the range ends inside one).
    pub(crate) fn mark_written(&self, ws: &mut WriteState, inode: &mut Inode, lblk: u64, len: u64) -> Result<()> {
        let end = lblk + len;
        let exts = self.collect_extents(inode)?;
        if !exts.iter().any(|e| e.uninit && e.end() > lblk && u64::from(e.block) < end) {
            return Ok(());
        }
        let mut out = Vec::with_capacity(exts.len() + 2);
        for e in exts {
            let (b, x) = (u64::from(e.block), e.end());
            if !e.uninit || x <= lblk || b >= end {
                out.push(e);
                continue;
            }
            // Up to three pieces: unwritten before, written middle, unwritten after.
            let (lo, hi) = (b.max(lblk), x.min(end));
            let piece = |from: u64, to: u64, uninit: bool| Extent { block: from as u32, len: (to - from) as u16, start: e.start + (from - b), uninit };
            if b < lo {
                out.push(piece(b, lo, true));
            }
            out.push(piece(lo, hi, false));
            if hi < x {
                out.push(piece(hi, x, true));
            }
        }
        self.rebuild_tree(ws, inode, &out)
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
    pub(crate) fn truncate_blocks(&self, ws: &mut WriteState, inode: &mut Inode, from: u64) -> Result<()> {
        if !inode.has_flag(flags::EXTENTS) {
            return self.truncate_indirect(ws, inode, from);
        }
        self.unmap_range(ws, inode, from, u64::MAX)
    }

    /// Free the blocks mapped at logical blocks [from, to) and drop them from
    /// the tree, splitting an extent the range ends inside (truncate, punch).
    pub(crate) fn unmap_range(&self, ws: &mut WriteState, inode: &mut Inode, from: u64, to: u64) -> Result<()> {
        debug_assert!(inode.has_flag(flags::EXTENTS));
        let exts = self.collect_extents(inode)?;
        if !exts.iter().any(|e| e.end() > from && u64::from(e.block) < to) {
            return Ok(());
        }
        let mut keep = Vec::with_capacity(exts.len() + 1);
        for e in exts {
            let (b, x) = (u64::from(e.block), e.end());
            if x <= from || b >= to {
                keep.push(e);
                continue;
            }
            let (lo, hi) = (b.max(from), x.min(to));
            let first = e.start + (lo - b);
            if inode.is_dir() {
                // Directory blocks are metadata: drop cached/journalled copies and revoke them.
                for blk in first..first + (hi - lo) {
                    self.forget_meta(ws, blk);
                }
            }
            self.free_blocks(ws, first, hi - lo)?;
            self.adjust_blocks(inode, -((hi - lo) as i64));
            // What is left of the extent on either side of the range.
            let piece = |from: u64, to: u64| Extent { block: from as u32, len: (to - from) as u16, start: e.start + (from - b), uninit: e.uninit };
            if b < lo {
                keep.push(piece(b, lo));
            }
            if hi < x {
                keep.push(piece(hi, x));
            }
        }
        self.rebuild_tree(ws, inode, &keep)
    }

    /// Block-mapped files can be freed entirely (unlink) but not shortened yet.
    fn truncate_indirect(&self, ws: &mut WriteState, inode: &mut Inode, from: u64) -> Result<()> {
        if from != 0 {
            return Err(FsError::Unsupported("shortening block-mapped (ext2/ext3-style) files".into()));
        }
        let per = u64::from(self.block_size() / 4);
        let ptrs: Vec<u64> = (0..15).map(|i| u64::from(ondisk::bytes::le32(&inode.base.block, i * 4))).collect();
        for (i, &p) in ptrs.iter().enumerate() {
            let levels = match i {
                0..=11 => 0,
                12 => 1,
                13 => 2,
                _ => 3,
            };
            self.free_indirect(ws, p, levels, per)?;
        }
        inode.base.block = [0; I_BLOCK_SIZE];
        self.adjust_blocks(inode, -(inode.blocks_512(&self.sb) as i64 / i64::from(self.block_size() / 512)));
        Ok(())
    }

    fn free_indirect(&self, ws: &mut WriteState, blk: u64, levels: u32, per: u64) -> Result<()> {
        if blk == 0 {
            return Ok(());
        }
        self.check_block(blk, "indirect block")?;
        if levels > 0 {
            let data = self.meta(blk)?;
            for i in 0..per as usize {
                self.free_indirect(ws, u64::from(ondisk::bytes::le32(&data, i * 4)), levels - 1, per)?;
            }
            return self.free_meta_block(ws, blk);
        }
        self.free_blocks(ws, blk, 1)
    }
}

fn corrupt(inode: &Inode, field: &'static str) -> FsError {
    FsError::Format(ondisk::FormatError::corrupt(
        "extent tree",
        Location::Inode(u64::from(inode.ino)),
        ondisk::Corruption::BadField { field, value: 0 },
    ))
}
