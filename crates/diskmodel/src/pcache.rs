//! The persistent cache of a drive-managed SMR disk: where writes that are not
//! streamed land, and which bands they dirty.
//!
//! Entries are kept in write order. In log mode (static-mapping Seagate) the
//! space of an entry comes back only when the log tail passes it, so cleaning
//! the band of the oldest entry is what frees space; in pool mode (dynamic
//! mapping) space comes back as soon as the entry's band is cleaned.

use std::collections::{BTreeSet, HashMap, VecDeque};

#[derive(Clone, Debug)]
struct Entry {
    band: u64,
    off: u64,
    len: u64,
    live: bool,
}

#[derive(Debug)]
pub struct PCache {
    capacity: u64,
    is_log: bool,
    band_bytes: u64,
    log: VecDeque<Entry>,
    /// Sequence number of `log[0]`.
    base_seq: u64,
    /// Bytes of cache space in use (log mode: from tail to head, dead entries
    /// included; pool mode: live entries only).
    used: u64,
    live_bytes: u64,
    live_frags: u64,
    /// Live entries per dirty band, as sequence numbers.
    bands: HashMap<u64, Vec<u64>>,
    /// (live fragment count, band) of every dirty band, for greedy victims.
    by_count: BTreeSet<(usize, u64)>,
    /// Bytes appended in total (the log head's offset before wrapping).
    head: u64,
}

impl PCache {
    pub fn new(capacity: u64, is_log: bool, band_bytes: u64) -> Self {
        PCache {
            capacity,
            is_log,
            band_bytes,
            log: VecDeque::new(),
            base_seq: 0,
            used: 0,
            live_bytes: 0,
            live_frags: 0,
            bands: HashMap::new(),
            by_count: BTreeSet::new(),
            head: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }
    pub fn used(&self) -> u64 {
        self.used
    }
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }
    pub fn live_frags(&self) -> u64 {
        self.live_frags
    }
    pub fn dirty_bands(&self) -> u64 {
        self.bands.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.live_frags == 0
    }
    /// Offset of the log head inside the cache area (where the next append goes).
    pub fn head_offset(&self) -> u64 {
        self.head % self.capacity.max(1)
    }
    /// Would appending `len` more bytes overflow the cache?
    pub fn needs_space(&self, len: u64) -> bool {
        self.used + len > self.capacity
    }

    /// Append a write of `len` bytes at host address `off` (split at band
    /// boundaries). The caller has made room.
    pub fn append(&mut self, off: u64, len: u64) {
        let mut o = off;
        let end = off + len;
        while o < end {
            let band = o / self.band_bytes;
            let piece_end = ((band + 1) * self.band_bytes).min(end);
            let seq = self.base_seq + self.log.len() as u64;
            self.log.push_back(Entry { band, off: o, len: piece_end - o, live: true });
            let v = self.bands.entry(band).or_default();
            if !v.is_empty() {
                self.by_count.remove(&(v.len(), band));
            }
            v.push(seq);
            self.by_count.insert((v.len(), band));
            self.used += piece_end - o;
            self.live_bytes += piece_end - o;
            self.live_frags += 1;
            o = piece_end;
        }
        self.head += len;
        debug_assert!(self.used <= self.capacity, "cache over-filled: {} > {}", self.used, self.capacity);
    }

    /// The band cleaning should take next, if any band is dirty.
    pub fn victim(&mut self, greedy: bool) -> Option<u64> {
        if greedy {
            return self.by_count.iter().next_back().map(|&(_, b)| b);
        }
        self.advance_tail();
        self.log.front().map(|e| e.band)
    }

    /// Number of live fragments of a band.
    pub fn fragments(&self, band: u64) -> usize {
        self.bands.get(&band).map_or(0, Vec::len)
    }

    fn kill(&mut self, seq: u64) {
        let idx = (seq - self.base_seq) as usize;
        if let Some(e) = self.log.get_mut(idx) {
            if e.live {
                e.live = false;
                self.live_bytes -= e.len;
                self.live_frags -= 1;
                if !self.is_log {
                    self.used -= e.len;
                }
            }
        }
    }

    /// Pop dead entries at the log's tail (log mode frees their space here).
    fn advance_tail(&mut self) {
        while let Some(e) = self.log.front() {
            if e.live {
                break;
            }
            if self.is_log {
                self.used -= e.len;
            }
            self.log.pop_front();
            self.base_seq += 1;
        }
    }

