//! The jmap: static block S -> the journal block J holding S's newest live
//! copy, with the transaction that owns the copy, and for every transaction
//! the list of static blocks whose newest copy it holds (its *live* blocks).
//!
//! Both modes use it (see docs/LAZY.md, "jmap"): in ordered mode an entry
//! means "committed, not yet written home"; in lazy mode "the newest copy of
//! S is in the log". A transaction with no live blocks can be passed by the
//! tail.
//!
//! Layout: open addressing with Robin Hood linear probing over fixed 24-byte
//! slots `key: u64 | jblock: u32 | txn+escaped: u32 | prev: u32 | next: u32`.
//! `prev`/`next` are slot indices linking the entry into its transaction's
//! doubly linked live list, so a supersede or removal unlinks in O(1) and a
//! transaction's live blocks are walked in O(live). Robin Hood moves entries
//! on insert and delete (backward shift); every move patches the moved
//! entry's list neighbours. Any capacity works (the home slot is a
//! multiply-shift of the hash, not a mask), so a table sized for a known
//! number of entries (mount) wastes nothing beyond the load factor; growth
//! doubles.
//!
//! Transactions are jbd2 sequences. A slot keeps the low 31 bits of its
//! sequence (the top bit is `escaped`); the full sequence is rebuilt from the
//! oldest sequence with a list head (`base`), which is unambiguous while the
//! transactions in the map span fewer than 2^31 sequences (the journal's live
//! transactions are consecutive and each takes at least one log block).

use std::collections::VecDeque;
use std::mem::size_of;

/// "No slot" in a list link or head.
const NIL: u32 = u32::MAX;
/// `jblock` of an empty slot: journal blocks are below `s_maxlen`, a u32, so
/// never `u32::MAX`.
const EMPTY: u32 = u32::MAX;
const ESCAPED: u32 = 1 << 31;
const TXN_BITS: u32 = ESCAPED - 1;
/// Maximum load: at most 9 entries per 10 slots (Robin Hood probes stay short).
const LOAD_NUM: usize = 9;
const LOAD_DEN: usize = 10;
const MIN_SLOTS: usize = 16;

#[derive(Clone, Copy, Debug)]
#[repr(C)]
struct Slot {
    key: u64,
    /// Journal-relative block of the copy, or `EMPTY`.
    jblock: u32,
    /// Low 31 bits of the owning sequence | `ESCAPED`.
    meta: u32,
    prev: u32,
    next: u32,
}

const _: () = assert!(size_of::<Slot>() == 24);

const EMPTY_SLOT: Slot = Slot {
    key: 0,
    jblock: EMPTY,
    meta: 0,
    prev: NIL,
    next: NIL,
};

/// A transaction's live list: first slot and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    first: u32,
    count: u32,
}

const EMPTY_HEAD: Head = Head {
    first: NIL,
    count: 0,
};

/// Where a static block's newest live copy is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JmapEntry {
    /// Journal-relative block holding the copy.
    pub jblock: u32,
    /// The copy's first 4 bytes were the jbd2 magic, zeroed in the log.
    pub escaped: bool,
    /// Sequence of the transaction that logged the copy.
    pub txn: u32,
}

/// Size of the map, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JmapStats {
    pub entries: usize,
    /// Memory allocated for the table and the list heads.
    pub bytes: usize,
}

/// The map; see the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Jmap {
    slots: Vec<Slot>,
    len: usize,
    /// List heads of sequences `base, base + 1, ...`.
    heads: VecDeque<Head>,
    base: u32,
    /// Test hook: a hash with few distinct values, to force long clusters.
    #[cfg(test)]
    clustered: bool,
}

