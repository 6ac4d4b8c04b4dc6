//! The namespace knowledge base: for each directory, where its blocks are and,
//! per entry, which inode a name leads to and which directory block holds it.
//!
//! Only hints: names are kept as 32-bit hashes (two names with one hash keep
//! the later one), and the KB may lag behind the volume. A wrong answer costs
//! the prefetcher a wasted read, never a wrong result, because resolution
//! itself always reads the real directory.
//!
//! Layout, per directory: its physical blocks in logical order, and an
//! open-addressing table (linear probing, at most 3/4 full) of 8-byte slots
//! `hash << 32 | child` with a parallel array of 2-byte block indexes. An
//! entry costs 10 bytes per slot, i.e. 13-27 bytes at the table's load range.
//!
//! Bounded: the KB holds at most `limit` bytes (`bytes()`, by capacity). What
//! would go over evicts arbitrary directories (the map's own order) down to
//! three quarters of it; a directory bigger than half the limit is not learnt.
//! Forgetting only costs hints: the directory is learnt again when listed.

use std::collections::HashMap;

/// How a directory's lookup reads its blocks, which decides what to prefetch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirKind {
    /// Scanned from block 0 until the name is found.
    Linear,
    /// Hashed (htree): the index root (block 0), then the leaf.
    Htree,
}

/// The block index stored for an entry whose block is unknown or too far in.
const NO_LBLK: u16 = u16::MAX;
/// A slot is empty when its child is 0 (inode 0 is never a valid child).
const EMPTY: u64 = 0;
/// Bytes a table slot costs: the slot and its block index.
const SLOT_BYTES: usize = 10;
/// The default bound (`stepahead_kb_mb=`): several times the largest KB the
/// benchmarks build (1.76M names of an ARC scan at 21-26 bytes each: 37-46 MiB).
pub const DEFAULT_LIMIT: usize = 128 << 20;

struct DirInfo {
    blocks: Box<[u64]>,
    /// `hash << 32 | child`, EMPTY when free; length a power of two (or 0).
    slots: Box<[u64]>,
    /// Logical directory block of each slot's entry (NO_LBLK: unknown).
    lblks: Box<[u16]>,
    len: u32,
    kind: DirKind,
}

/// What the KB knows of one name in a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    pub child: u32,
    /// Logical block of the directory holding the entry, if known.
    pub lblk: Option<u32>,
}

pub struct KnowledgeBase {
    dirs: HashMap<u32, DirInfo>,
    /// Blocks every lookup in a directory may read before its entry block:
    /// htree interior index nodes and extent-tree blocks. Only the few
    /// directories that have any are here (big or fragmented ones).
    index: HashMap<u32, Box<[u64]>>,
    entries: usize,
    /// Bytes of every directory's arrays and of the index lists.
    arrays: usize,
    /// Most bytes held (`bytes()`).
    limit: usize,
    /// Directories forgotten to stay within the limit (or too big to learn).
    evicted: u64,
}

impl Default for KnowledgeBase {
    fn default() -> Self {
        Self::with_limit(DEFAULT_LIMIT)
    }
}

/// A fast 64-bit hash of a name (word at a time, then a full avalanche),
/// folded to 32 bits. Not the ext4 directory hash: it needs no seed or version.
pub fn name_hash(name: &[u8]) -> u32 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut h = (name.len() as u64).wrapping_mul(K);
    let mut chunks = name.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K).rotate_left(29);
    }
    let mut w = [0u8; 8];
    w[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    h = (h ^ u64::from_le_bytes(w)).wrapping_mul(K);
    // splitmix64's finaliser: every input bit reaches the kept high bits.
    h ^= h >> 30;
    h = h.wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    (h >> 32) as u32
}

fn table_size(entries: usize) -> usize {
    if entries == 0 {
        return 0;
    }
    // Smallest power of two with entries <= 3/4 of it.
    (entries * 4).div_ceil(3).next_power_of_two().max(2)
}

fn slot_child(s: u64) -> u32 {
    s as u32
}

fn slot_hash(s: u64) -> u32 {
    (s >> 32) as u32
}

