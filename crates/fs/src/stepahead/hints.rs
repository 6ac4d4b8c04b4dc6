//! Where prefetches start: the FUSE frontend's lookups and listings, and the
//! library API's path resolution.
//!
//! Through FUSE the kernel asks one component at a time, so a hint prefetches
//! what the next steps will most likely need, within the budget:
//! - a listing (readdir from its start): the directory's own blocks, then its
//!   children's inode blocks (readdirplus and `stat` read them all), then the
//!   blocks of its subdirectories (`find` and `du` list each one next), and
//!   so on down `depth` levels of subdirectories the KB did not know yet;
//! - a lookup: what the KB says the lookup reads (the parent's blocks for the
//!   name, the child's inode block) and, for a child directory, its blocks.
//!
//! Each group that the KB already knows goes into the first batch; what has
//! to be found out first (a directory's entries, a subdirectory's inode)
//! goes into the next one.

use super::learn::DirLayout;
use super::prefetch::Lone;
use super::{plan, StepAhead};
use crate::acl::Cred;
use crate::error::{FsError, Result};
use crate::read_core::ReadCore;
use ondisk::dir::ftype;
use ondisk::inode::Inode;

/// Blocks prefetched of each subdirectory of a listed directory: enough for
/// small directories, and a big one gets its own listing hint when listed.
const SUBDIR_BLOCKS: usize = 8;

impl ReadCore {
    fn stepahead_on(&self) -> Option<&StepAhead> {
        self.stepahead.as_ref()
    }

    /// Blocks of known directory `dir` worth reading ahead of a lookup or a
    /// listing in it: its interior blocks, then its first `max` blocks.
    fn known_dir_blocks(kb: &super::KnowledgeBase, dir: u32, max: usize, out: &mut Vec<u64>) {
        out.extend_from_slice(kb.index_blocks(dir));
        if let Some(b) = kb.dir_blocks(dir) {
            out.extend_from_slice(&b[..b.len().min(max)]);
        }
    }

    /// The first blocks of known directories `dirs`.
    fn add_known_dirs(sa: &StepAhead, dirs: &[u32], out: &mut Vec<u64>) {
        let kb = sa.kb.read();
        for &c in dirs {
            Self::known_dir_blocks(&kb, c, SUBDIR_BLOCKS, out);
        }
    }

    /// Directory `dir` is about to be listed from its start by `reader`
    /// (the kernel has checked that it may).
    pub fn hint_listing(&self, dir: &Inode, reader: Cred) {
        let Some(sa) = self.stepahead_on() else { return };
        let mut budget = sa.opts.budget_blocks;
        self.listing_ahead(sa, dir, Some(reader), &mut budget);
    }

