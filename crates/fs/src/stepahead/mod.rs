//! StepAhead (issue 7): on a path-translation miss, fetch every block the rest
//! of the translation will need at once, instead of one step at a time.
//!
//! The knowledge base ([`kb`]) says where each directory's blocks are and which
//! inode each name leads to; [`plan`] turns a path into the blocks its
//! resolution will read; [`Volume::prefetch`] reads the uncached ones in one
//! batch into the buffer cache. The KB is learnt as directories are listed
//! ([`learn`]) and kept current by every namespace change ([`update`]); the
//! hints ([`hints`]) are where the FUSE frontend and the library API ask for
//! prefetches. Everything here is a hint: resolution still reads the real
//! directories, so a stale KB only wastes reads. docs/STEPAHEAD.md has the
//! design and the decisions.

mod hints;
pub mod kb;
mod learn;
mod paths;
mod plan;
mod prefetch;
mod update;

pub use kb::{DirKind, Hint, KnowledgeBase};
pub use learn::{learn, learn_tree};
pub use paths::PathHints;
pub use plan::{plan, Plan};
pub use prefetch::PrefetchStats;
pub(crate) use update::KbChange;

use crate::volume::Volume;
use parking_lot::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// How StepAhead runs (mount option `stepahead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepAheadOptions {
    /// Most blocks one hint may read (`stepahead_budget=`).
    pub budget_blocks: usize,
    /// A hint reads nothing while this many device reads are in flight
    /// (the device queue is congested: the prefetch would only add to it).
    pub congestion_limit: usize,
    /// Levels of subdirectories a listing hint reads ahead (`stepahead_depth=`).
    pub depth: usize,
    /// A full-path hint that enters a directory the KB did not know also
    /// reads its parent ahead as a listing hint would (`stepahead_paths=ahead`,
    /// the default); `stepahead_paths=exact` reads only what the path needs.
    pub path_ahead: bool,
    /// Most bytes the knowledge base holds (`stepahead_kb_mb=`): beyond it,
    /// directories are forgotten (`kb::KnowledgeBase::with_limit`).
    pub kb_bytes: usize,
}

impl Default for StepAheadOptions {
    fn default() -> Self {
        // 512 blocks = 2 MiB a hint with 4 KiB blocks; 32 = a SATA NCQ queue.
        StepAheadOptions {
            budget_blocks: 512,
            congestion_limit: 32,
            depth: 3,
            path_ahead: true,
            kb_bytes: kb::DEFAULT_LIMIT,
        }
    }
}

/// The volume's StepAhead state: the KB and the prefetcher's counters.
pub(crate) struct StepAhead {
    pub(crate) kb: RwLock<KnowledgeBase>,
    pub(crate) opts: StepAheadOptions,
    batches: AtomicU64,
    backoffs: AtomicU64,
    /// Hints that came down to one request and left it to the operation.
    lone_skips: AtomicU64,
    /// Full-path hints (preload library): taken, dropped while busy, refused
    /// (no credentials, or a directory on the path the sender may not search
    /// or list), and the blocks they prefetched.
    path_hints: AtomicU64,
    path_hints_dropped: AtomicU64,
    path_hints_denied: AtomicU64,
    path_hint_blocks: AtomicU64,
}

impl StepAhead {
    pub(crate) fn new(opts: StepAheadOptions) -> Self {
        StepAhead {
            kb: RwLock::new(KnowledgeBase::with_limit(opts.kb_bytes)),
            opts,
            batches: AtomicU64::new(0),
            backoffs: AtomicU64::new(0),
            lone_skips: AtomicU64::new(0),
            path_hints: AtomicU64::new(0),
            path_hints_dropped: AtomicU64::new(0),
            path_hints_denied: AtomicU64::new(0),
            path_hint_blocks: AtomicU64::new(0),
        }
    }
}

/// Path-translation reads (inode-table and directory blocks), counted
/// whether StepAhead runs or not, for the hit rate.
#[derive(Default)]
pub(crate) struct TranslationCounters {
    hits: AtomicU64,
    misses: AtomicU64,
}

