//! All-or-nothing operations, and what happens when one cannot finish.
//!
//! An operation changes many blocks (bitmaps, descriptors, inode table,
//! directory and extent blocks) and can fail halfway: a full disk, a damaged
//! block, a device error. Before it changes anything it opens an undo record;
//! the first change to each block, group descriptor or the superblock saves
//! the old version there, so a failure puts memory back exactly as it was and
//! the running transaction never holds half an operation.
//!
//! A device error is different: memory may then be newer than anything that
//! can be made durable, so the volume turns read-only (the kernel's
//! `errors=remount-ro`) and writes nothing more; the journal on disk still
//! ends at the last complete commit, which the next mount replays.

use super::state::Undo;
use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;

impl Volume {
    /// Save block `blk` as it is, unless the running operation already did.
    pub(crate) fn note_block(&self, ws: &mut WriteState, blk: u64) {
        let WriteState { undo, running, .. } = ws;
        if let Some(u) = undo.as_mut() {
            u.blocks.entry(blk).or_insert_with(|| (self.cache.peek(blk), running.slot(blk)));
        }
    }

    /// Save group `g`'s descriptor as it is, unless the running operation already did.
    pub(crate) fn note_group(&self, ws: &mut WriteState, g: u32) {
        let WriteState { undo, dirty_groups, .. } = ws;
        if let Some(u) = undo.as_mut() {
            u.groups.entry(g).or_insert_with(|| (self.group(g), dirty_groups.get(&g).copied()));
        }
    }

    fn roll_back(&self, ws: &mut WriteState, mut u: Undo) {
        for (blk, (cached, slot)) in u.blocks.drain() {
            self.cache.restore(blk, cached);
            ws.running.restore(blk, slot);
        }
        {
            let mut groups = self.groups.write();
            for (g, (gd, dirty)) in u.groups.drain() {
                groups.set(g as usize, gd);
                match dirty {
                    Some(d) => ws.dirty_groups.insert(g, d),
                    None => ws.dirty_groups.remove(&g),
                };
                // The operation may have moved this group's hints past an
                // inode or a block it no longer holds: start over from the
                // group's start. (Every allocation and free changes its
                // group's descriptor, so other groups' hints still hold, and
                // an operation that failed before allocating, EEXIST say,
                // costs none.)
                ws.inode_hints.remove(&g);
                ws.block_hints.remove(&g);
            }
        }
        ws.sb = u.sb.clone();
        for d in ws.deferred.drain(u.deferred.min(ws.deferred.len())..) {
            if let super::Deferred::Free { start, .. } = d {
                ws.pending_frees.remove(&start);
            }
        }
        u.recycle(ws);
    }

