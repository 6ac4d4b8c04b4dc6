//! The running transaction on its way to the journal: synchronously under
//! the write lock, or on the commit thread while operations go on; and the
//! periodic work (`background_tick`). The mode-specific steps are in
//! `ordered.rs` and `lazy.rs`.

use super::committer::{Committing, Job};
use super::{commit_locked, journal_transaction, JournalMode};
use crate::error::{FsError, Result};
use crate::volume::Volume;
use crate::write::{read_only_after, Deferred, Txn, WriteState};
use std::time::Instant;

/// A commit (or the work around it) failed: the volume turns read-only, as
/// the changes in memory will never be committed. Returns the error.
pub(crate) fn commit_failed(ws: &mut WriteState, e: FsError) -> FsError {
    ws.failed.get_or_insert_with(|| format!("commit failed: {e}"));
    e
}

/// Count a commit in the stats.
fn count_commit(ws: &mut WriteState, info: Option<&journal::CommitInfo>) {
    ws.stats.commits += 1;
    ws.stats.journal_blocks_logged += info.map_or(0, |i| i.journal_blocks);
}

impl Volume {
    /// Commit the running transaction: make every change in it durable.
    /// Any failure turns the volume read-only: the changes are in memory and
    /// will never be committed, so nothing more may be written after them.
    pub(crate) fn commit(&self, ws: &mut WriteState) -> Result<()> {
        if ws.undo.is_some() {
            // Only after an operation panicked halfway: never commit half of it.
            ws.failed.get_or_insert_with(|| "an operation stopped halfway (panic)".into());
        }
        if let Some(why) = &ws.failed {
            return Err(read_only_after(why));
        }
        let r = self.finish_commit(ws).and_then(|()| self.commit_running(ws));
        r.map_err(|e| commit_failed(ws, e))
    }

    fn commit_running(&self, ws: &mut WriteState) -> Result<()> {
        if ws.running.is_empty() && ws.dirty_groups.is_empty() {
            debug_assert!(ws.deferred.is_empty());
            ws.running_since = None;
        } else {
            self.commit_user_changes(ws)?;
        }
        if self.writer.journaling.mode == JournalMode::Lazy {
            self.commit_cleaning(ws)?;
        }
        Ok(())
    }

    fn commit_user_changes(&self, ws: &mut WriteState) -> Result<()> {
        let forgotten = self.apply_deferred(ws)?;
        self.write_dirty_groups(ws)?;
        self.write_super(ws)?;
        let txn = std::mem::take(&mut ws.running);
        ws.running_since = None;
        let now = Instant::now();
        if self.writer.journaling.mode == JournalMode::NoJournal {
            return self.commit_home(ws, &txn, forgotten, now);
        }
        let t = journal_transaction(self.block_size(), txn.blocks(), txn.revoked())?;
        if let Some(seq) = self.log_transaction(ws, &t)? {
            if self.writer.journaling.mode == JournalMode::Lazy {
                ws.ages.push_back((seq, now));
            }
        }
        // Freed metadata: its committed copies were needed until the free was
        // durable (a checkpoint before this commit still wrote them home); the
        // commit's revoke records took them out of the journal's map.
        for blk in forgotten {
            ws.unwritten.remove(&blk);
        }
        self.committed_blocks(ws, &txn, now);
        Ok(())
    }

    /// `txn`'s blocks are committed: in lazy mode the journal copy is each
    /// block's home now; in ordered mode each waits to be written home.
    fn committed_blocks(&self, ws: &mut WriteState, txn: &Txn, now: Instant) {
        match self.writer.journaling.mode {
            JournalMode::Lazy => self.lazy_committed(txn),
            JournalMode::Ordered | JournalMode::NoJournal => self.ordered_committed(ws, txn, now),
        }
    }

    /// Record a commit the commit thread made (see `committer`): as the end
    /// of `log_transaction` and `commit_user_changes` do for one made here.
    pub(crate) fn committed(&self, ws: &mut WriteState, info: Option<journal::CommitInfo>, txn: &Txn, since: Instant) {
        count_commit(ws, info.as_ref());
        if let Some(j) = self.log() {
            super::prune_ages(ws, &j.read());
            if let Some(i) = &info {
                ws.ages.push_back((i.sequence, since));
            }
        }
        self.committed_blocks(ws, txn, since);
    }

    /// Commit `t` to the journal, making room first if it does not fit.
    /// Returns its sequence number (None if it was empty).
    pub(crate) fn log_transaction(&self, ws: &mut WriteState, t: &journal::Transaction) -> Result<Option<u32>> {
        let Some(jbd2) = self.writer.journaling.jbd2.as_ref() else { return Ok(None) };
        let need = t.journal_blocks(jbd2.read().layout());
        self.make_room(ws, need)?;
        let info = {
            let mut j = jbd2.write();
            let info = commit_locked(&mut j, t, self.writer.journaling.mode)?;
            if self.writer.journaling.mode == JournalMode::Lazy {
                super::prune_ages(ws, &j);
            }
            info
        };
        count_commit(ws, info.as_ref());
        Ok(info.map(|i| i.sequence))
    }

    /// Before a commit of `need` journal blocks: refuse one the journal can
    /// never take, checkpoint if it does not fit now.
    pub(crate) fn make_room(&self, ws: &mut WriteState, need: u64) -> Result<()> {
        let Some(jbd2) = self.writer.journaling.jbd2.as_ref() else { return Ok(()) };
        let (space, max) = {
            let j = jbd2.read();
            (j.space_left(), j.max_transaction_blocks())
        };
        if need > max {
            return Err(FsError::Unsupported(format!(
                "transaction of {need} journal blocks exceeds the journal's limit of {max}"
            )));
        }
        if need > space {
            self.checkpoint(ws, journal::CheckpointGoal::Space(need))?;
        }
        Ok(())
    }

