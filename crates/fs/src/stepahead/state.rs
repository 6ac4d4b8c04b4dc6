//! StepAhead's state as the volume holds it: options, the knowledge base
//! and counters, and the namespace changes an operation queues for the KB.
//! Types only: what StepAhead does is in the other files of this module.

use super::kb::{self, KnowledgeBase};
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
    pub(crate) batches: AtomicU64,
    pub(crate) backoffs: AtomicU64,
    /// Hints that came down to one request and left it to the operation.
    pub(crate) lone_skips: AtomicU64,
    /// Full-path hints (preload library): taken, dropped while busy, refused
    /// (no credentials, or a directory on the path the sender may not search
    /// or list), and the blocks they prefetched.
    pub(crate) path_hints: AtomicU64,
    pub(crate) path_hints_dropped: AtomicU64,
    pub(crate) path_hints_denied: AtomicU64,
    pub(crate) path_hint_blocks: AtomicU64,
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
/// whether StepAhead runs or not, for the hit rate; and the same per lookup.
#[derive(Default)]
pub(crate) struct TranslationCounters {
    pub(crate) hits: AtomicU64,
    pub(crate) misses: AtomicU64,
    /// Lookups (one name translated) served without a device read, and with
    /// one: StepAhead's Figure 5 counts translations, not blocks.
    pub(crate) lookup_hits: AtomicU64,
    pub(crate) lookup_misses: AtomicU64,
}

impl TranslationCounters {
    pub(crate) fn count(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn count_lookup(&self, hit: bool) {
        let c = if hit { &self.lookup_hits } else { &self.lookup_misses };
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
    /// Lookups served without any device read / with one (whatever read
    /// it: the directory, the inode, or the prefetch its hint started).
    pub lookup_hits: u64,
    pub lookup_misses: u64,
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
    /// Translation block reads served from the cache / all of them.
    pub fn hit_rate(&self) -> f64 {
        hit_share(self.translation_hits, self.translation_misses)
    }

    /// Translations served from memory / all of them.
    pub fn lookup_hit_rate(&self) -> f64 {
        hit_share(self.lookup_hits, self.lookup_misses)
    }
}

/// hits / (hits + misses), 0 before any.
fn hit_share(hits: u64, misses: u64) -> f64 {
    let all = hits + misses;
    if all == 0 {
        return 0.0;
    }
    hits as f64 / all as f64
}

/// One change to the namespace, as the directory code made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KbChange {
    /// `name` now leads to `child`, its entry in logical block `lblk`.
    Entry {
        dir: u32,
        name: Vec<u8>,
        child: u32,
        lblk: u64,
    },
    /// `name` leads to another inode, in the same place.
    Retarget {
        dir: u32,
        name: Vec<u8>,
        child: u32,
    },
    Removed {
        dir: u32,
        name: Vec<u8>,
    },
    /// Block `lblk` (at `pblk`) appended to the directory.
    Grown {
        dir: u32,
        lblk: u64,
        pblk: u64,
    },
    /// A new interior (htree index) block.
    IndexNode {
        dir: u32,
        pblk: u64,
    },
    Hashed {
        dir: u32,
    },
    /// A directory just made: "." and ".." in its first block.
    NewDir {
        dir: u32,
        parent: u32,
        pblk: u64,
    },
    /// Learn it again when next listed (its layout changed in a way not
    /// followed entry by entry, or it is gone).
    Forget {
        dir: u32,
    },
}
