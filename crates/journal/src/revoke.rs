//! The revoke table: static block -> newest transaction that revoked it.
//!
//! A revoke record in transaction T cancels the replay of that block's copies
//! in every transaction up to and including T (jbd2's `jbd2_journal_set_revoke`
//! keeps the newest T, `jbd2_journal_test_revoke` compares against it).

use std::collections::HashMap;

use crate::tid_gt;

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
