//! The journal at the edges of a read-write mount: recovery and the start
//! of our own log at mount, the log's last state at a clean unmount.

use super::committer::Committer;
use super::JournalMode;
use crate::error::Result;
use crate::volume::Volume;
use crate::write::{journal_err, WriteState};
use ondisk::superblock::{feature, STATE_VALID};
use std::sync::Arc;

impl Volume {
    /// At a read-write mount: finish the journal's recovery as the mode
    /// wants it (replayed home, or resumed as lazy mode's log), take it over
    /// in our own format, size transactions from it, start the commit thread.
    pub(crate) fn start_journal(&mut self, ws: &mut WriteState) -> Result<()> {
        if let Some(info) = &self.journal {
            let map =
                journal::JournalMap::new(info.runs.clone(), info.len_blocks, self.block_size()).map_err(journal_err)?;
            let mut j = journal::Journal::load(self.dev.clone(), map).map_err(journal_err)?;
            if j.needs_recovery() {
                // The scan `open` made for its in-memory replay, if it made one.
                let rec = match self.core.journal.as_mut().and_then(|i| i.recovery.take()) {
                    Some(rec) => rec,
                    None => j.recover().map_err(journal_err)?,
                };
                if self.writer.journaling.is_lazy() {
                    // Lazy: the log goes on where it ended; its copies stay the
                    // metadata's home, found through the jmap. Nothing is written home.
                    j.resume(&rec).map_err(journal_err)?;
                } else {
                    // The same replay `open` laid over the device in memory, now
                    // written home by the journal (copies, flush, then an empty log).
                    j.replay_to_disk(&rec).map_err(journal_err)?;
                }
            }
            // What the overlay served is now home (ordered) or in the jmap (lazy).
            self.core.overlay = Default::default();
            let (compat, incompat) = journal::ext4_features(self.sb.has_metadata_csum(), self.sb.is_64bit());
            match j.set_features(compat, incompat) {
                Ok(()) => {}
                Err(journal::Error::NotCheckpointed { .. }) => {
                    // A live log in a format we do not write (another writer's
                    // features): bring it home, then start a log of our own.
                    j.checkpoint_from_log(journal::CheckpointGoal::All).map_err(journal_err)?;
                    j.empty().map_err(journal_err)?;
                    j.set_features(compat, incompat).map_err(journal_err)?;
                }
                Err(e) => return Err(journal_err(e)),
            }
            ws.commit_limit = (j.max_transaction_blocks() / 2).max(16);
            ws.txn_limit = Some(crate::write::TxnLimit { max_blocks: j.max_transaction_blocks(), layout: *j.layout() });
            // A piece of a write may allocate each block in another group: a
            // bitmap and a descriptor block each, on top of a running
            // transaction just under commit_limit (half the limit). An eighth
            // leaves room for its tree nodes; on a journal of 32 MiB or more
            // no FUSE write (1 MiB at most) is ever cut.
            self.writer.piece_blocks = (j.max_transaction_blocks() / 8).max(8);
            let j = Arc::new(parking_lot::RwLock::new(j));
            self.writer.journaling.committer =
                Some(Committer::start(j.clone(), self.block_size(), self.writer.journaling.mode)?);
            if self.writer.journaling.is_lazy() {
                // Reads find the newest copies in the log (the read core's path).
                self.core.lazy_log = Some(j.clone());
            }
            self.writer.journaling.jbd2 = Some(j);
            // As the kernel does: the flag says the journal may hold committed
            // transactions; stock tools replay it after a crash.
            ws.sb.f.feature_incompat |= feature::incompat::RECOVER;
        } else {
            // No journal: a crash leaves the volume flagged for a full e2fsck.
            self.writer.journaling.mode = JournalMode::NoJournal;
            ws.sb.f.state &= !STATE_VALID;
        }
        Ok(())
    }

    /// At a clean unmount, everything committed: lazy mode keeps its log
    /// (the metadata lives there; the kernel and e2fsck replay it); the
    /// other modes write everything home and empty the journal.
    pub(crate) fn close_journal(&self, ws: &mut WriteState) -> Result<()> {
        if self.log().is_some() {
            // The journal is where the metadata lives: it stays, flagged for
            // recovery, so the kernel and e2fsck replay it and see our tree.
            self.write_super_home(ws)?;
            // A lost snapshot only costs the next mount a scan.
            let _ = self.save_jmap_snapshot();
            return Ok(());
        }
        self.write_back(ws, None)?;
        if let Some(j) = self.writer.journaling.jbd2.as_ref() {
            j.write().empty().map_err(journal_err)?;
        }
        ws.sb.f.feature_incompat &= !feature::incompat::RECOVER;
        self.write_super_home(ws)
    }
}
