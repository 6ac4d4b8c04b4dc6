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

use super::{commit_failed, commit_locked, journal_transaction, Jbd2, Txn, WriteState};
use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use parking_lot::{Condvar, Mutex, RwLock};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// What the thread is given: the blocks (frozen versions) and the revokes.
struct Job {
    blocks: Vec<(u64, Block)>,
    revoked: Vec<u64>,
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
    txn: Txn,
    since: Instant,
}

impl Committer {
    pub(crate) fn start(jbd2: Arc<RwLock<Jbd2>>, block_size: u32, lazy: bool) -> Result<Committer> {
        let shared = Arc::new(Shared { slot: Mutex::new(Slot::Idle), changed: Condvar::new() });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ext4lazy-commit".into())
            .spawn(move || run(&s, &jbd2, block_size, lazy))
            .map_err(|e| FsError::io("starting the commit thread", e))?;
        Ok(Committer { shared, thread: Some(thread) })
    }

    fn submit(&self, job: Job) {
        let mut slot = self.shared.slot.lock();
        debug_assert!(matches!(*slot, Slot::Idle), "one commit at a time");
        *slot = Slot::Queued(job);
        self.shared.changed.notify_all();
    }

    /// Whether the job submitted last has ended.
    fn done(&self) -> bool {
        matches!(*self.shared.slot.lock(), Slot::Done(_))
    }

    /// Wait for the job submitted last to end; returns its result.
    fn wait(&self) -> Result<Option<journal::CommitInfo>> {
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

fn run(shared: &Shared, jbd2: &RwLock<Jbd2>, block_size: u32, lazy: bool) {
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
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| write_job(jbd2, block_size, lazy, &job)))
            .unwrap_or_else(|_| Err(FsError::io("the commit thread", std::io::Error::other("it panicked"))));
        drop(job); // the frozen versions: let the cache's copies be changed in place again
        let mut slot = shared.slot.lock();
        if !matches!(*slot, Slot::Exit) {
            *slot = Slot::Done(result);
        }
        shared.changed.notify_all();
    }
}

fn write_job(jbd2: &RwLock<Jbd2>, block_size: u32, lazy: bool, job: &Job) -> Result<Option<journal::CommitInfo>> {
    let t = journal_transaction(block_size, job.blocks.iter().map(|(b, d)| (*b, d)), job.revoked.iter().copied())?;
    commit_locked(&mut jbd2.write(), &t, lazy)
}

impl Volume {
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
        let (Some(committer), Some(jbd2)) = (self.committer.as_ref(), self.jbd2.as_ref()) else {
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
        let committer = self.committer.as_ref().expect("a transaction is committing only through the commit thread");
        let r = committer.wait().and_then(|info| {
            self.committed(ws, info, &txn, since);
            ws.stats.background_commits += 1;
            if self.opts.lazy {
                self.commit_cleaning(ws)?;
            }
            Ok(())
        });
        r.map_err(|e| commit_failed(ws, e))
    }

    /// Finish the transaction on the commit thread if its commit has ended
    /// (without waiting): the write-back list and pins are then up to date.
    pub(crate) fn finish_commit_if_done(&self, ws: &mut WriteState) -> Result<()> {
        match (&ws.committing, self.committer.as_ref()) {
            (Some(_), Some(c)) if c.done() => self.finish_commit(ws),
            _ => Ok(()),
        }
    }
}
