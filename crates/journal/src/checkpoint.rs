//! Checkpointing (the kernel's `fs/jbd2/checkpoint.c`): writing committed
//! blocks to their static locations so the log space holding them can be
//! reused, then moving the tail.
//!
//! Order: home writes, flush, then the superblock's new `s_start`/`s_sequence`
//! (with a flush before and after, PREFLUSH|FUA in jbd2), and only then may a
//! commit overwrite the freed blocks. A crash in between replays transactions
//! whose blocks are already home: harmless, the copies are identical or older
//! than later copies that replay after them.
//!
//! Policy (when to checkpoint, dirty_expire writeback) is the fs layer's; it
//! gets [`Journal::fill`], [`Journal::needs_checkpoint`],
//! [`Journal::live_transactions`] with [`Journal::live_blocks`] (the blocks
//! whose newest copy each holds and which are not home yet, from the jmap)
//! and tells the journal about its own writeback with [`Journal::written_home`].
//!
//! A block logged again by a newer transaction leaves the older one's live
//! list (as jbd2 moves a buffer to the newest checkpoint list): the older
//! transaction can be freed without writing it, since the newer copy is
//! replayed after it anyway.

use std::io;

use blockdev::BlockDevice;

use crate::{tid_geq, Error, Journal};

/// How much to checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointGoal {
    /// The oldest live transaction only.
    Oldest,
    /// Oldest transactions until at least this many blocks are free for the
    /// next transaction (all of them if that cannot be reached).
    Space(u64),
    /// Every live transaction (before [`Journal::empty`]).
    All,
}

/// What a checkpoint did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CheckpointStats {
    /// Blocks written home.
    pub written: u64,
    /// Blocks the caller declined (no longer metadata).
    pub skipped: u64,
    /// Transactions the tail moved past.
    pub transactions_freed: usize,
}

/// Fills the buffers of a chunk of blocks (one block each, in order) with
/// their newest committed contents, and says per block whether it is to be
/// written at all.
type Source<'a, D> = dyn FnMut(&Journal<D>, &[u64], &mut [u8], &mut [bool]) -> Result<(), Error> + 'a;

/// Blocks a checkpoint gathers before writing them home: home-consecutive
/// ones go out as one request (one at a time, a checkpoint of a full log
/// took 31,000 synchronous writes, and as many reads of the log, in a run
/// that created 30,000 files on an O_DIRECT image), and the memory it holds
/// stays bounded (1 MiB of 4 KiB blocks).
const CHUNK_BLOCKS: usize = 256;

impl<D: BlockDevice> Journal<D> {
    /// Checkpoint with contents from the caller: `contents(block, buf)` fills
    /// `buf` with the newest *committed* contents of static `block` (the
    /// buffer cache's copy, provided it holds no change of a transaction not
    /// yet committed) and returns true, or false if the block is no longer
    /// metadata and must not be written.
    pub fn checkpoint<F>(&mut self, goal: CheckpointGoal, mut contents: F) -> Result<CheckpointStats, Error>
    where
        F: FnMut(u64, &mut [u8]) -> io::Result<bool>,
    {
        let bs = self.map.block_size() as usize;
        self.checkpoint_with(goal, &mut |_, blocks, bufs, present| {
            for ((&block, buf), present) in blocks.iter().zip(bufs.chunks_exact_mut(bs)).zip(present.iter_mut()) {
                *present = contents(block, buf).map_err(|source| Error::HomeIo { block, source })?;
            }
            Ok(())
        })
    }

    /// Checkpoint with contents read back from the log (each block's newest
    /// committed copy): for tools (`ext4lazy checkpoint`), lazy-mode migration
    /// home, and when the caller has no cached copy. Each chunk's copies are
    /// read as one batch.
    pub fn checkpoint_from_log(&mut self, goal: CheckpointGoal) -> Result<CheckpointStats, Error> {
        self.checkpoint_with(goal, &mut |j, blocks, bufs, present| j.read_newest_batch(blocks, bufs, present))
    }

