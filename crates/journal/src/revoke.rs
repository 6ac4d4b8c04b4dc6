//! The revoke table: static block -> newest transaction that revoked it.
//!
//! A revoke record in transaction T cancels the replay of that block's copies
//! in every transaction up to and including T (jbd2's `jbd2_journal_set_revoke`
//! keeps the newest T, `jbd2_journal_test_revoke` compares against it).

use std::collections::HashMap;

use ondisk::jbd2::{Layout, RevokeBlock};

use crate::{tid_gt, Error};

/// Append the revoke blocks of transaction `sequence` for `blocks` to `out`
/// (whole journal blocks, `r_count` and tail checksum set), as many records
/// per block as fit (jbd2's `jbd2_journal_write_revoke_records`). Returns the
/// number of blocks appended. Without 64BIT, block numbers must fit 32 bits.
pub fn write_revoke_blocks(layout: &Layout, sequence: u32, blocks: &[u64], out: &mut Vec<u8>) -> Result<u64, Error> {
    if !layout.is_64bit {
        if let Some(b) = blocks.iter().find(|&&b| b > u64::from(u32::MAX)) {
            return Err(Error::Invalid(format!("revoke of block {b} needs a 64bit journal")));
        }
    }
    let bs = layout.block_bytes();
    let mut n = 0;
    for chunk in blocks.chunks(RevokeBlock::capacity(layout).max(1)) {
        let at = out.len();
        out.resize(at + bs, 0);
        RevokeBlock { sequence, blocks: chunk.to_vec() }.write_to(&mut out[at..], layout)?;
        n += 1;
    }
    Ok(n)
}

/// Revoked static blocks with the newest revoking transaction of each.
#[derive(Clone, Debug, Default)]
pub struct RevokeTable {
    newest: HashMap<u64, u32>,
}

impl RevokeTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Record that transaction `sequence` revokes `block`; keeps the newest.
    pub fn set(&mut self, block: u64, sequence: u32) {
        self.newest
            .entry(block)
            .and_modify(|s| {
                if tid_gt(sequence, *s) {
                    *s = sequence
                }
            })
            .or_insert(sequence);
    }

    /// Whether a copy of `block` logged in transaction `sequence` is revoked.
    pub fn is_revoked(&self, block: u64, sequence: u32) -> bool {
        match self.newest.get(&block) {
            Some(&revoked_by) => !tid_gt(sequence, revoked_by),
            None => false,
        }
    }

    /// The newest transaction revoking `block`, if any.
    pub fn get(&self, block: u64) -> Option<u32> {
        self.newest.get(&block).copied()
    }

    /// Number of distinct revoked blocks.
    pub fn len(&self) -> usize {
        self.newest.len()
    }

    pub fn is_empty(&self) -> bool {
        self.newest.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::jbd2::{csum_seed, Checksum};

    #[test]
    fn revoke_blocks_split_and_parse_back() {
        for is_64bit in [true, false] {
            let l = Layout { block_size: 1024, checksum: Checksum::V3, is_64bit, seed: csum_seed(&[3; 16]) };
            let blocks: Vec<u64> = (0..300).collect();
            let mut out = Vec::new();
            let n = write_revoke_blocks(&l, 9, &blocks, &mut out).unwrap();
            let cap = RevokeBlock::capacity(&l);
            assert_eq!(n as usize, blocks.len().div_ceil(cap));
            let mut back = Vec::new();
            for b in out.chunks(1024) {
                ondisk::jbd2::revoke::verify_checksum(b, &l).unwrap();
                let r = RevokeBlock::parse(b, &l).unwrap();
                assert_eq!(r.sequence, 9);
                back.extend(r.blocks);
            }
            assert_eq!(back, blocks);
        }
        let l32 = Layout { block_size: 1024, checksum: Checksum::None, is_64bit: false, seed: 0 };
        assert!(write_revoke_blocks(&l32, 1, &[1 << 33], &mut Vec::new()).is_err());
    }

    #[test]
    fn revoke_covers_same_and_older_transactions() {
        let mut t = RevokeTable::new();
        t.set(100, 10);
        assert!(t.is_revoked(100, 10));
        assert!(t.is_revoked(100, 3));
        assert!(!t.is_revoked(100, 11));
        assert!(!t.is_revoked(101, 1));
    }

    #[test]
    fn keeps_newest_sequence() {
        let mut t = RevokeTable::new();
        t.set(7, 20);
        t.set(7, 15);
        assert_eq!(t.get(7), Some(20));
        t.set(7, 25);
        assert_eq!(t.get(7), Some(25));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn sequence_wraps() {
        let mut t = RevokeTable::new();
        t.set(1, u32::MAX);
        t.set(1, 2); // 2 comes after u32::MAX
        assert_eq!(t.get(1), Some(2));
        assert!(t.is_revoked(1, u32::MAX - 5));
        assert!(!t.is_revoked(1, 3));
    }
}