    /// Write committed blocks home as the journal's checkpoint asks, and move its tail.
    pub(crate) fn checkpoint(&self, ws: &mut WriteState, goal: journal::CheckpointGoal) -> Result<()> {
        self.finish_commit(ws)?;
        let Some(jbd2) = self.writer.journaling.jbd2.as_ref() else { return Ok(()) };
        let mut j = jbd2.write();
        ws.stats.checkpoints += 1;
        match self.writer.journaling.mode {
            JournalMode::Lazy => Self::lazy_checkpoint(ws, &mut j, goal),
            JournalMode::Ordered | JournalMode::NoJournal => self.ordered_checkpoint(ws, &mut j, goal),
        }
    }

    /// Apply the running transaction's deferred frees: it is about to commit.
    /// Returns the blocks that stopped being metadata: their pending
    /// write-back is dropped only once this commit is durable.
    fn apply_deferred(&self, ws: &mut WriteState) -> Result<Vec<u64>> {
        let mut forgotten = Vec::new();
        ws.pending_frees.clear();
        ws.freed.clear();
        for d in std::mem::take(&mut ws.deferred) {
            match d {
                Deferred::Free { start, len } => self.release_blocks(ws, start, len)?,
                Deferred::Forget(blk) => forgotten.push(blk),
            }
        }
        Ok(forgotten)
    }

    /// Start committing the running transaction on the commit thread, or
    /// commit it here when it cannot go there: no commit thread, or blocks
    /// freed (their reuse waits for the commit). A journal short of space is
    /// checkpointed here first (that needs the write lock's lists).
    pub(crate) fn commit_soon(&self, ws: &mut WriteState) -> Result<()> {
        // As a synchronous commit: any failure on the way turns the volume read-only.
        let r = self.hand_over(ws);
        r.map_err(|e| commit_failed(ws, e))
    }

    fn hand_over(&self, ws: &mut WriteState) -> Result<()> {
        self.finish_commit(ws)?;
        let (Some(committer), Some(jbd2)) =
            (self.writer.journaling.committer.as_ref(), self.writer.journaling.jbd2.as_ref())
        else {
            return self.commit(ws);
        };
        if !ws.deferred.is_empty() || ws.undo.is_some() || ws.failed.is_some() {
            return self.commit(ws);
        }
        if ws.running.is_empty() && ws.dirty_groups.is_empty() {
            return Ok(());
        }
        self.write_dirty_groups(ws)?;
        self.write_super(ws)?;
        let need = journal::Transaction::journal_blocks_for(
            jbd2.read().layout(),
            ws.running.len(),
            ws.running.revoked().count(),
        );
        // Room first, here: the checkpoint writes home what the write lock's
        // lists hold (ordered), or migrates the oldest copies (lazy).
        self.make_room(ws, need)?;
        let txn = std::mem::take(&mut ws.running);
        ws.running_since = None;
        let job = Job { blocks: txn.blocks().map(|(b, d)| (b, d.clone())).collect(), revoked: txn.revoked().collect() };
        committer.submit(job);
        ws.committing = Some(Committing { txn, since: Instant::now() });
        Ok(())
    }

    /// Finish the transaction on the commit thread, if there is one: wait for
    /// its commit and record what it committed. A failed commit turns the
    /// volume read-only, as a synchronous one does.
    pub(crate) fn finish_commit(&self, ws: &mut WriteState) -> Result<()> {
        let Some(Committing { txn, since }) = ws.committing.take() else { return Ok(()) };
        let committer = self
            .writer
            .journaling
            .committer
            .as_ref()
            .expect("a transaction is committing only through the commit thread");
        let r = committer.wait().and_then(|info| {
            self.committed(ws, info, &txn, since);
            ws.stats.background_commits += 1;
            if self.writer.journaling.mode == JournalMode::Lazy {
                self.commit_cleaning(ws)?;
            }
            Ok(())
        });
        r.map_err(|e| commit_failed(ws, e))
    }

    /// Finish the transaction on the commit thread if its commit has ended
    /// (without waiting): the write-back list and pins are then up to date.
    pub(crate) fn finish_commit_if_done(&self, ws: &mut WriteState) -> Result<()> {
        match (&ws.committing, self.writer.journaling.committer.as_ref()) {
            (Some(_), Some(c)) if c.done() => self.finish_commit(ws),
            _ => Ok(()),
        }
    }

    /// Periodic work (about once a second): commit a transaction older than
    /// `commit=`, write home blocks committed longer than `dirty_expire=` ago.
    pub fn background_tick(&self) -> Result<()> {
        if self.writer.state.is_some() && self.failure().is_none() {
            // Before the write lock: write-back takes data locks, which come first.
            self.delalloc_tick()?;
        }
        let Some(mut ws) = self.lock_write() else { return Ok(()) };
        if ws.failed.is_some() {
            return Ok(()); // read-only since a device error, reported then
        }
        self.finish_commit_if_done(&mut ws)?;
        if ws.running_since.is_some_and(|t| t.elapsed() >= self.opts.commit_interval) {
            self.commit_soon(&mut ws)?;
        }
        if ws.committing.is_some() {
            // Write-back and idle work would wait for that commit holding the
            // write lock; they can wait for the next tick instead.
            return Ok(());
        }
        if let Some(cutoff) = Instant::now().checked_sub(self.opts.dirty_expire) {
            self.write_back(&mut ws, Some(cutoff))?;
        }
        if self.writer.journaling.mode == JournalMode::Lazy && ws.running.is_empty() {
            self.lazy_idle_work(&mut ws)?;
        }
        Ok(())
    }
}
