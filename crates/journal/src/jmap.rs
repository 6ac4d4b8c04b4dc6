//! The jmap: static block S -> the journal block J holding S's newest live
//! copy, and for every transaction the list of static blocks whose newest
//! copy it holds (its *live* blocks).
//!
//! Both modes use it (see docs/LAZY.md, "jmap"): in ordered mode an entry
//! means "committed, not yet written home"; in lazy mode "the newest copy of
//! S is in the log". A transaction with no live blocks can be passed by the
//! tail.
//!
//! # Layout: 20-byte slots in an ordered linear-probing table
//!
//! One array of 20-byte slots `h: u64 | jblock+escaped: u32 | prev: u32 |
//! next: u32` (4-byte aligned), nothing else per entry:
//!
//! - `h` is `mix(S)`, a bijection of u64 (splitmix64's finaliser), stored
//!   instead of S: probing compares and homes stored hashes without rehashing
//!   them, and [`LiveBlocks`] gets S back with the inverse (`unmix`).
//! - `jblock` is journal-relative; its top bit is `escaped`. Journals are
//!   below 2^31 - 1 blocks ([`JBLOCK_LIMIT`]; `Journal::load` refuses
//!   larger ones), and `u32::MAX` marks an empty slot.
//! - `prev`/`next` link the entry into its transaction's doubly linked live
//!   list by slot index: superseding or removing unlinks in O(1), a
//!   transaction's live blocks are walked in O(live). The list heads are a
//!   deque of first slots (4 bytes per transaction) beside the table.
//!
//! **No owner field.** The old layout kept the owning sequence in every slot
//! (24 bytes). Here only the *first* entry of a list records its owner: its
//! `prev` is `HEAD | sequence & 0x7fff_ffff` (slot indices are below 2^31),
//! which is all unlinking or moving an entry needs (a middle entry's
//! neighbours are slots; the first's is the list head). The owner of any
//! other entry is not stored: it is derivable from J, since the live
//! transactions are consecutive ranges of the circular log in sequence order
//! (`Journal::newest_copy` finds it by binary search over its live ring).
//! Consequences: [`Jmap::get`], [`Jmap::insert`] and [`Jmap::remove`] report
//! (J, escaped) without the sequence; no per-transaction count is kept
//! (unlinking a middle entry does not know whose list it leaves), so
//! [`Jmap::live_count`] walks the list (O(live)) and [`Jmap::has_live`],
//! what the tail needs, is O(1).
//!
//! **Ordered probing without wrap-around.** An entry's home slot is
//! `h * homes >> 64` (any number of home slots works), and the table is kept
//! sorted by `h` (Robin Hood order with ties broken by the hash itself, as
//! Amble and Knuth's ordered hash tables): an entry sits at or after its
//! home with no empty slot between. A lookup scans from the home while the
//! stored hash is smaller; empty slots hold `h = u64::MAX`, so the scan is a
//! single comparison per slot and stops at the first slot with a hash at
//! least the key's, hit or miss (one key hashes to `u64::MAX` too: whether a
//! slot is empty is its jblock field). The table does not wrap: slots past the
//! last home form an overflow area that catches the last cluster, extended
//! when needed so that the last slot stays empty (the scans' sentinel).
//! Insertion shifts the rest of the run one slot on, deletion shifts the
//! following displaced entries one slot back; every moved entry repoints its
//! list neighbours (or its list head).
//!
//! **Growth that keeps the load high.** Memory per entry is 20 bytes / load.
//! Doubling (the usual choice) leaves the load at half its maximum after
//! each growth: 44 bytes per entry at load 0.45. Here the table holds at
//! most `MAX_LOAD` = 0.92 entries per home slot and then grows to
//! `GROWN_LOAD` = 0.85 (by about 8%), so from a few thousand entries on a
//! table costs between 20 / 0.92 = 21.7 and 20 / 0.85 = 23.5 bytes per
//! entry, plus its overflow area (16 slots, more only if the last cluster
//! needs them) and 4 bytes per list head (a deque: up to 8 bytes per
//! transaction with live entries or behind one), whether sized up front
//! ([`Jmap::with_capacity`], which `resume` uses at mount) or grown one
//! insert at a time. Since the table is sorted by hash, growing is one
//! sequential merge into the new array (each entry goes to
//! `max(new home, previous position + 1)`), then one pass repointing the
//! list links through forwarding addresses left in the old array. Costs:
//! about 1 / (0.92 / 0.85 - 1) = 12 entry copies per insert amortised; one
//! step at 1,000,000 entries takes about 25 ms (the insert that triggers it
//! waits), and while it runs the old array is still allocated (2.1 times the
//! table for that moment). The map does not shrink after removals.
//!
//! Why 0.92 and not 0.95: lookups cost the same (one cache miss dominates:
//! about 40 ns at 1,000,000 entries either way), but an insert at full load
//! shifts the rest of its cluster, whose length grows as 1 / (1 - load)^2:
//! a remove + insert at load 0.95 measured 3.7 us against 1.0-1.4 us at 0.92
//! (and 1.4 us for the old 24-byte table at its maximum, 0.9). Lower loads
//! give shorter probes but leave little room under 24 bytes after a growth
//! step (0.90 growing to 0.84: 23.9 bytes per entry).
//!
//! Rejected: sizing the table for the whole log up front (live entries never
//! exceed the log's blocks). Nothing would ever grow, but a 1 GiB journal of
//! 4 KiB blocks would hold 5.7 MB of jmap from the first mount however little
//! of the log is live: hundreds of bytes per entry for a mostly empty log.
//!
//! Measured figures (`cargo test -p journal --release --lib memory --
//! --nocapture`) are in docs/LAZY.md.