    /// The band's cached fragments have been merged into it: drop them.
    /// Returns the number of fragments merged.
    pub fn clean_band(&mut self, band: u64) -> usize {
        let Some(seqs) = self.bands.remove(&band) else {
            return 0;
        };
        self.by_count.remove(&(seqs.len(), band));
        for &s in &seqs {
            self.kill(s);
        }
        self.advance_tail();
        debug_assert!(self.used <= self.capacity);
        seqs.len()
    }

    /// Cached fragments wholly covered by a write that went to the band
    /// directly are stale: drop them.
    pub fn invalidate(&mut self, off: u64, len: u64) {
        let end = off + len;
        let first = off / self.band_bytes;
        let last = (end.saturating_sub(1)) / self.band_bytes;
        for band in first..=last {
            let Some(seqs) = self.bands.get(&band) else {
                continue;
            };
            let mut keep = Vec::with_capacity(seqs.len());
            let mut dead = Vec::new();
            for &s in seqs {
                let e = &self.log[(s - self.base_seq) as usize];
                if e.off >= off && e.off + e.len <= end {
                    dead.push(s);
                } else {
                    keep.push(s);
                }
            }
            if dead.is_empty() {
                continue;
            }
            self.by_count.remove(&(seqs.len(), band));
            for s in dead {
                self.kill(s);
            }
            if keep.is_empty() {
                self.bands.remove(&band);
            } else {
                self.by_count.insert((keep.len(), band));
                self.bands.insert(band, keep);
            }
        }
        self.advance_tail();
    }

    /// The live cached fragments overlapping `[off, off + len)`.
    fn fragments_in(&self, off: u64, len: u64) -> impl Iterator<Item = &Entry> {
        let end = off.saturating_add(len);
        let first = off / self.band_bytes;
        let last = (end.saturating_sub(1)) / self.band_bytes;
        (first..=last)
            .filter_map(|band| self.bands.get(&band))
            .flat_map(|seqs| seqs.iter().map(|&s| &self.log[(s - self.base_seq) as usize]))
            .filter(move |e| e.off < end && off < e.off + e.len)
    }

    /// The first byte in `[off, off + len)` that a cached fragment holds.
    pub fn first_overlap(&self, off: u64, len: u64) -> Option<u64> {
        self.fragments_in(off, len).map(|e| e.off.max(off)).min()
    }

    /// Number of live cached fragments overlapping `[off, off+len)`.
    pub fn overlapping(&self, off: u64, len: u64) -> usize {
        self.fragments_in(off, len).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_space_returns_only_at_the_tail() {
        let mut c = PCache::new(16 * 4096, true, 1 << 20);
        c.append(0, 4096); // band 0
        c.append(1 << 20, 4096); // band 1
        c.append(4096, 4096); // band 0
        assert_eq!(c.used(), 3 * 4096);
        // cleaning band 1 frees nothing in log mode: band 0 is at the tail
        assert_eq!(c.clean_band(1), 1);
        assert_eq!(c.used(), 3 * 4096);
        assert_eq!(c.victim(false), Some(0));
        assert_eq!(c.clean_band(0), 2);
        assert_eq!(c.used(), 0);
        assert!(c.is_empty());
    }

    #[test]
    fn pool_space_returns_at_once_and_greedy_picks_fullest() {
        let mut c = PCache::new(16 * 4096, false, 1 << 20);
        c.append(0, 4096);
        c.append(1 << 20, 4096);
        c.append((1 << 20) + 8192, 4096);
        assert_eq!(c.victim(true), Some(1));
        assert_eq!(c.clean_band(1), 2);
        assert_eq!(c.used(), 4096);
        assert_eq!(c.overlapping(0, 8192), 1);
        c.invalidate(0, 8192);
        assert!(c.is_empty());
        assert_eq!(c.used(), 0);
    }

    #[test]
    fn first_overlap_finds_the_nearest_cached_byte_across_bands() {
        let mut c = PCache::new(1 << 20, false, 8192);
        c.append(12288, 4096); // band 1
        c.append(20480, 4096); // band 2
        assert_eq!(c.first_overlap(0, 8192), None);
        assert_eq!(c.first_overlap(0, 32768), Some(12288));
        assert_eq!(c.first_overlap(14336, 32768), Some(14336), "inside a fragment: where the range starts");
        assert_eq!(c.first_overlap(16384, 32768), Some(20480));
        c.clean_band(1);
        assert_eq!(c.first_overlap(0, 32768), Some(20480), "cleaned fragments hold nothing");
    }

    #[test]
    fn writes_across_a_band_boundary_split() {
        let mut c = PCache::new(1 << 20, true, 8192);
        c.append(4096, 8192);
        assert_eq!(c.dirty_bands(), 2);
        assert_eq!(c.live_frags(), 2);
    }
}
