//! The lazy-mode cleaner: keep room in the journal without writing home.
//!
//! In lazy mode the journal is where metadata lives, so its space is
//! reclaimed by moving, not by checkpointing: the live blocks of the oldest
//! transactions (those whose newest copy is still there) are logged again,
//! and once a transaction has no live block left the tail passes it. The
//! moved blocks go through the normal transaction path, so a crash during
//! cleaning is just a crash between commits.
//!
//! Policy (`CleanerPolicy`): cleaning starts when the log is fuller than
//! `start_fill`, frees the oldest transactions until it would be `stop_fill`
//! full, and moves at most `batch` blocks per commit so that a commit stays
//! short. Moved blocks form a transaction of their own, committed right
//! after the users' one: it carries the age of the blocks' last real change
//! (`WriteState::ages`), so a block the cleaner moved does not look young.
//! If the log is still too full for a commit, the oldest blocks migrate home
//! from their journal copies (`checkpoint_from_log`), the one case where lazy
//! mode writes metadata home. While the volume is idle, transactions whose
//! blocks are older than `cold_age` can instead migrate home: they have not
//! changed for that long, they are cold, and writing them home once costs
//! less than carrying them around the log forever (hot/cold separation).

use super::Jbd2;
use crate::error::{journal_err, Result};
use crate::read_core::ReadCore;
use crate::volume::Volume;
use crate::write::{Txn, WriteState};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Above this share of live blocks in the used log, moving them gains nothing.
const MAX_LIVE_RATIO: f64 = 0.9;

/// When and how much the cleaner works (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanerPolicy {
    /// Fraction of the log in use above which commits carry cleaned blocks.
    pub start_fill: f64,
    /// Each cleaning step frees the oldest transactions until the log would
    /// be this full, and no more: blocks near the head are still hot (about
    /// to be superseded, so moving them is waste), and a step that spans
    /// only the tail moves blocks of similar ages together.
    pub stop_fill: f64,
    /// Blocks moved per commit at most.
    pub batch: usize,
    /// While nothing is running, migrate home the live blocks of transactions
    /// committed longer ago than this, instead of moving them (None: never).
    pub cold_age: Option<Duration>,
}

impl Default for CleanerPolicy {
    fn default() -> Self {
        CleanerPolicy { start_fill: 0.7, stop_fill: 0.6, batch: 512, cold_age: None }
    }
}

impl Volume {
    /// `txn` is committed: its journal copies are the blocks' home now, so
    /// the cached copies are clean.
    pub(super) fn lazy_committed(&self, txn: &Txn) {
        for (blk, data) in txn.blocks() {
            self.cache.unpin(blk, data);
        }
    }

    /// The log is full: the oldest transactions' live blocks migrate home,
    /// copied from the log (nothing waits in memory in lazy mode).
    pub(super) fn lazy_checkpoint(ws: &mut WriteState, j: &mut Jbd2, goal: journal::CheckpointGoal) -> Result<()> {
        let st = j.checkpoint_from_log(goal).map_err(journal_err)?;
        ws.stats.blocks_written_home += st.written;
        ws.stats.blocks_migrated_home += st.written;
        Ok(())
    }

    /// Lazy mode with nothing running: migrate cold transactions home (if
    /// the policy says so), else clean a full log now rather than after the
    /// next user's commit (a commit with nothing running only cleans).
    pub(super) fn lazy_idle_work(&self, ws: &mut WriteState) -> Result<()> {
        if let Some(age) = self.opts.cleaner.cold_age {
            match self.migrate_cold_home(ws, age) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.fail_on_io(ws, e)),
            }
        }
        self.commit(ws)
    }

    /// After a lazy commit: if the log is full enough, log the live blocks
    /// of the oldest transactions again, in a transaction of their own (so
    /// that it can carry their age: see `WriteState::ages`). Returns the
    /// blocks moved.
    pub(crate) fn commit_cleaning(&self, ws: &mut WriteState) -> Result<usize> {
        // Its callers finished any commit on the commit thread: the cache
        // holds no version newer than committed but the running transaction's.
        debug_assert!(ws.committing.is_none());
        let Some(jbd2) = self.writer.journaling.jbd2.as_ref() else { return Ok(0) };
        let step = plan_step(&jbd2.read(), &self.opts.cleaner, |b| ws.running.touches(b), &ws.ages);
        if step.cut_short {
            ws.stats.cleaner_steps_cut_short += 1;
        }
        if step.victims.is_empty() {
            return Ok(0);
        }
        // The victims' committed contents, through the read core (cache, then the log).
        let core: &ReadCore = self;
        let mut t = journal::Transaction::new(core.block_size());
        for &blk in &step.victims {
            let data = core.meta(blk)?;
            t.log(blk, &data).map_err(journal_err)?;
        }
        if let (Some(seq), Some(at)) = (self.log_transaction(ws, &t)?, step.changed) {
            ws.ages.push_back((seq, at));
        }
        ws.stats.cleaner_blocks_moved += step.victims.len() as u64;
        Ok(step.victims.len())
    }

    /// Idle-time migration: if the oldest transaction's blocks are older
    /// than `cold_age` (see `WriteState::ages`), they go home. One
    /// transaction per call, so that the locks are let go between ticks.
    /// Returns whether anything was migrated.
    pub(crate) fn migrate_cold_home(&self, ws: &mut WriteState, cold_age: Duration) -> Result<bool> {
        self.finish_commit(ws)?;
        let Some(jbd2) = self.writer.journaling.jbd2.as_ref() else { return Ok(false) };
        let mut j = jbd2.write();
        prune_ages(ws, &j);
        let Some(oldest) = j.oldest_live().map(|t| t.sequence) else { return Ok(false) };
        let changed = ws.ages.iter().find(|&&(seq, _)| seq == oldest).map(|&(_, t)| t);
        if changed.is_some_and(|t| t.elapsed() < cold_age) {
            return Ok(false);
        }
        let st = j.checkpoint_from_log(journal::CheckpointGoal::Oldest).map_err(crate::error::journal_err)?;
        ws.stats.blocks_migrated_home += st.written;
        ws.stats.blocks_written_home += st.written;
        Ok(true)
    }
}