impl DirInfo {
    /// Bytes of its arrays.
    fn array_bytes(&self) -> usize {
        self.blocks.len() * 8 + self.slots.len() * SLOT_BYTES
    }

    fn home(&self, hash: u32) -> usize {
        // Spread the hash again so that the table index uses well-mixed bits.
        (u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize & (self.slots.len() - 1)
    }

    /// The slot holding `hash`, or the empty slot where it would go.
    fn find(&self, hash: u32) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let mut i = self.home(hash);
        loop {
            let s = self.slots[i];
            if s == EMPTY || slot_hash(s) == hash {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Insert or replace; returns whether the entry is new.
    fn put(&mut self, hash: u32, child: u32, lblk: u16) -> bool {
        debug_assert!(child != 0);
        if (self.len as usize + 1) * 4 > self.slots.len() * 3 {
            self.resize(table_size(self.len as usize + 1));
        }
        let Some(i) = self.find(hash) else { unreachable!("the table was just sized") };
        let new = self.slots[i] == EMPTY;
        self.slots[i] = u64::from(hash) << 32 | u64::from(child);
        self.lblks[i] = lblk;
        if new {
            self.len += 1;
        }
        new
    }

    fn resize(&mut self, size: usize) {
        let old_slots = std::mem::take(&mut self.slots);
        let old_lblks = std::mem::take(&mut self.lblks);
        self.slots = vec![EMPTY; size].into_boxed_slice();
        self.lblks = vec![NO_LBLK; size].into_boxed_slice();
        for (s, l) in old_slots.iter().zip(old_lblks.iter()) {
            if *s != EMPTY {
                let Some(i) = self.find(slot_hash(*s)) else { unreachable!("non-empty table") };
                self.slots[i] = *s;
                self.lblks[i] = *l;
            }
        }
    }

    /// Remove `hash` (backward-shift deletion keeps probe chains unbroken).
    fn remove(&mut self, hash: u32) -> bool {
        let Some(mut hole) = self.find(hash) else { return false };
        if self.slots[hole] == EMPTY {
            return false;
        }
        let mask = self.slots.len() - 1;
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let s = self.slots[j];
            if s == EMPTY {
                break;
            }
            // Move s back into the hole unless its home lies cyclically in (hole, j].
            let home = self.home(slot_hash(s));
            let stays = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !stays {
                self.slots[hole] = s;
                self.lblks[hole] = self.lblks[j];
                hole = j;
            }
        }
        self.slots[hole] = EMPTY;
        self.lblks[hole] = NO_LBLK;
        self.len -= 1;
        true
    }
}

/// Bytes a directory-map bucket costs (plus the control byte hashbrown keeps).
const DIR_BUCKET: usize = std::mem::size_of::<(u32, DirInfo)>() + 1;
const INDEX_BUCKET: usize = std::mem::size_of::<(u32, Box<[u64]>)>() + 1;

impl KnowledgeBase {
    pub fn new() -> Self {
        Self::default()
    }

    /// A KB that holds at most `limit` bytes (`bytes()`).
    pub fn with_limit(limit: usize) -> Self {
        KnowledgeBase { dirs: HashMap::new(), index: HashMap::new(), entries: 0, arrays: 0, limit, evicted: 0 }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Directories forgotten to stay within the limit, since the start.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Bytes the maps would take for their entries alone, with room for
    /// their slack after a shrink (hashbrown keeps up to about twice).
    fn bytes_after_shrink(&self) -> usize {
        std::mem::size_of::<Self>() + 2 * (self.dirs.len() * DIR_BUCKET + self.index.len() * INDEX_BUCKET) + self.arrays
    }

    /// Back within the limit after `keep` grew or was learnt: forget other
    /// directories, arbitrary ones (the map's order), down to 3/4 of the
    /// limit, so that eviction is rare; `keep` itself last, if alone it is
    /// too big.
    fn fit(&mut self, keep: u32) {
        if self.bytes() <= self.limit {
            return;
        }
        let target = self.limit / 4 * 3;
        let mut victims = Vec::new();
        let mut after = self.bytes_after_shrink();
        for (&d, info) in &self.dirs {
            if after <= target {
                break;
            }
            if d != keep {
                victims.push(d);
                after = after.saturating_sub(2 * DIR_BUCKET + info.array_bytes());
            }
        }
        for d in victims {
            self.forget_dir(d);
            self.evicted += 1;
        }
        self.dirs.shrink_to_fit();
        self.index.shrink_to_fit();
        if self.bytes() > self.limit && self.dirs.contains_key(&keep) {
            self.forget_dir(keep);
            self.evicted += 1;
            self.dirs.shrink_to_fit();
            self.index.shrink_to_fit();
        }
    }

    /// Record directory `dir` as just read, replacing what was known of it.
    /// Entries are (name, child inode, logical block holding the entry);
    /// entries with inode 0 (free space) are skipped.
    pub fn learn_dir<'a>(
        &mut self,
        dir: u32,
        kind: DirKind,
        blocks: &[u64],
        entries: impl IntoIterator<Item = (&'a [u8], u32, u64)>,
    ) {
        self.forget_dir(dir);
        let list: Vec<(u32, u32, u16)> = entries
            .into_iter()
            .filter(|e| e.1 != 0)
            .map(|(name, child, lblk)| (name_hash(name), child, u16::try_from(lblk).unwrap_or(NO_LBLK)))
            .collect();
        let size = table_size(list.len());
        if blocks.len() * 8 + size * SLOT_BYTES > self.limit / 2 {
            // Would crowd out everything else: not worth knowing.
            self.evicted += 1;
            return;
        }
        let mut info = DirInfo {
            blocks: blocks.into(),
            slots: vec![EMPTY; size].into_boxed_slice(),
            lblks: vec![NO_LBLK; size].into_boxed_slice(),
            len: 0,
            kind,
        };
        for (h, child, lblk) in list {
            info.put(h, child, lblk);
        }
        self.entries += info.len as usize;
        self.arrays += info.array_bytes();
        self.dirs.insert(dir, info);
        self.fit(dir);
    }

    pub fn forget_dir(&mut self, dir: u32) {
        if let Some(info) = self.dirs.remove(&dir) {
            self.entries -= info.len as usize;
            self.arrays -= info.array_bytes();
        }
        if let Some(b) = self.index.remove(&dir) {
            self.arrays -= b.len() * 8;
        }
    }

    /// The interior blocks (htree index nodes, extent-tree blocks) of a known
    /// directory; an empty list forgets them.
    pub fn set_index_blocks(&mut self, dir: u32, blocks: &[u64]) {
        let old = if blocks.is_empty() || !self.dirs.contains_key(&dir) {
            self.index.remove(&dir)
        } else {
            self.arrays += blocks.len() * 8;
            self.index.insert(dir, blocks.into())
        };
        if let Some(b) = old {
            self.arrays -= b.len() * 8;
        }
        self.fit(dir);
    }

    pub fn index_blocks(&self, dir: u32) -> &[u64] {
        self.index.get(&dir).map_or(&[], |b| b)
    }

    /// The directory became hashed (or, rebuilt, linear again).
    pub fn set_dir_kind(&mut self, dir: u32, kind: DirKind) {
        if let Some(info) = self.dirs.get_mut(&dir) {
            info.kind = kind;
        }
    }

    /// Whether the directory is known.
    pub fn knows(&self, dir: u32) -> bool {
        self.dirs.contains_key(&dir)
    }

    /// A name added (or re-pointed) in a known directory; ignored for an
    /// unknown one, which will be learnt whole when it is read.
    pub fn note_entry(&mut self, dir: u32, name: &[u8], child: u32, lblk: Option<u64>) {
        if child == 0 {
            return;
        }
        if let Some(info) = self.dirs.get_mut(&dir) {
            let lblk = lblk.and_then(|l| u16::try_from(l).ok()).unwrap_or(NO_LBLK);
            let before = info.array_bytes();
            if info.put(name_hash(name), child, lblk) {
                self.entries += 1;
            }
            let after = info.array_bytes();
            if after != before {
                self.arrays = self.arrays + after - before;
                self.fit(dir);
            }
        }
    }

    /// An existing name now leads to another inode (rename over a target,
    /// a moved directory's ".."): its entry block stays what it was.
    pub fn retarget_entry(&mut self, dir: u32, name: &[u8], child: u32) {
        let lblk = self.hint(dir, name).and_then(|h| h.lblk).map(u64::from);
        self.note_entry(dir, name, child, lblk);
    }

    /// The child inodes a known directory's entries lead to (any order).
    pub fn children(&self, dir: u32) -> Vec<u32> {
        self.dirs
            .get(&dir)
            .map_or_else(Vec::new, |d| d.slots.iter().filter(|&&s| s != EMPTY).map(|&s| slot_child(s)).collect())
    }

    /// A name removed from `dir`.
    pub fn drop_entry(&mut self, dir: u32, name: &[u8]) {
        if let Some(info) = self.dirs.get_mut(&dir) {
            if info.remove(name_hash(name)) {
                self.entries -= 1;
            }
        }
    }

    /// The directory's blocks changed (growth): keep its entries, replace the list.
    pub fn set_dir_blocks(&mut self, dir: u32, blocks: &[u64]) {
        if let Some(info) = self.dirs.get_mut(&dir) {
            self.arrays = self.arrays + blocks.len() * 8 - info.blocks.len() * 8;
            info.blocks = blocks.into();
            self.fit(dir);
        }
    }

    /// A block appended to a known directory (logical block `lblk`); a gap
    /// in what is known makes the list unusable, so the directory is forgotten.
    pub fn grow_dir(&mut self, dir: u32, lblk: u64, pblk: u64) {
        let Some(info) = self.dirs.get_mut(&dir) else { return };
        if info.blocks.len() as u64 == lblk {
            let mut v = std::mem::take(&mut info.blocks).into_vec();
            v.push(pblk);
            info.blocks = v.into_boxed_slice();
            self.arrays += 8;
            self.fit(dir);
        } else if (info.blocks.len() as u64) < lblk {
            self.forget_dir(dir);
        }
    }

    pub fn lookup(&self, dir: u32, name: &[u8]) -> Option<u32> {
        self.hint(dir, name).map(|h| h.child)
    }

    /// The child and the block holding its entry.
    pub fn hint(&self, dir: u32, name: &[u8]) -> Option<Hint> {
        let info = self.dirs.get(&dir)?;
        let i = info.find(name_hash(name))?;
        let s = info.slots[i];
        (s != EMPTY).then(|| {
            let l = info.lblks[i];
            Hint { child: slot_child(s), lblk: (l != NO_LBLK).then_some(u32::from(l)) }
        })
    }

    pub fn dir_blocks(&self, dir: u32) -> Option<&[u64]> {
        self.dirs.get(&dir).map(|d| &*d.blocks)
    }

    pub fn dir_kind(&self, dir: u32) -> Option<DirKind> {
        self.dirs.get(&dir).map(|d| d.kind)
    }

    /// Number of entries known in one directory.
    pub fn dir_len(&self, dir: u32) -> Option<usize> {
        self.dirs.get(&dir).map(|d| d.len as usize)
    }

    /// The directories known (any order).
    pub fn known_dirs(&self) -> Vec<u32> {
        self.dirs.keys().copied().collect()
    }

    /// Number of entries (names) known, over all directories.
    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn dirs(&self) -> usize {
        self.dirs.len()
    }

    /// Memory held, by capacity: the directory map's buckets (plus one control
    /// byte each, as hashbrown keeps) and every directory's arrays.
    pub fn bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.dirs.capacity() * DIR_BUCKET
            + self.index.capacity() * INDEX_BUCKET
            + self.arrays
    }

    /// `bytes()` counted afresh from every array (tests check the running count).
    #[cfg(test)]
    fn bytes_recounted(&self) -> usize {
        let arrays: usize =
            self.dirs.values().map(|d| d.blocks.len() * 8 + d.slots.len() * 8 + d.lblks.len() * 2).sum();
        let index: usize = self.index.values().map(|b| b.len() * 8).sum();
        std::mem::size_of::<Self>()
            + self.dirs.capacity() * DIR_BUCKET
            + arrays
            + self.index.capacity() * INDEX_BUCKET
            + index
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("file-{i:06}").into_bytes()).collect()
    }

    #[test]
    fn learn_lookup_update_forget() {
        let mut kb = KnowledgeBase::new();
        let ns = names(100);
        kb.learn_dir(
            2,
            DirKind::Linear,
            &[500, 501],
            ns.iter().enumerate().map(|(i, n)| (&n[..], 100 + i as u32, (i / 50) as u64)),
        );
        assert_eq!(kb.len(), 100);
        assert_eq!(kb.dir_blocks(2), Some(&[500u64, 501][..]));
        assert_eq!(kb.hint(2, b"file-000077"), Some(Hint { child: 177, lblk: Some(1) }));
        assert_eq!(kb.lookup(2, b"nope"), None);
        assert_eq!(kb.lookup(3, b"file-000001"), None);
        kb.note_entry(2, b"new", 9, None);
        assert_eq!(kb.hint(2, b"new"), Some(Hint { child: 9, lblk: None }));
        kb.note_entry(2, b"new", 10, Some(1));
        assert_eq!(kb.len(), 101, "re-pointing does not add");
        for n in &ns[..60] {
            kb.drop_entry(2, n);
        }
        assert_eq!(kb.len(), 41);
        for (i, n) in ns.iter().enumerate() {
            assert_eq!(kb.lookup(2, n), (i >= 60).then_some(100 + i as u32), "{i}");
        }
        kb.note_entry(7, b"x", 1, None);
        assert_eq!(kb.lookup(7, b"x"), None, "unknown directories are not created by a note");
        assert_eq!(kb.bytes(), kb.bytes_recounted());
        kb.set_index_blocks(2, &[7, 8]);
        kb.grow_dir(2, 2, 502);
        kb.set_dir_blocks(2, &[500, 501, 502, 503]);
        assert_eq!(kb.bytes(), kb.bytes_recounted());
        kb.forget_dir(2);
        assert!(kb.is_empty());
        assert_eq!(kb.bytes(), kb.bytes_recounted());
        assert_eq!(kb.dir_blocks(2), None);
    }

    #[test]
    fn deletion_keeps_every_probe_chain() {
        // Many inserts and removes in a small table exercise wrap-around shifts.
        let mut kb = KnowledgeBase::new();
        kb.learn_dir(5, DirKind::Htree, &[], std::iter::empty());
        let ns = names(2000);
        let mut live = std::collections::BTreeSet::new();
        let mut x = 12345u64;
        for round in 0..20_000u32 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (x >> 33) as usize % ns.len();
            if live.contains(&i) && round % 3 != 0 {
                kb.drop_entry(5, &ns[i]);
                live.remove(&i);
            } else {
                kb.note_entry(5, &ns[i], i as u32 + 1, None);
                live.insert(i);
            }
        }
        assert_eq!(kb.len(), live.len());
        for (i, n) in ns.iter().enumerate() {
            assert_eq!(kb.lookup(5, n), live.contains(&i).then_some(i as u32 + 1));
        }
    }

