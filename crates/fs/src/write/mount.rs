//! Turning a volume read-write: recovery to disk, the clean/dirty state, orphans.

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::superblock::feature;
use std::sync::Arc;

impl Volume {
    /// Called by `open` for a read-write volume.
    pub(crate) fn start_writing(&mut self) -> Result<()> {
        if self.sb.has_ro_compat(!SUPPORTED_RO_COMPAT_WRITE) {
            let unknown = self.sb.f.feature_ro_compat & !SUPPORTED_RO_COMPAT_WRITE;
            return Err(FsError::Unsupported(format!(
                "writing volumes with ro_compat features {unknown:#x} (mount read-only)"
            )));
        }
        if self.sb.f.state & ondisk::superblock::STATE_ERROR != 0 {
            return Err(FsError::Unsupported(
                "the volume has errors recorded: run e2fsck before mounting read-write".into(),
            ));
        }
        let mut ws = WriteState::new(self.sb.clone());
        if self.opts.data_writeback_bytes > 0 {
            // Below everything that writes, the journal included: its flush
            // before each commit block writes the waiting data first. A
            // flusher thread writes batches out meanwhile, as the kernel's
            // does, so a request rarely waits for a write-out.
            self.core.dev = Arc::new(blockdev::DataWriteback::with_flusher(
                self.dev.clone(),
                self.block_size,
                self.opts.data_writeback_bytes,
            ));
        }
        self.start_journal(&mut ws)?;
        ws.sb.f.mnt_count = ws.sb.f.mnt_count.wrapping_add(1);
        ws.sb.f.mtime = super::now().sec as u32;
        self.writer.state = Some(parking_lot::Mutex::new(ws));
        let mut guard = self.lock_write().expect("just set");
        self.write_super_home(&mut guard)?;
        self.free_orphans(&mut guard)?;
        self.commit(&mut guard)
    }

    /// The last handle on `ino` was closed: free it if it is an orphan.
    /// Only an inode found on the orphan list is freed: an unlink that ran
    /// between the close and this call (and saw the file closed) has already
    /// freed it, and freeing twice would corrupt the counts.
    pub(crate) fn free_if_orphan(&self, ino: u32) -> Result<()> {
        if self.writer.state.is_none() {
            return Ok(());
        }
        self.atomic(|ws| {
            if !self.take_off_orphan_list(ws, ino)? {
                return Ok(()); // not an orphan (never was, or already freed)
            }
            let inode = self.inode(ino)?;
            self.free_file(ws, inode, false)
        })
    }

    /// Unlink `ino` from the orphan list (the superblock's last_orphan, then
    /// each inode's dtime); false when it is not on it. Refuses, as damage,
    /// an inode on the list that still has names.
    pub(super) fn take_off_orphan_list(&self, ws: &mut WriteState, ino: u32) -> Result<bool> {
        let mut prev: Option<u32> = None;
        let mut cur = ws.sb.f.last_orphan;
        let mut n = 0;
        while cur != 0 && cur != ino && n < self.sb.f.inodes_count {
            prev = Some(cur);
            cur = self.inode(cur)?.base.dtime;
            n += 1;
        }
        if cur != ino {
            return Ok(false);
        }
        let inode = self.inode(ino)?;
        if inode.links_count() != 0 {
            return Err(FsError::Format(ondisk::FormatError::corrupt(
                "orphan list",
                ondisk::Location::Inode(u64::from(ino)),
                ondisk::Corruption::BadField { field: "links of an orphan", value: u64::from(inode.links_count()) },
            )));
        }
        match prev {
            None => ws.sb.f.last_orphan = inode.base.dtime,
            Some(p) => {
                let mut pi = self.inode(p)?;
                pi.base.dtime = inode.base.dtime;
                self.write_inode(ws, &pi)?;
            }
        }
        Ok(true)
    }
}

/// ro_compat features whose structures the write path keeps correct.
const SUPPORTED_RO_COMPAT_WRITE: u32 = feature::ro_compat::SPARSE_SUPER
    | feature::ro_compat::LARGE_FILE
    | feature::ro_compat::HUGE_FILE
    | feature::ro_compat::GDT_CSUM
    | feature::ro_compat::DIR_NLINK
    | feature::ro_compat::EXTRA_ISIZE
    | feature::ro_compat::METADATA_CSUM;
