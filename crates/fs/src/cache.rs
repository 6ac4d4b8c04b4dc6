//! The buffer cache: metadata blocks by static block number.
//!
//! Sharded so that FUSE worker threads rarely contend; each shard evicts with
//! the CLOCK algorithm (a block read again since the hand last passed survives).
//! Blocks are shared as `Arc<[u8]>`: readers keep a block alive while they
//! parse it, even if it is evicted meanwhile.

use crate::intmap::IntMap;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const SHARDS: usize = 64;
const RECENT_SLOTS: usize = 4096;

pub type Block = Arc<[u8]>;

struct Slot {
    data: Block,
    referenced: bool,
    /// Dirty: newer than the block's home copy, so it must not be evicted.
    pinned: bool,
    /// The cache epoch when this block was last modified (0: never).
    version: u64,
    /// Read by a prefetch and not asked for since (StepAhead's waste count).
    prefetched: bool,
    /// `data`'s checksum is known good: it was verified since it came from
    /// the device, or we wrote it. Verifying once per copy, as the kernel's
    /// buffer_verified does, spares a 4 KiB crc32c on every lookup.
    verified: bool,
}

#[derive(Default)]
struct Shard {
    map: IntMap<u64, Slot>,
    clock: VecDeque<u64>,
    /// Lookups counted under the shard's lock: one counter shared by every
    /// thread was a cache line bounced on each lookup (15 a file created).
    hits: u64,
    misses: u64,
}

/// A cached block as [`BufferCache::peek`] saw it, for [`BufferCache::restore`].
#[derive(Clone, Debug)]
pub struct Peeked {
    pub data: Block,
    pub pinned: bool,
    pub verified: bool,
}

/// Counters for the stats file and tests.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub blocks: u64,
    /// About how many blocks the cache holds before it evicts.
    pub capacity: u64,
    /// Blocks a prefetch brought in (not those it found cached).
    pub prefetched: u64,
    /// Prefetched blocks asked for afterwards.
    pub prefetch_used: u64,
    /// Prefetched blocks evicted or dropped without being asked for.
    pub prefetch_wasted: u64,
}

impl CacheStats {
    /// Prefetched blocks still cached and not asked for yet (wasted if the
    /// volume is unmounted now).
    pub fn prefetch_unused(&self) -> u64 {
        self.prefetched.saturating_sub(self.prefetch_used + self.prefetch_wasted)
    }
}

pub struct BufferCache {
    shards: Vec<Mutex<Shard>>,
    per_shard: usize,
    evictions: AtomicU64,
    prefetched: AtomicU64,
    prefetch_used: AtomicU64,
    prefetch_wasted: AtomicU64,
    /// Counts modifications (`insert_dirty`): a reader that saw an older
    /// epoch before its device read may be holding an outdated copy.
    epoch: AtomicU64,
    /// The epoch of the last modification of any block hashing to each slot:
    /// remembers modifications of blocks evicted since (lossy, so a collision
    /// only costs a copy not cached).
    recent: Vec<AtomicU64>,
}