impl TranslationCounters {
    pub(crate) fn count(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// StepAhead's figures for the stats file.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepAheadStats {
    pub enabled: bool,
    /// Path-translation reads served from the cache / all of them.
    pub translation_hits: u64,
    pub translation_misses: u64,
    /// Blocks prefetches read into the cache.
    pub prefetch_blocks: u64,
    /// Prefetched blocks later asked for.
    pub prefetch_used_blocks: u64,
    /// Prefetched blocks evicted (or freed) without use, plus, when the
    /// figures are final (unmount), those still unused in the cache.
    pub prefetch_wasted_blocks: u64,
    /// Prefetched blocks still cached and unused (live figures only).
    pub prefetch_unused_blocks: u64,
    /// Batches submitted, and hints skipped because the device was congested.
    pub prefetch_batches: u64,
    pub prefetch_backoffs: u64,
    /// Lookup hints whose blocks came down to one request, left to the
    /// lookup itself (it reads them with its own readahead).
    pub prefetch_lone_skips: u64,
    /// Full-path hints received from the preload library (every one counted,
    /// dropped or not), dropped because the queue was full, refused or cut
    /// short for the sender's permissions, and the blocks the rest prefetched.
    pub path_hints: u64,
    pub path_hints_dropped: u64,
    pub path_hints_denied: u64,
    pub path_hint_blocks: u64,
    pub kb_entries: u64,
    pub kb_dirs: u64,
    pub kb_bytes: u64,
    /// Directories the KB forgot to stay within its limit.
    pub kb_dirs_evicted: u64,
}

impl StepAheadStats {
    pub fn hit_rate(&self) -> f64 {
        let all = self.translation_hits + self.translation_misses;
        if all == 0 {
            return 0.0;
        }
        self.translation_hits as f64 / all as f64
    }
}

impl Volume {
    /// StepAhead's figures; `final_figures` counts prefetched blocks still
    /// unused as wasted (the volume is going away).
    pub fn stepahead_stats(&self, final_figures: bool) -> StepAheadStats {
        let c = self.cache.stats();
        let mut st = StepAheadStats {
            enabled: self.stepahead.is_some(),
            translation_hits: self.translation.hits.load(Ordering::Relaxed),
            translation_misses: self.translation.misses.load(Ordering::Relaxed),
            prefetch_blocks: c.prefetched,
            prefetch_used_blocks: c.prefetch_used,
            prefetch_wasted_blocks: c.prefetch_wasted,
            prefetch_unused_blocks: c.prefetch_unused(),
            ..Default::default()
        };
        if final_figures {
            st.prefetch_wasted_blocks += st.prefetch_unused_blocks;
            st.prefetch_unused_blocks = 0;
        }
        if let Some(sa) = &self.stepahead {
            st.prefetch_batches = sa.batches.load(Ordering::Relaxed);
            st.prefetch_backoffs = sa.backoffs.load(Ordering::Relaxed);
            st.prefetch_lone_skips = sa.lone_skips.load(Ordering::Relaxed);
            st.path_hints = sa.path_hints.load(Ordering::Relaxed);
            st.path_hints_dropped = sa.path_hints_dropped.load(Ordering::Relaxed);
            st.path_hints_denied = sa.path_hints_denied.load(Ordering::Relaxed);
            st.path_hint_blocks = sa.path_hint_blocks.load(Ordering::Relaxed);
            let kb = sa.kb.read();
            st.kb_entries = kb.len() as u64;
            st.kb_dirs = kb.dirs() as u64;
            st.kb_bytes = kb.bytes() as u64;
            st.kb_dirs_evicted = kb.evicted();
        }
        st
    }

    /// Change the knowledge base, if StepAhead is on (tests make it stale
    /// on purpose; tools may load one).
    pub fn with_kb_mut<T>(&self, f: impl FnOnce(&mut KnowledgeBase) -> T) -> Option<T> {
        self.stepahead.as_ref().map(|sa| f(&mut sa.kb.write()))
    }

    /// Run `f` on the knowledge base, if StepAhead is on.
    pub fn with_kb<T>(&self, f: impl FnOnce(&KnowledgeBase) -> T) -> Option<T> {
        self.stepahead.as_ref().map(|sa| f(&sa.kb.read()))
    }
}
