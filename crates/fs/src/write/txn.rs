//! The running transaction as the engine sees it: the newest version of every
//! metadata block changed since the last commit, and the blocks freed from
//! metadata use (to be revoked in the journal).

use crate::cache::Block;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Default)]
pub struct Txn {
    blocks: BTreeMap<u64, Block>,
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

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.revoked.is_empty()
    }

    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn blocks(&self) -> impl Iterator<Item = (u64, &Block)> {
        self.blocks.iter().map(|(&b, d)| (b, d))
    }

    pub fn revoked(&self) -> impl Iterator<Item = u64> + '_ {
        self.revoked.iter().copied()
    }
}
