//! The running transaction as the engine sees it: the newest version of every
//! metadata block changed since the last commit, and the blocks freed from
//! metadata use (to be revoked in the journal).

use crate::cache::Block;
use crate::intmap::IntMap;
use std::collections::BTreeSet;

/// What the running transaction holds for one block.
#[derive(Clone)]
pub enum Slot {
    Absent,
    Logged(Block),
    Revoked,
}

/// Blocks in no particular order (the journal's transaction sorts them):
/// an untar adds one about 200,000 times, and a hash map costs a third of
/// what a B-tree did there.
#[derive(Default)]
pub struct Txn {
    blocks: IntMap<u64, Block>,
    revoked: BTreeSet<u64>,
}

impl Txn {
    pub fn add(&mut self, blk: u64, data: Block) {
        self.revoked.remove(&blk);
        self.blocks.insert(blk, data);
    }

    /// `blk` stopped being metadata (freed): it must not be replayed over new contents.
    pub fn revoke(&mut self, blk: u64) {
        self.blocks.remove(&blk);
        self.revoked.insert(blk);
    }

    pub fn slot(&self, blk: u64) -> Slot {
        match self.blocks.get(&blk) {
            Some(b) => Slot::Logged(b.clone()),
            None if self.revoked.contains(&blk) => Slot::Revoked,
            None => Slot::Absent,
        }
    }

    /// Put back what [`Txn::slot`] saw.
    pub fn restore(&mut self, blk: u64, slot: Slot) {
        self.blocks.remove(&blk);
        self.revoked.remove(&blk);
        match slot {
            Slot::Absent => {}
            Slot::Logged(b) => {
                self.blocks.insert(blk, b);
            }
            Slot::Revoked => {
                self.revoked.insert(blk);
            }
        }
    }

    /// Whether this transaction changed or freed `blk`.
    pub fn touches(&self, blk: u64) -> bool {
        self.blocks.contains_key(&blk) || self.revoked.contains(&blk)
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.revoked.is_empty()
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks this transaction revokes.
    pub fn revoked_len(&self) -> usize {
        self.revoked.len()
    }

    pub fn blocks(&self) -> impl Iterator<Item = (u64, &Block)> {
        self.blocks.iter().map(|(&b, d)| (b, d))
    }

    pub fn revoked(&self) -> impl Iterator<Item = u64> + '_ {
        self.revoked.iter().copied()
    }
}