/// splitmix64's finaliser: a bijection with well-mixed high bits (the home
/// slot uses the high bits).
fn mix(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Slots needed to hold `n` entries within the maximum load.
fn slots_for(n: usize) -> usize {
    (n * LOAD_DEN).div_ceil(LOAD_NUM).max(MIN_SLOTS)
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
            m.slots = vec![EMPTY_SLOT; slots_for(n)];
        }
        m
    }

    #[cfg(test)]
    fn clustered() -> Self {
        Jmap {
            clustered: true,
            ..Self::default()
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Slots in the table.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Memory really allocated: the table plus the list heads.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * size_of::<Slot>() + self.heads.capacity() * size_of::<Head>()
    }

    pub fn stats(&self) -> JmapStats {
        JmapStats {
            entries: self.len,
            bytes: self.bytes(),
        }
    }

    /// Drop every entry and list head (keeps the table's memory).
    pub fn clear(&mut self) {
        self.slots.fill(EMPTY_SLOT);
        self.len = 0;
        self.heads.clear();
    }

    fn hash(&self, key: u64) -> u64 {
        #[cfg(test)]
        if self.clustered {
            // Three distinct home slots for every key.
            return (key % 3) << 62;
        }
        mix(key)
    }

    fn home(&self, key: u64) -> usize {
        ((u128::from(self.hash(key)) * self.slots.len() as u128) >> 64) as usize
    }

    fn next_slot(&self, i: usize) -> usize {
        if i + 1 == self.slots.len() {
            0
        } else {
            i + 1
        }
    }

    fn is_empty_slot(&self, i: usize) -> bool {
        self.slots[i].jblock == EMPTY
    }

    /// How far the entry in slot `i` is from its home slot.
    fn dist(&self, i: usize) -> usize {
        let h = self.home(self.slots[i].key);
        if i >= h {
            i - h
        } else {
            i + self.slots.len() - h
        }
    }

    fn find(&self, key: u64) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(key);
        let mut d = 0;
        // Terminates: the load is below 1, so an empty slot exists.
        loop {
            if self.is_empty_slot(i) {
                return None;
            }
            if self.slots[i].key == key {
                return Some(i);
            }
            // Robin Hood: a richer resident means the key would have been here.
            if self.dist(i) < d {
                return None;
            }
            i = self.next_slot(i);
            d += 1;
        }
    }

    /// Full sequence of a slot's owner (see the module documentation).
    fn txn_of(&self, meta: u32) -> u32 {
        self.base
            .wrapping_add((meta & TXN_BITS).wrapping_sub(self.base) & TXN_BITS)
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
                self.heads.push_front(EMPTY_HEAD);
            }
            self.base = txn;
        } else {
            while self.heads.len() <= off as usize {
                self.heads.push_back(EMPTY_HEAD);
            }
        }
        debug_assert!(
            self.heads.len() < TXN_BITS as usize,
            "transactions in the jmap must span fewer than 2^31 sequences"
        );
        txn.wrapping_sub(self.base) as usize
    }

    fn entry_at(&self, i: usize) -> JmapEntry {
        let s = &self.slots[i];
        JmapEntry {
            jblock: s.jblock,
            escaped: s.meta & ESCAPED != 0,
            txn: self.txn_of(s.meta),
        }
    }

    /// The newest live copy of static block `s`.
    pub fn get(&self, s: u64) -> Option<JmapEntry> {
        self.find(s).map(|i| self.entry_at(i))
    }

    /// Record that transaction `txn` holds the newest copy of `s` at journal
    /// block `jblock`. If `s` had an entry, it leaves its old transaction's
    /// live list (superseded) and that transaction is returned.
    pub fn insert(&mut self, s: u64, jblock: u32, escaped: bool, txn: u32) -> Option<u32> {
        debug_assert!(jblock != EMPTY, "journal block {jblock} cannot be mapped");
        let meta = (txn & TXN_BITS) | if escaped { ESCAPED } else { 0 };
        let h = self.head_for(txn);
        if let Some(i) = self.find(s) {
            let old = self.txn_of(self.slots[i].meta);
            self.unlink(i);
            self.slots[i].jblock = jblock;
            self.slots[i].meta = meta;
            self.link(i, h);
            return Some(old);
        }
        if (self.len + 1) * LOAD_DEN > self.slots.len() * LOAD_NUM {
            self.grow();
        }
        let i = self.place(s, jblock, meta);
        self.len += 1;
        self.link(i, h);
        None
    }

    /// Remove `s`'s entry (written home, revoked, or freed) and return it.
    pub fn remove(&mut self, s: u64) -> Option<JmapEntry> {
        let i = self.find(s)?;
        let entry = self.entry_at(i);
        self.unlink(i);
        // Backward shift: pull the following displaced entries one slot back.
        let mut hole = i;
        let mut j = self.next_slot(i);
        while !self.is_empty_slot(j) && self.dist(j) > 0 {
            self.move_slot(j, hole);
            hole = j;
            j = self.next_slot(j);
        }
        self.slots[hole] = EMPTY_SLOT;
        self.len -= 1;
        Some(entry)
    }

    /// Number of static blocks whose newest copy `txn` holds.
    pub fn live_count(&self, txn: u32) -> usize {
        self.head_index(txn)
            .map_or(0, |i| self.heads[i].count as usize)
    }

    /// The static blocks whose newest copy `txn` holds, in no particular order.
    pub fn live_blocks(&self, txn: u32) -> LiveBlocks<'_> {
        let at = self.head_index(txn).map_or(NIL, |i| self.heads[i].first);
        LiveBlocks { map: self, at }
    }

    /// Drop the list heads of `txn` and older transactions (the tail passed
    /// them), stopping at the first that still has live blocks. Returns how
    /// many heads went.
    pub fn retire(&mut self, txn: u32) -> usize {
        let mut n = 0;
        while let Some(h) = self.heads.front() {
            if crate::tid_gt(self.base, txn) || h.count != 0 {
                break;
            }
            self.heads.pop_front();
            self.base = self.base.wrapping_add(1);
            n += 1;
        }
        n
    }

    /// Put a new key into the table (it is not there; there is room) and
    /// return its slot, unlinked. Robin Hood insertion as a shift: the key
    /// goes to the first slot whose resident is closer to its home than the
    /// key would be, and the run from there to the next empty slot moves one
    /// slot on (keeping each run ordered by home).
    fn place(&mut self, key: u64, jblock: u32, meta: u32) -> usize {
        debug_assert!(self.len < self.slots.len());
        let mut i = self.home(key);
        let mut d = 0;
        while !self.is_empty_slot(i) && self.dist(i) >= d {
            i = self.next_slot(i);
            d += 1;
        }
        let p = i;
        let mut e = p;
        while !self.is_empty_slot(e) {
            e = self.next_slot(e);
        }
        while e != p {
            let from = if e == 0 { self.slots.len() - 1 } else { e - 1 };
            self.move_slot(from, e);
            e = from;
        }
        self.slots[p] = Slot {
            key,
            jblock,
            meta,
            prev: NIL,
            next: NIL,
        };
        p
    }

    /// Move the entry in slot `from` to slot `to` (free or already moved
    /// away) and repoint its list neighbours (or its list head) at `to`.
    fn move_slot(&mut self, from: usize, to: usize) {
        let s = self.slots[from];
        self.slots[to] = s;
        let to32 = to as u32;
        if s.prev != NIL {
            self.slots[s.prev as usize].next = to32;
        } else {
            let h = self.owner_head(s.meta);
            self.heads[h].first = to32;
        }
        if s.next != NIL {
            self.slots[s.next as usize].prev = to32;
        }
    }

    fn owner_head(&self, meta: u32) -> usize {
        let h = self.txn_of(meta).wrapping_sub(self.base) as usize;
        debug_assert!(
            h < self.heads.len(),
            "entry of a transaction without a list head"
        );
        h
    }

    /// Push slot `i` at the front of list head `h`.
    fn link(&mut self, i: usize, h: usize) {
        let first = self.heads[h].first;
        self.slots[i].prev = NIL;
        self.slots[i].next = first;
        if first != NIL {
            self.slots[first as usize].prev = i as u32;
        }
        self.heads[h].first = i as u32;
        self.heads[h].count += 1;
    }

    /// Take slot `i` out of its transaction's list.
    fn unlink(&mut self, i: usize) {
        let s = self.slots[i];
        let h = self.owner_head(s.meta);
        if s.prev != NIL {
            self.slots[s.prev as usize].next = s.next;
        } else {
            self.heads[h].first = s.next;
        }
        if s.next != NIL {
            self.slots[s.next as usize].prev = s.prev;
        }
        debug_assert!(self.heads[h].count > 0);
        self.heads[h].count -= 1;
    }

    /// Double the table (or allocate the first one) and re-insert every
    /// entry, rebuilding the lists (their order is not part of the contract).
    fn grow(&mut self) {
        let cap = (self.slots.len() * 2).max(MIN_SLOTS);
        assert!(cap < NIL as usize, "jmap larger than 2^32 slots");
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; cap]);
        for h in self.heads.iter_mut() {
            *h = EMPTY_HEAD;
        }
        for s in old.into_iter().filter(|s| s.jblock != EMPTY) {
            let i = self.place(s.key, s.jblock, s.meta);
            let h = self.owner_head(s.meta);
            self.link(i, h);
        }
    }

    /// Check every structural invariant (tests).
    #[cfg(test)]
    fn check(&self) {
        let mut n = 0;
        for i in 0..self.slots.len() {
            if self.is_empty_slot(i) {
                continue;
            }
            n += 1;
            assert_eq!(
                self.find(self.slots[i].key),
                Some(i),
                "slot {i} not found by its key"
            );
            let next = self.next_slot(i);
            if !self.is_empty_slot(next) {
                assert!(
                    self.dist(next) <= self.dist(i) + 1,
                    "Robin Hood order at {i}"
                );
            }
        }
        assert_eq!(n, self.len);
        let mut listed = 0;
        for (k, h) in self.heads.iter().enumerate() {
            let txn = self.base.wrapping_add(k as u32);
            let mut prev = NIL;
            let mut at = h.first;
            let mut c = 0;
            while at != NIL {
                let s = &self.slots[at as usize];
                assert!(s.jblock != EMPTY);
                assert_eq!(s.prev, prev, "back link of slot {at}");
                assert_eq!(self.txn_of(s.meta), txn);
                prev = at;
                at = s.next;
                c += 1;
                assert!(c <= self.len, "cycle in the list of {txn}");
            }
            assert_eq!(c, h.count as usize, "count of {txn}");
            listed += c;
        }
        assert_eq!(listed, self.len);
        assert!(self.len * LOAD_DEN <= self.slots.len() * LOAD_NUM || self.len == 0);
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
        Some(s.key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    #[test]
    fn insert_supersede_remove() {
        let mut m = Jmap::new();
        assert_eq!(m.bytes(), 0);
        assert_eq!(m.insert(10, 100, false, 7), None);
        assert_eq!(m.insert(11, 101, true, 7), None);
        assert_eq!(m.insert(10, 200, true, 8), Some(7));
        assert_eq!(
            m.get(10),
            Some(JmapEntry {
                jblock: 200,
                escaped: true,
                txn: 8
            })
        );
        assert_eq!(m.live_count(7), 1);
        assert_eq!(m.live_blocks(7).collect::<Vec<_>>(), vec![11]);
        assert_eq!(m.live_blocks(8).collect::<Vec<_>>(), vec![10]);
        assert_eq!(m.retire(7), 0, "7 still has a live block");
        assert_eq!(m.remove(11).map(|e| e.txn), Some(7));
        assert_eq!(m.retire(7), 1);
        assert_eq!(m.live_count(7), 0);
        assert_eq!(m.len(), 1);
        assert_eq!(m.remove(11), None);
        m.check();
    }

    #[test]
    fn sequences_wrap() {
        let mut m = Jmap::new();
        m.insert(1, 5, false, u32::MAX - 1);
        m.insert(2, 6, false, u32::MAX);
        m.insert(3, 7, false, 0);
        m.insert(1, 8, false, 1);
        assert_eq!(m.get(3).unwrap().txn, 0);
        assert_eq!(m.get(2).unwrap().txn, u32::MAX);
        assert_eq!(m.live_count(u32::MAX - 1), 0);
        assert_eq!(m.retire(u32::MAX - 1), 1);
        assert_eq!(m.live_count(1), 1);
        // An older transaction than any in the map (recovery order is free).
        m.insert(9, 9, false, u32::MAX - 5);
        assert_eq!(m.get(9).unwrap().txn, u32::MAX - 5);
        assert_eq!(m.get(1).unwrap().txn, 1);
        m.check();
    }

    /// Fill a map with `n` distinct static blocks (scattered below 2^40) in
    /// transactions of 1000 blocks.
    fn fill(m: &mut Jmap, n: u64) {
        for i in 0..n {
            let s = (i << 20) | (mix(i) & 0xF_FFFF);
            assert_eq!(
                m.insert(s, (i % (1 << 30)) as u32, i % 97 == 0, (i / 1000) as u32),
                None
            );
        }
    }

    /// The memory figure docs/LAZY.md reports. A slot is 24 bytes; with at
    /// most 9 entries per 10 slots an entry costs 24 / load bytes: 26.7 when
    /// the table is sized for its entries (mount), up to twice that right
    /// after a doubling.
    #[test]
    fn memory_per_entry_at_one_million() {
        const N: u64 = 1_000_000;
        let mut grown = Jmap::new();
        fill(&mut grown, N);
        let mut sized = Jmap::with_capacity(N as usize);
        fill(&mut sized, N);
        assert_eq!(sized.capacity(), 1_111_112, "sized once, never grown");
        for (what, m) in [("grown one by one", &grown), ("sized for 1M", &sized)] {
            let per = m.bytes() as f64 / m.len() as f64;
            eprintln!(
                "jmap {what}: {} entries, {} slots (load {:.3}), {} bytes, {per:.2} bytes/entry",
                m.len(),
                m.capacity(),
                m.len() as f64 / m.capacity() as f64,
                m.bytes()
            );
            assert_eq!(m.len(), N as usize);
            // 24-byte slots at load >= 0.45 (half the maximum, after a doubling).
            assert!(per <= 24.0 * 10.0 / 9.0 * 2.0 + 0.1, "{what}: {per}");
        }
        let per_sized = sized.bytes() as f64 / sized.len() as f64;
        assert!(per_sized <= 24.0 * 10.0 / 9.0 + 0.1, "sized: {per_sized}");
        // Emptying keeps the table; every lookup misses.
        let mut m = sized;
        let keys: Vec<u64> = (0..1000)
            .flat_map(|t| m.live_blocks(t).collect::<Vec<_>>())
            .collect();
        assert_eq!(keys.len(), N as usize);
        for k in keys {
            assert!(m.remove(k).is_some());
        }
        assert!(m.is_empty());
        assert_eq!(m.retire(999), 1000);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert {
            key: u64,
            jblock: u32,
            escaped: bool,
            txn: u32,
        },
        Remove {
            key: u64,
        },
        RetireOldest,
    }

    fn op(keys: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0..keys, 0..1_000_000u32, any::<bool>(), 0..6u32).prop_map(
                |(key, jblock, escaped, txn)| Op::Insert { key, jblock, escaped, txn }
            ),
            3 => (0..keys).prop_map(|key| Op::Remove { key }),
            1 => Just(Op::RetireOldest),
        ]
    }

    /// Run `ops` on a map and on a model (HashMap + per-transaction sets);
    /// transactions are `base + t`, so sequences may wrap.
    fn run(mut m: Jmap, base: u32, ops: Vec<Op>, keys: u64) {
        let mut model: HashMap<u64, JmapEntry> = HashMap::new();
        let mut lists: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
        // Transactions below this were retired; inserts go at or after it.
        let mut oldest = 0u32;
        for op in ops {
            match op {
                Op::Insert {
                    key,
                    jblock,
                    escaped,
                    txn,
                } => {
                    let t = oldest + txn;
                    let seq = base.wrapping_add(t);
                    let prev = model.insert(
                        key,
                        JmapEntry {
                            jblock,
                            escaped,
                            txn: seq,
                        },
                    );
                    if let Some(p) = prev {
                        lists
                            .get_mut(&p.txn.wrapping_sub(base))
                            .unwrap()
                            .remove(&key);
                    }
                    lists.entry(t).or_default().insert(key);
                    assert_eq!(m.insert(key, jblock, escaped, seq), prev.map(|p| p.txn));
                }
                Op::Remove { key } => {
                    let want = model.remove(&key);
                    if let Some(p) = want {
                        lists
                            .get_mut(&p.txn.wrapping_sub(base))
                            .unwrap()
                            .remove(&key);
                    }
                    assert_eq!(m.remove(key), want);
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
                assert_eq!(m.get(k), model.get(&k).copied(), "key {k}");
            }
            for (&t, l) in &lists {
                let seq = base.wrapping_add(t);
                assert_eq!(m.live_count(seq), l.len());
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

        #[test]
        fn matches_model_with_collisions(ops in prop::collection::vec(op(120), 1..300), base in any::<u32>()) {
            run(Jmap::clustered(), base, ops, 120);
        }

        #[test]
        fn matches_model_presized(ops in prop::collection::vec(op(60), 1..300)) {
            run(Jmap::with_capacity(37), u32::MAX - 3, ops, 60);
        }
    }
}
