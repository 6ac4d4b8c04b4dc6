//! StepAhead (issue 7): on a path-translation miss, fetch every block the rest
//! of the translation will need at once, instead of one step at a time.
//!
//! The knowledge base ([`kb`]) says where each directory's blocks are and which
//! inode each name leads to; [`plan`] turns a path into the blocks its
//! resolution will read; [`Volume::prefetch`] reads the uncached ones in one
//! batch into the buffer cache. Everything here is a hint: resolution still
//! reads the real directories, so a stale KB only wastes reads.

pub mod kb;
mod plan;

pub use kb::{DirKind, Hint, KnowledgeBase};
pub use plan::{plan, Plan};

use crate::cache::Block;
use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::inode::flags;
use std::sync::Arc;

/// What one prefetch did with the blocks it was given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrefetchStats {
    /// Distinct blocks asked for.
    pub requested: usize,
    /// Already in the buffer cache: nothing to do.
    pub cached: usize,
    /// Read and offered to the cache.
    pub read: usize,
    /// Not blocks of this volume (a stale or corrupt hint): skipped.
    pub invalid: usize,
    /// Contiguous runs submitted together.
    pub runs: usize,
}

impl Volume {
    /// Whether `blk` is in the buffer cache (counts neither a hit nor a miss).
    pub fn is_cached(&self, blk: u64) -> bool {
        self.cache.contains(blk)
    }

    /// Read those of `blocks` that are not cached, submitted as one batch of
    /// contiguous runs (the device may reorder them), and cache them as clean
    /// copies. Blocks whose newest copy is in the journal (lazy mode) or in
    /// the replayed overlay come from there, as on any cache miss.
    pub fn prefetch(&self, blocks: &[u64]) -> Result<PrefetchStats> {
        let mut want: Vec<u64> = blocks.to_vec();
        want.sort_unstable();
        want.dedup();
        let mut st = PrefetchStats { requested: want.len(), ..Default::default() };
        want.retain(|&b| {
            if self.check_block(b, "prefetched block").is_err() {
                st.invalid += 1;
                false
            } else if self.cache.contains(b) {
                st.cached += 1;
                false
            } else {
                true
            }
        });
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for &b in &want {
            match runs.last_mut() {
                Some((start, len)) if *start + *len == b => *len += 1,
                _ => runs.push((b, 1)),
            }
        }
        st.runs = runs.len();
        if runs.is_empty() {
            return Ok(st);
        }
        // Noted before reading: a block modified meanwhile keeps its newer copy.
        let seen = self.cache.read_epoch();
        let bufs = self.read_runs_uncached(&runs, IoClass::Metadata)?;
        let bs = self.block_size as usize;
        for (&(start, len), buf) in runs.iter().zip(&bufs) {
            debug_assert_eq!(buf.len(), len as usize * bs);
            for (i, chunk) in buf.chunks_exact(bs).enumerate() {
                let data: Block = Arc::from(chunk);
                self.cache.insert_read(start + i as u64, data, seen);
                st.read += 1;
            }
        }
        Ok(st)
    }
}

/// Read directory `dir` and record it in `kb` (what a mount-time walk or a
/// directory read does). Holes end the block list: entries past one keep
/// their block index, which the planner then ignores.
pub fn learn(vol: &Volume, kb: &mut KnowledgeBase, dir: u32) -> Result<()> {
    let inode = vol.inode(dir)?;
    if !inode.is_dir() {
        return Err(FsError::NotDir);
    }
    let inline = inode.has_flag(flags::INLINE_DATA);
    let mut blocks = Vec::new();
    if !inline {
        let n = vol.dir_blocks(&inode);
        let mut lblk = 0;
        while lblk < n {
            match vol.map_block(&inode, lblk, n - lblk)? {
                Mapping::Mapped { pblk, len, .. } => {
                    blocks.extend(pblk..pblk + len);
                    lblk += len;
                }
                Mapping::Hole { .. } => break,
            }
        }
    }
    let bs = u64::from(vol.block_size());
    let mut entries: Vec<(Vec<u8>, u32, u64)> = Vec::new();
    vol.read_dir(&inode, 0, &mut |e| {
        // Inline entries live in the inode itself: block index 0, no blocks.
        let lblk = if inline { 0 } else { e.next.saturating_sub(1) / bs };
        entries.push((e.name, e.ino, lblk));
        true
    })?;
    let kind = if vol.is_htree(&inode) { DirKind::Htree } else { DirKind::Linear };
    kb.learn_dir(dir, kind, &blocks, entries.iter().map(|(n, c, l)| (&n[..], *c, *l)));
    Ok(())
}

/// Learn every directory reachable from `root` (the mount-time walk).
/// Returns the number of directories learnt.
pub fn learn_tree(vol: &Volume, kb: &mut KnowledgeBase, root: u32) -> Result<usize> {
    let mut todo = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(dir) = todo.pop() {
        if !seen.insert(dir) {
            continue;
        }
        learn(vol, kb, dir)?;
        let mut subdirs = Vec::new();
        vol.read_dir(&vol.inode(dir)?, 0, &mut |e| {
            if e.file_type == ondisk::dir::ftype::DIR && e.name != b"." && e.name != b".." {
                subdirs.push(e.ino);
            }
            true
        })?;
        todo.extend(subdirs);
    }
    Ok(seen.len())
}
