//! Logical -> physical block mapping for extent-mapped and block-mapped
//! (ext2/ext3 indirect) inodes.

use crate::error::{FsError, Result};
use crate::read_core::ReadCore;
use ondisk::bytes::le32;
use ondisk::extent::{self, ExtentNode};
use ondisk::inode::{flags, Inode};
use ondisk::{Corruption, FormatError, Location};

/// What a run of logical blocks maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// `len` blocks with nothing allocated: they read as zeros.
    Hole { len: u64 },
    /// `len` blocks stored contiguously from physical block `pblk`;
    /// `unwritten` (preallocated) blocks read as zeros.
    Mapped { pblk: u64, len: u64, unwritten: bool },
}

impl Mapping {
    pub fn len(&self) -> u64 {
        match *self {
            Mapping::Hole { len } | Mapping::Mapped { len, .. } => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One past the largest logical block an extent tree can address.
const EXTENT_LBLK_END: u64 = 1 << 32;

impl ReadCore {
    /// Map logical block `lblk` of `inode`, describing at most `max` blocks from it.
    pub fn map_block(&self, inode: &Inode, lblk: u64, max: u64) -> Result<Mapping> {
        // Lengths are clamped to [1, max]: a zero (a directory smaller than a
        // block asks for one) maps one block, never a panic.
        let max = max.max(1);
        if inode.has_flag(flags::EXTENTS) {
            self.map_extent(inode, lblk, max)
        } else {
            self.map_indirect(inode, lblk, max)
        }
    }

    fn map_extent(&self, inode: &Inode, lblk: u64, max: u64) -> Result<Mapping> {
        if lblk >= EXTENT_LBLK_END {
            return Ok(Mapping::Hole { len: max });
        }
        let ino = u64::from(inode.ino);
        let mut node = ExtentNode::parse(&inode.base.block, Location::Inode(ino))?;
        // Where the subtree we are in stops covering logical blocks.
        let mut boundary = EXTENT_LBLK_END;
        let mut depth = node.header().depth;
        loop {
            match node {
                ExtentNode::Leaf(_, extents) => {
                    let i = extents.partition_point(|e| u64::from(e.block) <= lblk);
                    if i > 0 {
                        let e = &extents[i - 1];
                        if lblk < e.end() {
                            let len = (e.end() - lblk).min(max);
                            let pblk = e.start + (lblk - u64::from(e.block));
                            self.check_data_run(pblk, len, inode)?;
                            return Ok(Mapping::Mapped { pblk, len, unwritten: e.uninit });
                        }
                    }
                    let next = extents.get(i).map_or(boundary, |e| u64::from(e.block));
                    return Ok(Mapping::Hole { len: next.saturating_sub(lblk).clamp(1, max) });
                }
                ExtentNode::Index(_, index) => {
                    let i = index.partition_point(|e| u64::from(e.block) <= lblk);
                    if i == 0 {
                        // Before the first subtree: a hole up to it.
                        let next = index.first().map_or(boundary, |e| u64::from(e.block));
                        return Ok(Mapping::Hole { len: next.saturating_sub(lblk).clamp(1, max) });
                    }
                    if let Some(n) = index.get(i) {
                        boundary = boundary.min(u64::from(n.block));
                    }
                    let Some(child_depth) = depth.checked_sub(1) else {
                        return Err(bad_depth(Location::Inode(ino), 0));
                    };
                    node = self.extent_child(inode, index[i - 1].leaf, child_depth)?;
                    depth = child_depth;
                }
            }
        }
    }

    /// Read and check the extent-tree node in block `blk` below inode `inode`'s
    /// root, which must be at `depth`: owned by the inode, its checksum, its
    /// header. The one place both the block map and the write path read one.
    pub(crate) fn extent_child(&self, inode: &Inode, blk: u64, depth: u16) -> Result<ExtentNode> {
        let at = Location::Block(blk);
        self.check_owned(blk, 1, inode.ino, "extent node")?;
        let data = self.meta(blk)?;
        // Only blocks below the root are checksummed: most files never need the seed.
        if self.sb.has_metadata_csum() {
            let seed = Inode::csum_seed(&self.sb, inode.ino, inode.base.generation);
            extent::verify_block_checksum(&data, seed, at)?;
        }
        let node = ExtentNode::parse(&data, at)?;
        // Depth drops by exactly one a level: this also rules out loops.
        if node.header().depth != depth {
            return Err(bad_depth(at, node.header().depth));
        }
        Ok(node)
    }

    fn check_data_run(&self, pblk: u64, len: u64, inode: &Inode) -> Result<()> {
        let end = pblk.checked_add(len);
        if pblk < u64::from(self.sb.f.first_data_block) || end.is_none_or(|e| e > self.sb.blocks_count()) {
            return Err(FsError::Format(FormatError::corrupt(
                "block map",
                Location::Inode(u64::from(inode.ino)),
                Corruption::BadField { field: "physical block", value: pblk },
            )));
        }
        self.check_owned(pblk, len, inode.ino, "block map")
    }

    /// ext2/ext3 block map: 12 direct pointers, then single, double and triple indirect blocks.
    fn map_indirect(&self, inode: &Inode, lblk: u64, max: u64) -> Result<Mapping> {
        let per = u64::from(self.block_size / 4);
        let ptr = |i: usize| u64::from(le32(&inode.base.block, i * 4));
        // (levels, pointer in i_block, first logical block it covers)
        let (levels, root, base) = if lblk < 12 {
            return self.scan_pointers(inode, &inode.base.block[..48], lblk as usize, max);
        } else if lblk < 12 + per {
            (1u32, ptr(12), 12)
        } else if lblk < 12 + per + per * per {
            (2, ptr(13), 12 + per)
        } else if lblk < 12 + per + per * per + per * per * per {
            (3, ptr(14), 12 + per + per * per)
        } else {
            return Ok(Mapping::Hole { len: max });
        };
        let mut rel = lblk - base;
        let mut blk = root;
        let mut span = per.pow(levels); // logical blocks under `blk`
        for _ in 1..levels {
            span /= per;
            if blk == 0 {
                return Ok(Mapping::Hole { len: (span - rel % span).min(max) });
            }
            self.check_owned(blk, 1, inode.ino, "indirect block")?;
            let data = self.meta(blk)?;
            let idx = (rel / span) as usize;
            blk = u64::from(le32(&data, idx * 4));
            rel %= span;
        }
        if blk == 0 {
            return Ok(Mapping::Hole { len: (per - rel).min(max) });
        }
        self.check_owned(blk, 1, inode.ino, "indirect block")?;
        let data = self.meta(blk)?;
        self.scan_pointers(inode, &data, rel as usize, max)
    }

    /// From pointer `i` of an array of 32-bit block pointers, the run of
    /// contiguous (or all-zero) pointers, at most `max` long.
    fn scan_pointers(&self, inode: &Inode, ptrs: &[u8], i: usize, max: u64) -> Result<Mapping> {
        let n = ptrs.len() / 4;
        let first = u64::from(le32(ptrs, i * 4));
        let mut len = 1u64;
        while len < max && i + (len as usize) < n {
            let next = u64::from(le32(ptrs, (i + len as usize) * 4));
            let contiguous = if first == 0 { next == 0 } else { next == first + len };
            if !contiguous {
                break;
            }
            len += 1;
        }
        if first == 0 {
            return Ok(Mapping::Hole { len });
        }
        self.check_data_run(first, len, inode)?;
        Ok(Mapping::Mapped { pblk: first, len, unwritten: false })
    }
}

fn bad_depth(at: Location, depth: u16) -> FsError {
    FsError::Format(FormatError::corrupt(
        "extent node",
        at,
        Corruption::BadField { field: "eh_depth", value: u64::from(depth) },
    ))
}
