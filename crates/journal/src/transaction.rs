//! The running transaction (the kernel's `fs/jbd2/transaction.c`): the
//! metadata blocks operations changed since the last commit, each with its
//! newest contents, and the blocks they freed from metadata use (revoked).
//!
//! jbd2 pins buffers and copies them at commit ("frozen data"); here the
//! transaction holds each block's newest contents as an immutable shared
//! buffer (the caller's, or a copy), which is simpler and makes the commit
//! independent of later changes in the buffer cache.
//! Sequence numbers are assigned when the transaction is committed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use ondisk::jbd2::{Layout, RevokeBlock, HEADER_SIZE};

use crate::Error;

/// A transaction being built: static block -> newest contents, plus revokes.
#[derive(Clone, Debug)]
pub struct Transaction {
    block_size: usize,
    blocks: BTreeMap<u64, Arc<[u8]>>,
    revoked: BTreeSet<u64>,
}

impl Transaction {
    pub fn new(block_size: u32) -> Self {
        Transaction { block_size: block_size as usize, blocks: BTreeMap::new(), revoked: BTreeSet::new() }
    }

    /// Record the newest contents of metadata block `block` (a whole block).
    /// Logging a block revoked earlier in this transaction cancels the revoke,
    /// as `jbd2_journal_cancel_revoke` does: a revoke in T would also cancel
    /// T's own copy at replay.
    pub fn log(&mut self, block: u64, data: &[u8]) -> Result<(), Error> {
        self.log_shared(block, data.into())
    }

    /// [`Self::log`] without a copy: `data` is immutable, so the transaction
    /// may share it (a commit at unmount logs tens of MiB).
    pub fn log_shared(&mut self, block: u64, data: Arc<[u8]>) -> Result<(), Error> {
        if data.len() != self.block_size {
            return Err(Error::Invalid(format!(
                "block {block}: {} bytes, block size is {}",
                data.len(),
                self.block_size
            )));
        }
        self.revoked.remove(&block);
        self.blocks.insert(block, data);
        Ok(())
    }

    /// Block `block` stopped being metadata (freed, or about to hold file
    /// data): no copy of it from this or an earlier transaction may be
    /// replayed over whatever is written there next (`jbd2_journal_revoke`).
    /// Drops this transaction's own copy.
    pub fn revoke(&mut self, block: u64) {
        self.blocks.remove(&block);
        self.revoked.insert(block);
    }

    /// Contents logged for `block` in this transaction.
    pub fn get(&self, block: u64) -> Option<&[u8]> {
        self.blocks.get(&block).map(|b| &b[..])
    }

    /// Logged blocks in static block order (the order they are written).
    pub fn blocks(&self) -> impl Iterator<Item = (u64, &[u8])> {
        self.blocks.iter().map(|(b, d)| (*b, &d[..]))
    }

    pub fn revoked(&self) -> impl Iterator<Item = u64> + '_ {
        self.revoked.iter().copied()
    }

    /// Number of logged blocks.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn revoked_len(&self) -> usize {
        self.revoked.len()
    }

    /// Nothing to commit.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty() && self.revoked.is_empty()
    }

    pub fn block_size(&self) -> u32 {
        self.block_size as u32
    }

    /// Journal blocks the commit will take: revoke blocks, descriptors, the
    /// copies and the commit block (0 for an empty transaction).
    pub fn journal_blocks(&self, layout: &Layout) -> u64 {
        Self::journal_blocks_for(layout, self.blocks.len(), self.revoked.len())
    }

    /// Journal blocks a transaction of `blocks` copies and `revoked` revokes
    /// will take (for a caller that holds them elsewhere until the commit).
    pub fn journal_blocks_for(layout: &Layout, blocks: usize, revoked: usize) -> u64 {
        if blocks == 0 && revoked == 0 {
            return 0;
        }
        let n = blocks as u64;
        let per_desc = tags_per_descriptor(layout) as u64;
        let per_revoke = RevokeBlock::capacity(layout) as u64;
        n.div_ceil(per_desc) + n + (revoked as u64).div_ceil(per_revoke) + 1
    }

    /// Whether this transaction reached `max_blocks` (e.g.
    /// [`crate::Journal::max_transaction_blocks`]) and should be committed.
    pub fn is_full(&self, layout: &Layout, max_blocks: u64) -> bool {
        self.journal_blocks(layout) >= max_blocks
    }
}

