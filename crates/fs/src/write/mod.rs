//! The write side of the engine.
//!
//! Every modifying operation runs under the volume's write lock (`WriteState`):
//! the kernel already serialises operations per directory, and one lock keeps
//! allocators, bitmaps and directory blocks consistent without a lock order to
//! get wrong. Readers never take it: they see each block's newest version in
//! the buffer cache, where modified blocks are pinned until written home.
//!
//! A modification copies a block, changes it, sets its checksum and installs
//! it (pinned) in the cache and in the running transaction. `commit` hands the
//! transaction to the journal (ordered mode), or, on a volume without a
//! journal, writes it home.

mod alloc;
mod attrs;
mod cleaner;
pub(crate) mod committer;
mod data;
mod dirops;
mod extent_tree;
mod extents;
pub(crate) mod iflags;
mod inline;
mod mount;
mod namespace;
mod ops;
mod orphans;
mod spare;
mod split;
mod txn;
mod undo;
mod xattrops;

pub use attrs::SetAttr;
pub use cleaner::CleanerPolicy;
pub use data::Falloc;
pub use iflags::OpenAccess;
pub use namespace::CreateKind;
pub(crate) use split::Split;
pub use txn::Txn;
pub use xattrops::XattrMode;

use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::bitmap::{self, Kind};
use ondisk::group_desc::{GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ondisk::inode::{Inode, Timestamp};
use ondisk::superblock::Superblock;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Journal errors as the engine reports them.
pub(crate) fn journal_err(e: journal::Error) -> FsError {
    match e {
        journal::Error::Format(f) => FsError::Format(f),
        journal::Error::Io { jblock, source } => FsError::io(format!("journal block {jblock}"), source),
        journal::Error::NoSpace { needed, available } => {
            FsError::Unsupported(format!("journal full: {needed} blocks needed, {available} free"))
        }
        other => FsError::io(format!("journal: {other}"), std::io::Error::other("journal failure")),
    }
}

/// Largest request write-back builds from neighbouring blocks (bytes).
const MAX_WRITE_BACK_RUN: usize = 1 << 20;

/// The error every write gets once a device error has turned the volume read-only.
pub(crate) fn read_only_after(why: &str) -> FsError {
    FsError::io(format!("(the volume turned read-only after: {why})"), std::io::Error::from_raw_os_error(libc::EROFS))
}

/// A committed block not yet written to its home location.
pub struct Unwritten {
    pub data: Block,
    pub since: std::time::Instant,
}

/// The journal as the write path drives it.
pub type Jbd2 = journal::Journal<Arc<dyn blockdev::BlockDevice>>;

/// State owned by the write lock.
pub struct WriteState {
    /// The superblock as it will next be written (free counts, state, times).
    pub sb: Superblock,
    pub running: Txn,
    /// When the running transaction got its first block.
    pub running_since: Option<std::time::Instant>,
    /// Blocks committed but not yet written home, with the version committed.
    pub unwritten: std::collections::BTreeMap<u64, Unwritten>,
    pub stats: WriteStats,
    /// Changes that wait for the running transaction to commit (see [`Deferred`]).
    pub deferred: Vec<Deferred>,
    /// The block runs `deferred` frees, start -> length, never overlapping:
    /// a second free of a block before the commit is found here, as a first
    /// free is found by its bitmap bit.
    pub pending_frees: std::collections::BTreeMap<u64, u64>,
    /// Lazy mode: the age of each transaction still in the log, oldest first,
    /// as (sequence, when its blocks were last changed at the latest): its
    /// commit time, or for a cleaning transaction that of the youngest
    /// transaction its blocks came from. Without an entry (found at mount,
    /// or moved from such), a transaction counts as old.
    pub ages: std::collections::VecDeque<(u32, std::time::Instant)>,
    /// The running operation's undo record.
    pub undo: Option<undo::Undo>,
    /// The last operation's undo maps, emptied, for the next one.
    pub(crate) undo_spare: Option<(undo::BlockSaves, undo::GroupSaves)>,
    /// Set when a device error turned the volume read-only: what failed.
    pub failed: Option<String>,
    /// What the running operation changed in the namespace, for StepAhead's
    /// knowledge base once it succeeds.
    pub(crate) kb_changes: Vec<crate::stepahead::KbChange>,
    /// The running operation changed an inode with the sync (or dirsync)
    /// flag: commit before returning.
    pub(crate) sync_wanted: bool,
    /// Old block versions to copy the next changes into.
    pub(crate) spare: spare::SpareBlocks,
    /// Scratch blocks for the partial first and last block of a data write.
    pub(crate) edge_blocks: [Vec<u8>; 2],
    /// Groups whose descriptors changed since the last commit (`set_group`).
    pub(crate) dirty_groups: BTreeMap<u32, DirtyGroup>,
    /// Per group: where the inode allocator looks for a free bit first.
    pub(crate) inode_hints: crate::intmap::IntMap<u32, usize>,
    /// Per group: every block bit below this one is set (`alloc_blocks`).
    pub(crate) block_hints: crate::intmap::IntMap<u32, usize>,
    /// The transaction on the commit thread, until it is finished here.
    pub(crate) committing: Option<committer::Committing>,
    /// The running transaction commits once it holds this many blocks: half
    /// of what the journal accepts (jbd2 commits at the limit; half leaves
    /// room for the operation about to start, and ordinary operations are
    /// atomic: a commit never splits one; only those bigger than a
    /// transaction commit partway, `split`). Kept here so that no request
    /// takes the journal's lock for it while a commit holds that lock.
    pub(crate) commit_limit: u64,
    /// What one transaction may hold (None without a journal), for the
    /// operations that commit partway (`split`).
    pub(crate) txn_limit: Option<split::TxnLimit>,
    /// Groups the running transaction's deferred frees will change.
    pub(crate) freed: split::FreedGroups,
    /// The running operation committed part of itself (`split`): it can no
    /// longer be rolled back whole.
    pub(crate) partway: bool,
}

/// The write lock, held. A panic that unwinds through its holder can leave
/// memory changed halfway (an operation's changes, a commit or a write-back
/// cut short), which must never be committed: the volume turns read-only, as
/// after a device error. parking_lot's lock does not poison, so without this
/// the next writer would carry on from the half-done state.
pub(crate) struct WriteGuard<'a>(parking_lot::MutexGuard<'a, WriteState>);

