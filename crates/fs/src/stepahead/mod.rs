//! StepAhead (issue 7): on a path-translation miss, fetch every block the rest
//! of the translation will need at once, instead of one step at a time.
//!
//! The knowledge base ([`kb`]) says where each directory's blocks are and which
//! inode each name leads to; [`plan`] turns a path into the blocks its
//! resolution will read; [`ReadCore::prefetch`] reads the uncached ones in one
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
pub(crate) mod state;

pub(crate) use state::{KbChange, StepAhead};
pub use state::{StepAheadOptions, StepAheadStats};

use crate::read_core::ReadCore;
use std::sync::atomic::Ordering;

impl ReadCore {
    /// StepAhead's figures; `final_figures` counts prefetched blocks still
    /// unused as wasted (the volume is going away).
    pub fn stepahead_stats(&self, final_figures: bool) -> StepAheadStats {
        let c = self.cache.stats();
        let mut st = StepAheadStats {
            enabled: self.stepahead.is_some(),
            translation_hits: self.translation.hits.load(Ordering::Relaxed),
            translation_misses: self.translation.misses.load(Ordering::Relaxed),
            lookup_hits: self.translation.lookup_hits.load(Ordering::Relaxed),
            lookup_misses: self.translation.lookup_misses.load(Ordering::Relaxed),
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
