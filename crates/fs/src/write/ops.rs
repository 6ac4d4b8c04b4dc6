//! What every operation shares: the write lock taken (and a commit started
//! when the transaction is full), fresh inodes, times. The operations
//! themselves: `namespace.rs`, `data.rs`, `attrs.rs`, `orphans.rs`. Each runs
//! under the write lock and leaves every structure (bitmaps, counts,
//! checksums, link counts, times) consistent at its end.

use super::{now, WriteState};
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::extent::{ExtentHeader, ExtentNode};
use ondisk::inode::{flags, Inode, InodeBase, InodeExtra, TimeField, GOOD_OLD_INODE_SIZE, I_BLOCK_SIZE};
use ondisk::superblock::feature;
use std::sync::atomic::{AtomicU32, Ordering};

static GENERATION: AtomicU32 = AtomicU32::new(0);

fn next_generation() -> u32 {
    let t = now();
    GENERATION.fetch_add(0x9E37_79B9, Ordering::Relaxed) ^ (t.nsec.rotate_left(13) ^ t.sec as u32)
}

/// Set ctime to now (a change to the inode alone).
pub(super) fn touch_ctime(inode: &mut Inode) {
    inode.set_time(TimeField::Change, now());
}

pub(super) fn touch(inode: &mut Inode, mtime: bool) {
    let t = now();
    inode.set_time(TimeField::Change, t);
    if mtime {
        inode.set_time(TimeField::Modify, t);
    }
}

/// How long a request waits for the write lock by spinning before it sleeps.
const WRITE_LOCK_SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Take the write lock, spinning up to [`WRITE_LOCK_SPIN`] first. Operations
/// hold it for microseconds, mostly on the other CPU's queue thread; a waiter
/// that sleeps must be woken across CPUs, which on small VMs costs 50-100 us
/// (`perf bench sched pipe` across two vCPUs), far more than the wait.
fn lock_spinning(m: &parking_lot::Mutex<WriteState>) -> parking_lot::MutexGuard<'_, WriteState> {
    // Usually free: no clock read then.
    if let Some(g) = m.try_lock() {
        return g;
    }
    let start = std::time::Instant::now();
    loop {
        if let Some(g) = m.try_lock() {
            return g;
        }
        if start.elapsed() >= WRITE_LOCK_SPIN {
            return m.lock();
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    }
}

impl Volume {
    /// Take the write lock; first finish a commit the commit thread has
    /// ended, and start committing the running transaction if it has grown
    /// to `WriteState::commit_limit`.
    pub(crate) fn writer(&self) -> Result<super::WriteGuard<'_>> {
        let mut ws =
            self.writer.state.as_ref().map(|m| super::WriteGuard::new(lock_spinning(m))).ok_or(FsError::ReadOnly)?;
        if ws.undo.is_some() {
            // An operation panicked halfway: its changes are in memory and must
            // never be committed (not even by the cleaner after a finished commit).
            ws.failed.get_or_insert_with(|| "an operation stopped halfway (panic)".into());
        }
        if ws.failed.is_some() {
            return Err(FsError::ReadOnly);
        }
        self.finish_commit_if_done(&mut ws)?;
        // Deferred frees add bitmap blocks at commit, changed groups their descriptor blocks: count them too.
        if (ws.running.len() + ws.deferred.len() + ws.dirty_groups.len()) as u64 >= ws.commit_limit {
            self.commit_soon(&mut ws)?;
        }
        Ok(ws)
    }

    /// A fresh in-memory inode record of the given mode.
    pub(super) fn new_inode(&self, ino: u32, mode_bits: u16, uid: u32, gid: u32) -> Inode {
        let size = usize::from(self.sb.inode_size());
        let t = now();
        let base = InodeBase { mode: mode_bits, links_count: 1, generation: next_generation(), ..Default::default() };
        let extra = (size > GOOD_OLD_INODE_SIZE).then(|| {
            let want = if self.sb.f.want_extra_isize >= 32 { self.sb.f.want_extra_isize } else { 32 };
            InodeExtra { extra_isize: want.min((size - GOOD_OLD_INODE_SIZE) as u16), ..Default::default() }
        });
        let mut inode = Inode { ino, base, extra, raw: vec![0u8; size] };
        inode.set_uid(uid);
        inode.set_gid(gid);
        for f in [TimeField::Access, TimeField::Modify, TimeField::Change, TimeField::Birth] {
            inode.set_time(f, t);
        }
        inode
    }

    pub(super) fn init_extent_root(&self, inode: &mut Inode) {
        if self.sb.has_incompat(feature::incompat::EXTENTS) {
            inode.insert_flags(flags::EXTENTS);
            let mut root = [0u8; I_BLOCK_SIZE];
            ExtentNode::Leaf(ExtentHeader { entries: 0, max: 4, depth: 0, generation: 0 }, vec![]).write(&mut root);
            inode.base.block = root;
        }
    }
}
