//! The end of a file's life and of a mount: freeing an unlinked file at its
//! last name or handle, the orphan list at mount, sync and shutdown.

use super::{now, Split, WriteState};
use crate::error::{FsError, Result};
use crate::volume::Volume;
use ondisk::inode::{flags, mode, Inode, I_BLOCK_SIZE};

/// What freeing one orphan adds to a transaction besides its extents (each
/// of which makes its own room): its inode's block, inode bitmap and
/// descriptor, its xattr block with that block's bitmap and descriptor,
/// the tree's last node.
const ORPHAN_CREDITS: u64 = 8;

impl Volume {
    /// An inode whose last name is gone: free it now, or, while it is still
    /// open, put it on the orphan list so a crash cannot leak it.
    pub(super) fn drop_if_unlinked(&self, ws: &mut WriteState, mut inode: Inode) -> Result<()> {
        if inode.links_count() > 0 {
            return self.write_inode(ws, &inode);
        }
        if self.orphan_if_open(inode.ino) {
            self.writer.lookups.unlinked_while_held();
            inode.base.dtime = ws.sb.f.last_orphan;
            ws.sb.f.last_orphan = inode.ino;
            return self.write_inode(ws, &inode);
        }
        self.free_file(ws, inode, false)
    }

    /// Release every block and the inode itself. `listed`: the inode is on
    /// the orphan list (and stays there: the caller takes it off).
    pub(crate) fn free_file(&self, ws: &mut WriteState, mut inode: Inode, listed: bool) -> Result<()> {
        let is_dir = inode.is_dir();
        // Delayed data of a file that goes never reaches the disk.
        self.delayed.forget(inode.ino);
        if is_dir {
            self.kb_change(&mut ws.kb_changes, crate::stepahead::KbChange::Forget { dir: inode.ino });
        }
        // A fast symlink keeps its target in i_block, inline data its bytes in the inode.
        let fast_symlink = inode.is_symlink() && inode.size() < I_BLOCK_SIZE as u64 && !inode.has_flag(flags::EXTENTS);
        let has_data = !fast_symlink
            && !inode.has_flag(flags::INLINE_DATA)
            && matches!(inode.file_type(), mode::S_IFREG | mode::S_IFDIR | mode::S_IFLNK);
        // A delete that commits partway is on the orphan list at each cut:
        // the next mount finishes it.
        let mut split = Split::orphan(listed);
        if has_data {
            self.truncate_blocks(ws, &mut inode, 0, &mut split)?;
        }
        self.end_split(ws, &mut inode, split);
        let acl = inode.file_acl();
        if acl != 0 {
            self.release_xattr_block(ws, acl)?;
            inode.base.file_acl_lo = 0;
            inode.base.file_acl_hi = 0;
        }
        inode.base.dtime = now().sec as u32;
        inode.base.links_count = 0;
        inode.set_size(0);
        self.write_inode(ws, &inode)?;
        self.free_inode(ws, inode.ino, is_dir)
    }

    /// Drop one reference to a shared xattr block; free it with the last.
    pub(crate) fn release_xattr_block(&self, ws: &mut WriteState, blk: u64) -> Result<()> {
        self.check_owned(blk, 1, 0, "xattr block")?;
        let data = self.meta(blk)?;
        let refs = ondisk::bytes::le32(&data, 4);
        if refs <= 1 {
            return self.free_meta_block(ws, blk);
        }
        let seed = self.sb.csum_seed();
        let csum = self.sb.has_metadata_csum();
        self.modify(ws, blk, |b| {
            ondisk::bytes::put_le32(b, 4, refs - 1);
            if csum {
                ondisk::xattr::set_block_checksum(b, blk, seed);
            }
            Ok(())
        })
    }

    /// Make everything written so far durable (fsync, sync, unmount).
    pub fn sync(&self) -> Result<()> {
        // Delayed data first (none on a read-only volume): it takes data
        // locks, which come before the write lock.
        self.writeback_files(None)?;
        let mut ws = self.lock_write().ok_or(FsError::ReadOnly)?;
        self.commit(&mut ws)
    }

    /// Final flush at unmount: free orphans, commit, write everything home,
    /// empty the journal, mark the volume clean.
    pub fn shutdown(&self) -> Result<()> {
        // Delayed data that cannot go out (no room for a file's extent-tree
        // blocks) must not take the rest with it: the other files go out
        // one by one, and what went out is committed before the error is
        // returned. Returning at once lost every block written back since
        // the last commit (13,131 blocks where 8 had no room).
        let lost = match self.failure() {
            None => self.writeback_files(None).err().inspect(|_| self.writeback_each_file()),
            Some(_) => None,
        };
        let mut ws = self.lock_write().ok_or(FsError::ReadOnly)?;
        let ws = &mut *ws;
        if let Some(why) = &ws.failed {
            // Leave the volume as the last commit left it: the next mount replays the journal.
            return Err(super::read_only_after(why));
        }
        self.free_orphans(ws)?;
        self.commit(ws)?;
        ws.sb.f.state |= ondisk::superblock::STATE_VALID;
        self.close_journal(ws)?;
        lost.map_or(Ok(()), Err)
    }

    /// Finish every inode on the orphan list, as the kernel's
    /// `ext4_orphan_cleanup`: free those without names (unlinked while open,
    /// or a delete a crash cut short), truncate the others to their size (a
    /// truncate a crash cut short). Each leaves the list in the transaction
    /// that finishes it, and a transaction without room for the next is
    /// committed first: thousands of orphans take many transactions, and a
    /// big one splits as a delete does (`split`).
    pub(crate) fn free_orphans(&self, ws: &mut WriteState) -> Result<()> {
        let mut n = 0;
        // The count bounds a list that loops.
        while ws.sb.f.last_orphan != 0 && n < self.sb.f.inodes_count {
            let mut inode = self.inode(ws.sb.f.last_orphan)?;
            let next = inode.base.dtime;
            if self.txn_full(ws, ORPHAN_CREDITS) {
                self.commit_partway(ws)?;
            }
            if inode.links_count() == 0 {
                self.free_file(ws, inode, true)?;
            } else {
                self.finish_truncate(ws, &mut inode)?;
            }
            ws.sb.f.last_orphan = next;
            n += 1;
        }
        ws.sb.f.last_orphan = 0;
        Ok(())
    }

    /// An orphan that still has names: a truncate a crash cut short. Free
    /// what lies past its size (extent-mapped regular files: the only ones
    /// we truncate) and take it off the list.
    pub(super) fn finish_truncate(&self, ws: &mut WriteState, inode: &mut Inode) -> Result<()> {
        if inode.is_reg() && inode.has_flag(flags::EXTENTS) && !inode.has_flag(flags::INLINE_DATA) {
            let size = inode.size();
            let mut split = Split::orphan(true);
            self.truncate_blocks(ws, inode, size.div_ceil(u64::from(self.block_size())), &mut split)?;
            self.zero_tail(inode, size)?;
        }
        inode.base.dtime = 0;
        self.write_inode(ws, inode)
    }
}
