//! The lazy-mode cleaner: keep room in the journal without writing home.
//!
//! In lazy mode the journal is where metadata lives, so its space is
//! reclaimed by moving, not by checkpointing: the live blocks of the oldest
//! transactions (those whose newest copy is still there) are logged again in
//! the running transaction, mixed with whatever users are doing, and once a
//! transaction has no live block left the tail passes it. The blocks go
//! through the normal transaction path, so a crash during cleaning is just a
//! crash between commits.
//!
//! Policy (`CleanerPolicy`): cleaning starts when the log is fuller than
//! `start_fill`, and moves at most `batch` blocks per commit so that a commit
//! stays short. If the log is still too full for a commit, the oldest blocks
//! migrate home from their journal copies (`checkpoint_from_log`), the one
//! case where lazy mode writes metadata home. While the volume is idle,
//! transactions older than `cold_age` can instead migrate home: their live
//! blocks have not changed since, they are cold, and writing them home once
//! costs less than carrying them around the log forever (hot/cold separation).

use super::txn::Slot;
use super::WriteState;
use crate::error::Result;
use crate::volume::Volume;
use std::time::Duration;

/// Above this share of live blocks in the used log, moving them gains nothing.
const MAX_LIVE_RATIO: f64 = 0.9;

/// When and how much the cleaner works (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanerPolicy {
    /// Fraction of the log in use above which commits carry cleaned blocks.
    pub start_fill: f64,
    /// Blocks moved per commit at most.
    pub batch: usize,
    /// While nothing is running, migrate home the live blocks of transactions
    /// committed longer ago than this, instead of moving them (None: never).
    pub cold_age: Option<Duration>,
}

impl Default for CleanerPolicy {
    fn default() -> Self {
        CleanerPolicy { start_fill: 0.7, batch: 512, cold_age: None }
    }
}

impl Volume {
    /// Before a lazy commit: log again live blocks of the oldest transactions,
    /// if the journal is full enough to need it. Returns the blocks moved.
    pub(crate) fn clean_into_running(&self, ws: &mut WriteState) -> Result<usize> {
        let Some(jbd2) = self.jbd2.as_ref() else { return Ok(0) };
        let policy = self.opts.cleaner;
        let victims: Vec<u64> = {
            let j = jbd2.read();
            let fill = j.fill();
            if (fill.used as f64) < policy.start_fill * fill.log_blocks as f64 {
                return Ok(0);
            }
            // A log that is nearly all live copies frees next to nothing when
            // they move: then a full log migrates home instead (commit's fallback).
            if j.jmap_stats().entries as f64 > MAX_LIVE_RATIO * fill.used as f64 {
                return Ok(0);
            }
            // Stay inside the transaction limit: operations commit at half of
            // it, cleaning may fill up to three quarters (descriptor and revoke
            // blocks take the rest, with room to spare).
            let used = ws.running.len() + ws.running.revoked().count();
            let room = (j.max_transaction_blocks() * 3 / 4).saturating_sub(used as u64 + 64) as usize;
            j.live_transactions().flat_map(|t| j.live_blocks(t.sequence)).take(policy.batch.min(room)).collect()
        };
        let mut moved = 0;
        for blk in victims {
            // Changed in this transaction already (it moves anyway), or freed
            // by it (must not come back): leave it.
            if !matches!(ws.running.slot(blk), Slot::Absent) {
                continue;
            }
            let data = self.meta(blk)?;
            self.install(ws, blk, data.to_vec());
            moved += 1;
        }
        ws.stats.cleaner_blocks_moved += moved as u64;
        Ok(moved)
    }

    /// Idle-time migration: if the oldest transaction is older than
    /// `cold_age` (transactions found at mount count as old), its live blocks
    /// go home. One transaction per call, so that the locks are let go between
    /// ticks. Returns whether anything was migrated.
    pub(crate) fn migrate_cold_home(&self, ws: &mut WriteState, cold_age: Duration) -> Result<bool> {
        let Some(jbd2) = self.jbd2.as_ref() else { return Ok(false) };
        let mut j = jbd2.write();
        prune_commit_times(ws, &j);
        let Some(oldest) = j.oldest_live().map(|t| t.sequence) else { return Ok(false) };
        let committed = ws.commit_times.iter().find(|&&(seq, _)| seq == oldest).map(|&(_, t)| t);
        if committed.is_some_and(|t| t.elapsed() < cold_age) {
            return Ok(false);
        }
        let st = j.checkpoint_from_log(journal::CheckpointGoal::Oldest).map_err(super::journal_err)?;
        ws.stats.blocks_migrated_home += st.written;
        ws.stats.blocks_written_home += st.written;
        Ok(true)
    }
}

impl Volume {
    /// At a lazy unmount: save the jmap so the next mount need not scan the
    /// log (temp file, fsync, rename: a crash leaves the old file or none).
    pub(crate) fn save_jmap_snapshot(&self) -> Result<()> {
        let (Some(path), Some(jbd2)) = (self.opts.jmap_snapshot.as_ref(), self.jbd2.as_ref()) else { return Ok(()) };
        let j = jbd2.read();
        if j.superblock().start == 0 {
            return Ok(()); // nothing live: the next mount has nothing to scan
        }
        let bytes = j.snapshot();
        drop(j);
        let tmp = path.with_extension("jmap-tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        // Losing the snapshot only costs the next mount a scan: not an error of the volume.
        write().map_err(|e| crate::error::FsError::io(format!("writing the jmap snapshot {}", path.display()), e))
    }
}

/// Drop the commit times of transactions the tail has passed.
pub(crate) fn prune_commit_times(ws: &mut WriteState, j: &super::Jbd2) {
    let oldest = j.oldest_live().map_or(j.next_sequence(), |t| t.sequence);
    while ws.commit_times.front().is_some_and(|&(seq, _)| seq_before(seq, oldest)) {
        ws.commit_times.pop_front();
    }
}

/// Whether transaction ID `a` comes before `b` (IDs wrap around, as in jbd2).
fn seq_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}
