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
mod dirops;
mod extents;
mod mount;
mod ops;
mod txn;

pub use ops::{CreateKind, SetAttr};
pub use txn::Txn;

use crate::cache::Block;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::inode::{Inode, Timestamp};
use ondisk::superblock::Superblock;
use std::sync::Arc;

/// State owned by the write lock.
pub struct WriteState {
    /// The superblock as it will next be written (free counts, state, times).
    pub sb: Superblock,
    pub running: Txn,
    /// Blocks committed but not yet written home, with the version committed.
    pub unwritten: std::collections::BTreeMap<u64, Block>,
}

impl WriteState {
    pub fn new(sb: Superblock) -> Self {
        WriteState { sb, running: Txn::default(), unwritten: Default::default() }
    }
}

/// Current time as ext4 stores it.
pub fn now() -> Timestamp {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timestamp { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

impl Volume {
    /// Copy block `blk`, let `f` change it, and record the new version.
    pub(crate) fn modify(&self, ws: &mut WriteState, blk: u64, f: impl FnOnce(&mut [u8]) -> Result<()>) -> Result<()> {
        let mut data = self.meta(blk)?.to_vec();
        f(&mut data)?;
        self.install(ws, blk, data);
        Ok(())
    }

    /// Record `data` as the new contents of metadata block `blk`.
    pub(crate) fn install(&self, ws: &mut WriteState, blk: u64, data: Vec<u8>) {
        debug_assert_eq!(data.len(), self.block_size() as usize);
        let b: Block = Arc::from(data);
        self.cache.insert_dirty(blk, b.clone());
        ws.running.add(blk, b);
    }

    /// A block that will be entirely rewritten: no need to read its old contents.
    pub(crate) fn fresh_block(&self) -> Vec<u8> {
        vec![0u8; self.block_size() as usize]
    }

    /// Write an inode record (with its checksum) into its inode-table block.
    pub(crate) fn write_inode(&self, ws: &mut WriteState, inode: &Inode) -> Result<()> {
        let (blk, off) = self.inode_location(inode.ino);
        let bytes = inode.to_bytes(&self.sb);
        self.modify(ws, blk, |b| {
            b[off..off + bytes.len()].copy_from_slice(&bytes);
            Ok(())
        })
    }

    /// Commit the running transaction: make every change in it durable.
    pub(crate) fn commit(&self, ws: &mut WriteState) -> Result<()> {
        self.write_super(ws)?;
        let txn = std::mem::take(&mut ws.running);
        if txn.is_empty() {
            return Ok(());
        }
        // Ordered mode: file data is written before the metadata that points to it.
        self.dev.flush().map_err(|e| FsError::io("flushing data before commit", e))?;
        for (blk, data) in txn.blocks() {
            ws.unwritten.insert(blk, data.clone());
        }
        self.write_back(ws)
    }

    /// Write every committed block home and flush.
    pub(crate) fn write_back(&self, ws: &mut WriteState) -> Result<()> {
        let bs = u64::from(self.block_size());
        for (blk, data) in std::mem::take(&mut ws.unwritten) {
            self.dev
                .write_at(blk * bs, &data, IoClass::Metadata)
                .map_err(|e| FsError::io(format!("writing block {blk} home"), e))?;
            self.cache.unpin(blk, &data);
        }
        self.dev.flush().map_err(|e| FsError::io("flushing metadata", e))
    }

    /// Put the in-memory superblock (free counts, times) into the running transaction.
    pub(crate) fn write_super(&self, ws: &mut WriteState) -> Result<()> {
        let (bfree, ifree) = {
            let groups = self.groups.read();
            (
                groups.iter().map(|g| u64::from(g.free_blocks_count())).sum::<u64>(),
                groups.iter().map(|g| g.free_inodes_count()).sum::<u32>(),
            )
        };
        ws.sb.set_free_blocks_count(bfree);
        ws.sb.f.free_inodes_count = ifree;
        ws.sb.f.wtime = now().sec as u32;
        let bs = self.block_size() as usize;
        let off = (ondisk::superblock::SUPERBLOCK_OFFSET as usize) % bs;
        let blk = ondisk::superblock::SUPERBLOCK_OFFSET / bs as u64;
        let bytes = ws.sb.to_bytes();
        self.modify(ws, blk, |b| {
            b[off..off + bytes.len()].copy_from_slice(&bytes);
            Ok(())
        })
    }

    /// Write group `g`'s descriptor (with checksum) into its descriptor block and the mirror.
    pub(crate) fn write_group(&self, ws: &mut WriteState, g: u32, gd: ondisk::group_desc::GroupDesc) -> Result<()> {
        let dsize = self.sb.desc_size();
        let per_block = self.block_size() as usize / dsize;
        let blk = ondisk::group_desc::descriptor_block(&self.sb, (g as usize / per_block) as u64);
        let off = (g as usize % per_block) * dsize;
        let bytes = gd.to_bytes(&self.sb, g);
        self.modify(ws, blk, |b| {
            b[off..off + dsize].copy_from_slice(&bytes);
            Ok(())
        })?;
        self.groups.write()[g as usize] = gd;
        Ok(())
    }
}