    #[test]
    fn at_most_32_bytes_per_entry_at_1m() {
        // One big directory (with its blocks: ~70 names a block), and the
        // same entries over 100,000 directories of 10 (one block each).
        const N: usize = 1_000_000;
        let ns = names(N);
        let mut big = KnowledgeBase::new();
        let blocks: Vec<u64> = (0..(N / 70) as u64).collect();
        big.learn_dir(2, DirKind::Htree, &blocks, ns.iter().enumerate().map(|(i, n)| (&n[..], 42, (i / 70) as u64)));
        let mut small = KnowledgeBase::new();
        for d in 0..(N / 10) as u32 {
            let part = &ns[d as usize * 10..d as usize * 10 + 10];
            small.learn_dir(d + 11, DirKind::Linear, &[u64::from(d) + 9000], part.iter().map(|n| (&n[..], 42, 0)));
        }
        for kb in [&big, &small] {
            // 32-bit hashes: ~116 pairs of a million names in one directory
            // collide (the later one is kept), none among ten.
            assert!(kb.len() > N - 300, "{}", kb.len());
            let per = kb.bytes() as f64 / kb.len() as f64;
            eprintln!("KB: {} dirs, {:.1} bytes/entry", kb.dirs(), per);
            assert!(per <= 32.0, "{per} bytes per entry");
            assert_eq!(kb.bytes(), kb.bytes_recounted());
            assert_eq!(kb.evicted(), 0, "1M entries fit the default limit");
        }
        // Grown one entry at a time (note_entry) instead of learnt at once.
        let mut grown = KnowledgeBase::new();
        grown.learn_dir(2, DirKind::Htree, &[], std::iter::empty());
        for n in &ns[..100_000] {
            grown.note_entry(2, n, 42, Some(0));
        }
        let per = grown.bytes() as f64 / grown.len() as f64;
        eprintln!("KB grown by notes: {per:.1} bytes/entry");
        assert!(per <= 32.0, "{per}");
    }

