//! Changing an extent tree in place, one root-to-leaf path at a time, as the
//! kernel's ext4 does.
//!
//! - An entry goes into the node where a lookup of its key ends. A full node
//!   splits in two (or, at the right edge of the tree, starts a new node, so
//!   that files written in order get full leaves) and its parent gains an
//!   entry; a full root (four entries in the inode) moves into a new block
//!   and indexes it alone: the tree grows by one level.
//! - A node emptied by a removal is freed and leaves its parent; a root left
//!   with one child small enough to take its place takes it: the tree shrinks.
//! - Every index entry's key is the first logical block below it (e2fsck
//!   checks that exactly), so a change to a node's first entry is carried up.
//!
//! Each change costs the nodes on one path (a few blocks), whatever the
//! size of the file.
//!
//! Readers of a file's data never see a change halfway: they map under the
//! inode's data lock (`ReadCore::data_lock`), which every operation that
//! changes the map holds until its inode is written. Directories are changed
//! and read under the kernel's lock on the directory.

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::extent::{self, Extent, ExtentHeader, ExtentIndex, ExtentNode};
use ondisk::inode::{Inode, I_BLOCK_SIZE};
use ondisk::Location;

/// Entries that fit in the root (i_block): (60 - 12) / 12.
pub(super) const ROOT_MAX: u16 = 4;

/// One node on the path from the root to a leaf.
pub(super) struct Level {
    /// Where the node lives; None for the root, in the inode.
    pub blk: Option<u64>,
    pub node: ExtentNode,
    /// Index nodes: the entry the path follows. Leaves: how many extents
    /// start at or before the block looked up.
    pub pos: usize,
}

/// The nodes from the root (first) to the leaf (last) for one logical block.
pub(super) struct ExtentPath {
    pub levels: Vec<Level>,
}

impl ExtentPath {
    pub fn leaf(&self) -> (&[Extent], usize) {
        let l = self.levels.last().expect("a path is never empty");
        match &l.node {
            ExtentNode::Leaf(_, v) => (v, l.pos),
            ExtentNode::Index(..) => unreachable!("a path ends at a leaf"),
        }
    }

    pub fn leaf_mut(&mut self) -> &mut Vec<Extent> {
        match &mut self.levels.last_mut().expect("a path is never empty").node {
            ExtentNode::Leaf(_, v) => v,
            ExtentNode::Index(..) => unreachable!("a path ends at a leaf"),
        }
    }

    pub fn depth(&self) -> usize {
        self.levels.len() - 1
    }

    /// The first logical block past the leaf's subtree: the key of the next
    /// subtree at the lowest level that has one. None for the last leaf.
    pub fn next_key(&self) -> Option<u64> {
        self.levels.iter().rev().skip(1).find_map(|l| match &l.node {
            ExtentNode::Index(_, v) => v.get(l.pos + 1).map(|e| u64::from(e.block)),
            ExtentNode::Leaf(..) => None,
        })
    }
}

/// An entry of either kind of node.
#[derive(Clone, Copy, Debug)]
enum Entry {
    Extent(Extent),
    Index(ExtentIndex),
}

fn insert_entry(node: &mut ExtentNode, at: usize, e: Entry) {
    match (node, e) {
        (ExtentNode::Leaf(h, v), Entry::Extent(x)) => {
            v.insert(at, x);
            h.entries = v.len() as u16;
        }
        (ExtentNode::Index(h, v), Entry::Index(x)) => {
            v.insert(at, x);
            h.entries = v.len() as u16;
        }
        _ => unreachable!("an entry of the node's own kind"),
    }
}

fn remove_entry(node: &mut ExtentNode, at: usize) {
    match node {
        ExtentNode::Leaf(_, v) => {
            v.remove(at);
        }
        ExtentNode::Index(_, v) => {
            v.remove(at);
        }
    }
    node.sync_count();
}

fn corrupt(inode: &Inode, field: &'static str) -> FsError {
    FsError::Format(ondisk::FormatError::corrupt(
        "extent tree",
        Location::Inode(u64::from(inode.ino)),
        ondisk::Corruption::BadField { field, value: 0 },
    ))
}

impl Volume {
    /// Entries a node in a block holds: the kernel's (block - header) / entry,
    /// which leaves the four bytes of the checksum tail.
    pub(super) fn node_capacity(&self) -> u16 {
        ((self.block_size() as usize - extent::HEADER_SIZE) / extent::ENTRY_SIZE) as u16
    }

