//! The last, partly filled block of recently written files, kept in memory.
//!
//! The kernel's page cache keeps the page holding a file's end after a write,
//! so an append (which rewrites that page) and a read of the file's end cost
//! no device read. The daemon sees only the bytes of each write, and the
//! kernel's FUSE page cache never marks a partly written page up to date: so
//! without this, every append to a file whose end is on disk reads that block
//! first (read-modify-write), and the first read of a file's end after a
//! write asks the daemon for it again. Postmark at scale 0.2 made 8,200 such
//! reads, a third of the daemon's device reads, each waited for in turn.
//!
//! An entry says: block `lblk` of inode `ino` lives at physical block `pblk`
//! and holds these bytes on disk. It is used only when the file's current
//! map still sends `lblk` to `pblk`, so a block unmapped, moved or freed
//! since can never be served from here. What keeps the bytes right is that
//! every data write of a file's block goes through one of the write paths
//! that call [`Tails::forget_range`] before writing (or [`Tails::remember`]
//! after): `write_piece`, delayed write-back, zeroing, inline conversion and
//! `write_data`. All of them, and every reader, hold the file's data lock.

use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};

struct Tail {
    lblk: u64,
    pblk: u64,
    data: Box<[u8]>,
    /// The insertion that made this entry current (see `Inner::order`).
    stamp: u64,
}

#[derive(Default)]
struct Inner {
    tails: HashMap<u32, Tail>,
    /// Insertions, oldest first: (inode, stamp). An insertion whose stamp is
    /// no longer its inode's is stale and skipped when evicting.
    order: VecDeque<(u32, u64)>,
    next_stamp: u64,
}

/// At most `capacity` files' last blocks, the oldest remembered going first.
pub(crate) struct Tails {
    inner: Mutex<Inner>,
    capacity: usize,
    hits: AtomicU64,
}

impl Tails {
    pub(crate) fn new(capacity: usize) -> Tails {
        Tails { inner: Mutex::new(Inner::default()), capacity, hits: AtomicU64::new(0) }
    }

    /// Copy the bytes kept for block `lblk` of `ino`, mapped at `pblk`, into
    /// `dst` (one block); false when nothing is kept for that mapping.
    pub(crate) fn read(&self, ino: u32, lblk: u64, pblk: u64, dst: &mut [u8]) -> bool {
        if self.capacity == 0 {
            return false; // every reader would take the lock for nothing
        }
        let g = self.inner.lock();
        match g.tails.get(&ino) {
            Some(t) if t.lblk == lblk && t.pblk == pblk && t.data.len() == dst.len() => {
                dst.copy_from_slice(&t.data);
                self.hits.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// Block `lblk` of `ino`, at `pblk`, now holds `block` on disk (written
    /// just now): keep it, in place of what was kept for `ino`.
    pub(crate) fn remember(&self, ino: u32, lblk: u64, pblk: u64, block: &[u8]) {
        if self.capacity == 0 {
            return;
        }
        let mut g = self.inner.lock();
        let g = &mut *g;
        g.next_stamp += 1;
        let stamp = g.next_stamp;
        match g.tails.get_mut(&ino) {
            Some(t) if t.data.len() == block.len() => {
                t.data.copy_from_slice(block);
                (t.lblk, t.pblk, t.stamp) = (lblk, pblk, stamp);
            }
            _ => {
                g.tails.insert(ino, Tail { lblk, pblk, data: block.into(), stamp });
            }
        }
        g.order.push_back((ino, stamp));
        while g.tails.len() > self.capacity {
            let Some((old, s)) = g.order.pop_front() else { break };
            if g.tails.get(&old).is_some_and(|t| t.stamp == s) {
                g.tails.remove(&old);
            }
        }
        // Re-remembering the same files leaves stale insertions behind: drop
        // them before the queue outgrows the entries by much.
        if g.order.len() > 2 * self.capacity + 16 {
            let tails = &g.tails;
            g.order.retain(|(i, s)| tails.get(i).is_some_and(|t| t.stamp == *s));
        }
        debug_assert!(g.tails.len() <= self.capacity);
    }

    /// Blocks `lblk..lblk + n` of `ino` are about to be written, unmapped or
    /// zeroed: whatever is kept among them is no longer known to be right.
    pub(crate) fn forget_range(&self, ino: u32, lblk: u64, n: u64) {
        let mut g = self.inner.lock();
        if g.tails.get(&ino).is_some_and(|t| t.lblk >= lblk && t.lblk - lblk < n) {
            g.tails.remove(&ino);
        }
    }

    /// `ino` is freed: nothing of it is kept.
    pub(crate) fn forget(&self, ino: u32) {
        self.inner.lock().tails.remove(&ino);
    }

    /// Reads served from here since mount.
    pub(crate) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner.lock().tails.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(fill: u8) -> Vec<u8> {
        vec![fill; 4096]
    }

    #[test]
    fn a_block_is_served_only_for_the_mapping_it_was_written_at() {
        let t = Tails::new(8);
        t.remember(12, 3, 900, &block(7));
        let mut dst = block(0);
        assert!(t.read(12, 3, 900, &mut dst));
        assert_eq!(dst, block(7));
        assert!(!t.read(12, 3, 901, &mut dst), "the block moved");
        assert!(!t.read(12, 4, 900, &mut dst), "another logical block");
        assert!(!t.read(13, 3, 900, &mut dst), "another file");
        assert_eq!(t.hits(), 1);
    }

    #[test]
    fn a_write_over_the_block_forgets_it_and_one_elsewhere_does_not() {
        let t = Tails::new(8);
        t.remember(5, 10, 100, &block(1));
        t.forget_range(5, 0, 10);
        t.forget_range(5, 11, 4);
        t.forget_range(6, 10, 1);
        let mut dst = block(0);
        assert!(t.read(5, 10, 100, &mut dst), "writes beside it or to another file leave it");
        t.forget_range(5, 8, 3);
        assert!(!t.read(5, 10, 100, &mut dst));
        t.remember(5, 10, 100, &block(2));
        t.forget(5);
        assert!(!t.read(5, 10, 100, &mut dst));
    }

    #[test]
    fn remembering_again_replaces_and_the_oldest_go_first() {
        let t = Tails::new(3);
        for ino in 1..=3 {
            t.remember(ino, 0, u64::from(ino), &block(ino as u8));
        }
        // Inode 1 again, at its new end: it is now the newest.
        t.remember(1, 1, 50, &block(9));
        let mut dst = block(0);
        assert!(!t.read(1, 0, 1, &mut dst), "the old end is replaced");
        assert!(t.read(1, 1, 50, &mut dst) && dst == block(9));
        t.remember(4, 0, 4, &block(4));
        assert_eq!(t.len(), 3);
        assert!(!t.read(2, 0, 2, &mut dst), "the oldest went");
        assert!(t.read(1, 1, 50, &mut dst) && t.read(3, 0, 3, &mut dst) && t.read(4, 0, 4, &mut dst));
    }

    #[test]
    fn the_queue_stays_bounded_when_the_same_files_are_remembered_over_and_over() {
        let t = Tails::new(4);
        for round in 0..10_000u64 {
            t.remember((round % 3) as u32, round, round, &block(1));
        }
        assert!(t.inner.lock().order.len() <= 2 * 4 + 16 + 1);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_zero_capacity_keeps_nothing() {
        let t = Tails::new(0);
        t.remember(1, 0, 1, &block(1));
        assert!(!t.read(1, 0, 1, &mut block(0)));
    }
}