    /// Learning far beyond the limit (a tree 25x bigger, one directory at a
    /// time, and one directory grown by notes) never holds more than it, and
    /// what is still known answers as before.
    #[test]
    fn stays_within_its_limit() {
        const LIMIT: usize = 1 << 20;
        let ns = names(50);
        let child = |d: u32, i: usize| d * 100 + i as u32 + 1;
        let mut kb = KnowledgeBase::with_limit(LIMIT);
        for d in 11..20_011u32 {
            kb.learn_dir(
                d,
                DirKind::Linear,
                &[u64::from(d)],
                ns.iter().enumerate().map(|(i, n)| (&n[..], child(d, i), 0)),
            );
            assert!(kb.bytes() <= LIMIT, "{} bytes after {d}", kb.bytes());
            assert_eq!(kb.lookup(d, &ns[7]), Some(child(d, 7)), "the directory just learnt is known");
        }
        assert_eq!(kb.bytes(), kb.bytes_recounted());
        assert!(kb.evicted() >= 19_000, "{}", kb.evicted());
        assert!(kb.dirs() >= 200 && kb.bytes() >= LIMIT / 2, "{} dirs, {} bytes: still useful", kb.dirs(), kb.bytes());
        assert_eq!(kb.len(), kb.dirs() * ns.len());
        for d in kb.known_dirs() {
            for (i, n) in ns.iter().enumerate() {
                assert_eq!(kb.hint(d, n), Some(Hint { child: child(d, i), lblk: Some(0) }));
            }
        }
        // One directory grown past half the limit by notes: the others go
        // first, then the directory itself.
        let big = names(100_000);
        kb.learn_dir(5, DirKind::Htree, &[9], std::iter::empty());
        let mut gone_at = None;
        for (i, n) in big.iter().enumerate() {
            kb.note_entry(5, n, i as u32 + 1, Some(0));
            assert!(kb.bytes() <= LIMIT, "{} bytes at note {i}", kb.bytes());
            if !kb.knows(5) {
                gone_at = Some(i);
                break;
            }
        }
        let gone_at = gone_at.expect("the directory outgrew the limit");
        assert!(gone_at > 30_000, "kept while it fitted: {gone_at}");
        assert_eq!(kb.bytes(), kb.bytes_recounted());
        // Too big to learn at once: not learnt, nothing else lost.
        kb.learn_dir(7, DirKind::Linear, &[1], ns.iter().map(|n| (&n[..], 3, 0)));
        kb.learn_dir(6, DirKind::Htree, &[2], big.iter().map(|n| (&n[..], 4, 0)));
        assert!(!kb.knows(6) && kb.knows(7));
        assert_eq!(kb.bytes(), kb.bytes_recounted());
    }

    #[test]
    fn hash_spreads_similar_names() {
        let ns = names(100_000);
        let hashes: std::collections::HashSet<u32> = ns.iter().map(|n| name_hash(n)).collect();
        // Birthday bound: ~1.2 expected collisions among 100k 32-bit values.
        assert!(hashes.len() >= 100_000 - 10);
    }
}