use std::collections::VecDeque;
use std::mem::size_of;

/// Journal blocks must be below this (the top bit of the jblock field is
/// `escaped`, and all ones marks an empty slot).
pub const JBLOCK_LIMIT: u32 = (1 << 31) - 1;
/// `next` of a list's last entry, a list head of an empty list.
const NIL: u32 = u32::MAX;
/// The jblock field of an empty slot.
const EMPTY: u32 = u32::MAX;
const ESCAPED: u32 = 1 << 31;
/// `prev` of a list's first entry: `HEAD | sequence & SEQ_BITS`.
const HEAD: u32 = 1 << 31;
const SEQ_BITS: u32 = HEAD - 1;
/// Grow when an insert would put more than MAX_LOAD entries per home slot...
const MAX_LOAD: (usize, usize) = (92, 100);
/// ...to this load.
const GROWN_LOAD: (usize, usize) = (85, 100);
const MIN_HOMES: usize = 16;
/// Slots past the last home, and the step by which they are extended.
const OVERFLOW: usize = 16;

/// One entry (or an empty slot). Packed to 4-byte alignment: 20 bytes.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed(4))]
struct Slot {
    /// `mix(static block)`; `u64::MAX` in an empty slot.
    h: u64,
    /// Journal block | `ESCAPED`, or `EMPTY`.
    val: u32,
    /// Previous slot in the owner's live list, or `HEAD | owner's sequence`.
    prev: u32,
    /// Next slot in the owner's live list, or `NIL`.
    next: u32,
}

const _: () = assert!(size_of::<Slot>() == 20);

const EMPTY_SLOT: Slot = Slot { h: u64::MAX, val: EMPTY, prev: NIL, next: NIL };

impl Slot {
    fn is_empty(&self) -> bool {
        self.val == EMPTY
    }
}

/// Where a static block's newest live copy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JmapEntry {
    /// Journal-relative block holding the copy.
    pub jblock: u32,
    /// The copy's first 4 bytes were the jbd2 magic, zeroed in the log.
    pub escaped: bool,
}

impl JmapEntry {
    fn from_val(val: u32) -> Self {
        JmapEntry { jblock: val & !ESCAPED, escaped: val & ESCAPED != 0 }
    }
}

/// Size of the map, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JmapStats {
    pub entries: usize,
    /// Memory allocated for the table and the list heads.
    pub bytes: usize,
}

/// Test hook: which bijection turns keys into stored hashes.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Hasher {
    #[default]
    Mix,
    /// `h = key`: small keys all have home 0 (one long cluster).
    Identity,
    /// `h = !key`: small keys all have the last home (everything in the
    /// overflow area; key 0 has `h = u64::MAX`, the empty slots' hash).
    Reverse,
}

/// The map; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Jmap {
    /// Home slots, then the overflow area; sorted by hash; the last is empty.
    slots: Vec<Slot>,
    /// Number of home slots (`slots.len()` minus the overflow area).
    homes: usize,
    len: usize,
    /// First slot of the live lists of sequences `base, base + 1, ...`.
    heads: VecDeque<u32>,
    base: u32,
    #[cfg(test)]
    hasher: Hasher,
}