    /// The listing hint's reads, within `budget`: the blocks read. With a
    /// `sender` (a reader or a path hint's sender), only subdirectories it
    /// may list are read ahead; `dir` itself the caller has checked.
    pub(super) fn listing_ahead(&self, sa: &StepAhead, dir: &Inode, sender: Option<Cred>, budget: &mut usize) -> usize {
        // Without a sender (the library API's own walks) or for root, no checks.
        let checked = sender.filter(|who| who.uid != 0);
        let may_list = |d: &Inode| checked.is_none_or(|who| self.may_list(d, who));
        let mut read = 0;
        if !dir.is_dir() {
            return read;
        }
        // The layout from the inode is exact (the KB's may be stale).
        let Ok(layout) = self.dir_layout(dir) else { return read };
        let mut first: Vec<u64> = layout.extent_blocks.iter().chain(&layout.blocks).copied().collect();
        let mut known_subdirs = Vec::new();
        {
            let kb = sa.kb.read();
            for c in kb.children(dir.ino) {
                self.push_inode_block(c, &mut first);
                if kb.knows(c) {
                    known_subdirs.push(c);
                }
            }
        }
        // A sender's: only those it may list (checked outside the KB's lock:
        // an ACL may need a read); those whose inode is not cached yet wait
        // for the batch that reads it.
        let mut unchecked = Vec::new();
        if checked.is_some() {
            known_subdirs.retain(|&c| match self.inode_cached(c) {
                Some(d) => may_list(&d),
                None => {
                    unchecked.push(c);
                    false
                }
            });
        }
        Self::add_known_dirs(sa, &known_subdirs, &mut first);
        read += self.hint_prefetch(&first, budget, Lone::Read).read;
        if !unchecked.is_empty() {
            unchecked.retain(|&c| self.inode_cached(c).is_some_and(|d| may_list(&d)));
            let mut blocks = Vec::new();
            Self::add_known_dirs(sa, &unchecked, &mut blocks);
            read += self.hint_prefetch(&blocks, budget, Lone::Read).read;
        }
        let Some(entries) = self.learn_cached(&sa.kb, dir, &layout) else { return read };
        let mut frontier = real_children(&entries);
        // Level by level down the subtree: the entries' inode blocks, then
        // the blocks of the subdirectories the KB did not know, which are
        // then learnt (their entries are the next level), within the budget.
        for level in 0..sa.opts.depth.max(1) {
            let mut inode_blocks = Vec::with_capacity(frontier.len());
            for &(c, _) in &frontier {
                self.push_inode_block(c, &mut inode_blocks);
            }
            read += self.hint_prefetch(&inode_blocks, budget, Lone::Read).read;
            let mut subdirs: Vec<Inode> = {
                let kb = sa.kb.read();
                frontier
                    .iter()
                    .filter(|&&(c, ft)| (ft == ftype::DIR || ft == ftype::UNKNOWN) && !kb.knows(c))
                    .filter_map(|&(c, _)| self.inode_cached(c))
                    .filter(Inode::is_dir)
                    .collect()
            };
            // Outside the KB's lock: an ACL may need a read.
            subdirs.retain(|d| may_list(d));
            let layouts: Vec<Vec<u64>> = subdirs.iter().map(|d| self.dir_blocks_without_io(d, SUBDIR_BLOCKS)).collect();
            let sub: Vec<u64> = layouts.iter().flatten().copied().collect();
            read += self.hint_prefetch(&sub, budget, Lone::Read).read;
            if level + 1 >= sa.opts.depth || *budget == 0 {
                break;
            }
            frontier.clear();
            for (d, blocks) in subdirs.iter().zip(layouts) {
                // Only directories read whole (small ones) are learnt here.
                if blocks.is_empty() || blocks.len() as u64 != self.dir_blocks(d) {
                    continue;
                }
                let layout = DirLayout { blocks, extent_blocks: Vec::new() };
                if let Some(e) = self.learn_cached(&sa.kb, d, &layout) {
                    frontier.extend(real_children(&e));
                }
            }
            if frontier.is_empty() {
                break;
            }
        }
        read
    }

    /// A listing of `dir` goes on from `offset` (a later readdir call): if the
    /// next block is not cached, read the next `budget` blocks in one batch
    /// (a big directory does not fit one hint's budget).
    pub fn hint_listing_continues(&self, dir: &Inode, offset: u64) {
        let Some(sa) = self.stepahead_on() else { return };
        if !dir.is_dir() || dir.has_flag(ondisk::inode::flags::INLINE_DATA) {
            return;
        }
        let n = self.dir_blocks(dir);
        let mut lblk = offset / u64::from(self.block_size);
        let mut blocks = Vec::new();
        while lblk < n && blocks.len() < sa.opts.budget_blocks {
            let want = (n - lblk).min((sa.opts.budget_blocks - blocks.len()) as u64);
            match self.map_block(dir, lblk, want) {
                Ok(crate::bmap::Mapping::Mapped { pblk, len, .. }) => {
                    if blocks.is_empty() && self.cache.contains(pblk) {
                        return; // read ahead already (or by the listing itself)
                    }
                    blocks.extend(pblk..pblk + len);
                    lblk += len;
                }
                Ok(crate::bmap::Mapping::Hole { len }) => lblk += len,
                Err(_) => break,
            }
        }
        let mut budget = sa.opts.budget_blocks;
        self.hint_prefetch(&blocks, &mut budget, Lone::Read);
    }

