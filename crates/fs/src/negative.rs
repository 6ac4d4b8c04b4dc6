//! The last name a lookup did not find, and the directory blocks that showed
//! it absent, so that the create that usually follows need not search again.
//!
//! The kernel looks a name up before it creates it: an untar sends LOOKUP
//! then CREATE for every file, and the create must check the name is still
//! free, which scanned the same directory leaf a second time (about a twentieth
//! of the engine's work there). The memo is trusted only while every block it
//! holds is still the cached version of its block (a changed block is always a
//! new copy: the memo shares the old one) and the directory's size, flags and
//! block map are unchanged; anything else searches again. Only directories
//! whose whole block map is in the inode are remembered, so that the map
//! compared is all of it.

use crate::cache::{Block, BufferCache};
use ondisk::bytes::le16;
use ondisk::inode::{flags, Inode};
use parking_lot::Mutex;
use std::sync::Arc;

/// Most blocks a memo holds.
const MAX_BLOCKS: usize = 16;

/// Directory blocks a lookup read, as (physical block, copy read).
pub(crate) struct Seen {
    keep: bool,
    blocks: Vec<(u64, Block)>,
    /// A hole, or a way of reading that is not recorded: the blocks do not cover the search.
    partial: bool,
}

impl Seen {
    /// `keep`: record the blocks (read-write volumes); otherwise noting is free.
    pub(crate) fn new(keep: bool) -> Self {
        Seen { keep, blocks: Vec::new(), partial: false }
    }

    pub(crate) fn note(&mut self, pblk: u64, data: &Block) {
        if !self.keep || self.partial {
            return;
        }
        if self.blocks.len() == MAX_BLOCKS {
            // A long linear directory: not worth holding all of it.
            self.partial = true;
            self.blocks.clear();
            return;
        }
        self.blocks.push((pblk, data.clone()));
    }

    pub(crate) fn note_partial(&mut self) {
        self.partial = true;
    }
}

struct Absence {
    dir: u32,
    name: Vec<u8>,
    size: u64,
    flags: u32,
    map: [u8; 60],
    blocks: Vec<(u64, Block)>,
}

/// Whether the directory's whole block map lies in its inode (`i_block`),
/// which the memo compares: an extent tree of depth 0, or a block-mapped
/// directory within the 12 direct blocks. Deeper maps keep blocks elsewhere.
fn map_in_inode(dir: &Inode) -> bool {
    if dir.has_flag(flags::EXTENTS) {
        le16(&dir.base.block, 6) == 0 // eh_depth
    } else {
        dir.size() <= 12 * 1024 // 12 direct blocks of the smallest block size
    }
}

#[derive(Default)]
pub(crate) struct NegativeMemo {
    last: Mutex<Option<Absence>>,
}

impl NegativeMemo {
    /// A lookup of `name` in `dir` found nothing, having read `seen`.
    pub(crate) fn remember(&self, dir: &Inode, name: &[u8], seen: Seen) {
        if !seen.keep || seen.partial || seen.blocks.is_empty() || !map_in_inode(dir) {
            return;
        }
        let a = Absence {
            dir: dir.ino,
            name: name.to_vec(),
            size: dir.size(),
            flags: dir.base.flags,
            map: dir.base.block,
            blocks: seen.blocks,
        };
        *self.last.lock() = Some(a);
    }

    /// Whether `name` is known to be absent from `dir` as it is now. Takes the
    /// memo: the create it serves changes the directory anyway.
    pub(crate) fn known_absent(&self, cache: &BufferCache, dir: &Inode, name: &[u8]) -> bool {
        let Some(a) = self.last.lock().take() else { return false };
        a.dir == dir.ino
            && a.name == name
            && a.size == dir.size()
            && a.flags == dir.base.flags
            && a.map == dir.base.block
            && a.blocks.iter().all(|(pblk, b)| cache.peek_quiet(*pblk).is_some_and(|c| Arc::ptr_eq(&c, b)))
    }
}