/// splitmix64's finaliser: a bijection of u64 with well-mixed high bits
/// (the home slot uses the high bits).
fn mix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The inverse of [`mix`] (the multipliers' inverses mod 2^64; `x ^ x >> k`
/// is undone by xoring in `x >> k`, `x >> 2k`, ...).
fn unmix(h: u64) -> u64 {
    let mut z = h ^ (h >> 31) ^ (h >> 62);
    z = z.wrapping_mul(0x3196_42B2_D24D_8EC3);
    z ^= (z >> 27) ^ (z >> 54);
    z = z.wrapping_mul(0x96DE_1B17_3F11_9089);
    z ^= (z >> 30) ^ (z >> 60);
    z.wrapping_sub(0x9E37_79B9_7F4A_7C15)
}

/// Home slots for `n` entries at load `(num, den)`.
fn homes_for(n: usize, (num, den): (usize, usize)) -> usize {
    (n * den).div_ceil(num).max(MIN_HOMES)
}

impl Jmap {
    pub fn new() -> Self {
        Self::default()
    }

    /// A map sized for `n` entries without growing (e.g. at mount, from the
    /// number of surviving copies).
    pub fn with_capacity(n: usize) -> Self {
        let mut m = Self::new();
        if n > 0 {
            m.resize(homes_for(n, MAX_LOAD));
        }
        m
    }

    #[cfg(test)]
    fn with_hasher(hasher: Hasher) -> Self {
        Jmap { hasher, ..Self::default() }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in the table (home slots and overflow area).
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Memory really allocated: the table plus the list heads.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>() + self.heads.capacity() * size_of::<u32>()
    }

    pub fn stats(&self) -> JmapStats {
        JmapStats { entries: self.len, bytes: self.bytes() }
    }

    /// Drop every entry and list head (keeps the table's memory).
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY_SLOT);
        self.len = 0;
        self.heads.clear();
    }

    fn hash(&self, key: u64) -> u64 {
        #[cfg(test)]
        match self.hasher {
            Hasher::Mix => {}
            Hasher::Identity => return key,
            Hasher::Reverse => return !key,
        }
        mix(key)
    }

    fn unhash(&self, h: u64) -> u64 {
        #[cfg(test)]
        match self.hasher {
            Hasher::Mix => {}
            Hasher::Identity => return h,
            Hasher::Reverse => return !h,
        }
        unmix(h)
    }

    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.homes as u128) >> 64) as usize
    }

    /// The first slot at or after `h`'s home whose hash is not below `h`:
    /// `h`'s slot if it is in the table, else where it goes.
    fn seek(&self, h: u64) -> usize {
        let mut i = self.home(h);
        // Terminates: the last slot is empty (hash u64::MAX).
        while self.slots[i].h < h {
            i += 1;
        }
        i
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let h = self.hash(key);
        let i = self.seek(h);
        let s = &self.slots[i];
        (s.h == h && !s.is_empty()).then_some(i)
    }

    /// Index in `heads` of the owner recorded in a first entry's `prev`.
    fn head_of(&self, code: u32) -> usize {
        debug_assert!(code & HEAD != 0);
        let k = ((code & SEQ_BITS).wrapping_sub(self.base) & SEQ_BITS) as usize;
        debug_assert!(k < self.heads.len(), "entry of a transaction without a list head");
        k
    }

    fn head_index(&self, txn: u32) -> Option<usize> {
        let i = txn.wrapping_sub(self.base) as usize;
        (i < self.heads.len()).then_some(i)
    }

    /// The list head of `txn`, created (with empty heads for any gap) if missing.
    fn head_for(&mut self, txn: u32) -> usize {
        if self.heads.is_empty() {
            self.base = txn;
        }
        let off = txn.wrapping_sub(self.base) as i32;
        if off < 0 {
            // An older transaction than any in the map: extend at the front.
            for _ in 0..off.unsigned_abs() {
                self.heads.push_front(NIL);
            }
            self.base = txn;
        } else {
            while self.heads.len() <= off as usize {
                self.heads.push_back(NIL);
            }
        }
        debug_assert!(
            self.heads.len() < SEQ_BITS as usize,
            "transactions in the jmap must span fewer than 2^31 sequences"
        );
        txn.wrapping_sub(self.base) as usize
    }

    /// The newest live copy of static block `s`.
    pub fn get(&self, s: u64) -> Option<JmapEntry> {
        self.find(s).map(|i| JmapEntry::from_val(self.slots[i].val))
    }

    /// Record that transaction `txn` holds the newest copy of `s` at journal
    /// block `jblock` (below [`JBLOCK_LIMIT`]). If `s` had an entry, it leaves
    /// its old transaction's live list (superseded) and is returned.
    pub fn insert(&mut self, s: u64, jblock: u32, escaped: bool, txn: u32) -> Option<JmapEntry> {
        assert!(jblock < JBLOCK_LIMIT, "journal block {jblock} cannot be mapped");
        let val = jblock | if escaped { ESCAPED } else { 0 };
        let head = self.head_for(txn);
        if self.slots.is_empty() {
            self.resize(MIN_HOMES);
        }
        let h = self.hash(s);
        let mut p = self.seek(h);
        if self.slots[p].h == h && !self.slots[p].is_empty() {
            let old = JmapEntry::from_val(self.slots[p].val);
            self.unlink(p);
            self.slots[p].val = val;
            self.link(p, head, txn);
            return Some(old);
        }
        if (self.len + 1) * MAX_LOAD.1 > self.homes * MAX_LOAD.0 {
            self.resize(homes_for(self.len + 1, GROWN_LOAD).max(self.homes + 1));
            p = self.seek(h);
        }
        // Shift the run from p to the next empty slot one slot on.
        let mut e = p;
        while !self.slots[e].is_empty() {
            e += 1;
        }
        if e + 1 == self.slots.len() {
            // The last slot is about to be used: keep an empty one after it.
            self.extend_overflow();
        }
        while e > p {
            self.move_slot(e - 1, e);
            e -= 1;
        }
        self.slots[p] = Slot { h, val, prev: NIL, next: NIL };
        self.len += 1;
        self.link(p, head, txn);
        None
    }

    /// Remove `s`'s entry (written home, revoked, or freed) and return it.
    pub fn remove(&mut self, s: u64) -> Option<JmapEntry> {
        let i = self.find(s)?;
        let entry = JmapEntry::from_val(self.slots[i].val);
        self.unlink(i);
        // Backward shift: pull the following displaced entries one slot back
        // (the last slot is empty, so j stays in the table).
        let mut hole = i;
        let mut j = i + 1;
        while !self.slots[j].is_empty() && self.home(self.slots[j].h) < j {
            self.move_slot(j, hole);
            hole = j;
            j += 1;
        }
        self.slots[hole] = EMPTY_SLOT;
        self.len -= 1;
        Some(entry)
    }

    /// Whether `txn` holds the newest copy of any static block (O(1)).
    pub fn has_live(&self, txn: u32) -> bool {
        self.head_index(txn).is_some_and(|i| self.heads[i] != NIL)
    }

    /// Number of static blocks whose newest copy `txn` holds (walks the list:
    /// O(live); see the module documentation).
    pub fn live_count(&self, txn: u32) -> usize {
        self.live_blocks(txn).count()
    }

    /// The static blocks whose newest copy `txn` holds, in no particular order.
    pub fn live_blocks(&self, txn: u32) -> LiveBlocks<'_> {
        let at = self.head_index(txn).map_or(NIL, |i| self.heads[i]);
        LiveBlocks { map: self, at }
    }

    /// Drop the list heads of `txn` and older transactions (the tail passed
    /// them), stopping at the first that still has live blocks. Returns how
    /// many heads went.
    pub fn retire(&mut self, txn: u32) -> usize {
        let mut n = 0;
        while let Some(&first) = self.heads.front() {
            if crate::tid_gt(self.base, txn) || first != NIL {
                break;
            }
            self.heads.pop_front();
            self.base = self.base.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Move the entry in slot `from` to slot `to` (free or already moved
    /// away) and repoint its list neighbours (or its list head) at `to`.
    fn move_slot(&mut self, from: usize, to: usize) {
        let s = self.slots[from];
        self.slots[to] = s;
        let to32 = to as u32;
        if s.prev & HEAD != 0 {
            let k = self.head_of(s.prev);
            self.heads[k] = to32;
        } else {
            self.slots[s.prev as usize].next = to32;
        }
        if s.next != NIL {
            self.slots[s.next as usize].prev = to32;
        }
    }

    /// Push slot `i` at the front of list head `head`, the list of `txn`.
    fn link(&mut self, i: usize, head: usize, txn: u32) {
        let first = self.heads[head];
        let code = HEAD | (txn & SEQ_BITS);
        self.slots[i].prev = code;
        self.slots[i].next = first;
        if first != NIL {
            self.slots[first as usize].prev = i as u32;
        }
        self.heads[head] = i as u32;
    }

    /// Take slot `i` out of its transaction's list.
    fn unlink(&mut self, i: usize) {
        let s = self.slots[i];
        if s.prev & HEAD != 0 {
            let k = self.head_of(s.prev);
            self.heads[k] = s.next;
        } else {
            self.slots[s.prev as usize].next = s.next;
        }
        if s.next != NIL {
            // The next entry takes over our prev: a slot, or the head code.
            self.slots[s.next as usize].prev = s.prev;
        }
    }

    /// Add `OVERFLOW` empty slots at the end of `slots` (exactly: the memory
    /// figure counts allocated slots).
    fn extend_overflow_of(slots: &mut Vec<Slot>) {
        let n = slots.len() + OVERFLOW;
        assert!(n < HEAD as usize, "jmap larger than 2^31 slots");
        slots.reserve_exact(OVERFLOW);
        slots.resize(n, EMPTY_SLOT);
    }

    fn extend_overflow(&mut self) {
        Self::extend_overflow_of(&mut self.slots);
    }

    /// Rebuild the table with `homes` home slots (at least `len`). The table
    /// is sorted by hash, so the entries are merged into the new array in
    /// order, each at `max(new home, previous position + 1)`; the old slot
    /// keeps the entry's new position (in `next`) so that a second pass can
    /// repoint every list link and head. The lists keep their order.
    fn resize(&mut self, homes: usize) {
        debug_assert!(homes >= self.len);
        let mut new = Vec::new();
        new.reserve_exact(homes + OVERFLOW);
        new.resize(homes + OVERFLOW, EMPTY_SLOT);
        assert!(new.len() < HEAD as usize, "jmap larger than 2^31 slots");
        let mut old = std::mem::take(&mut self.slots);
        self.homes = homes;
        let mut free = 0;
        for o in old.iter_mut().filter(|o| !o.is_empty()) {
            let p = self.home(o.h).max(free);
            while p + 1 >= new.len() {
                Self::extend_overflow_of(&mut new);
            }
            new[p] = *o;
            o.next = p as u32;
            free = p + 1;
        }
        for o in old.iter().filter(|o| !o.is_empty()) {
            let s = &mut new[o.next as usize];
            if s.prev & HEAD == 0 {
                s.prev = old[s.prev as usize].next;
            }
            if s.next != NIL {
                s.next = old[s.next as usize].next;
            }
        }
        for first in self.heads.iter_mut().filter(|f| **f != NIL) {
            *first = old[*first as usize].next;
        }
        self.slots = new;
    }

    /// Mean and maximum probe length of a hit (slots read: 1 + distance
    /// from the home slot), over all entries. Walks the whole table.
    pub fn probe_lengths(&self) -> (f64, usize) {
        let mut sum = 0;
        let mut max = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if !s.is_empty() {
                let p = i - self.home(s.h) + 1;
                sum += p;
                max = max.max(p);
            }
        }
        (sum as f64 / self.len.max(1) as f64, max)
    }

    /// Check every structural invariant (tests).
    #[cfg(test)]
    fn check(&self) {
        if self.slots.is_empty() {
            assert_eq!(self.len, 0);
            assert_eq!(self.homes, 0);
        } else {
            assert!(self.slots.len() > self.homes, "no overflow area");
            assert!(self.slots.last().unwrap().is_empty(), "last slot in use");
        }
        let mut n = 0;
        let mut last_empty = None;
        let mut prev_h = None;
        for (i, s) in self.slots.iter().enumerate() {
            if s.is_empty() {
                assert_eq!({ s.h }, u64::MAX, "empty slot {i} with a hash");
                last_empty = Some(i);
                continue;
            }
            n += 1;
            let h = s.h;
            assert!(s.val & !ESCAPED < JBLOCK_LIMIT);
            let home = self.home(h);
            assert!(home <= i, "slot {i} before its home {home}");
            assert!(last_empty.is_none_or(|e| e < home), "empty slot between home {home} and {i}");
            assert!(prev_h.is_none_or(|p| p < h), "hash order at {i}");
            prev_h = Some(h);
            let key = self.unhash(h);
            assert_eq!(self.hash(key), h);
            assert_eq!(self.find(key), Some(i), "slot {i} not found by its key");
        }
        assert_eq!(n, self.len);
        let mut seen = vec![false; self.slots.len()];
        let mut listed = 0;
        for (k, &first) in self.heads.iter().enumerate() {
            let txn = self.base.wrapping_add(k as u32);
            let mut prev = HEAD | (txn & SEQ_BITS);
            let mut at = first;
            while at != NIL {
                let s = &self.slots[at as usize];
                assert!(!s.is_empty());
                assert!(!seen[at as usize], "slot {at} in two lists or a cycle");
                seen[at as usize] = true;
                assert_eq!({ s.prev }, prev, "back link of slot {at}");
                prev = at;
                at = s.next;
                listed += 1;
            }
        }
        assert_eq!(listed, self.len, "every entry in exactly one list");
        assert!(self.len * MAX_LOAD.1 <= self.homes * MAX_LOAD.0 || self.len == 0);
    }
}

/// Iterator over a transaction's live static blocks.
pub struct LiveBlocks<'a> {
    map: &'a Jmap,
    at: u32,
}

