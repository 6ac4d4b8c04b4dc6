//! Learning directories into the knowledge base: where a directory's blocks
//! are, and per entry the child inode and the block holding the entry.
//!
//! Two ways: [`learn`] reads the directory through the ordinary read path (a
//! walk, tests); the listing hint learns from blocks it has just prefetched,
//! without counting those reads as uses ([`ReadCore::learn_cached`]).

use super::kb::{DirKind, KnowledgeBase};
use crate::bmap::Mapping;
use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::read_core::ReadCore;
use ondisk::dir::DirIter;
use ondisk::extent::ExtentNode;
use ondisk::inode::{flags, Inode};
use ondisk::Location;

/// Where a directory's blocks are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct DirLayout {
    /// Physical block of each logical block, up to the first hole.
    pub blocks: Vec<u64>,
    /// Extent-tree blocks a mapping reads first (empty for small directories).
    pub extent_blocks: Vec<u64>,
}

/// One entry as learnt.
pub(crate) struct Learnt {
    pub name: Vec<u8>,
    pub child: u32,
    pub lblk: u64,
    pub file_type: u8,
}

impl ReadCore {
    /// The directory's layout from its inode (extent-tree blocks are read
    /// through the cache; ext2/3 indirect blocks are not listed).
    pub(crate) fn dir_layout(&self, dir: &Inode) -> Result<DirLayout> {
        let mut layout = DirLayout::default();
        if dir.has_flag(flags::INLINE_DATA) {
            return Ok(layout);
        }
        if dir.has_flag(flags::EXTENTS) {
            self.extent_interior(dir, &mut layout.extent_blocks)?;
        }
        let n = self.dir_blocks(dir);
        let mut lblk = 0;
        while lblk < n {
            match self.map_block(dir, lblk, n - lblk)? {
                Mapping::Mapped { pblk, len, .. } => {
                    layout.blocks.extend(pblk..pblk + len);
                    lblk += len;
                }
                Mapping::Hole { .. } => break,
            }
        }
        Ok(layout)
    }

