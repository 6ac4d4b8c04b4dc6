//! The prefetcher: read the uncached ones of a set of blocks in one batch
//! into the buffer cache.

use crate::cache::Block;
use crate::error::Result;
use crate::volume::Volume;
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
    /// Contiguous runs submitted together.
    pub runs: usize,
}

impl Volume {
    /// Whether `blk` is in the buffer cache (counts neither a hit nor a miss).
    pub fn is_cached(&self, blk: u64) -> bool {
        self.cache.contains(blk)
    }

    /// Read those of `blocks` that are not cached, submitted as one batch of
    /// contiguous runs (the device may reorder them), and cache them as clean
    /// copies. Blocks whose newest copy is in the journal (lazy mode) or in
    /// the replayed overlay come from there, as on any cache miss.
    pub fn prefetch(&self, blocks: &[u64]) -> Result<PrefetchStats> {
        self.prefetch_within(blocks, usize::MAX)
    }

    /// [`Volume::prefetch`] of at most `budget` blocks (the first ones of
    /// `blocks` that need reading: callers list them most wanted first).
    pub(crate) fn prefetch_within(&self, blocks: &[u64], budget: usize) -> Result<PrefetchStats> {
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
        want.sort_unstable();
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &b in &want {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == b => *len += 1,
                _ => runs.push((b, 1)),
            }
        }
        st.runs = runs.len();
        if runs.is_empty() {
            return Ok(st);
        }
        if let Some(sa) = &self.stepahead {
            sa.batches.fetch_add(1, Ordering::Relaxed);
        }
        // Noted before reading: a block modified meanwhile keeps its newer copy.
        let epoch = self.cache.read_epoch();
        let bufs = self.read_runs_uncached(&runs, IoClass::Metadata)?;
        let bs = self.block_size as usize;
        for (&(start, len), buf) in runs.iter().zip(&bufs) {
            debug_assert_eq!(buf.len(), len as usize * bs);
            for (i, chunk) in buf.chunks_exact(bs).enumerate() {
                let data: Block = Arc::from(chunk);
                self.cache.insert_prefetched(start + i as u64, data, epoch);
                st.read += 1;
            }
        }
        Ok(st)
    }

    /// A hint's prefetch: nothing while the device is congested, at most
    /// what is left of `budget` (which it uses up). Errors only cost the
    /// prefetch: the operation that follows reads what it needs itself.
    pub(crate) fn hint_prefetch(&self, blocks: &[u64], budget: &mut usize) -> PrefetchStats {
        let Some(sa) = &self.stepahead else { return PrefetchStats::default() };
        if blocks.is_empty() || *budget == 0 {
            return PrefetchStats::default();
        }
        if self.reads_in_flight.load(Ordering::Relaxed) >= sa.opts.congestion_limit {
            sa.backoffs.fetch_add(1, Ordering::Relaxed);
            return PrefetchStats::default();
        }
        match self.prefetch_within(blocks, *budget) {
            Ok(st) => {
                *budget -= st.read.min(*budget);
                st
            }
            // The read that follows meets the same error and reports it.
            Err(_) => PrefetchStats::default(),
        }
    }
}