impl Iterator for LiveBlocks<'_> {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        if self.at == NIL {
            return None;
        }
        let s = &self.map.slots[self.at as usize];
        self.at = s.next;
        Some(self.map.unhash(s.h))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;
    use std::collections::{BTreeMap, BTreeSet, HashMap};
    use std::time::Instant;

    /// Counts the bytes each thread has allocated and not freed, so the
    /// memory test can check `bytes()` against what the allocator handed out.
    struct Counting;

    thread_local! {
        static LIVE: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    fn count(delta: isize) {
        let _ = LIVE.try_with(|l| {
            let v = l.get() + delta;
            l.set(v);
            let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
        });
    }

    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count(layout.size() as isize);
            System.alloc(layout)
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count(layout.size() as isize);
            System.alloc_zeroed(layout)
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            count(-(layout.size() as isize));
            System.dealloc(ptr, layout)
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count(new_size as isize - layout.size() as isize);
            System.realloc(ptr, layout, new_size)
        }
    }

    #[global_allocator]
    static ALLOC: Counting = Counting;

    /// (bytes live on this thread, and the peak since the last call).
    fn allocated() -> (isize, isize) {
        let live = LIVE.with(|l| l.get());
        let peak = PEAK.with(|p| p.replace(live));
        (live, peak)
    }

    fn entry(jblock: u32, escaped: bool) -> JmapEntry {
        JmapEntry { jblock, escaped }
    }

    #[test]
    fn allocation_counting() {
        let base = allocated().0;
        let mut m = Jmap::new();
        for k in 0..50_000 {
            m.insert(k, 1, false, (k / 1000) as u32);
            assert_eq!(allocated().0 - base, m.bytes() as isize, "after {k}");
        }
    }

    #[test]
    fn mix_is_a_bijection() {
        for k in [0, 1, 2, 12345, u64::MAX, u64::MAX - 1, 1 << 63, 0xDEAD_BEEF_0123_4567] {
            assert_eq!(unmix(mix(k)), k);
            assert_eq!(mix(unmix(k)), k);
        }
        for i in 0..100_000u64 {
            let k = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i << 7);
            assert_eq!(unmix(mix(k)), k);
        }
    }

    #[test]
    fn insert_supersede_remove() {
        let mut m = Jmap::new();
        assert_eq!(m.bytes(), 0);
        assert_eq!(m.insert(10, 100, false, 7), None);
        assert_eq!(m.insert(11, 101, true, 7), None);
        assert_eq!(m.insert(10, 200, true, 8), Some(entry(100, false)));
        assert_eq!(m.get(10), Some(entry(200, true)));
        assert_eq!(m.live_count(7), 1);
        assert!(m.has_live(7));
        assert_eq!(m.live_blocks(7).collect::<Vec<_>>(), vec![11]);
        assert_eq!(m.live_blocks(8).collect::<Vec<_>>(), vec![10]);
        assert_eq!(m.retire(7), 0, "7 still has a live block");
        assert_eq!(m.remove(11), Some(entry(101, true)));
        assert!(!m.has_live(7));
        assert_eq!(m.retire(7), 1);
        assert_eq!(m.live_count(7), 0);
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(11), None);
        // The largest journal block and the escaped bit do not collide with
        // the empty marker.
        m.insert(12, JBLOCK_LIMIT - 1, true, 8);
        m.insert(13, JBLOCK_LIMIT - 1, false, 9);
        assert_eq!(m.get(12), Some(entry(JBLOCK_LIMIT - 1, true)));
        assert_eq!(m.get(13), Some(entry(JBLOCK_LIMIT - 1, false)));
        m.check();
    }

    #[test]
    #[should_panic(expected = "cannot be mapped")]
    fn jblock_limit() {
        Jmap::new().insert(1, JBLOCK_LIMIT, false, 1);
    }

    #[test]
    fn sequences_wrap() {
        let mut m = Jmap::new();
        m.insert(1, 5, false, u32::MAX - 1);
        m.insert(2, 6, false, u32::MAX);
        m.insert(3, 7, false, 0);
        m.insert(1, 8, false, 1);
        assert_eq!(m.live_blocks(0).collect::<Vec<_>>(), vec![3]);
        assert_eq!(m.live_blocks(u32::MAX).collect::<Vec<_>>(), vec![2]);
        assert_eq!(m.live_count(u32::MAX - 1), 0);
        assert_eq!(m.retire(u32::MAX - 1), 1);
        assert_eq!(m.live_count(1), 1);
        // An older transaction than any in the map (recovery order is free).
        m.insert(9, 9, false, u32::MAX - 5);
        assert_eq!(m.live_blocks(u32::MAX - 5).collect::<Vec<_>>(), vec![9]);
        assert_eq!(m.live_blocks(1).collect::<Vec<_>>(), vec![1]);
        // The list of u32::MAX, whose first entry's head code is u32::MAX
        // (all 31 low bits set), through growth and removals.
        for k in 100..200 {
            m.insert(k, k as u32, false, u32::MAX);
        }
        m.check();
        assert_eq!(m.remove(2), Some(entry(6, false)));
        assert_eq!(m.live_count(u32::MAX), 100);
        m.check();
    }

    /// `n` distinct static blocks, scattered below 2^40.
    fn keys(n: u64) -> Vec<u64> {
        (0..n).map(|i| (i << 20) | (mix(i) & 0xF_FFFF)).collect()
    }

    /// Insert `keys` into `m` in transactions of 1000 blocks, calling `each`
    /// after every insert.
    fn fill(m: &mut Jmap, keys: &[u64], mut each: impl FnMut(&Jmap)) {
        for (i, &s) in keys.iter().enumerate() {
            let i = i as u64;
            assert_eq!(m.insert(s, (i % (1 << 30)) as u32, i.is_multiple_of(97), (i / 1000) as u32), None);
            each(m);
        }
    }

    /// The memory figure docs/LAZY.md reports: at most 24 bytes per entry
    /// (really allocated, list links and heads included) at 1,000,000
    /// entries, both with the table sized up front (mount) and grown one
    /// insert at a time; for the grown map, at every size from 10,000 entries
    /// on, not just at the end. Also prints probe lengths and lookup times.
    #[test]
    fn memory_per_entry_at_one_million() {
        const N: u64 = 1_000_000;
        // From this many entries on, the fixed overheads (overflow area,
        // minimum table) are small enough for the bound.
        const FROM: usize = 10_000;
        let keys = keys(N);
        let mut worst = 0.0f64;
        let base = allocated().0;
        let t = Instant::now();
        let mut grown = Jmap::new();
        fill(&mut grown, &keys, |m| {
            if m.len() >= FROM {
                worst = worst.max(m.bytes() as f64 / m.len() as f64);
            }
        });
        let grow_ns = t.elapsed().as_nanos() as f64 / N as f64;
        let (live, peak) = allocated();
        assert_eq!(live - base, grown.bytes() as isize, "bytes() is what is allocated");
        let peak = peak - base;
        let base = live;
        let t = Instant::now();
        let mut sized = Jmap::with_capacity(N as usize);
        let capacity = sized.capacity();
        fill(&mut sized, &keys, |_| {});
        let sized_ns = t.elapsed().as_nanos() as f64 / N as f64;
        assert_eq!(allocated().0 - base, sized.bytes() as isize, "bytes() is what is allocated");
        assert_eq!(sized.capacity(), capacity, "sized once, never grown");
        eprintln!("jmap: worst bytes/entry while growing from {FROM} to {N} entries: {worst:.2}");
        eprintln!(
            "jmap: peak allocated while growing: {} bytes, {:.2} per final entry \
             (old and new table during the last growth)",
            peak,
            peak as f64 / N as f64
        );
        // Lookups: hits in random order, and misses.
        let mut order = keys.clone();
        let mut x = 1u64;
        for i in (1..order.len()).rev() {
            x = mix(x);
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let misses: Vec<u64> = (0..N).map(|i| (i << 20) | 0x8_0000 | (mix(!i) & 0x7_FFFF)).collect();
        for (what, m, insert_ns) in [("grown one by one", &grown, grow_ns), ("sized for 1M", &sized, sized_ns)] {
            let per = m.bytes() as f64 / m.len() as f64;
            let (mean, max) = m.probe_lengths();
            let t = Instant::now();
            let mut found = 0;
            for &k in &order {
                found += usize::from(m.get(k).is_some());
            }
            let hit_ns = t.elapsed().as_nanos() as f64 / N as f64;
            let t = Instant::now();
            let mut found_miss = 0;
            for &k in &misses {
                found_miss += usize::from(m.get(k).is_some());
            }
            let miss_ns = t.elapsed().as_nanos() as f64 / N as f64;
            assert_eq!((found, found_miss), (N as usize, 0));
            eprintln!(
                "jmap {what}: {} entries, {} home slots + {} overflow (load {:.3}), {} bytes, \
                 {per:.2} bytes/entry; probe length mean {mean:.2} max {max}; \
                 lookup {hit_ns:.0} ns (hit) {miss_ns:.0} ns (miss); insert {insert_ns:.0} ns",
                m.len(),
                m.homes,
                m.capacity() - m.homes,
                m.len() as f64 / m.homes as f64,
                m.bytes()
            );
            assert_eq!(m.len(), N as usize);
            assert!(per <= 24.0, "{what}: {per} bytes per entry");
        }
        assert!(worst <= 24.0, "grown: {worst} bytes per entry");
        // One growth step at this size (the pause an insert may see).
        let t = Instant::now();
        let homes = grown.homes;
        grown.resize(homes_for(grown.len() + 1, GROWN_LOAD).max(homes + 1));
        eprintln!(
            "jmap: one growth step at {N} entries ({homes} -> {} home slots): {:.1} ms",
            grown.homes,
            t.elapsed().as_secs_f64() * 1e3
        );
        // Steady state at the maximum load: remove a random entry, insert a
        // new block (the shifts are longest here).
        let mut m = sized;
        let t = Instant::now();
        const CHURN: usize = 200_000;
        for (n, &k) in order[..CHURN].iter().enumerate() {
            assert!(m.remove(k).is_some());
            assert!(m.insert(misses[n], 1, false, 1000).is_none());
        }
        let churn_ns = t.elapsed().as_nanos() as f64 / CHURN as f64;
        // Superseding (a block committed again): unlink and relink.
        let t = Instant::now();
        for &k in &order[CHURN..2 * CHURN] {
            assert!(m.insert(k, 2, false, 1001).is_some());
        }
        eprintln!(
            "jmap at load {:.3}: remove + insert {churn_ns:.0} ns, supersede {:.0} ns",
            m.len() as f64 / m.homes as f64,
            t.elapsed().as_nanos() as f64 / CHURN as f64
        );
        // Emptying through the lists keeps the table; every slot is empty.
        let listed: Vec<u64> = (0..=1001).flat_map(|t| m.live_blocks(t).collect::<Vec<_>>()).collect();
        assert_eq!(listed.len(), N as usize);
        for k in listed {
            assert!(m.remove(k).is_some());
        }
        assert!(m.is_empty());
        assert_eq!(m.retire(1001), 1002);
        assert!(m.slots.iter().all(Slot::is_empty));
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert { key: u64, jblock: u32, escaped: bool, txn: u32 },
        Remove { key: u64 },
        RetireOldest,
    }

    fn op(keys: u64) -> impl Strategy<Value = Op> {
        let jblock = prop_oneof![0..1_000_000u32, JBLOCK_LIMIT - 3..JBLOCK_LIMIT];
        prop_oneof![
            6 => (0..keys, jblock, any::<bool>(), 0..6u32).prop_map(
                |(key, jblock, escaped, txn)| Op::Insert { key, jblock, escaped, txn }
            ),
            3 => (0..keys).prop_map(|key| Op::Remove { key }),
            1 => Just(Op::RetireOldest),
        ]
    }

    /// Run `ops` on a map and on a model (HashMap + per-transaction sets);
    /// transactions are `base + t`, so sequences may wrap.
    fn run(mut m: Jmap, base: u32, ops: Vec<Op>, keys: u64) {
        let mut model: HashMap<u64, (JmapEntry, u32)> = HashMap::new();
        let mut lists: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        // Transactions below this were retired; inserts go at or after it.
        let mut oldest = 0u32;
        for op in ops {
            match op {
                Op::Insert { key, jblock, escaped, txn } => {
                    let t = oldest + txn;
                    let prev = model.insert(key, (entry(jblock, escaped), t));
                    if let Some((_, pt)) = prev {
                        lists.get_mut(&pt).unwrap().remove(&key);
                    }
                    lists.entry(t).or_default().insert(key);
                    let seq = base.wrapping_add(t);
                    assert_eq!(m.insert(key, jblock, escaped, seq), prev.map(|p| p.0));
                }
                Op::Remove { key } => {
                    let want = model.remove(&key);
                    if let Some((_, pt)) = want {
                        lists.get_mut(&pt).unwrap().remove(&key);
                    }
                    assert_eq!(m.remove(key), want.map(|w| w.0));
                }
                Op::RetireOldest => {
                    // Retire the oldest transactions that have nothing live.
                    while lists.get(&oldest).is_none_or(|l| l.is_empty()) && oldest < 64 {
                        lists.remove(&oldest);
                        m.retire(base.wrapping_add(oldest));
                        oldest += 1;
                    }
                }
            }
            m.check();
            assert_eq!(m.len(), model.len());
            for k in 0..keys {
                assert_eq!(m.get(k), model.get(&k).map(|e| e.0), "key {k}");
            }
            for (&t, l) in &lists {
                let seq = base.wrapping_add(t);
                assert_eq!(m.live_count(seq), l.len());
                assert_eq!(m.has_live(seq), !l.is_empty());
                let got: BTreeSet<u64> = m.live_blocks(seq).collect();
                assert_eq!(&got, l);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn matches_model(ops in prop::collection::vec(op(200), 1..400), base in any::<u32>()) {
            run(Jmap::new(), base, ops, 200);
        }

        /// Keys 0..120 hashed to themselves: all share home slot 0, one
        /// cluster as long as the map.
        #[test]
        fn matches_model_one_cluster(ops in prop::collection::vec(op(120), 1..300), base in any::<u32>()) {
            run(Jmap::with_hasher(Hasher::Identity), base, ops, 120);
        }

        /// Keys hashed to their complement: all have the last home slot and
        /// live in the overflow area, which grows; key 0's hash is u64::MAX.
        #[test]
        fn matches_model_overflow(ops in prop::collection::vec(op(120), 1..300), base in any::<u32>()) {
            run(Jmap::with_hasher(Hasher::Reverse), base, ops, 120);
        }

        #[test]
        fn matches_model_presized(ops in prop::collection::vec(op(60), 1..300)) {
            run(Jmap::with_capacity(37), u32::MAX - 3, ops, 60);
        }

        /// Many keys: the table grows many times with lists spread over it.
        #[test]
        fn matches_model_many_keys(ops in prop::collection::vec(op(5000), 1..3000)) {
            let mut m = Jmap::new();
            let mut model = HashMap::new();
            for op in ops {
                if let Op::Insert { key, jblock, escaped, txn } = op {
                    assert_eq!(m.insert(key, jblock, escaped, txn), model.insert(key, entry(jblock, escaped)));
                } else if let Op::Remove { key } = op {
                    assert_eq!(m.remove(key), model.remove(&key));
                }
            }
            m.check();
            for (&k, &e) in &model {
                assert_eq!(m.get(k), Some(e));
            }
            assert_eq!(m.len(), model.len());
        }
    }
}
