//! The write side of the engine.
//!
//! Every modifying operation runs under the volume's write lock (`WriteState`):
//! the kernel already serialises operations per directory, and one lock keeps
//! allocators, bitmaps and directory blocks consistent without a lock order to
//! get wrong. Readers never take it: they see each block's newest version in
//! the buffer cache, where modified blocks are pinned until written home.
//!
//! A modification copies a block, changes it, sets its checksum and installs
//! it (pinned) in the cache and in the running transaction. `commit` hands the
//! transaction to the journal (ordered mode), or, on a volume without a
//! journal, writes it home.

mod alloc;
mod attrs;
mod data;
mod delalloc;
mod dirops;
mod extent_tree;
mod extents;
pub(crate) mod iflags;
mod inline;
mod mount;
mod namespace;
mod ops;
mod orphans;
mod spare;
mod split;
pub(crate) mod state;
pub(crate) mod txn;
mod undo;
pub(crate) mod writer;
mod xattrops;

pub use crate::error::journal_err;
pub use crate::journaling::{CleanerPolicy, Jbd2};
pub use attrs::SetAttr;
pub use data::Falloc;
pub use iflags::OpenAccess;
pub use namespace::CreateKind;
pub(crate) use split::Split;
pub use state::WriteStats;
pub(crate) use state::{Deferred, TxnLimit, Unwritten, WriteGuard, WriteState};
pub use txn::Txn;
pub use xattrops::XattrMode;

