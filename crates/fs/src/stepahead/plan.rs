//! From a path to the blocks its resolution will read.
//!
//! Per step (directory `d`, name `c`): `d`'s inode-table block, then the
//! directory blocks a lookup of `c` reads, then on to the child. Which
//! directory blocks, using the block index the KB keeps per entry:
//! - linear directory: blocks 0..=k, the scan up to the entry's block k;
//! - htree: the index root (block 0) and the leaf k;
//! - entry block unknown: all blocks (linear) or the root only (htree);
//! - always: the directory's interior blocks the KB keeps (htree index nodes
//!   of directories of more than ~500 leaves, extent-tree blocks of
//!   fragmented ones), which a lookup may read before the leaf.
//!
//! A name the KB does not know still plans what its lookup will read (all
//! blocks of a linear directory, the htree root), then stops.

use super::kb::{DirKind, KnowledgeBase};
use crate::read_core::ReadCore;

/// The blocks to prefetch, in the order resolution will want them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub blocks: Vec<u64>,
    /// Path components whose child the KB knew (the plan covers them all).
    pub known: usize,
    /// The inode the plan reached: `start`, or the child of the last known step.
    pub at: u32,
    /// Each directory the plan searches, in order, with the number of
    /// `blocks` planned before its own: cutting `blocks` there leaves out
    /// that directory and everything after it (a caller that may not search it).
    pub searched: Vec<(u32, usize)>,
}

impl Plan {
    fn push(&mut self, b: u64) {
        if !self.blocks.contains(&b) {
            self.blocks.push(b);
        }
    }

    fn push_inode(&mut self, vol: &ReadCore, ino: u32) -> bool {
        // A stale hint may name any number: plan nothing for an invalid one.
        if ino == 0 || ino > vol.sb.f.inodes_count {
            return false;
        }
        self.push(vol.inode_location(ino).0);
        true
    }
}

/// Plan the resolution of `path` (components, no slashes) from directory `start`.
pub fn plan(vol: &ReadCore, kb: &KnowledgeBase, start: u32, path: &[&[u8]]) -> Plan {
    let mut p = Plan { at: start, ..Plan::default() };
    if !p.push_inode(vol, start) {
        return p;
    }
    let mut dir = start;
    for name in path {
        let (Some(blocks), Some(kind)) = (kb.dir_blocks(dir), kb.dir_kind(dir)) else { break };
        p.searched.push((dir, p.blocks.len()));
        let hint = kb.hint(dir, name);
        let entry_blk = hint.and_then(|h| h.lblk).map(|l| l as usize).filter(|&l| l < blocks.len());
        for &b in kb.index_blocks(dir) {
            p.push(b);
        }
        let wanted: &[u64] = match (kind, entry_blk) {
            (DirKind::Linear, Some(k)) => &blocks[..=k],
            (DirKind::Linear, None) => blocks,
            (DirKind::Htree, _) => &blocks[..blocks.len().min(1)],
        };
        for &b in wanted {
            p.push(b);
        }
        if let (DirKind::Htree, Some(k)) = (kind, entry_blk) {
            p.push(blocks[k]);
        }
        let Some(h) = hint else { break };
        if !p.push_inode(vol, h.child) {
            break;
        }
        p.known += 1;
        p.at = h.child;
        dir = h.child;
    }
    p
}