    /// A listing of `dir` reached its end: a directory too big for the
    /// first hint's budget is learnt now, from the cache, if it is all there.
    pub fn hint_listed(&self, dir: &Inode) {
        let Some(sa) = self.stepahead_on() else { return };
        if !dir.is_dir() || sa.kb.read().knows(dir.ino) {
            return;
        }
        if let Ok(layout) = self.dir_layout(dir) {
            let _ = self.learn_cached(&sa.kb, dir, &layout);
        }
    }

    fn push_inode_block(&self, ino: u32, out: &mut Vec<u64>) {
        if ino != 0 && ino <= self.sb.f.inodes_count {
            out.push(self.inode_location(ino).0);
        }
    }

    /// `name` is about to be looked up in directory `parent`.
    pub fn hint_lookup(&self, parent: u32, name: &[u8]) {
        let Some(sa) = self.stepahead_on() else { return };
        let blocks = {
            let kb = sa.kb.read();
            if !kb.knows(parent) {
                return;
            }
            let mut p = plan(self, &kb, parent, &[name]).blocks;
            if let Some(child) = kb.lookup(parent, name).filter(|&c| kb.knows(c)) {
                Self::known_dir_blocks(&kb, child, SUBDIR_BLOCKS, &mut p);
            }
            p
        };
        let mut budget = sa.opts.budget_blocks;
        self.hint_prefetch(&blocks, &mut budget, Lone::Skip);
    }

    /// A lookup found `child`: if it is a directory the KB does not know,
    /// read its first blocks ahead of the lookup or listing that follows.
    pub fn hint_looked_up(&self, child: &Inode) {
        let Some(sa) = self.stepahead_on() else { return };
        let mut budget = sa.opts.budget_blocks;
        self.looked_up_ahead(sa, child, &mut budget);
    }

    /// The looked-up hint's reads, within `budget`: the blocks read.
    pub(super) fn looked_up_ahead(&self, sa: &StepAhead, child: &Inode, budget: &mut usize) -> usize {
        if !child.is_dir() || sa.kb.read().knows(child.ino) {
            return 0;
        }
        let max = if self.is_htree(child) { 1 } else { SUBDIR_BLOCKS };
        let blocks = self.dir_blocks_without_io(child, max);
        let read = self.hint_prefetch(&blocks, budget, Lone::Skip).read;
        // Small directories, now whole in the cache, are learnt for free.
        if blocks.len() as u64 == self.dir_blocks(child) && !blocks.is_empty() {
            let layout = DirLayout { blocks, extent_blocks: Vec::new() };
            let _ = self.learn_cached(&sa.kb, child, &layout);
        }
        read
    }

    /// Resolve `path` (components, no slashes) from directory `start`, as a
    /// library caller would; with StepAhead, every step the KB knows is
    /// prefetched in one batch first, and again from each step it did not know.
    pub fn resolve(&self, start: u32, path: &[&[u8]]) -> Result<Inode> {
        let mut inode = self.inode(start)?;
        let mut i = 0;
        while i < path.len() {
            let mut known = 0;
            if let Some(sa) = self.stepahead_on() {
                let p = plan(self, &sa.kb.read(), inode.ino, &path[i..]);
                let mut budget = sa.opts.budget_blocks;
                self.hint_prefetch(&p.blocks, &mut budget, Lone::Read);
                known = p.known;
            }
            // The steps the plan covered, then one it did not.
            for _ in 0..known.max(1) {
                let (child, _) = self.lookup(&inode, path[i])?.ok_or(FsError::NotFound)?;
                let next = self.inode(child)?;
                if i + 1 < path.len() && !next.is_dir() {
                    return Err(FsError::NotDir);
                }
                if known == 0 {
                    self.hint_looked_up(&next);
                }
                inode = next;
                i += 1;
            }
        }
        Ok(inode)
    }
}

/// A directory's entries other than "." and "..": (inode, file type).
fn real_children(entries: &[super::learn::Learnt]) -> Vec<(u32, u8)> {
    entries.iter().filter(|e| e.name != b"." && e.name != b"..").map(|e| (e.child, e.file_type)).collect()
}