use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::bitmap::{self, Kind};
use ondisk::group_desc::{GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use ondisk::inode::{Inode, Timestamp};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The error every write gets once a device error has turned the volume read-only.
pub(crate) fn read_only_after(why: &str) -> FsError {
    FsError::io(format!("(the volume turned read-only after: {why})"), std::io::Error::from_raw_os_error(libc::EROFS))
}

/// Current time as ext4 stores it.
pub fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

impl Volume {
    /// Copy block `blk`, let `f` change it, and record the new version.
    pub(crate) fn modify(&self, ws: &mut WriteState, blk: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<()> {
        let mut data = self.meta(blk)?;
        // The cache shares the block, so this copies it once, into a spare.
        f(ws.spare.make_mut(&mut data))?;
        self.install(ws, blk, data);
        Ok(())
    }

    /// Record `data` as the new contents of metadata block `blk`.
    pub(crate) fn install(&self, ws: &mut WriteState, blk: u64, data: impl Into<Block>) {
        let b: Block = data.into();
        debug_assert_eq!(b.len(), self.block_size() as usize);
        self.note_block(ws, blk);
        self.cache.insert_dirty(blk, b.clone());
        ws.running.add(blk, b);
        ws.running_since.get_or_insert_with(std::time::Instant::now);
    }

    /// A block that will be entirely rewritten: no need to read its old contents.
    pub(crate) fn fresh_block(&self) -> Vec<u8> {
        vec![0u8; self.block_size() as usize]
    }

    /// Write an inode record (with its checksum) into its inode-table block.
    pub(crate) fn write_inode(&self, ws: &mut WriteState, inode: &Inode) -> Result<()> {
        // A file with delayed data: the disk keeps the size its written data reaches.
        match self.delayed.sizes_at_write(inode.ino, inode.size()) {
            Some(disk_size) => self.write_inode_as(ws, inode, disk_size),
            None => self.write_inode_record(ws, inode),
        }
    }

    /// Write `inode` with `disk_size` as the size on disk (readers see the
    /// size `delayed` keeps): delayed allocation's write-back.
    pub(crate) fn write_inode_as(&self, ws: &mut WriteState, inode: &Inode, disk_size: u64) -> Result<()> {
        if disk_size == inode.size() {
            return self.write_inode_record(ws, inode);
        }
        let mut on_disk = inode.clone();
        on_disk.set_size(disk_size);
        self.write_inode_record(ws, &on_disk)
    }

    fn write_inode_record(&self, ws: &mut WriteState, inode: &Inode) -> Result<()> {
        let (blk, off) = self.inode_location(inode.ino);
        let len = inode.raw.len();
        debug_assert_eq!(len, usize::from(self.sb.inode_size()));
        self.note_sync(ws, inode);
        self.modify(ws, blk, |b| {
            let record = &mut b[off..off + len];
            inode.write_to(&self.sb, record);
            debug_assert!(inode.as_written(record).is_none_or(|w| Ok(w) == Inode::parse(&self.sb, inode.ino, record)));
            self.inodes.put_written(inode, record);
            Ok(())
        })
    }

    /// Take the write lock as a writer (None on a read-only volume).
    pub(crate) fn lock_write(&self) -> Option<WriteGuard<'_>> {
        self.writer.state.as_ref().map(|m| WriteGuard::new(m.lock()))
    }

    /// The write path's counters (None on a read-only volume).
    pub fn write_stats(&self) -> Option<WriteStats> {
        self.writer.state.as_ref().map(|w| w.lock().stats)
    }

    /// The orphan list's head as the write path has it (0: empty; the
    /// list goes on through each inode's dtime). For tests.
    #[doc(hidden)]
    pub fn last_orphan_for_tests(&self) -> u32 {
        self.writer.state.as_ref().map_or(self.sb.f.last_orphan, |w| w.lock().sb.f.last_orphan)
    }

    /// Why the volume turned read-only, if a device error made it so.
    pub fn failure(&self) -> Option<String> {
        self.writer.state.as_ref().and_then(|w| w.lock().failed.clone())
    }

    /// Blocks freed by the running transaction: free for `statfs`, not yet for the allocator.
    pub(crate) fn deferred_free_blocks(&self) -> u64 {
        let Some(w) = self.writer.state.as_ref() else { return 0 };
        w.lock().deferred.iter().map(|d| if let Deferred::Free { len, .. } = d { *len } else { 0 }).sum()
    }

    /// The superblock's block and its bytes with current free counts and write time.
    fn super_bytes(&self, ws: &mut WriteState) -> (u64, usize, [u8; ondisk::superblock::SUPERBLOCK_SIZE]) {
        let (bfree, ifree) = self.free_counts();
        ws.sb.set_free_blocks_count(bfree);
        // At most s_inodes_count, a u32: the sum of per-group counts fits.
        ws.sb.f.free_inodes_count = ifree as u32;
        ws.sb.f.wtime = now().sec as u32;
        let bs = self.block_size() as usize;
        let off = (ondisk::superblock::SUPERBLOCK_OFFSET as usize) % bs;
        let blk = ondisk::superblock::SUPERBLOCK_OFFSET / bs as u64;
        (blk, off, ws.sb.to_bytes())
    }

    /// Put the in-memory superblock (free counts, times) into the running transaction.
    pub(crate) fn write_super(&self, ws: &mut WriteState) -> Result<()> {
        let (blk, off, bytes) = self.super_bytes(ws);
        self.modify(ws, blk, |b| {
            b[off..off + bytes.len()].copy_from_slice(&bytes);
            Ok(())
        })
    }

    /// Write the superblock straight to its home and flush (mount and clean
    /// unmount: the needs_recovery flag itself must not wait for the journal).
    pub(crate) fn write_super_home(&self, ws: &mut WriteState) -> Result<()> {
        let (blk, off, bytes) = self.super_bytes(ws);
        let mut data = self.meta(blk)?.to_vec();
        data[off..off + bytes.len()].copy_from_slice(&bytes);
        let bs = u64::from(self.block_size());
        self.dev.write_at(blk * bs, &data, IoClass::Metadata).map_err(|e| FsError::io("writing the superblock", e))?;
        self.dev.flush().map_err(|e| FsError::io("flushing the superblock", e))?;
        if !ws.unwritten.contains_key(&blk) && ws.running.blocks().all(|(b, _)| b != blk) {
            self.cache.remove(blk);
            self.cache.insert(blk, Arc::from(data));
        }
        Ok(())
    }

    /// Make `gd` group `g`'s descriptor; `changed` names the bitmap the caller
    /// changed (and installed), if any. Its checksum and the descriptor block
    /// are brought up to date when the transaction commits
    /// ([`Volume::write_dirty_groups`]): an untar allocates about 64,000 times,
    /// and each allocation used to sum a 4 KiB bitmap and rewrite a descriptor block.
    pub(crate) fn set_group(&self, ws: &mut WriteState, g: u32, gd: GroupDesc, changed: Option<Kind>) {
        self.note_group(ws, g);
        self.groups.write().set(g as usize, gd);
        let mark = ws.dirty_groups.entry(g).or_default();
        match changed {
            Some(Kind::Block) => mark.block_bitmap = true,
            Some(Kind::Inode) => mark.inode_bitmap = true,
            None => {}
        }
    }

    /// At commit: the checksums of the bitmaps changed since the last commit
    /// go into their descriptors, and every changed descriptor into its block.
    pub(crate) fn write_dirty_groups(&self, ws: &mut WriteState) -> Result<()> {
        let dirty = std::mem::take(&mut ws.dirty_groups);
        if dirty.is_empty() {
            return Ok(());
        }
        let dsize = self.sb.desc_size();
        let per_block = self.block_size() as usize / dsize;
        let mut by_block: BTreeMap<u64, Vec<(usize, Vec<u8>)>> = BTreeMap::new();
        for (g, d) in dirty {
            let mut gd = self.group(g);
            // The bitmaps are cached: changed in the running transaction, they are pinned.
            if d.block_bitmap && !gd.has_flag(BG_BLOCK_UNINIT) {
                let bits = self.meta(gd.block_bitmap())?;
                bitmap::set_checksum(&self.sb, &mut gd, &bits, Kind::Block);
            }
            if d.inode_bitmap && !gd.has_flag(BG_INODE_UNINIT) {
                let bits = self.meta(gd.inode_bitmap())?;
                bitmap::set_checksum(&self.sb, &mut gd, &bits, Kind::Inode);
            }
            let blk = ondisk::group_desc::descriptor_block(&self.sb, (g as usize / per_block) as u64);
            let off = (g as usize % per_block) * dsize;
            by_block.entry(blk).or_default().push((off, gd.to_bytes(&self.sb, g)));
            self.groups.write().set(g as usize, gd);
        }
        for (blk, descs) in by_block {
            self.modify(ws, blk, |b| {
                for (off, bytes) in &descs {
                    b[*off..*off + dsize].copy_from_slice(bytes);
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}