/// Why the volume turned read-only after a panic under the write lock.
pub(crate) const PANICKED: &str = "an operation panicked holding the write lock";

impl std::ops::Deref for WriteGuard<'_> {
    type Target = WriteState;
    fn deref(&self) -> &WriteState {
        &self.0
    }
}

impl std::ops::DerefMut for WriteGuard<'_> {
    fn deref_mut(&mut self) -> &mut WriteState {
        &mut self.0
    }
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.get_or_insert_with(|| PANICKED.into());
        }
    }
}

impl<'a> WriteGuard<'a> {
    pub(crate) fn new(g: parking_lot::MutexGuard<'a, WriteState>) -> Self {
        WriteGuard(g)
    }
}

/// Changes applied when the running transaction commits, not before.
///
/// Freed blocks must not be reused while the transaction that frees them can
/// still be lost: new data written there (data goes straight to its blocks)
/// would overwrite what a crash brings back, the old file or directory block.
/// The kernel's ext4 holds freed blocks back the same way until the commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deferred {
    /// Clear these blocks in the bitmaps.
    Free { start: u64, len: u64 },
    /// This block stops being metadata: once the freeing commit is durable,
    /// drop its pending write-back so nothing writes it over its next contents.
    /// (Until then its committed copies must survive: a crash brings it back.)
    Forget(u64),
}

/// Counters for the stats file and benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteStats {
    pub commits: u64,
    /// Of `commits`, those the commit thread made while operations went on.
    pub background_commits: u64,
    /// Journal blocks written: descriptors, copies, revokes, commit blocks.
    pub journal_blocks_logged: u64,
    /// Checkpoints forced by a full journal (a commit waited for write-back).
    pub checkpoints: u64,
    /// Metadata blocks written to their static location.
    pub blocks_written_home: u64,
    /// Lazy mode: live blocks the cleaner logged again to free the log's tail.
    pub cleaner_blocks_moved: u64,
    /// Lazy mode: cleaning steps that stopped at a transaction holding a
    /// block the running transaction changed (see `commit_cleaning`).
    pub cleaner_steps_cut_short: u64,
    /// Lazy mode: blocks written home from their journal copies (a full log, idle migration).
    pub blocks_migrated_home: u64,
}

