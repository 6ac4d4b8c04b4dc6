//! The commit thread (jbd2's kjournald2): a transaction that reached its
//! size limit is written to the journal here while operations go on filling
//! the next one.
//!
//! Why: an untar's mid-way commit (2,000 blocks: copies, the flush that
//! first writes the data gathered before it, the commit block, a second
//! flush) took about 100 ms on the request that crossed the limit, ~5% of
//! the untar, while the other CPU sat idle.
//!
//! The write lock hands over a frozen transaction: the versions of its blocks
//! the cache held at that moment (a later change copies a block before
//! changing it, as every change does). One transaction commits at a time.
//! Everything that needs the journal to include it (a synchronous commit, a
//! checkpoint, write-back home, unmount) first waits for it and finishes it
//! under the write lock ([`Volume::finish_commit`]): the committed blocks join
//! the write-back list (ordered mode) or are unpinned (lazy mode), as a
//! synchronous commit does at once. A transaction that frees blocks commits
//! synchronously: freed blocks may be reused only once the free is durable.

use super::{commit_locked, journal_transaction, Jbd2, JournalMode};
use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::write::txn::Txn;
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What the thread is given: the blocks (frozen versions) and the revokes.
pub(super) struct Job {
    pub(super) blocks: Vec<(u64, Block)>,
    pub(super) revoked: Vec<u64>,
}

enum Slot {
    Idle,
    Queued(Job),
    Busy,
    Done(Result<Option<journal::CommitInfo>>),
    Exit,
}

struct Shared {
    slot: Mutex<Slot>,
    changed: Condvar,
}

/// The commit thread of a read-write volume with a journal.
pub(crate) struct Committer {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A transaction handed to the commit thread, kept under the write lock
/// until it is finished.
pub(crate) struct Committing {
    pub(super) txn: Txn,
    pub(super) since: Instant,
}

impl Committer {
    pub(crate) fn start(jbd2: Arc<RwLock<Jbd2>>, block_size: u32, mode: JournalMode) -> Result<Committer> {
        let shared = Arc::new(Shared { slot: Mutex::new(Slot::Idle), changed: Condvar::new() });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ext4lazy-commit".into())
            .spawn(move || run(&s, &jbd2, block_size, mode))
            .map_err(|e| FsError::io("starting the commit thread", e))?;
        Ok(Committer { shared, thread: Some(thread) })
    }

    pub(super) fn submit(&self, job: Job) {
        let mut slot = self.shared.slot.lock();
        debug_assert!(matches!(*slot, Slot::Idle), "one commit at a time");
        *slot = Slot::Queued(job);
        self.shared.changed.notify_all();
    }

    /// Whether the job submitted last has ended.
    pub(super) fn done(&self) -> bool {
        matches!(*self.shared.slot.lock(), Slot::Done(_))
    }

    /// Wait for the job submitted last to end; returns its result.
    pub(super) fn wait(&self) -> Result<Option<journal::CommitInfo>> {
        let mut slot = self.shared.slot.lock();
        loop {
            match std::mem::replace(&mut *slot, Slot::Idle) {
                Slot::Done(r) => return r,
                other => *slot = other,
            }
            self.shared.changed.wait(&mut slot);
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        *self.shared.slot.lock() = Slot::Exit;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, jbd2: &RwLock<Jbd2>, block_size: u32, mode: JournalMode) {
    loop {
        let job = {
            let mut slot = shared.slot.lock();
            loop {
                match std::mem::replace(&mut *slot, Slot::Busy) {
                    Slot::Queued(job) => break job,
                    Slot::Exit => {
                        *slot = Slot::Exit;
                        return;
                    }
                    other => *slot = other,
                }
                shared.changed.wait(&mut slot);
            }
        };
        // A panic must not leave a waiter waiting forever: it is a failed commit.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_job(jbd2, block_size, mode, &job)))
            .unwrap_or_else(|_| Err(FsError::io("the commit thread", std::io::Error::other("it panicked"))));
        drop(job); // the frozen versions: let the cache's copies be changed in place again
        let mut slot = shared.slot.lock();
        if !matches!(*slot, Slot::Exit) {
            *slot = Slot::Done(result);
        }
        shared.changed.notify_all();
    }
}

fn write_job(
    jbd2: &RwLock<Jbd2>,
    block_size: u32,
    mode: JournalMode,
    job: &Job,
) -> Result<Option<journal::CommitInfo>> {
    let t = journal_transaction(block_size, job.blocks.iter().map(|(b, d)| (*b, d)), job.revoked.iter().copied())?;
    commit_locked(&mut jbd2.write(), &t, mode)
}