    /// The interior blocks of an extent tree (none when it fits the inode).
    fn extent_interior(&self, inode: &Inode, out: &mut Vec<u64>) -> Result<()> {
        let mut level = vec![ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(inode.ino)))?];
        // Depth is at most 5 in ext4; the bound also stops a corrupt loop.
        for _ in 0..6 {
            let mut next = Vec::new();
            for node in &level {
                if let ExtentNode::Index(_, index) = node {
                    for e in index {
                        self.check_block(e.leaf, "extent block")?;
                        out.push(e.leaf);
                        next.push(ExtentNode::parse(&self.meta(e.leaf)?, Location::Block(e.leaf))?);
                    }
                }
            }
            if next.is_empty() {
                break;
            }
            level = next;
        }
        Ok(())
    }

    /// The blocks of a small directory that mapping its inode gives without
    /// reading anything (an extent tree inside the inode, or the direct
    /// pointers of a block map), at most `max`.
    pub(crate) fn dir_blocks_without_io(&self, dir: &Inode, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        if dir.has_flag(flags::INLINE_DATA) {
            return out;
        }
        let n = self.dir_blocks(dir).min(max as u64);
        if dir.has_flag(flags::EXTENTS) {
            match ExtentNode::parse(&dir.base.block, Location::Inode(u64::from(dir.ino))) {
                Ok(ExtentNode::Leaf(..)) => {}
                _ => return out,
            }
        } else if n > 12 {
            return out;
        }
        let mut lblk = 0;
        while lblk < n {
            match self.map_block(dir, lblk, n - lblk) {
                Ok(Mapping::Mapped { pblk, len, .. }) if self.check_block(pblk, "directory block").is_ok() => {
                    out.extend(pblk..pblk + len.min(n - lblk));
                    lblk += len;
                }
                _ => break,
            }
        }
        out
    }

    /// The entries of a directory whose blocks `read` gives (None when one
    /// is missing or damaged: nothing is learnt from half a directory), and
    /// the htree index nodes found among them.
    fn collect(
        &self,
        dir: &Inode,
        layout: &DirLayout,
        read: &dyn Fn(u64) -> Option<Block>,
    ) -> Option<(Vec<Learnt>, Vec<u64>)> {
        let mut entries = Vec::new();
        let mut index_nodes = Vec::new();
        if dir.has_flag(flags::INLINE_DATA) {
            self.read_dir(dir, 0, &mut |e| {
                entries.push(Learnt { name: e.name, child: e.ino, lblk: 0, file_type: e.file_type });
                true
            })
            .ok()?;
            return Some((entries, index_nodes));
        }
        let bs = self.block_size as usize;
        let htree = self.is_htree(dir);
        for (lblk, &pblk) in layout.blocks.iter().enumerate() {
            let data = read(pblk)?;
            if data.len() != bs {
                return None;
            }
            // An interior index node: one empty entry spanning the block.
            if htree
                && lblk > 0
                && ondisk::bytes::le32(&data, 0) == 0
                && ondisk::dir::rec_len_from_disk(ondisk::bytes::le16(&data, 4), bs) == bs
            {
                index_nodes.push(pblk);
                continue;
            }
            for e in DirIter::new(&data, bs, self.has_filetype(), Location::Block(pblk)) {
                let e = e.ok()?;
                if e.inode != 0 {
                    entries.push(Learnt {
                        name: e.name.to_vec(),
                        child: e.inode,
                        lblk: lblk as u64,
                        file_type: e.file_type,
                    });
                }
            }
        }
        Some((entries, index_nodes))
    }

    /// Record `dir` in `kb` from what `collect` found.
    fn record(&self, kb: &mut KnowledgeBase, dir: &Inode, layout: &DirLayout, entries: &[Learnt], index_nodes: &[u64]) {
        let kind = if self.is_htree(dir) { DirKind::Htree } else { DirKind::Linear };
        kb.learn_dir(dir.ino, kind, &layout.blocks, entries.iter().map(|e| (&e.name[..], e.child, e.lblk)));
        let mut interior = layout.extent_blocks.clone();
        interior.extend_from_slice(index_nodes);
        kb.set_index_blocks(dir.ino, &interior);
    }

    /// Learn a directory from blocks already in the cache, without counting
    /// those reads as uses of prefetched blocks. Returns its entries, or None
    /// when a block is not cached (nothing learnt).
    pub(crate) fn learn_cached(
        &self,
        kb: &parking_lot::RwLock<KnowledgeBase>,
        dir: &Inode,
        layout: &DirLayout,
    ) -> Option<Vec<Learnt>> {
        let (entries, index_nodes) = self.collect(dir, layout, &|b| self.cache.peek_quiet(b))?;
        self.record(&mut kb.write(), dir, layout, &entries, &index_nodes);
        Some(entries)
    }

    /// An inode from the cache only, without counting a use (None if its
    /// block is not cached or it does not parse).
    pub(crate) fn inode_cached(&self, ino: u32) -> Option<Inode> {
        if ino == 0 || ino > self.sb.f.inodes_count {
            return None;
        }
        let (blk, off) = self.inode_location(ino);
        let data = self.cache.peek_quiet(blk)?;
        let isz = usize::from(self.sb.inode_size());
        Inode::parse(&self.sb, ino, data.get(off..off + isz)?).ok()
    }
}

/// Read directory `dir` through the ordinary read path and record it in `kb`
/// (what a walk does, and the reference the in-band updates are tested against).
pub fn learn(vol: &ReadCore, kb: &mut KnowledgeBase, dir: u32) -> Result<()> {
    let inode = vol.inode(dir)?;
    if !inode.is_dir() {
        return Err(FsError::NotDir);
    }
    let layout = vol.dir_layout(&inode)?;
    let (entries, index_nodes) = vol
        .collect(&inode, &layout, &|b| vol.meta(b).ok())
        .ok_or_else(|| FsError::Invalid(format!("directory {dir} could not be read whole")))?;
    vol.record(kb, &inode, &layout, &entries, &index_nodes);
    Ok(())
}

/// Learn every directory reachable from `root` (a walk).
/// Returns the number of directories learnt.
pub fn learn_tree(vol: &ReadCore, kb: &mut KnowledgeBase, root: u32) -> Result<usize> {
    let mut todo = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(dir) = todo.pop() {
        if !seen.insert(dir) {
            continue;
        }
        learn(vol, kb, dir)?;
        let mut subdirs = Vec::new();
        vol.read_dir(&vol.inode(dir)?, 0, &mut |e| {
            if e.file_type == ondisk::dir::ftype::DIR && e.name != b"." && e.name != b".." {
                subdirs.push(e.ino);
            }
            true
        })?;
        todo.extend(subdirs);
    }
    Ok(seen.len())
}
