//! Ordered mode (and a volume without a journal): committed blocks wait in
//! memory (`WriteState::unwritten`, pinned in the cache) until write-back
//! (`dirty_expire=`, unmount) or a checkpoint writes them home; then the
//! journal may reuse their space.

use super::Jbd2;
use crate::error::{journal_err, FsError, Result};
use crate::volume::Volume;
use crate::write::{read_only_after, Txn, Unwritten, WriteState};
use blockdev::{IoClass, WriteRequest};
use std::time::Instant;

/// Largest request write-back builds from neighbouring blocks (bytes).
const MAX_WRITE_BACK_RUN: usize = 1 << 20;
/// Bytes of home writes submitted together at most (they are copied into one
/// aligned buffer for an O_DIRECT image).
const MAX_WRITE_BACK_BATCH: usize = 8 << 20;

impl Volume {
    /// `txn` is committed: each block waits to be written home, pinned.
    pub(super) fn ordered_committed(&self, ws: &mut WriteState, txn: &Txn, now: Instant) {
        for (blk, data) in txn.blocks() {
            ws.unwritten.insert(blk, Unwritten { data: data.clone(), since: now });
        }
    }

    /// A commit on a volume without a journal: flush the data, then write
    /// the metadata home directly. `forgotten`: blocks that stopped being
    /// metadata in this transaction, not to be written.
    pub(super) fn commit_home(&self, ws: &mut WriteState, txn: &Txn, forgotten: Vec<u64>, now: Instant) -> Result<()> {
        self.dev.flush().map_err(|e| FsError::io("flushing data before commit", e))?;
        for blk in forgotten {
            ws.unwritten.remove(&blk);
        }
        self.ordered_committed(ws, txn, now);
        self.write_back(ws, None)
    }

    /// The journal is short of space: write home what its oldest
    /// transactions hold (from memory, where it waits), so the tail moves.
    pub(super) fn ordered_checkpoint(
        &self,
        ws: &mut WriteState,
        j: &mut Jbd2,
        goal: journal::CheckpointGoal,
    ) -> Result<()> {
        let WriteState { unwritten, stats, .. } = ws;
        let mut written = Vec::new();
        j.checkpoint(goal, |blk, buf| match unwritten.get(&blk) {
            Some(u) => {
                buf.copy_from_slice(&u.data);
                written.push(blk);
                Ok(true)
            }
            // Not pending: already home, or no longer metadata.
            None => Ok(false),
        })
        .map_err(journal_err)?;
        stats.blocks_written_home += written.len() as u64;
        for blk in written {
            if let Some(u) = unwritten.remove(&blk) {
                self.cache.unpin(blk, &u.data);
            }
        }
        Ok(())
    }

    /// Write committed blocks home (all, or those committed before `older_than`),
    /// flush, and let the journal reuse their space. A failure turns the volume read-only.
    pub(crate) fn write_back(&self, ws: &mut WriteState, older_than: Option<Instant>) -> Result<()> {
        if let Some(why) = &ws.failed {
            return Err(read_only_after(why));
        }
        self.finish_commit(ws)?;
        let r = self.write_back_due(ws, older_than);
        r.map_err(|e| self.fail_on_io(ws, e))
    }

    fn write_back_due(&self, ws: &mut WriteState, older_than: Option<Instant>) -> Result<()> {
        let bs = u64::from(self.block_size());
        let due: Vec<u64> =
            ws.unwritten.iter().filter(|(_, u)| older_than.is_none_or(|t| u.since <= t)).map(|(&b, _)| b).collect();
        if due.is_empty() {
            return Ok(());
        }
        // `due` is sorted: neighbouring blocks (inode tables, bitmaps) go in
        // one request, gathered from the pinned buffers without a copy, and
        // the requests go out together, a batch of at most
        // MAX_WRITE_BACK_BATCH bytes at a time, as the kernel's write-back
        // submits a plug's worth (one by one, each waited for its turn).
        let max_run = MAX_WRITE_BACK_RUN / bs as usize;
        let mut batch: Vec<WriteRequest<'_>> = Vec::new();
        let mut batch_blocks = 0;
        let mut run: Vec<&[u8]> = Vec::with_capacity(max_run);
        for (i, blk) in due.iter().enumerate() {
            run.push(&ws.unwritten[blk].data);
            let ends = due.get(i + 1).is_none_or(|&next| next != blk + 1) || run.len() >= max_run;
            if ends {
                let first = blk + 1 - run.len() as u64;
                batch_blocks += run.len();
                batch.push(WriteRequest {
                    offset: first * bs,
                    bufs: std::mem::replace(&mut run, Vec::with_capacity(max_run)),
                    class: IoClass::Metadata,
                });
                if batch_blocks * bs as usize >= MAX_WRITE_BACK_BATCH || i + 1 == due.len() {
                    let (lo, hi) = (batch[0].offset / bs, *blk);
                    self.dev
                        .write_batch(&batch)
                        .map_err(|e| FsError::io(format!("writing blocks {lo}..={hi} home"), e))?;
                    batch.clear();
                    batch_blocks = 0;
                }
            }
        }
        self.dev.flush().map_err(|e| FsError::io("flushing metadata", e))?;
        ws.stats.blocks_written_home += due.len() as u64;
        for blk in &due {
            if let Some(u) = ws.unwritten.remove(blk) {
                self.cache.unpin(*blk, &u.data);
            }
        }
        if let Some(j) = self.writer.journaling.jbd2.as_ref() {
            let mut j = j.write();
            j.written_home(due);
            j.advance_tail().map_err(journal_err)?;
        }
        Ok(())
    }
}