/// Tags one descriptor block holds: after the header, the first tag carries
/// the 16-byte uuid, the rest have SAME_UUID; v2/v3 keep a 4-byte tail.
pub fn tags_per_descriptor(layout: &Layout) -> usize {
    let room = layout.block_bytes() - HEADER_SIZE - layout.tail_bytes() - 16;
    let n = room / layout.tag_bytes();
    debug_assert!(n >= 1);
    n
}

/// The running transaction shared by many threads (FUSE serves requests
/// concurrently): operations add blocks under a short lock; the committer
/// swaps in an empty transaction with [`Running::take`] and commits the old
/// one outside the lock, so operations are not blocked by the commit I/O.
#[derive(Debug)]
pub struct Running {
    inner: Mutex<Transaction>,
}

impl Running {
    pub fn new(block_size: u32) -> Self {
        Running { inner: Mutex::new(Transaction::new(block_size)) }
    }

    /// Lock the running transaction (to log several blocks atomically, as one
    /// operation's handle does). A poisoned lock is recovered: the
    /// transaction's data stays consistent block by block.
    pub fn lock(&self) -> MutexGuard<'_, Transaction> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn log(&self, block: u64, data: &[u8]) -> Result<(), Error> {
        self.lock().log(block, data)
    }

    pub fn revoke(&self, block: u64) {
        self.lock().revoke(block)
    }

    /// Take the transaction to commit, leaving an empty one running.
    pub fn take(&self) -> Transaction {
        let mut g = self.lock();
        let bs = g.block_size();
        std::mem::replace(&mut *g, Transaction::new(bs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ondisk::jbd2::{csum_seed, Checksum};

    fn layout(bs: u32, checksum: Checksum, is_64bit: bool) -> Layout {
        Layout { block_size: bs, checksum, is_64bit, seed: csum_seed(&[1; 16]) }
    }

    #[test]
    fn revoke_and_relog_cancel_each_other() {
        let mut t = Transaction::new(1024);
        t.log(5, &[1; 1024]).unwrap();
        t.revoke(5);
        assert!(t.get(5).is_none());
        assert_eq!(t.revoked().collect::<Vec<_>>(), vec![5]);
        t.log(5, &[2; 1024]).unwrap();
        assert_eq!(t.revoked_len(), 0);
        assert_eq!(t.get(5).unwrap()[0], 2);
        assert!(matches!(t.log(6, &[0; 10]), Err(Error::Invalid(_))));
    }

    #[test]
    fn sizes_follow_the_format() {
        // v3: 1024 - 12 - 4 - 16 = 992 / 16 = 62 tags.
        assert_eq!(tags_per_descriptor(&layout(1024, Checksum::V3, true)), 62);
        // none, 32-bit: 8-byte tags, no tail: (1024 - 28) / 8 = 124.
        assert_eq!(tags_per_descriptor(&layout(1024, Checksum::None, false)), 124);
        let l = layout(1024, Checksum::V3, true);
        let mut t = Transaction::new(1024);
        assert_eq!(t.journal_blocks(&l), 0);
        for b in 0..63 {
            t.log(b, &[0; 1024]).unwrap();
        }
        assert_eq!(t.journal_blocks(&l), 2 + 63 + 1);
        t.revoke(1000);
        assert_eq!(t.journal_blocks(&l), 2 + 63 + 1 + 1);
        assert!(t.is_full(&l, 67));
        assert!(!t.is_full(&l, 68));
    }

    #[test]
    fn running_take_leaves_empty() {
        let r = Running::new(1024);
        r.log(1, &[0; 1024]).unwrap();
        r.revoke(2);
        let t = r.take();
        assert_eq!(t.len(), 1);
        assert!(r.lock().is_empty());
    }
}