impl WriteState {
    pub fn new(sb: Superblock) -> Self {
        WriteState {
            sb,
            running: Txn::default(),
            running_since: None,
            unwritten: Default::default(),
            stats: WriteStats::default(),
            deferred: Vec::new(),
            pending_frees: Default::default(),
            ages: Default::default(),
            undo: None,
            undo_spare: None,
            failed: None,
            kb_changes: Vec::new(),
            sync_wanted: false,
            dirty_groups: BTreeMap::new(),
            edge_blocks: Default::default(),
            spare: Default::default(),
            committing: None,
            commit_limit: 4096,
            txn_limit: None,
            freed: Default::default(),
            partway: false,
            inode_hints: Default::default(),
            block_hints: Default::default(),
        }
    }
}

/// A commit (or the work around it) failed: the volume turns read-only, as
/// the changes in memory will never be committed. Returns the error.
pub(crate) fn commit_failed(ws: &mut WriteState, e: FsError) -> FsError {
    ws.failed.get_or_insert_with(|| format!("commit failed: {e}"));
    e
}

/// The journal's transaction for `blocks` (their newest contents) and `revoked`.
pub(crate) fn journal_transaction<'a>(
    block_size: u32,
    blocks: impl IntoIterator<Item = (u64, &'a Block)>,
    revoked: impl IntoIterator<Item = u64>,
) -> Result<journal::Transaction> {
    let mut t = journal::Transaction::new(block_size);
    for (blk, data) in blocks {
        t.log(blk, data).map_err(journal_err)?;
    }
    for blk in revoked {
        t.revoke(blk);
    }
    Ok(t)
}

/// Commit `t` under the journal's lock. jbd2 ordering: copies, flush (which
/// also makes earlier data writes durable: ordered mode), commit block,
/// flush. In lazy mode, transactions whose blocks all moved on then free
/// their space.
pub(crate) fn commit_locked(j: &mut Jbd2, t: &journal::Transaction, lazy: bool) -> Result<Option<journal::CommitInfo>> {
    let info = j.commit(t).map_err(journal_err)?;
    if lazy {
        j.advance_tail().map_err(journal_err)?;
    }
    Ok(info)
}

/// Count a commit in the stats.
fn count_commit(ws: &mut WriteState, info: Option<&journal::CommitInfo>) {
    ws.stats.commits += 1;
    ws.stats.journal_blocks_logged += info.map_or(0, |i| i.journal_blocks);
}

/// Current time as ext4 stores it.
pub fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

