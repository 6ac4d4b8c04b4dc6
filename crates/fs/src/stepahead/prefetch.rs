//! The prefetcher: read the uncached ones of a set of blocks in one batch
//! into the buffer cache.

use crate::cache::Block;
use crate::error::Result;
use crate::read_core::ReadCore;
use blockdev::IoClass;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// What one prefetch did with the blocks it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Distinct blocks asked for.
    pub requested: usize,
    /// Already in the buffer cache: nothing to do.
    pub cached: usize,
    /// Read and offered to the cache.
    pub read: usize,
    /// Not blocks of this volume (a stale or corrupt hint): skipped.
    pub invalid: usize,
    /// Left out: over the budget.
    pub over_budget: usize,
    /// Requests submitted together (contiguous runs at home, log stretches).
    pub runs: usize,
    /// Not read: one request, which the operation makes itself (`Lone::Skip`).
    pub left_to_the_operation: usize,
}

/// A hint's prefetch that comes down to one request: read it or leave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lone {
    Read,
    /// Leave it to the operation that follows: hints run just before it, so
    /// reading first gains nothing, and the operation's own read is as good
    /// or better (an inode block misses with its 32-block readahead window,
    /// a log copy with its stretch, where the hint reads the one block).
    Skip,
}

/// The longest run of home blocks `Lone::Skip` leaves alone: what a miss
/// reads in one request anyway (a directory reads up to 16 contiguous
/// blocks, an inode block its 32-block window).
const LONE_RUN_MAX: u64 = 16;

/// The longest gap between two runs a prefetch reads through rather than
/// making two requests: 32 blocks (128 KiB) take about 0.9 ms to transfer at
/// a disk's 150 MB/s, a second request costs a positioning of a few ms, and
/// requests queued together stop the drive's own read-ahead, which served
/// the demand reads they replace nearly for free (measured on `cmr`: a
/// prefetched directory block cost 1.3 ms of drive time, a demand one 0.26 ms).
const GAP_MAX: u64 = 32;

/// Runs `(start, length)` sorted by start, merged where they overlap, touch
/// or leave a gap of at most `gap` blocks: the one way this module turns
/// blocks, windows and bridged gaps into requests.
fn merge_runs(runs: impl IntoIterator<Item = (u64, u64)>, gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (start, len) in runs {
        match out.last_mut() {
            Some((s, n)) if *s + *n + gap >= start => *n = (*n).max(start + len - *s),
            _ => out.push((start, len)),
        }
    }
    out
}

fn stretch_len(s: &[journal::CopyAt]) -> u64 {
    s.last().map_or(0, |c| c.jblock - s[0].jblock + 1)
}

impl ReadCore {
    /// Whether `blk` is in the buffer cache (counts neither a hit nor a miss).
    pub fn is_cached(&self, blk: u64) -> bool {
        self.cache.contains(blk)
    }

    /// Read those of `blocks` that are not cached, submitted as one batch of
    /// contiguous runs (the device may reorder them), and cache them as clean
    /// copies. Blocks whose newest copy is in the journal (lazy mode) or in
    /// the replayed overlay come from there, as on any cache miss.
    pub fn prefetch(&self, blocks: &[u64]) -> Result<PrefetchStats> {
        self.prefetch_within(blocks, usize::MAX, Lone::Read)
    }