impl Volume {
    /// At a lazy unmount: save the jmap so the next mount need not scan the
    /// log. Written as root beside an image others may own the directory
    /// of: [`crate::safefile::replace`] (0600, no symlink followed, fsync,
    /// rename: a crash leaves the old file or none).
    pub(crate) fn save_jmap_snapshot(&self) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        let (Some(path), Some(jbd2)) = (self.opts.jmap_snapshot.as_ref(), self.writer.journaling.jbd2.as_ref()) else {
            return Ok(());
        };
        let j = jbd2.read();
        if j.superblock().start == 0 {
            return Ok(()); // nothing live: the next mount has nothing to scan
        }
        let bytes = j.snapshot();
        drop(j);
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::DirBuilder::new().recursive(true).mode(0o755).create(dir)?;
            }
            crate::safefile::replace(path, &bytes)
        };
        // Losing the snapshot only costs the next mount a scan: not an error of the volume.
        write().map_err(|e| crate::error::FsError::io(format!("writing the jmap snapshot {}", path.display()), e))
    }
}

/// One cleaning step: the blocks to log again, oldest transactions first.
#[derive(Debug, Default, PartialEq)]
struct Step {
    victims: Vec<u64>,
    /// When the youngest of the victims' sources was committed (their age).
    changed: Option<Instant>,
    /// The step stopped at a transaction whose blocks the running one changed.
    cut_short: bool,
}

/// Choose a cleaning step from what the cleaner may see: the log, the policy,
/// which blocks the running transaction changed (`touched`), and when each
/// live transaction's blocks last changed (`ages`).
fn plan_step(j: &Jbd2, policy: &CleanerPolicy, touched: impl Fn(u64) -> bool, ages: &VecDeque<(u32, Instant)>) -> Step {
    let mut step = Step::default();
    let fill = j.fill();
    if (fill.used as f64) < policy.start_fill * fill.log_blocks as f64 {
        return step;
    }
    // A log that is nearly all live copies frees next to nothing when
    // they move: then a full log migrates home instead (commit's fallback).
    if j.jmap_stats().entries as f64 > MAX_LIVE_RATIO * fill.used as f64 {
        return step;
    }
    // Within three quarters of the transaction limit and of the free
    // space, leaving room for descriptor blocks: cleaning must never
    // itself force a migration home.
    let room = (j.max_transaction_blocks() * 3 / 4).min(j.space_left()).saturating_sub(64) as usize;
    let limit = policy.batch.min(room);
    let excess = fill.used.saturating_sub((policy.stop_fill * fill.log_blocks as f64) as u64);
    let mut freed = 0;
    let mut changed = Some(None::<Instant>);
    for t in j.live_transactions() {
        if step.victims.len() >= limit || freed >= excess {
            break;
        }
        // A victim's contents come from the cache, which must then hold its
        // committed version. A block the running transaction changed (or
        // freed) holds uncommitted changes there; its next copy comes with
        // the next commit, which also frees this transaction's copy. The
        // tail cannot pass this transaction before then, so this step stops
        // here. (Cleaning runs after a commit on the commit thread too, with
        // operations since.)
        if j.live_blocks(t.sequence).any(&touched) {
            step.cut_short = true;
            break;
        }
        let before = step.victims.len();
        step.victims.extend(j.live_blocks(t.sequence).take(limit - before));
        freed += t.blocks.saturating_sub((step.victims.len() - before) as u64);
        if step.victims.len() > before {
            // The youngest source bounds the age of every moved block.
            let age = ages.iter().find(|&&(seq, _)| seq == t.sequence).map(|&(_, at)| at);
            changed = changed.map(|c| c.max(age));
        }
    }
    step.changed = changed.flatten();
    step
}

/// Drop the ages of transactions the tail has passed.
pub(crate) fn prune_ages(ws: &mut WriteState, j: &Jbd2) {
    let oldest = j.oldest_live().map_or(j.next_sequence(), |t| t.sequence);
    while ws.ages.front().is_some_and(|&(seq, _)| seq_before(seq, oldest)) {
        ws.ages.pop_front();
    }
}

/// Whether transaction ID `a` comes before `b` (IDs wrap around, as in jbd2).
fn seq_before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}