impl Volume {
    /// Copy block `blk`, let `f` change it, and record the new version.
    pub(crate) fn modify(&self, ws: &mut WriteState, blk: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<()> {
        let mut data = self.meta(blk)?;
        // The cache shares the block, so this copies it once, into a spare.
        f(ws.spare.make_mut(&mut data))?;
        self.install(ws, blk, data);
        Ok(())
    }

    /// Record `data` as the new contents of metadata block `blk`.
    pub(crate) fn install(&self, ws: &mut WriteState, blk: u64, data: impl Into<Block>) {
        let b: Block = data.into();
        debug_assert_eq!(b.len(), self.block_size() as usize);
        self.note_block(ws, blk);
        self.cache.insert_dirty(blk, b.clone());
        ws.running.add(blk, b);
        ws.running_since.get_or_insert_with(std::time::Instant::now);
    }

    /// A block that will be entirely rewritten: no need to read its old contents.
    pub(crate) fn fresh_block(&self) -> Vec<u8> {
        vec![0u8; self.block_size() as usize]
    }

    /// Write an inode record (with its checksum) into its inode-table block.
    pub(crate) fn write_inode(&self, ws: &mut WriteState, inode: &Inode) -> Result<()> {
        let (blk, off) = self.inode_location(inode.ino);
        let len = inode.raw.len();
        debug_assert_eq!(len, usize::from(self.sb.inode_size()));
        self.note_sync(ws, inode);
        self.modify(ws, blk, |b| {
            let record = &mut b[off..off + len];
            inode.write_to(&self.sb, record);
            debug_assert!(inode.as_written(record).is_none_or(|w| Ok(w) == Inode::parse(&self.sb, inode.ino, record)));
            self.inodes.put_written(inode, record);
            Ok(())
        })
    }

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
        if self.opts.lazy {
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
        let now = std::time::Instant::now();
        if self.jbd2.is_none() {
            // No journal: flush data, then write the metadata home directly.
            self.dev.flush().map_err(|e| FsError::io("flushing data before commit", e))?;
            for blk in forgotten {
                ws.unwritten.remove(&blk);
            }
            for (blk, data) in txn.blocks() {
                ws.unwritten.insert(blk, Unwritten { data: data.clone(), since: now });
            }
            return self.write_back(ws, None);
        }
        let t = journal_transaction(self.block_size(), txn.blocks(), txn.revoked())?;
        if let Some(seq) = self.log_transaction(ws, &t)? {
            if self.opts.lazy {
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
    /// block's home now, so the cached copy is clean; in ordered mode each
    /// waits to be written home.
    fn committed_blocks(&self, ws: &mut WriteState, txn: &Txn, now: std::time::Instant) {
        for (blk, data) in txn.blocks() {
            if self.opts.lazy {
                self.cache.unpin(blk, data);
            } else {
                ws.unwritten.insert(blk, Unwritten { data: data.clone(), since: now });
            }
        }
    }

    /// Record a commit the commit thread made (see `committer`): as the end
    /// of `log_transaction` and `commit_user_changes` do for one made here.
    pub(crate) fn committed(
        &self,
        ws: &mut WriteState,
        info: Option<journal::CommitInfo>,
        txn: &Txn,
        since: std::time::Instant,
    ) {
        count_commit(ws, info.as_ref());
        if self.opts.lazy {
            if let Some(j) = self.jbd2.as_ref() {
                cleaner::prune_ages(ws, &j.read());
            }
            if let Some(i) = &info {
                ws.ages.push_back((i.sequence, since));
            }
        }
        self.committed_blocks(ws, txn, since);
    }

    /// Commit `t` to the journal, making room first if it does not fit.
    /// Returns its sequence number (None if it was empty).
    pub(crate) fn log_transaction(&self, ws: &mut WriteState, t: &journal::Transaction) -> Result<Option<u32>> {
        let Some(jbd2) = self.jbd2.as_ref() else { return Ok(None) };
        let need = t.journal_blocks(jbd2.read().layout());
        self.make_room(ws, need)?;
        let info = {
            let mut j = jbd2.write();
            let info = commit_locked(&mut j, t, self.opts.lazy)?;
            if self.opts.lazy {
                cleaner::prune_ages(ws, &j);
            }
            info
        };
        count_commit(ws, info.as_ref());
        Ok(info.map(|i| i.sequence))
    }

    /// Before a commit of `need` journal blocks: refuse one the journal can
    /// never take, checkpoint if it does not fit now.
    pub(crate) fn make_room(&self, ws: &mut WriteState, need: u64) -> Result<()> {
        let Some(jbd2) = self.jbd2.as_ref() else { return Ok(()) };
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
    /// In lazy mode the copies come from the log (nothing is pending in memory):
    /// the journal is full, so the oldest blocks migrate home.
    pub(crate) fn checkpoint(&self, ws: &mut WriteState, goal: journal::CheckpointGoal) -> Result<()> {
        self.finish_commit(ws)?;
        let Some(jbd2) = self.jbd2.as_ref() else { return Ok(()) };
        let mut j = jbd2.write();
        ws.stats.checkpoints += 1;
        if self.opts.lazy {
            let st = j.checkpoint_from_log(goal).map_err(journal_err)?;
            ws.stats.blocks_written_home += st.written;
            ws.stats.blocks_migrated_home += st.written;
            return Ok(());
        }
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

    /// Take the write lock as a writer (None on a read-only volume).
    pub(crate) fn lock_write(&self) -> Option<WriteGuard<'_>> {
        self.write.as_ref().map(|m| WriteGuard::new(m.lock()))
    }

    /// The write path's counters (None on a read-only volume).
    pub fn write_stats(&self) -> Option<WriteStats> {
        self.write.as_ref().map(|w| w.lock().stats)
    }

    /// The orphan list's head as the write path has it (0: empty; the
    /// list goes on through each inode's dtime). For tests.
    #[doc(hidden)]
    pub fn last_orphan_for_tests(&self) -> u32 {
        self.write.as_ref().map_or(self.sb.f.last_orphan, |w| w.lock().sb.f.last_orphan)
    }

    /// Why the volume turned read-only, if a device error made it so.
    pub fn failure(&self) -> Option<String> {
        self.write.as_ref().and_then(|w| w.lock().failed.clone())
    }

    /// Blocks freed by the running transaction: free for `statfs`, not yet for the allocator.
    pub(crate) fn deferred_free_blocks(&self) -> u64 {
        let Some(w) = self.write.as_ref() else { return 0 };
        w.lock().deferred.iter().map(|d| if let Deferred::Free { len, .. } = d { *len } else { 0 }).sum()
    }

    /// Write committed blocks home (all, or those committed before `older_than`),
    /// flush, and let the journal reuse their space. A failure turns the volume read-only.
    pub(crate) fn write_back(&self, ws: &mut WriteState, older_than: Option<std::time::Instant>) -> Result<()> {
        if let Some(why) = &ws.failed {
            return Err(read_only_after(why));
        }
        self.finish_commit(ws)?;
        let r = self.write_back_due(ws, older_than);
        r.map_err(|e| self.fail_on_io(ws, e))
    }

    fn write_back_due(&self, ws: &mut WriteState, older_than: Option<std::time::Instant>) -> Result<()> {
        let bs = u64::from(self.block_size());
        let due: Vec<u64> =
            ws.unwritten.iter().filter(|(_, u)| older_than.is_none_or(|t| u.since <= t)).map(|(&b, _)| b).collect();
        if due.is_empty() {
            return Ok(());
        }
        // `due` is sorted: neighbouring blocks (inode tables, bitmaps) go in one request.
        let mut run: Vec<u8> = Vec::new();
        for (i, blk) in due.iter().enumerate() {
            run.extend_from_slice(&ws.unwritten[blk].data);
            let ends = due.get(i + 1).is_none_or(|&next| next != blk + 1) || run.len() >= MAX_WRITE_BACK_RUN;
            if ends {
                let first = blk + 1 - (run.len() as u64 / bs);
                self.dev
                    .write_at(first * bs, &run, IoClass::Metadata)
                    .map_err(|e| FsError::io(format!("writing blocks {first}..={blk} home"), e))?;
                run.clear();
            }
        }
        self.dev.flush().map_err(|e| FsError::io("flushing metadata", e))?;
        ws.stats.blocks_written_home += due.len() as u64;
        for blk in &due {
            if let Some(u) = ws.unwritten.remove(blk) {
                self.cache.unpin(*blk, &u.data);
            }
        }
        if let Some(j) = self.jbd2.as_ref() {
            let mut j = j.write();
            j.written_home(due);
            j.advance_tail().map_err(journal_err)?;
        }
        Ok(())
    }

    /// Periodic work (about once a second): commit a transaction older than
    /// `commit=`, write home blocks committed longer than `dirty_expire=` ago.
    pub fn background_tick(&self) -> Result<()> {
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
        if let Some(cutoff) = std::time::Instant::now().checked_sub(self.opts.dirty_expire) {
            self.write_back(&mut ws, Some(cutoff))?;
        }
        if self.opts.lazy && ws.running.is_empty() {
            self.lazy_idle_work(&mut ws)?;
        }
        Ok(())
    }

    /// Lazy mode with nothing running: migrate cold transactions home (if
    /// the policy says so), else clean a full log now rather than after the
    /// next user's commit (a commit with nothing running only cleans).
    fn lazy_idle_work(&self, ws: &mut WriteState) -> Result<()> {
        if let Some(age) = self.opts.cleaner.cold_age {
            match self.migrate_cold_home(ws, age) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.fail_on_io(ws, e)),
            }
        }
        self.commit(ws)
    }

    /// The superblock's block and its bytes with current free counts and write time.
    fn super_bytes(&self, ws: &mut WriteState) -> (u64, usize, [u8; ondisk::superblock::SUPERBLOCK_SIZE]) {
        let (bfree, ifree) = self.free_counts();
        ws.sb.set_free_blocks_count(bfree);
        // At most s_inodes_count, a u32: the sum of per-group counts fits.
        ws.sb.f.free_inodes_count = ifree as u32;
        ws.sb.f.wtime = now().sec as u32;
        let bs = self.block_size() as usize;
        let off = (ondisk::superblock::SUPERBLOCK_OFFSET as usize) % bs;
        let blk = ondisk::superblock::SUPERBLOCK_OFFSET / bs as u64;
        (blk, off, ws.sb.to_bytes())
    }

    /// Put the in-memory superblock (free counts, times) into the running transaction.
    pub(crate) fn write_super(&self, ws: &mut WriteState) -> Result<()> {
        let (blk, off, bytes) = self.super_bytes(ws);
        self.modify(ws, blk, |b| {
            b[off..off + bytes.len()].copy_from_slice(&bytes);
            Ok(())
        })
    }

    /// Write the superblock straight to its home and flush (mount and clean
    /// unmount: the needs_recovery flag itself must not wait for the journal).
    pub(crate) fn write_super_home(&self, ws: &mut WriteState) -> Result<()> {
        let (blk, off, bytes) = self.super_bytes(ws);
        let mut data = self.meta(blk)?.to_vec();
        data[off..off + bytes.len()].copy_from_slice(&bytes);
        let bs = u64::from(self.block_size());
        self.dev.write_at(blk * bs, &data, IoClass::Metadata).map_err(|e| FsError::io("writing the superblock", e))?;
        self.dev.flush().map_err(|e| FsError::io("flushing the superblock", e))?;
        if !ws.unwritten.contains_key(&blk) && ws.running.blocks().all(|(b, _)| b != blk) {
            self.cache.remove(blk);
            self.cache.insert(blk, Arc::from(data));
        }
        Ok(())
    }

    /// Make `gd` group `g`'s descriptor; `changed` names the bitmap the caller
    /// changed (and installed), if any. Its checksum and the descriptor block
    /// are brought up to date when the transaction commits
    /// ([`Volume::write_dirty_groups`]): an untar allocates about 64,000 times,
    /// and each allocation used to sum a 4 KiB bitmap and rewrite a descriptor block.
    pub(crate) fn set_group(&self, ws: &mut WriteState, g: u32, gd: GroupDesc, changed: Option<Kind>) {
        self.note_group(ws, g);
        self.groups.write()[g as usize] = gd;
        let mark = ws.dirty_groups.entry(g).or_default();
        match changed {
            Some(Kind::Block) => mark.block_bitmap = true,
            Some(Kind::Inode) => mark.inode_bitmap = true,
            None => {}
        }
    }

    /// At commit: the checksums of the bitmaps changed since the last commit
    /// go into their descriptors, and every changed descriptor into its block.
    fn write_dirty_groups(&self, ws: &mut WriteState) -> Result<()> {
        let dirty = std::mem::take(&mut ws.dirty_groups);
        if dirty.is_empty() {
            return Ok(());
        }
        let dsize = self.sb.desc_size();
        let per_block = self.block_size() as usize / dsize;
        let mut by_block: BTreeMap<u64, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
        for (g, d) in dirty {
            let mut gd = self.group(g);
            // The bitmaps are cached: changed in the running transaction, they are pinned.
            if d.block_bitmap && !gd.has_flag(BG_BLOCK_UNINIT) {
                let bits = self.meta(gd.block_bitmap())?;
                bitmap::set_checksum(&self.sb, &mut gd, &bits, Kind::Block);
            }
            if d.inode_bitmap && !gd.has_flag(BG_INODE_UNINIT) {
                let bits = self.meta(gd.inode_bitmap())?;
                bitmap::set_checksum(&self.sb, &mut gd, &bits, Kind::Inode);
            }
            let blk = ondisk::group_desc::descriptor_block(&self.sb, (g as usize / per_block) as u64);
            let off = (g as usize % per_block) * dsize;
            by_block.entry(blk).or_default().push((off, gd.to_bytes(&self.sb, g)));
            self.groups.write()[g as usize] = gd;
        }
        for (blk, descs) in by_block {
            self.modify(ws, blk, |b| {
                for (off, bytes) in &descs {
                    b[*off..*off + dsize].copy_from_slice(bytes);
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// What changed in a group since the last commit, besides its descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyGroup {
    pub block_bitmap: bool,
    pub inode_bitmap: bool,
}