    /// [`ReadCore::prefetch`] of at most `budget` blocks (the first ones of
    /// `blocks` that need reading: callers list them most wanted first).
    /// `lone`: what to do when everything left to read is one request the
    /// operation that follows would make the same way itself.
    pub(crate) fn prefetch_within(&self, blocks: &[u64], budget: usize, lone: Lone) -> Result<PrefetchStats> {
        let mut st = PrefetchStats::default();
        let mut seen = std::collections::HashSet::with_capacity(blocks.len());
        let mut want = Vec::with_capacity(blocks.len().min(budget));
        for &b in blocks {
            if !seen.insert(b) {
                continue;
            }
            st.requested += 1;
            if self.check_block(b, "prefetched block").is_err() {
                st.invalid += 1;
            } else if self.cache.contains(b) {
                st.cached += 1;
            } else if want.len() >= budget {
                st.over_budget += 1;
            } else {
                want.push(b);
            }
        }
        if want.is_empty() {
            return Ok(st);
        }
        // Sorted into contiguous runs below.
        want.sort_unstable();
        // Lazy mode: held across the reads, so the tail cannot move and free a copy meanwhile.
        let jbd2 = self.log().map(|j| j.read());
        let (home, stretches) = match &jbd2 {
            Some(j) => self.split_by_log(j, &want)?,
            None => (want.clone(), Vec::new()),
        };
        let exact = merge_runs(home.iter().map(|&b| (b, 1)), 0);
        let alone = match (exact.as_slice(), stretches.len()) {
            ([(_, len)], 0) => *len <= LONE_RUN_MAX,
            ([], 1) => true,
            _ => false,
        };
        if lone == Lone::Skip && alone {
            st.left_to_the_operation = want.len();
            if let Some(sa) = &self.stepahead {
                sa.lone_skips.fetch_add(1, Ordering::Relaxed);
            }
            return Ok(st);
        }
        if let Some(sa) = &self.stepahead {
            sa.batches.fetch_add(1, Ordering::Relaxed);
        }
        // A lookup's hint (`Lone::Skip`) runs just before the lookup, which
        // reads with its own readahead: it keeps to the blocks it wants, so
        // it never turns into the one request the lookup would make.
        let windows = if lone == Lone::Skip { exact } else { self.with_inode_windows(&home) };
        let runs = if lone == Lone::Skip { windows.clone() } else { merge_runs(windows.iter().copied(), GAP_MAX) };
        st.runs = runs.len() + stretches.len();
        // What a run brings beyond its windows (a gap bridged) is not ours to
        // cache: it may be any block, file data included.
        let in_window = |blk: u64| {
            let i = windows.partition_point(|&(s, _)| s <= blk);
            i > 0 && blk < windows[i - 1].0 + windows[i - 1].1
        };
        // Noted before reading: a block modified meanwhile keeps its newer copy.
        let epoch = self.cache.read_epoch();
        let bs = self.block_size as usize;
        let wanted: std::collections::HashSet<u64> = want.iter().copied().collect();
        // A wanted block is cached as prefetched (StepAhead's use and waste
        // counts); the rest of a window as a miss's readahead caches it.
        let keep = |blk: u64, data: Block, st: &mut PrefetchStats| {
            if wanted.contains(&blk) {
                self.cache.insert_prefetched(blk, data, epoch);
                st.read += 1;
            } else if in_window(blk) && !self.cache.contains(blk) {
                self.cache.insert_read(blk, data, epoch);
            }
        };
        if jbd2.is_none() {
            // Read through the replayed overlay, as any miss is.
            let bufs = self.read_runs_uncached(&runs, IoClass::Metadata)?;
            for (&(start, len), buf) in runs.iter().zip(&bufs) {
                debug_assert_eq!(buf.len(), len as usize * bs);
                for (i, chunk) in buf.chunks_exact(bs).enumerate() {
                    keep(start + i as u64, Arc::from(chunk), &mut st);
                }
            }
            return Ok(st);
        }
        // Lazy mode: home runs and log stretches in one batch. Wanted home
        // blocks have no copy in the log (split_by_log); the rest of a
        // window may, and is then left out (read_runs_uncached would split
        // the window around them, a request per copy).
        let mut bufs: Vec<Vec<u8>> = runs.iter().map(|&(_, n)| vec![0u8; n as usize * bs]).collect();
        let mut logs: Vec<Vec<u8>> = stretches.iter().map(|s| vec![0u8; stretch_len(s) as usize * bs]).collect();
        {
            let mut reqs: Vec<blockdev::ReadRequest<'_>> = Vec::with_capacity(bufs.len() + logs.len());
            for (&(start, _), buf) in runs.iter().zip(bufs.iter_mut()) {
                reqs.push(blockdev::ReadRequest { offset: start * bs as u64, buf, class: IoClass::Metadata });
            }
            for (s, buf) in stretches.iter().zip(logs.iter_mut()) {
                reqs.push(blockdev::ReadRequest { offset: s[0].phys * bs as u64, buf, class: IoClass::Journal });
            }
            self.submit_reads(&mut reqs)?;
        }
        let logged = |blk: u64| jbd2.as_ref().is_some_and(|j| j.has_copy(blk));
        for (&(start, _), buf) in runs.iter().zip(&bufs) {
            for (i, chunk) in buf.chunks_exact(bs).enumerate() {
                let blk = start + i as u64;
                // A wanted block with a copy in the log comes from its stretch.
                if !logged(blk) {
                    keep(blk, Arc::from(chunk), &mut st);
                }
            }
        }
        drop(jbd2);
        for (s, buf) in stretches.iter().zip(&logs) {
            for c in s {
                let at = ((c.jblock - s[0].jblock) as usize) * bs;
                let mut data = buf[at..at + bs].to_vec();
                if c.escaped {
                    journal::unescape(&mut data);
                }
                // The rest of the stretch, as a miss's log readahead caches it.
                if wanted.contains(&c.block) {
                    self.cache.insert_prefetched(c.block, Arc::from(data), epoch);
                    st.read += 1;
                } else if !self.cache.contains(c.block) {
                    self.cache.insert_read(c.block, Arc::from(data), epoch);
                }
            }
        }
        Ok(st)
    }