    /// Run one modifying operation under the write lock, all or nothing.
    /// A full disk with blocks freed by the running transaction is retried once
    /// after committing it (those blocks may be reused only then); one whose
    /// only free inodes are still held by the kernel, once after their FORGET.
    pub(crate) fn atomic<T>(&self, mut op: impl FnMut(&mut WriteState) -> Result<T>) -> Result<T> {
        // (`writer` refuses if an operation panicked halfway before.)
        let mut ws = self.writer()?;
        let mut retried = false;
        let mut waited_for_forget = false;
        loop {
            // Counted before the operation looks for a free inode: a FORGET
            // served while it runs is not missed by the wait below.
            let releases_seen = self.writer.lookups.releases();
            ws.undo = Some(Undo::begin(&mut ws));
            ws.sync_wanted = false;
            ws.partway = false;
            ws.out_of_inodes = false;
            ws.claiming_delayed = false;
            let result = self.run_op(&mut ws, &mut op);
            let undo = ws.undo.take().expect("set above");
            let err = match result {
                Ok(v) => {
                    undo.recycle(&mut ws);
                    self.kb_apply(&mut ws.kb_changes);
                    // The sync and dirsync inode flags: durable on return.
                    if std::mem::take(&mut ws.sync_wanted) {
                        self.commit(&mut ws)?;
                    }
                    return Ok(v);
                }
                Err(e) => e,
            };
            self.kb_discard(&mut ws.kb_changes);
            self.roll_back(&mut ws, undo);
            if ws.partway {
                // Part of it is committed (`split`): memory is back at its last
                // cut, which only the next mount's orphan processing finishes.
                ws.failed.get_or_insert_with(|| format!("an operation failed after committing part of itself: {err}"));
                return Err(err);
            }
            if matches!(err, FsError::NoSpace)
                && !retried
                && ws.deferred.iter().any(|d| matches!(d, super::Deferred::Free { .. }))
            {
                retried = true;
                self.commit(&mut ws)?;
                continue;
            }
            if matches!(err, FsError::NoSpace) && ws.out_of_inodes && !waited_for_forget {
                // Out of inodes, but a FORGET on its way may free one (`lookups.rs`):
                // a free number the kernel still holds, or an unlinked inode kept
                // (on the orphan list) while the kernel may have it open. Wait for
                // one without the write lock, which the FORGET's thread may need.
                // A FORGET served since the operation began counts too: the
                // list and the count are read together, and a FORGET takes a
                // number off the list and counts it in one step (`Lookups::sub`).
                let (held, releases) = self.free_but_held();
                let may_come = !held.is_empty() || releases != releases_seen || ws.sb.f.last_orphan != 0;
                if may_come {
                    waited_for_forget = true;
                    drop(ws);
                    self.writer.lookups.wait_release(releases_seen);
                    ws = self.writer()?;
                    continue;
                }
            }
            return Err(self.fail_on_io(&mut ws, err));
        }
    }

    /// Run `op` with its undo record open. A panic in it rolls its changes
    /// back, so that reads go on seeing memory as the last whole operation
    /// left it, and turns the volume read-only before it unwinds on to the
    /// request's boundary: whatever broke may have broken more than the undo
    /// record knows of. (`inject` can make it panic here, for tests.)
    fn run_op<T>(&self, ws: &mut WriteState, op: &mut impl FnMut(&mut WriteState) -> Result<T>) -> Result<T> {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let r = op(ws);
            crate::inject::panic_if_armed();
            r
        }));
        r.unwrap_or_else(|payload| {
            self.stopped_by_panic(ws);
            std::panic::resume_unwind(payload)
        })
    }

    fn stopped_by_panic(&self, ws: &mut WriteState) {
        ws.failed
            .get_or_insert_with(|| "an operation panicked halfway (its changes in memory were rolled back)".into());
        if let Some(undo) = ws.undo.take() {
            self.kb_discard(&mut ws.kb_changes);
            self.roll_back(ws, undo);
        }
    }

    /// A device error while writing turns the volume read-only; other errors pass.
    pub(crate) fn fail_on_io(&self, ws: &mut WriteState, err: FsError) -> FsError {
        if matches!(err, FsError::Io { .. }) && ws.failed.is_none() {
            ws.failed = Some(err.to_string());
        }
        err
    }
}

#[cfg(test)]
mod tests {
    use crate::write::txn::{Slot, Txn};

    #[test]
    fn txn_slots_round_trip() {
        let mut t = Txn::default();
        let b: crate::cache::Block = std::sync::Arc::from(vec![1u8; 8]);
        t.add(5, b.clone());
        t.revoke(6);
        let (s5, s6, s7) = (t.slot(5), t.slot(6), t.slot(7));
        t.revoke(5);
        t.add(6, b.clone());
        t.add(7, b);
        t.restore(5, s5);
        t.restore(6, s6);
        t.restore(7, s7);
        assert!(matches!(t.slot(5), Slot::Logged(_)));
        assert!(matches!(t.slot(6), Slot::Revoked));
        assert!(matches!(t.slot(7), Slot::Absent));
        assert_eq!(t.len(), 1);
    }
}
