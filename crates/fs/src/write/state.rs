//! The write lock's state (`WriteState`) and the records it keeps: types
//! only, what the write path does with them is in the other files of
//! `write/` and in `journaling/`.

use super::spare;
use super::txn::{Slot, Txn};
use crate::cache::{Block, Peeked};
use crate::intmap::IntMap;
use ondisk::group_desc::GroupDesc;
use ondisk::superblock::Superblock;
use std::collections::BTreeMap;

/// A committed block not yet written to its home location.
pub struct Unwritten {
    pub data: Block,
    pub since: std::time::Instant,
}

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
    pub undo: Option<Undo>,
    /// The last operation's undo maps, emptied, for the next one.
    pub(crate) undo_spare: Option<(BlockSaves, GroupSaves)>,
    /// Set when a device error turned the volume read-only: what failed.
    pub failed: Option<String>,
    /// What the running operation changed in the namespace, for StepAhead's
    /// knowledge base once it succeeds.
    pub(crate) kb_changes: Vec<crate::stepahead::state::KbChange>,
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
    /// The running operation found no inode to allocate (`alloc_inode`):
    /// its ENOSPC may be one a FORGET on its way would lift (`atomic`).
    pub(crate) out_of_inodes: bool,
    /// The running operation is write-back of delayed data: its blocks are
    /// the ones reserved for that data (`delalloc.rs`), not to be refused.
    pub(crate) claiming_delayed: bool,
    /// Per group: every block bit below this one is set (`alloc_blocks`).
    pub(crate) block_hints: crate::intmap::IntMap<u32, usize>,
    /// The transaction on the commit thread, until it is finished here.
    pub(crate) committing: Option<crate::journaling::committer::Committing>,
    /// The running transaction commits once it holds this many blocks: half
    /// of what the journal accepts (jbd2 commits at the limit; half leaves
    /// room for the operation about to start, and ordinary operations are
    /// atomic: a commit never splits one; only those bigger than a
    /// transaction commit partway, `split`). Kept here so that no request
    /// takes the journal's lock for it while a commit holds that lock.
    pub(crate) commit_limit: u64,
    /// What one transaction may hold (None without a journal), for the
    /// operations that commit partway (`split`).
    pub(crate) txn_limit: Option<TxnLimit>,
    /// Groups the running transaction's deferred frees will change.
    pub(crate) freed: FreedGroups,
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
            out_of_inodes: false,
            claiming_delayed: false,
            block_hints: Default::default(),
        }
    }
}

/// The state an operation found, for what it has changed so far.
pub struct Undo {
    pub(super) sb: Superblock,
    pub(super) blocks: BlockSaves,
    pub(super) groups: GroupSaves,
    pub(super) deferred: usize,
}

/// Each block's cached copy and transaction slot as found.
pub(crate) type BlockSaves = IntMap<u64, (Option<Peeked>, Slot)>;
/// Each group's descriptor, and its entry in `dirty_groups`, as found.
pub(crate) type GroupSaves = IntMap<u32, (GroupDesc, Option<DirtyGroup>)>;

impl Undo {
    /// An empty record for the operation about to start, in the maps the
    /// last operation left (an untar runs 200,000 operations: two fresh hash
    /// maps each were a measurable share of their cost).
    pub(super) fn begin(ws: &mut WriteState) -> Self {
        let (blocks, groups) = ws.undo_spare.take().unwrap_or_default();
        debug_assert!(blocks.is_empty() && groups.is_empty());
        Undo { sb: ws.sb.clone(), blocks, groups, deferred: ws.deferred.len() }
    }

    /// Keep the maps (emptied) for the next operation, and the old block
    /// versions nothing else holds any more as spares.
    pub(super) fn recycle(mut self, ws: &mut WriteState) {
        for (_, (cached, slot)) in self.blocks.drain() {
            drop(slot);
            if let Some(p) = cached {
                ws.spare.give_back(p.data);
            }
        }
        self.groups.clear();
        ws.undo_spare = Some((self.blocks, self.groups));
    }
}

/// What the journal accepts in one transaction, for the write path's
/// estimates; read at mount so that no operation takes the journal's lock.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TxnLimit {
    /// jbd2's limit: a quarter of the journal.
    pub max_blocks: u64,
    pub layout: ondisk::jbd2::Layout,
}

/// Groups whose block bitmap and descriptor the running transaction's
/// deferred frees will change at its commit (`Deferred::Free` only touches
/// the bitmaps then), kept as they are added so that an estimate costs no
/// walk of the frees. A rolled-back free stays counted until the commit:
/// the estimate may only be too high.
#[derive(Default)]
pub(crate) struct FreedGroups {
    pub groups: crate::intmap::IntMap<u32, ()>,
    pub desc_blocks: crate::intmap::IntMap<u64, ()>,
}

impl FreedGroups {
    pub(crate) fn clear(&mut self) {
        self.groups.clear();
        self.desc_blocks.clear();
    }
}

/// What changed in a group since the last commit, besides its descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirtyGroup {
    pub block_bitmap: bool,
    pub inode_bitmap: bool,
}
