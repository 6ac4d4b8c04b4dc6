//! Spare block buffers for copy-on-write.
//!
//! A change never writes into a block in place while anything else may hold
//! it (readers, the running operation's undo record, a commit in flight): it
//! copies the block first. The old version usually dies when the operation
//! ends, as its undo record is dropped. An untar copies about 250,000 blocks;
//! taking each copy from the versions earlier operations left, instead of from
//! the allocator, saves an allocation and a free per copy.

use crate::cache::Block;
use std::sync::Arc;

/// At most this many spares are kept (1 MiB of 4 KiB blocks).
const KEEP: usize = 256;

#[derive(Default)]
pub(crate) struct SpareBlocks {
    spare: Vec<Block>,
}

impl SpareBlocks {
    /// `b`'s bytes, to change: in place when nothing else holds `b`, else in
    /// a copy (into a spare when there is one) that replaces it.
    pub(crate) fn make_mut<'a>(&mut self, b: &'a mut Block) -> &'a mut [u8] {
        if Arc::get_mut(b).is_none() {
            *b = match self.spare.pop() {
                Some(mut s) if s.len() == b.len() => {
                    Arc::get_mut(&mut s).expect("a spare is held by nothing else").copy_from_slice(b);
                    s
                }
                _ => Arc::from(&b[..]),
            };
        }
        Arc::get_mut(b).expect("unique: just copied")
    }

    /// Keep `b` as a spare if this was its last holder.
    pub(crate) fn give_back(&mut self, mut b: Block) {
        if self.spare.len() < KEEP && Arc::get_mut(&mut b).is_some() {
            self.spare.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_block_is_copied_and_a_unique_one_changed_in_place() {
        let mut s = SpareBlocks::default();
        let reader: Block = Arc::from(vec![7u8; 16]);
        let mut mine = reader.clone();
        s.make_mut(&mut mine)[0] = 1;
        assert_eq!((reader[0], mine[0], mine[1]), (7, 1, 7), "the reader keeps the old version");
        let at = mine.as_ptr();
        s.make_mut(&mut mine)[1] = 2;
        assert_eq!((mine.as_ptr(), mine[1]), (at, 2), "no second copy of a block nothing else holds");
    }

    #[test]
    fn only_a_last_reference_becomes_a_spare_and_is_reused() {
        let mut s = SpareBlocks::default();
        let old: Block = Arc::from(vec![3u8; 16]);
        let held = old.clone();
        s.give_back(old);
        assert!(s.spare.is_empty(), "someone still holds it");
        let at = held.as_ptr();
        s.give_back(held);
        assert_eq!(s.spare.len(), 1);
        let src: Block = Arc::from(vec![9u8; 16]);
        let mut b = src.clone();
        s.make_mut(&mut b);
        assert_eq!((b.as_ptr(), &b[..]), (at, &[9u8; 16][..]), "the spare holds the copy");
        assert!(s.spare.is_empty());
    }
}
