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
//!
//! Hints come from any local user, so a hint reads only what its sender
//! could look up itself: it stops before the first directory on the path the
//! sender may not search (execute permission, by mode, owner, group and ACL),
//! and reads a directory ahead (a listing) only where the sender may also
//! read it; the same for the subdirectories that read-ahead goes down into.
//! The sender is one uid and one gid (the kernel's SCM_CREDENTIALS):
//! supplementary groups are not known, so a user who may pass only through
//! one of them gets no prefetch there (a cost, never a wrong answer). Root
//! passes everywhere, as CAP_DAC_READ_SEARCH does.

use super::prefetch::Lone;
use super::{plan, StepAhead};
use crate::acl::{Cred, MAY_EXEC, MAY_READ};
use crate::read_core::ReadCore;
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
    /// Whether `dir` was read ahead already (since the set last filled up).
    fn listed(&self, dir: u32) -> bool {
        self.listed.contains(&dir)
    }

    fn note_listed(&mut self, dir: u32) {
        if self.listed.len() >= REMEMBERED {
            self.listed.clear();
        }
        self.listed.insert(dir);
    }
}

impl ReadCore {
    /// A full-path hint was dropped before it was looked at (queue full).
    pub fn note_path_hint_dropped(&self) {
        if let Some(sa) = &self.stepahead {
            sa.path_hints.fetch_add(1, Ordering::Relaxed);
            sa.path_hints_dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A full-path hint refused before it was looked at: it came without
    /// its sender's credentials.
    pub fn note_path_hint_refused(&self) {
        if let Some(sa) = &self.stepahead {
            sa.path_hints.fetch_add(1, Ordering::Relaxed);
            sa.path_hints_denied.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A program run by `sender` is about to translate `path` (components
    /// from the root of the volume, no "." or ".."): prefetch what it needs,
    /// as far as `sender` may look. Returns the blocks read.
    pub fn hint_path(&self, path: &[&[u8]], sender: Cred, state: &mut PathHints) -> usize {
        let Some(sa) = &self.stepahead else { return 0 };
        sa.path_hints.fetch_add(1, Ordering::Relaxed);
        let (read, denied) = self.path_ahead(sa, path, sender, state);
        if denied {
            sa.path_hints_denied.fetch_add(1, Ordering::Relaxed);
        }
        sa.path_hint_blocks.fetch_add(read as u64, Ordering::Relaxed);
        read
    }

    /// The hint's reads, and whether a permission cut it short.
    fn path_ahead(&self, sa: &StepAhead, path: &[&[u8]], sender: Cred, state: &mut PathHints) -> (usize, bool) {
        let mut budget = sa.opts.budget_blocks;
        let (mut read, mut at, mut i) = (0, ROOT_INO, 0);
        while i < path.len() && budget > 0 {
            let mut p = plan(self, &sa.kb.read(), at, &path[i..]);
            // Up to the first directory the sender may not search: its inode
            // block (planned by the step before) stays, since the sender may
            // stat it; its blocks and everything after go.
            let refused = p.searched.iter().find(|&&(d, _)| !self.may_search(d, sender)).copied();
            if let Some((_, from)) = refused {
                p.blocks.truncate(from);
            }
            // A plan that comes down to one request is left to the kernel's
            // lookup, which makes it at the same moment (with its readahead).
            read += self.hint_prefetch(&p.blocks, &mut budget, Lone::Skip).read;
            if refused.is_some() {
                return (read, true);
            }
            i += p.known;
            if i >= path.len() || !sa.opts.path_ahead || state.listed(p.at) {
                break;
            }
            // The KB does not know `path[i]`: read its directory ahead as a
            // listing would (which learns it), then plan on from there. No
            // lookups here: they would race the kernel's own for the same blocks.
            let Ok(dir) = self.inode(p.at) else { break };
            if !dir.is_dir() {
                break;
            }
            if !self.may_list(&dir, sender) {
                return (read, true);
            }
            state.note_listed(p.at);
            read += self.listing_ahead(sa, &dir, Some(sender), &mut budget);
            at = p.at;
        }
        (read, false)
    }

    /// Whether `sender` may search directory `ino`: its inode as cached (no
    /// use counted), else read.
    fn may_search(&self, ino: u32, sender: Cred) -> bool {
        if sender.uid == 0 {
            return true;
        }
        match self.inode_cached(ino).map_or_else(|| self.inode(ino).ok(), Some) {
            Some(dir) => dir.is_dir() && self.permits(&dir, sender, MAY_EXEC),
            None => false,
        }
    }

    /// Whether `sender` may list directory `dir` and look names up in it,
    /// which reading it ahead amounts to.
    pub(super) fn may_list(&self, dir: &ondisk::inode::Inode, sender: Cred) -> bool {
        sender.uid == 0 || (dir.is_dir() && self.permits(dir, sender, MAY_READ | MAY_EXEC))
    }
}