    /// `home` (sorted blocks) as the runs to read: each inode-table block
    /// widened to its readahead window, as a miss on it reads it, and
    /// overlapping or touching runs merged. Block by block, a prefetch paid a
    /// request per inode block where the miss it replaces paid one per
    /// window: on `cmr` with the drive's read cache an ordered-mode `find`
    /// went from 89 inode-table requests to 2,042 and took 3.5x as long.
    fn with_inode_windows(&self, home: &[u64]) -> Vec<(u64, u64)> {
        let windows = home.iter().map(|&b| {
            let (start, len) = self.inode_window(b).unwrap_or((b, 1));
            debug_assert!(start <= b && b < start + len);
            (start, len)
        });
        merge_runs(windows, 0)
    }

    /// Lazy mode: `want` (sorted) split into blocks at home and the log
    /// stretches that hold the newest copies of the others, each stretch what
    /// a miss on its first block would read (`Volume::log_stretch`), taken in
    /// log order so that one stretch covers the next wanted copies.
    fn split_by_log(&self, j: &crate::write::Jbd2, want: &[u64]) -> Result<(Vec<u64>, Vec<Vec<journal::CopyAt>>)> {
        let mut home = Vec::new();
        let mut logged = Vec::new();
        for &b in want {
            match j.newest_copy_location(b).map_err(crate::write::journal_err)? {
                Some((phys, _)) => logged.push((phys, b)),
                None => home.push(b),
            }
        }
        logged.sort_unstable();
        let mut covered = std::collections::HashSet::new();
        let mut stretches = Vec::new();
        for &(_, b) in &logged {
            if covered.contains(&b) {
                continue;
            }
            let s = self.log_stretch(j, b)?;
            if s.is_empty() {
                home.push(b); // cannot happen (it has a copy); read it as a miss would
                continue;
            }
            covered.extend(s.iter().map(|c| c.block));
            stretches.push(s);
        }
        home.sort_unstable();
        Ok((home, stretches))
    }

    /// A hint's prefetch: nothing while the device is congested, at most
    /// what is left of `budget` (which it uses up). Errors only cost the
    /// prefetch: the operation that follows reads what it needs itself.
    pub(crate) fn hint_prefetch(&self, blocks: &[u64], budget: &mut usize, lone: Lone) -> PrefetchStats {
        let Some(sa) = &self.stepahead else { return PrefetchStats::default() };
        if blocks.is_empty() || *budget == 0 {
            return PrefetchStats::default();
        }
        if self.reads_in_flight.load(Ordering::Relaxed) >= sa.opts.congestion_limit {
            sa.backoffs.fetch_add(1, Ordering::Relaxed);
            return PrefetchStats::default();
        }
        match self.prefetch_within(blocks, *budget, lone) {
            Ok(st) => {
                *budget -= st.read.min(*budget);
                st
            }
            // The read that follows meets the same error and reports it.
            Err(_) => PrefetchStats::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_up_to_the_limit_are_bridged() {
        assert_eq!(merge_runs([(0, 2), (10, 1), (100, 5)], 32), vec![(0, 11), (100, 5)]);
        assert_eq!(merge_runs([(0, 1), (33, 1)], 32), vec![(0, 34)], "a gap of exactly 32");
        assert_eq!(merge_runs([(0, 1), (34, 1)], 32), vec![(0, 1), (34, 1)], "33: two requests");
        assert_eq!(merge_runs([(5, 3), (8, 2)], 0), vec![(5, 5)], "touching runs join");
        assert_eq!(merge_runs([], 32), vec![]);
        let blocks = [1u64, 2, 3, 7, 9, 10];
        assert_eq!(merge_runs(blocks.iter().map(|&b| (b, 1)), 0), vec![(1, 3), (7, 1), (9, 2)]);
        assert_eq!(merge_runs([(0, 32), (0, 32), (16, 4), (30, 10)], 0), vec![(0, 40)], "overlapping windows");
    }
}
