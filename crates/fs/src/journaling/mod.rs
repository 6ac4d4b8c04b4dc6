//! Journaling policy: what happens to changed metadata once an operation is
//! done, in each journal mode. The rest of the engine calls `commit`,
//! `commit_soon`, `checkpoint`, `write_back` and `background_tick` on the
//! volume and never asks which mode is on; the mode is decided here.
//!
//! - [`JournalMode::Ordered`] (jbd2's data=ordered): a transaction's blocks are
//!   logged, then wait in memory (`WriteState::unwritten`) until write-back or
//!   a checkpoint writes them home (`ordered.rs`).
//! - [`JournalMode::Lazy`] (ext4-lazy): the log is the metadata's home; reads
//!   find the newest copy through the jmap, the cleaner moves live blocks
//!   from the tail, cold ones migrate home (`lazy.rs`, docs/LAZY.md).
//! - [`JournalMode::NoJournal`]: a volume without a journal; each commit
//!   writes its blocks home (`ordered.rs`).
//!
//! Where each step lives: `commit.rs` (the running transaction to the log,
//! here or on the commit thread, and the periodic work), `committer.rs` (the
//! commit thread), `setup.rs` (recovery at mount, the log at unmount).

mod commit;
pub(crate) mod committer;
mod lazy;
mod ordered;
mod setup;

pub(crate) use lazy::prune_ages;
pub use lazy::CleanerPolicy;

use crate::cache::Block;
use crate::error::journal_err;
use crate::error::Result;
use parking_lot::RwLock;
use std::sync::Arc;

/// The journal as the write path drives it.
pub type Jbd2 = journal::Journal<Arc<dyn blockdev::BlockDevice>>;

/// How committed metadata reaches its home.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalMode {
    /// No journal on the volume: commits write home directly.
    NoJournal,
    /// Logged, then written home (the kernel's default).
    Ordered,
    /// Logged, and served from the log (`journal=lazy`).
    Lazy,
}

/// The journal a volume writes, and its mode. Read-only volumes have none
/// (their journal, if any, is replayed in memory: `overlay.rs`).
pub(crate) struct Journaling {
    pub(crate) mode: JournalMode,
    /// The jbd2 journal of a read-write volume. Its own lock, not the write
    /// lock: in lazy mode, readers look up the newest copy of a block in its
    /// jmap (shared), while a commit or a tail move excludes them.
    pub(crate) jbd2: Option<Arc<RwLock<Jbd2>>>,
    /// The commit thread (read-write volumes with a journal).
    pub(crate) committer: Option<committer::Committer>,
}

impl Journaling {
    /// The mode the options ask for; the journal itself starts at a
    /// read-write mount (`setup.rs`).
    pub(crate) fn new(lazy: bool) -> Self {
        Journaling { mode: if lazy { JournalMode::Lazy } else { JournalMode::Ordered }, jbd2: None, committer: None }
    }

    pub(crate) fn is_lazy(&self) -> bool {
        self.mode == JournalMode::Lazy
    }
}

/// The journal's transaction for `blocks` (their newest contents) and `revoked`.
pub(crate) fn journal_transaction<'a>(
    block_size: u32,
    blocks: impl IntoIterator<Item = (u64, &'a Block)>,
    revoked: impl IntoIterator<Item = u64>,
) -> Result<journal::Transaction> {
    let mut t = journal::Transaction::new(block_size);
    for (blk, data) in blocks {
        t.log_shared(blk, data.clone()).map_err(journal_err)?;
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
pub(crate) fn commit_locked(
    j: &mut Jbd2,
    t: &journal::Transaction,
    mode: JournalMode,
) -> Result<Option<journal::CommitInfo>> {
    let info = j.commit(t).map_err(journal_err)?;
    if mode == JournalMode::Lazy {
        j.advance_tail().map_err(journal_err)?;
    }
    Ok(info)
}