    fn inode_seed(&self, inode: &Inode) -> Option<u32> {
        self.sb.has_metadata_csum().then(|| Inode::csum_seed(&self.sb, inode.ino, inode.base.generation))
    }

    fn capacity(&self, level: &Level) -> usize {
        usize::from(if level.blk.is_none() { ROOT_MAX } else { self.node_capacity() })
    }

    /// Read and check the node in block `blk`, which must be at `depth`.
    fn read_node(&self, inode: &Inode, blk: u64, depth: u16) -> Result<ExtentNode> {
        let node = self.extent_child(inode, blk, depth)?;
        // The write path walks into every child it changes: an empty one has no key to place.
        if node.is_empty() {
            return Err(corrupt(inode, "empty extent node"));
        }
        Ok(node)
    }

    /// The path from the root to the leaf that covers (or would cover) `lblk`.
    pub(super) fn extent_path(&self, inode: &Inode, lblk: u64) -> Result<ExtentPath> {
        let root = ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))?;
        let mut levels = vec![Level { blk: None, node: root, pos: 0 }];
        loop {
            let last = levels.last_mut().expect("a path is never empty");
            let blk = match &last.node {
                ExtentNode::Leaf(_, v) => {
                    last.pos = v.partition_point(|e| u64::from(e.block) <= lblk);
                    return Ok(ExtentPath { levels });
                }
                // Blocks before the first key belong to the first subtree.
                ExtentNode::Index(_, v) => {
                    last.pos = v.partition_point(|e| u64::from(e.block) <= lblk).max(1) - 1;
                    v.get(last.pos).ok_or_else(|| corrupt(inode, "empty index node"))?.leaf
                }
            };
            let depth = last.node.header().depth - 1;
            let node = self.read_node(inode, blk, depth)?;
            levels.push(Level { blk: Some(blk), node, pos: 0 });
        }
    }

    /// Write a node back: the root into the inode (which the operation
    /// writes when it ends), other nodes into their block with a fresh checksum.
    fn store(&self, ws: &mut WriteState, inode: &mut Inode, level: &Level) {
        debug_assert!(level.node.len() <= self.capacity(level));
        match level.blk {
            None => {
                let mut root = [0u8; I_BLOCK_SIZE];
                level.node.write(&mut root);
                inode.base.block = root;
            }
            Some(blk) => {
                let mut data = self.fresh_block();
                level.node.write(&mut data);
                if let Some(seed) = self.inode_seed(inode) {
                    extent::set_block_checksum(&mut data, seed);
                }
                self.install(ws, blk, data);
            }
        }
    }

    /// A block for a new node, near `goal`.
    fn alloc_node(&self, ws: &mut WriteState, inode: &mut Inode, goal: u64) -> Result<u64> {
        let blk = self.alloc_tree_block(ws, goal)?;
        self.adjust_blocks(inode, 1);
        Ok(blk)
    }

    /// Where a new node of `inode` should go: near the data it maps.
    fn node_goal(&self, inode: &Inode, path: &ExtentPath) -> u64 {
        let (exts, pos) = path.leaf();
        exts.get(pos.saturating_sub(1)).map_or_else(|| self.inode_group_first_block(inode.ino), |e| e.start)
    }

    /// Node `k`'s first key changed: carry it up into the entries that index it.
    fn fix_keys(&self, ws: &mut WriteState, inode: &mut Inode, path: &mut ExtentPath, k: usize) -> Result<()> {
        let Some(key) = path.levels[k].node.first_key() else { return Ok(()) };
        for j in (0..k).rev() {
            let pos = path.levels[j].pos;
            let ExtentNode::Index(_, v) = &mut path.levels[j].node else { unreachable!("parents are index nodes") };
            if v[pos].block == key {
                break;
            }
            v[pos].block = key;
            self.store(ws, inode, &path.levels[j]);
            if pos != 0 {
                break;
            }
        }
        Ok(())
    }

    /// Insert `e` at position `at` of level `k`, splitting full nodes and
    /// growing the tree as needed. Leaves `path` stale past level `k`'s parent.
    fn insert_at(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        k: usize,
        at: usize,
        e: Entry,
    ) -> Result<()> {
        let len = path.levels[k].node.len();
        if len < self.capacity(&path.levels[k]) {
            insert_entry(&mut path.levels[k].node, at, e);
            self.store(ws, inode, &path.levels[k]);
            if at == 0 && k > 0 {
                self.fix_keys(ws, inode, path, k)?;
            }
            return Ok(());
        }
        if k == 0 {
            self.grow(ws, inode, path)?;
            return self.insert_at(ws, inode, path, 1, at, e);
        }
        // Split: at the tree's right edge the new entry starts a node of its
        // own (appends fill nodes whole); elsewhere the node halves.
        let rightmost = at == len && path.levels[..=k].iter().rev().skip(1).all(|l| l.pos + 1 == l.node.len());
        let mid = if rightmost { len } else { len / 2 };
        let goal = self.node_goal(inode, path);
        let rblk = self.alloc_node(ws, inode, goal)?;
        let mut right =
            Level { blk: Some(rblk), node: path.levels[k].node.split_off(mid, self.node_capacity()), pos: 0 };
        let into_left = at < mid || (at == mid && !rightmost);
        if into_left {
            insert_entry(&mut path.levels[k].node, at, e);
        } else {
            insert_entry(&mut right.node, at - mid, e);
        }
        let key = right.node.first_key().expect("a split leaves both halves non-empty");
        self.store(ws, inode, &right);
        if into_left && at == 0 {
            self.fix_keys(ws, inode, path, k)?;
        }
        let left_blk = path.levels[k].blk;
        let left = path.levels[k].node.clone();
        let parent_at = path.levels[k - 1].pos + 1;
        self.insert_at(ws, inode, path, k - 1, parent_at, Entry::Index(ExtentIndex { block: key, leaf: rblk }))?;
        self.store(ws, inode, &Level { blk: left_blk, node: left, pos: 0 });
        Ok(())
    }

    /// The root is full: move it into a new block, which the root then
    /// indexes alone (one level more).
    fn grow(&self, ws: &mut WriteState, inode: &mut Inode, path: &mut ExtentPath) -> Result<()> {
        let depth = path.levels[0].node.header().depth + 1;
        if depth > extent::MAX_DEPTH {
            return Err(FsError::NoSpace);
        }
        let goal = self.node_goal(inode, path);
        let blk = self.alloc_node(ws, inode, goal)?;
        let mut child = path.levels[0].node.clone();
        child.header_mut().max = self.node_capacity();
        let key = child.first_key().expect("a full root has entries");
        let pos = path.levels[0].pos;
        let root = ExtentNode::Index(
            ExtentHeader { entries: 1, max: ROOT_MAX, depth, generation: 0 },
            vec![ExtentIndex { block: key, leaf: blk }],
        );
        path.levels[0] = Level { blk: None, node: root, pos: 0 };
        path.levels.insert(1, Level { blk: Some(blk), node: child, pos });
        self.store(ws, inode, &path.levels[1]);
        self.store(ws, inode, &path.levels[0]);
        Ok(())
    }

    /// Remove entry `at` of level `k` (see [`Self::removed`]).
    fn remove_at(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        k: usize,
        at: usize,
    ) -> Result<()> {
        remove_entry(&mut path.levels[k].node, at);
        self.removed(ws, inode, path, k, at == 0)
    }

    /// Level `k` lost entries (its first too, if `first_changed`): store it.
    /// A non-root node left empty is freed and leaves its parent in turn; an
    /// empty root becomes an empty leaf. Leaves `path` stale below level `k`.
    pub(super) fn removed(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        k: usize,
        first_changed: bool,
    ) -> Result<()> {
        if !path.levels[k].node.is_empty() {
            self.store(ws, inode, &path.levels[k]);
            if first_changed && k > 0 {
                self.fix_keys(ws, inode, path, k)?;
            }
            return Ok(());
        }
        let Some(blk) = path.levels[k].blk else {
            path.levels[0].node =
                ExtentNode::Leaf(ExtentHeader { entries: 0, max: ROOT_MAX, depth: 0, generation: 0 }, Vec::new());
            path.levels.truncate(1);
            self.store(ws, inode, &path.levels[0]);
            return Ok(());
        };
        let parent_at = path.levels[k - 1].pos;
        self.remove_at(ws, inode, path, k - 1, parent_at)?;
        self.free_meta_block(ws, blk)?;
        self.adjust_blocks(inode, -1);
        Ok(())
    }

    /// While the root indexes a single node that fits in the root, that node
    /// becomes the root (one level less), as the kernel's ext4 does.
    pub(super) fn shrink(&self, ws: &mut WriteState, inode: &mut Inode) -> Result<()> {
        loop {
            let root = ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))?;
            let ExtentNode::Index(h, v) = &root else { return Ok(()) };
            let [only] = v.as_slice() else { return Ok(()) };
            let mut child = self.read_node(inode, only.leaf, h.depth - 1)?;
            if child.len() > usize::from(ROOT_MAX) {
                return Ok(());
            }
            child.header_mut().max = ROOT_MAX;
            let mut buf = [0u8; I_BLOCK_SIZE];
            child.write(&mut buf);
            inode.base.block = buf;
            self.free_meta_block(ws, only.leaf)?;
            self.adjust_blocks(inode, -1);
        }
    }

    /// Add extent `e`, which overlaps nothing, to the tree: merged into the
    /// extent before it when both are contiguous on disk, else as an entry.
    pub(super) fn insert_extent(&self, ws: &mut WriteState, inode: &mut Inode, e: Extent) -> Result<()> {
        let mut path = self.extent_path(inode, u64::from(e.block))?;
        let (exts, at) = path.leaf();
        debug_assert!(at == 0 || exts[at - 1].end() <= u64::from(e.block), "overlapping extent {e:?}");
        debug_assert!(exts.get(at).is_none_or(|n| e.end() <= u64::from(n.block)), "overlapping extent {e:?}");
        if at > 0 && mergeable(&exts[at - 1], &e) {
            path.leaf_mut()[at - 1].len += e.len;
            let k = path.depth();
            self.store(ws, inode, &path.levels[k]);
            return Ok(());
        }
        let k = path.depth();
        self.insert_at(ws, inode, &mut path, k, at, Entry::Extent(e))
    }

    /// Replace extent `i` of the path's leaf by `pieces` (sorted, inside the
    /// old extent's logical range, none empty; none at all removes it). The
    /// first piece takes the old entry's place, the others are inserted.
    /// Leaves `path` stale.
    pub(super) fn replace_extent(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        i: usize,
        pieces: &[Extent],
    ) -> Result<()> {
        let k = path.depth();
        let Some((first, rest)) = pieces.split_first() else {
            self.remove_at(ws, inode, path, k, i)?;
            return self.shrink(ws, inode);
        };
        let old_key = path.leaf().0[i].block;
        path.leaf_mut()[i] = *first;
        self.store(ws, inode, &path.levels[k]);
        if i == 0 && first.block != old_key {
            self.fix_keys(ws, inode, path, k)?;
        }
        for p in rest {
            self.insert_extent(ws, inode, *p)?;
        }
        Ok(())
    }

    /// Merge extent `i` of the path's leaf into extent `i - 1` where both
    /// are contiguous and alike. Returns whether it did (`path` is then stale).
    pub(super) fn merge_left(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        path: &mut ExtentPath,
        i: usize,
    ) -> Result<bool> {
        let exts = path.leaf().0;
        if i == 0 || i >= exts.len() || !mergeable(&exts[i - 1], &exts[i]) {
            return Ok(false);
        }
        let len = exts[i].len;
        path.leaf_mut()[i - 1].len += len;
        let k = path.depth();
        self.remove_at(ws, inode, path, k, i)?;
        Ok(true)
    }

    /// Every extent of the file, in logical order (for checks and tests: it
    /// reads the whole tree).
    pub(crate) fn collect_extents(&self, inode: &Inode) -> Result<Vec<Extent>> {
        let mut out = Vec::new();
        let mut at = 0u64;
        loop {
            let path = self.extent_path(inode, at)?;
            out.extend_from_slice(path.leaf().0);
            match path.next_key() {
                Some(next) if next > at => at = next,
                Some(_) => return Err(corrupt(inode, "index keys out of order")),
                None => break,
            }
        }
        if out.windows(2).any(|w| w[0].end() > u64::from(w[1].block)) {
            return Err(corrupt(inode, "extents overlap or are out of order"));
        }
        Ok(out)
    }
}

/// `b` continues `a` on disk and logically, with the same state, and the
/// sum still fits one extent.
fn mergeable(a: &Extent, b: &Extent) -> bool {
    let limit = u32::from(extent::MAX_INIT_LEN) - u32::from(a.uninit);
    a.end() == u64::from(b.block)
        && a.start + u64::from(a.len) == b.start
        && a.uninit == b.uninit
        && u32::from(a.len) + u32::from(b.len) <= limit
}

impl Volume {
    /// The shape of a file's extent tree: its depth and how many extents it
    /// holds (reads the whole tree; for tests and tools).
    pub fn extent_tree_shape(&self, inode: &Inode) -> Result<(u16, usize)> {
        let root = ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))?;
        Ok((root.header().depth, self.collect_extents(inode)?.len()))
    }
}