    fn checkpoint_with(&mut self, goal: CheckpointGoal, source: &mut Source<'_, D>) -> Result<CheckpointStats, Error> {
        if self.needs_recovery {
            return Err(Error::NeedsRecovery);
        }
        let k = self.transactions_for(goal);
        // Each block is live in one transaction only: no duplicates. Sorted,
        // so home writes go in block order and neighbours merge.
        let mut blocks: Vec<u64> = self.live.iter().take(k).flat_map(|t| self.jmap.live_blocks(t.sequence)).collect();
        blocks.sort_unstable();
        debug_assert!(blocks.windows(2).all(|w| w[0] < w[1]), "a block live in two transactions");
        let mut stats = CheckpointStats::default();
        let bs = self.map.block_size() as usize;
        let mut bufs = vec![0u8; blocks.len().min(CHUNK_BLOCKS) * bs];
        let mut present = vec![false; blocks.len().min(CHUNK_BLOCKS)];
        for chunk in blocks.chunks(CHUNK_BLOCKS) {
            let (bufs, present) = (&mut bufs[..chunk.len() * bs], &mut present[..chunk.len()]);
            source(self, chunk, bufs, present)?;
            stats.written += self.write_home_runs(chunk, bufs, present)?;
        }
        stats.skipped = blocks.len() as u64 - stats.written;
        if !blocks.is_empty() {
            self.dev.flush().map_err(Error::Flush)?;
        }
        self.written_home(blocks);
        stats.transactions_freed = self.advance_tail()?;
        Ok(stats)
    }

    /// Write home the `present` blocks of `blocks` (sorted; contents in
    /// `bufs`, one block each), one request per run of consecutive blocks,
    /// all submitted together. Returns how many were written.
    fn write_home_runs(&self, blocks: &[u64], bufs: &[u8], present: &[bool]) -> Result<u64, Error> {
        let bs = self.map.block_size() as usize;
        let mut runs = Vec::new();
        let mut i = 0;
        while i < blocks.len() {
            if !present[i] {
                i += 1;
                continue;
            }
            let mut end = i + 1;
            while end < blocks.len() && present[end] && blocks[end] == blocks[end - 1] + 1 {
                end += 1;
            }
            runs.push((blocks[i], &bufs[i * bs..end * bs]));
            i = end;
        }
        self.write_home_batch(&runs)?;
        Ok(runs.iter().map(|(_, data)| (data.len() / bs) as u64).sum())
    }

    /// How many of the oldest transactions a goal needs cleaned.
    fn transactions_for(&self, goal: CheckpointGoal) -> usize {
        match goal {
            CheckpointGoal::Oldest => self.live.len().min(1),
            CheckpointGoal::All => self.live.len(),
            CheckpointGoal::Space(want) => {
                let mut left = self.space_left();
                let mut k = 0;
                for t in &self.live {
                    if left >= want {
                        break;
                    }
                    left += t.blocks;
                    k += 1;
                }
                k
            }
        }
    }

    /// The caller wrote these static blocks home itself (dirty_expire
    /// writeback) with contents at least as new as their newest committed
    /// copy, and flushed: no live transaction needs to write them again, and
    /// reads no longer need the log. O(1) per block. Call
    /// [`Self::advance_tail`] to reuse the space.
    pub fn written_home<I: IntoIterator<Item = u64>>(&mut self, blocks: I) {
        for b in blocks {
            self.jmap.remove(b);
        }
    }

    /// `block` was freed from metadata use (its revoke is in the running
    /// transaction): never write an older copy of it home, as jbd2's
    /// `jbd2_journal_forget` drops the checkpoint buffer.
    pub fn forget(&mut self, block: u64) {
        self.written_home([block]);
    }

    /// Free the oldest transactions without live blocks (each block home,
    /// superseded by a newer copy, or revoked): record the new tail in the
    /// superblock (flushed before and after, so the home writes
    /// are durable first and the new tail before the space is reused).
    /// Returns the number of transactions freed.
    pub fn advance_tail(&mut self) -> Result<usize, Error> {
        let mut freed = 0;
        while let Some(t) = self.live.front() {
            if self.jmap.has_live(t.sequence) {
                break;
            }
            self.jmap.retire(t.sequence);
            self.live.pop_front();
            freed += 1;
        }
        if freed == 0 {
            return Ok(0);
        }
        let (tail, seq) = match self.live.front() {
            Some(t) => (t.start, t.sequence),
            None => (self.head, self.next_sequence),
        };
        debug_assert!(tid_geq(seq, self.tail_sequence), "the tail moves forward");
        self.tail = tail;
        self.tail_sequence = seq;
        self.sb.start = tail as u32;
        self.sb.sequence = seq;
        self.write_superblock(true)?;
        debug_assert!(self.used() <= self.last - self.first);
        Ok(freed)
    }
}
