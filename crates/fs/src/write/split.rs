//! Operations bigger than one transaction: truncate, punch, freeing a file,
//! freeing the orphans at mount.
//!
//! A journal transaction holds at most a quarter of the journal (jbd2's
//! limit), and freeing a fragmented file changes a block bitmap and a
//! descriptor block for every group its blocks lie in: with a 1,024-block
//! journal, a file spread over a few hundred groups needed more than any
//! transaction may hold, its commit failed and the volume turned read-only.
//! So these operations commit partway, as the kernel's truncate restarts its
//! handle (`ext4_datasem_ensure_credits` in `ext4_ext_rm_leaf`): before each
//! extent is freed, [`Volume::txn_full`] says whether what it may add still
//! fits, and if not [`Volume::split_here`] commits what is done and goes on
//! in the next transaction.
//!
//! Every cut must leave a state that the next mount can finish, whoever
//! mounts it (ext4lazy, the kernel, e2fsck):
//! - a truncate or a delete keeps its inode on the orphan list, with its
//!   final size, from the first cut to its end: orphan processing truncates
//!   a linked inode to its size and frees an unlinked one;
//! - a punch needs nothing: a hole punched partway is a smaller hole.
//!
//! An operation that commits partway cannot be rolled back whole: if it then
//! fails, memory goes back to its last cut and the volume turns read-only
//! (`Volume::atomic`); the next mount finishes it from the orphan list.

use super::WriteState;
use crate::error::Result;
use crate::volume::Volume;
use ondisk::inode::Inode;

/// Room kept in every transaction for what a split operation does after its
/// last check: shrinking the extent tree, freeing the inode and its xattr
/// block, the inode's own block.
const END_RESERVE: u64 = 16;

/// How an operation that may commit partway leaves its inode at each cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Split {
    /// A punch (or the punch of a zero range): the size does not change.
    Punch,
    /// A truncate or a delete. `listed`: the inode is on the orphan list
    /// (an unlinked file still open, or an orphan being freed at mount).
    /// `added`: the first cut put it there, and its end takes it off.
    Orphan { listed: bool, added: bool },
}

impl Split {
    /// A truncate or delete of an inode that is on the orphan list or not.
    pub(crate) fn orphan(listed: bool) -> Split {
        Split::Orphan { listed, added: false }
    }
}

impl Volume {
    /// Group descriptors in one block.
    fn descs_per_block(&self) -> u64 {
        u64::from(self.block_size()) / self.sb.desc_size() as u64
    }

    /// Index of the descriptor block that holds group `g`'s descriptor.
    pub(crate) fn desc_block_of(&self, g: u32) -> u64 {
        u64::from(g) / self.descs_per_block()
    }

    /// Whether `need` more blocks might not fit in the running transaction.
    /// The estimate is an upper bound of what its commit will log: its
    /// blocks, the bitmaps and descriptor blocks that its frees and changed
    /// groups add at the commit, the superblock, and the journal's own
    /// descriptor, revoke and commit blocks. A transaction with nothing in
    /// it takes the next step whatever its size (one that could never fit
    /// fails at its commit, as before), so that every cut is followed by
    /// progress. Without a journal nothing limits a transaction.
    pub(crate) fn txn_full(&self, ws: &WriteState, need: u64) -> bool {
        let Some(limit) = ws.txn_limit else { return false };
        if ws.running.is_empty() && ws.deferred.is_empty() && ws.dirty_groups.is_empty() {
            return false;
        }
        // Changed groups are few in a long operation, but thousands of
        // orphans change thousands: never count more than the table has.
        let desc_blocks = u64::from(self.group_count()).div_ceil(self.descs_per_block());
        let changed_descs = ws.freed.desc_blocks.len() as u64 + (ws.dirty_groups.len() as u64).min(desc_blocks);
        let copies = ws.running.len() as u64 + ws.freed.groups.len() as u64 + changed_descs + 1 + need;
        // `need` may also stand for revoked blocks: count it there too.
        let revoked = ws.running.revoked_len() + need as usize;
        journal::Transaction::journal_blocks_for(&limit.layout, copies as usize, revoked) + END_RESERVE
            > limit.max_blocks
    }

    /// A cut in an operation that may span transactions: commit what it did
    /// so far. The caller's state must be whole here: every structure `inode`
    /// points to is written, and `inode` itself is written now, put on the
    /// orphan list first if `split` asks for it (a truncate or delete that
    /// is not on it yet).
    pub(crate) fn split_here(&self, ws: &mut WriteState, inode: &mut Inode, split: &mut Split) -> Result<()> {
        if let Split::Orphan { listed: listed @ false, added } = split {
            inode.base.dtime = ws.sb.f.last_orphan;
            ws.sb.f.last_orphan = inode.ino;
            *listed = true;
            *added = true;
        }
        self.write_inode(ws, inode)?;
        self.commit_partway(ws)
    }

    /// The end of an operation split by [`Volume::split_here`]: an inode its
    /// first cut put on the orphan list comes off it. Nothing else changed
    /// the list meanwhile (the write lock is held throughout), so it is the
    /// list's head.
    pub(crate) fn end_split(&self, ws: &mut WriteState, inode: &mut Inode, split: Split) {
        if let Split::Orphan { added: true, .. } = split {
            debug_assert_eq!(ws.sb.f.last_orphan, inode.ino, "an inode put on the orphan list by a cut stays its head");
            ws.sb.f.last_orphan = inode.base.dtime;
            inode.base.dtime = 0;
        }
    }

    /// Commit the running transaction in the middle of an operation, keeping
    /// what the operation did so far: its undo record ends here (what it
    /// saved is now committed) and a new one starts for the rest.
    pub(crate) fn commit_partway(&self, ws: &mut WriteState) -> Result<()> {
        let undo = ws.undo.take();
        let in_operation = undo.is_some();
        if let Some(u) = undo {
            u.recycle(ws);
            self.kb_apply(&mut ws.kb_changes);
            ws.partway = true;
        }
        // A new record even when the commit fails: the operation's caller
        // (`Volume::atomic`) rolls back to this cut with it, and finds the
        // volume read-only.
        let r = self.commit(ws);
        if in_operation {
            ws.undo = Some(super::state::Undo::begin(ws));
        }
        r
    }
}