fn recent_slot(block: u64) -> usize {
    (block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize % RECENT_SLOTS
}

impl BufferCache {
    /// A cache holding about `capacity_blocks` blocks (at least one per shard).
    pub fn new(capacity_blocks: usize) -> Self {
        BufferCache {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            per_shard: capacity_blocks.div_ceil(SHARDS).max(1),
            evictions: AtomicU64::new(0),
            prefetched: AtomicU64::new(0),
            prefetch_used: AtomicU64::new(0),
            prefetch_wasted: AtomicU64::new(0),
            epoch: AtomicU64::new(0),
            recent: (0..RECENT_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn shard(&self, block: u64) -> &Mutex<Shard> {
        // Neighbouring blocks land in different shards.
        let h = block.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.shards[h as usize % SHARDS]
    }

    pub fn get(&self, block: u64) -> Option<Block> {
        let mut s = self.shard(block).lock();
        match s.map.get_mut(&block) {
            Some(slot) => {
                slot.referenced = true;
                if std::mem::take(&mut slot.prefetched) {
                    self.prefetch_used.fetch_add(1, Ordering::Relaxed);
                }
                let data = slot.data.clone();
                s.hits += 1;
                Some(data)
            }
            None => {
                s.misses += 1;
                None
            }
        }
    }

    /// Whether `block` is cached, without counting a hit or miss.
    pub fn contains(&self, block: u64) -> bool {
        self.shard(block).lock().map.contains_key(&block)
    }

    /// Cache a clean copy (read from home or the journal). A pinned (dirty)
    /// copy is never replaced by a clean one: it is newer.
    pub fn insert(&self, block: u64, data: Block) {
        self.put(block, data, false);
    }

    /// Install a modified block: pinned until [`BufferCache::unpin`] says its home copy is current.
    pub fn insert_dirty(&self, block: u64, data: Block) {
        self.put(block, data, true);
    }

    /// The epoch to note before reading a block from the device, for [`BufferCache::insert_read`].
    pub fn read_epoch(&self) -> u64 {
        self.epoch.load(Ordering::SeqCst)
    }

    /// Cache a copy read from the device after noting `seen` = [`BufferCache::read_epoch`].
    /// A block modified since (even if already committed and unpinned, or
    /// evicted again) is not replaced by the older copy; when it cannot be
    /// told whether this block changed, the copy is simply not cached.
    pub fn insert_read(&self, block: u64, data: Block, seen: u64) {
        self.insert_read_as(block, data, seen, false);
    }

    /// Like [`BufferCache::insert_read`], for a block a prefetch read: it is
    /// counted, and counted as wasted if it leaves the cache unasked for.
    /// Returns whether it was cached as a new block.
    pub fn insert_prefetched(&self, block: u64, data: Block, seen: u64) -> bool {
        self.insert_read_as(block, data, seen, true)
    }

    fn insert_read_as(&self, block: u64, data: Block, seen: u64, prefetched: bool) -> bool {
        // One critical section: a modification lands either before the check
        // (and is seen) or after the insert (and replaces the copy).
        let mut s = self.shard(block).lock();
        if self.recent[recent_slot(block)].load(Ordering::SeqCst) > seen {
            return false; // modified since the reader looked (or one sharing its slot was)
        }
        if let Some(slot) = s.map.get_mut(&block) {
            if !slot.pinned && slot.version <= seen {
                slot.data = data;
                slot.verified = false;
            }
            return false;
        }
        self.insert_locked(&mut s, block, data, false, 0);
        if prefetched {
            if let Some(slot) = s.map.get_mut(&block) {
                slot.prefetched = true;
                self.prefetched.fetch_add(1, Ordering::Relaxed);
            }
        }
        true
    }

    /// Whether `data` is the cached copy of `block` and its checksum is known good.
    pub fn is_verified(&self, block: u64, data: &Block) -> bool {
        self.shard(block).lock().map.get(&block).is_some_and(|s| s.verified && Arc::ptr_eq(&s.data, data))
    }

    /// `data`'s checksum was verified: remember it while it is the cached copy of `block`.
    pub fn mark_verified(&self, block: u64, data: &Block) {
        if let Some(slot) = self.shard(block).lock().map.get_mut(&block) {
            if Arc::ptr_eq(&slot.data, data) {
                slot.verified = true;
            }
        }
    }

    /// The home copy now matches `data` (if it is still the cached version): allow eviction.
    pub fn unpin(&self, block: u64, written: &Block) {
        if let Some(slot) = self.shard(block).lock().map.get_mut(&block) {
            if Arc::ptr_eq(&slot.data, written) {
                slot.pinned = false;
            }
        }
    }

    fn put(&self, block: u64, data: Block, dirty: bool) {
        let mut s = self.shard(block).lock();
        // Under the shard lock, so that insert_read sees either the new
        // version in the slot or the new epoch.
        let version = if dirty { self.epoch.fetch_add(1, Ordering::SeqCst) + 1 } else { 0 };
        if dirty {
            self.recent[recent_slot(block)].fetch_max(version, Ordering::SeqCst);
        }
        if let Some(slot) = s.map.get_mut(&block) {
            if dirty || !slot.pinned {
                slot.data = data;
                slot.pinned |= dirty;
                slot.verified = dirty;
            }
            slot.version = slot.version.max(version);
            return;
        }
        self.insert_locked(&mut s, block, data, dirty, version);
    }

    /// Add a block that is not cached, evicting as needed (shard lock held).
    fn insert_locked(&self, s: &mut Shard, block: u64, data: Block, dirty: bool, version: u64) {
        // Sweep at most one full turn of the clock (twice: referenced blocks get a
        // second chance); if everything is pinned, grow past the limit instead of spinning.
        let mut budget = 2 * s.clock.len();
        while s.map.len() >= self.per_shard && budget > 0 {
            budget -= 1;
            let Some(victim) = s.clock.pop_front() else { break };
            let keep = match s.map.get_mut(&victim) {
                Some(slot) if slot.pinned => true,
                Some(slot) if slot.referenced => {
                    slot.referenced = false;
                    true
                }
                Some(_) => false,
                None => continue,
            };
            if keep {
                s.clock.push_back(victim);
            } else {
                if s.map.remove(&victim).is_some_and(|v| v.prefetched) {
                    self.prefetch_wasted.fetch_add(1, Ordering::Relaxed);
                }
                self.evictions.fetch_add(1, Ordering::Relaxed);
            }
        }
        s.map.insert(
            block,
            Slot { data, referenced: false, pinned: dirty, version, prefetched: false, verified: dirty },
        );
        s.clock.push_back(block);
    }

    /// The cached copy of `block`, with its pinned and verified marks, without counting a hit.
    pub fn peek(&self, block: u64) -> Option<Peeked> {
        self.shard(block).lock().map.get(&block).map(|s| Peeked {
            data: s.data.clone(),
            pinned: s.pinned,
            verified: s.verified,
        })
    }

    /// Put back exactly what [`BufferCache::peek`] saw (undoing a failed
    /// operation), the verified mark too: a changed bitmap is ours, and its
    /// descriptor's checksum is brought up to date only at commit.
    pub fn restore(&self, block: u64, saved: Option<Peeked>) {
        match saved {
            None => self.remove(block),
            Some(Peeked { data, pinned, verified }) => {
                let mut s = self.shard(block).lock();
                match s.map.get_mut(&block) {
                    Some(slot) => {
                        slot.data = data;
                        slot.pinned = pinned;
                        slot.verified = verified;
                    }
                    None => {
                        let version = self.epoch.load(Ordering::SeqCst);
                        s.map.insert(
                            block,
                            Slot { data, referenced: false, pinned, version, prefetched: false, verified },
                        );
                        s.clock.push_back(block);
                    }
                }
            }
        }
    }

    /// Forget a block (e.g. freed metadata); a pinned copy is dropped too.
    pub fn remove(&self, block: u64) {
        if self.shard(block).lock().map.remove(&block).is_some_and(|v| v.prefetched) {
            self.prefetch_wasted.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The cached copy of `block` without counting a hit or a use: for
    /// StepAhead reading what it just prefetched to plan further.
    pub fn peek_quiet(&self, block: u64) -> Option<Block> {
        self.shard(block).lock().map.get(&block).map(|s| s.data.clone())
    }

    /// Number of pinned (dirty) blocks.
    pub fn pinned(&self) -> usize {
        self.shards.iter().map(|s| s.lock().map.values().filter(|v| v.pinned).count()).sum()
    }

    pub fn stats(&self) -> CacheStats {
        let (mut hits, mut misses, mut blocks) = (0, 0, 0);
        for shard in &self.shards {
            let s = shard.lock();
            (hits, misses, blocks) = (hits + s.hits, misses + s.misses, blocks + s.map.len() as u64);
        }
        CacheStats {
            hits,
            misses,
            evictions: self.evictions.load(Ordering::Relaxed),
            prefetched: self.prefetched.load(Ordering::Relaxed),
            prefetch_used: self.prefetch_used.load(Ordering::Relaxed),
            prefetch_wasted: self.prefetch_wasted.load(Ordering::Relaxed),
            blocks,
            capacity: (self.per_shard * SHARDS) as u64,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_read_older_than_a_modification_never_replaces_it() {
        let c = BufferCache::new(64);
        let old: Block = Arc::from(vec![1u8; 8]);
        let new: Block = Arc::from(vec![2u8; 8]);
        // A reader notes the epoch and reads the old copy; meanwhile the block
        // is modified and committed (unpinned).
        let seen = c.read_epoch();
        c.insert_dirty(7, new.clone());
        c.unpin(7, &new);
        c.insert_read(7, old.clone(), seen);
        assert_eq!(c.get(7).unwrap()[0], 2, "the newer copy stays");
        // Modified and evicted again: the old copy is not cached at all.
        c.remove(7);
        c.insert_read(7, old.clone(), seen);
        assert!(!c.contains(7));
        // A read that saw the current epoch is cached as usual, and so is one
        // of a block nobody modified, even if others were.
        c.insert_read(8, old.clone(), c.read_epoch());
        assert!(c.contains(8));
        assert_ne!(recent_slot(7), recent_slot(9));
        c.insert_read(9, old, seen);
        assert!(c.contains(9), "an unrelated modification does not stop caching");
    }
    use super::*;

    fn blk(v: u8) -> Block {
        Arc::from(vec![v; 8])
    }

    #[test]
    fn hit_after_insert_and_bounded_size() {
        let c = BufferCache::new(SHARDS * 2);
        for i in 0..10_000u64 {
            c.insert(i, blk(i as u8));
        }
        let st = c.stats();
        assert!(st.blocks <= (SHARDS * 2) as u64, "{st:?}");
        assert!(st.evictions >= 10_000 - (SHARDS * 2) as u64);
        c.insert(5, blk(5));
        assert_eq!(c.get(5).unwrap()[0], 5);
    }

    #[test]
    fn referenced_blocks_survive_one_sweep() {
        let c = BufferCache::new(SHARDS * 2); // two blocks per shard
        let same: Vec<u64> = (0..100_000u64).filter(|&b| std::ptr::eq(c.shard(b), c.shard(0))).take(3).collect();
        let (a, b, n) = (same[0], same[1], same[2]);
        c.insert(a, blk(1));
        c.insert(b, blk(2));
        assert!(c.get(a).is_some()); // a is referenced, b is not
        c.insert(n, blk(3));
        assert!(c.contains(a), "a referenced block gets a second chance");
        assert!(!c.contains(b), "the unreferenced block is the victim");
        assert!(c.contains(n));
    }

    #[test]
    fn prefetched_blocks_count_as_used_or_wasted_once() {
        let c = BufferCache::new(SHARDS); // one block per shard
        let same: Vec<u64> = (0..100_000u64).filter(|&b| std::ptr::eq(c.shard(b), c.shard(0))).take(4).collect();
        assert!(c.insert_prefetched(same[0], blk(1), c.read_epoch()));
        assert!(!c.insert_prefetched(same[0], blk(1), c.read_epoch()), "already cached: not counted again");
        assert!(c.get(same[0]).is_some());
        assert!(c.get(same[0]).is_some());
        assert_eq!((c.stats().prefetched, c.stats().prefetch_used, c.stats().prefetch_unused()), (1, 1, 0));
        // Evicted unused: wasted; removed unused: wasted.
        assert!(c.insert_prefetched(same[1], blk(2), c.read_epoch()));
        assert!(!c.contains(same[0]), "one block per shard");
        assert!(c.peek_quiet(same[1]).is_some());
        assert_eq!(c.stats().prefetch_unused(), 1, "a quiet peek is no use");
        c.insert(same[2], blk(3));
        assert!(c.insert_prefetched(same[3], blk(4), c.read_epoch()));
        c.remove(same[3]);
        let st = c.stats();
        assert_eq!((st.prefetched, st.prefetch_used, st.prefetch_wasted, st.prefetch_unused()), (3, 1, 2, 0), "{st:?}");
    }

    #[test]
    fn dirty_blocks_are_never_evicted_until_unpinned() {
        let c = BufferCache::new(SHARDS); // one block per shard
        let same: Vec<u64> = (0..100_000u64).filter(|&b| std::ptr::eq(c.shard(b), c.shard(0))).take(3).collect();
        let d = blk(9);
        c.insert_dirty(same[0], d.clone());
        c.insert(same[1], blk(1));
        assert!(c.contains(same[0]), "pinned block survived");
        // A clean copy read from disk must not replace the newer dirty one.
        c.insert(same[0], blk(0));
        assert_eq!(c.get(same[0]).unwrap()[0], 9);
        c.unpin(same[0], &d);
        c.insert(same[2], blk(2));
        c.insert(same[1], blk(1));
        assert!(!c.contains(same[0]), "unpinned block can go");
        assert_eq!(c.pinned(), 0);
    }
}
