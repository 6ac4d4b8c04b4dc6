//! Full-path hints (issue 7, item 3c): a program about to translate a whole
//! path has told us which (the preload library, through the daemon's hint
//! socket). Here we prefetch what its translation will read, at once, while
//! the kernel asks for it one component at a time.
//!
//! Per hint, from the root: the blocks the KB knows the path needs, in one
//! batch (`plan`). At the first name the KB does not know, the program is
//! entering a part of the tree it has not seen: with `path_ahead` (the
//! default) that name's directory is read ahead as a listing would be (its
//! blocks, its entries' inodes and `depth` levels of subdirectories, in
//! batches), which teaches the KB its entries, and the plan goes on from
//! there; the next paths there (siblings, in a sorted walk) find their blocks
//! cached. Each directory is read ahead once per stream of hints. `exact`
//! (`stepahead_paths=exact`) stops at the first unknown name. The hint never
//! looks a name up itself: that would read the very blocks the kernel's
//! lookup is reading at the same moment (first built that way: `stat` of
//! every file 2x slower on `cmr`, docs/STEPAHEAD.md). Only reads: an answer
//! never depends on a hint, and a stale KB costs wasted reads.

use super::prefetch::Lone;
use super::{plan, StepAhead};
use crate::volume::Volume;
use crate::ROOT_INO;
use std::collections::HashSet;
use std::sync::atomic::Ordering;

/// Directories read ahead by path hints, remembered so a stream of hints
/// into one place reads its parent ahead once.
const REMEMBERED: usize = 4096;

/// What one stream of path hints keeps between hints.
#[derive(Default)]
pub struct PathHints {
    listed: HashSet<u32>,
}

impl PathHints {
    /// True the first time `dir` is seen (since the set last filled up).
    fn first_time(&mut self, dir: u32) -> bool {
        if self.listed.len() >= REMEMBERED {
            self.listed.clear();
        }
        self.listed.insert(dir)
    }
}

impl Volume {
    /// A full-path hint was dropped before it was looked at (queue full).
    pub fn note_path_hint_dropped(&self) {
        if let Some(sa) = &self.stepahead {
            sa.path_hints.fetch_add(1, Ordering::Relaxed);
            sa.path_hints_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A program is about to translate `path` (components from the root of
    /// the volume, no "." or ".."): prefetch what it needs. Returns the blocks read.
    pub fn hint_path(&self, path: &[&[u8]], state: &mut PathHints) -> usize {
        let Some(sa) = &self.stepahead else { return 0 };
        sa.path_hints.fetch_add(1, Ordering::Relaxed);
        let read = self.path_ahead(sa, path, state);
        sa.path_hint_blocks.fetch_add(read as u64, Ordering::Relaxed);
        read
    }

    fn path_ahead(&self, sa: &StepAhead, path: &[&[u8]], state: &mut PathHints) -> usize {
        let mut budget = sa.opts.budget_blocks;
        let (mut read, mut at, mut i) = (0, ROOT_INO, 0);
        while i < path.len() && budget > 0 {
            let p = plan(self, &sa.kb.read(), at, &path[i..]);
            // A plan that comes down to one request is left to the kernel's
            // lookup, which makes it at the same moment (with its readahead).
            read += self.hint_prefetch(&p.blocks, &mut budget, Lone::Skip).read;
            i += p.known;
            if i >= path.len() || !sa.opts.path_ahead || !state.first_time(p.at) {
                break;
            }
            // The KB does not know `path[i]`: read its directory ahead as a
            // listing would (which learns it), then plan on from there. No
            // lookups here: they would race the kernel's own for the same blocks.
            let Ok(dir) = self.inode(p.at) else { break };
            read += self.listing_ahead(sa, &dir, &mut budget);
            at = p.at;
        }
        read
    }
}
