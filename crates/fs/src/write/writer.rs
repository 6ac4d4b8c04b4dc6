//! The writer half of a volume (the read core is the other): the write lock
//! and what it guards, the journal and its mode, and the references the
//! kernel holds on inodes. Read-only volumes have one too, without a write
//! lock, so that handles and lookups are counted the same way.

use super::state::WriteState;
use crate::journaling::Journaling;
use crate::lookups::Lookups;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// The references the kernel holds on inodes, and which of the held inodes
/// may be on the orphan list: one lock for both, so that an unlink that
/// finds a file open and its last close cannot miss each other.
#[derive(Default)]
pub(crate) struct OpenFiles {
    pub(crate) held: HashMap<u32, u64>,
    /// Put on the orphan list while held (unlinked while open, O_TMPFILE):
    /// the last release frees them. A stale entry (the operation rolled
    /// back, a link gave the file a name) costs that release one look at
    /// the list, nothing more.
    pub(crate) orphans: HashSet<u32>,
}

pub(crate) struct Writer {
    /// Present on read-write volumes: the write lock and what it guards.
    pub(crate) state: Option<Mutex<WriteState>>,
    /// The journal a read-write volume writes, and its mode (`journaling/`).
    pub(crate) journaling: Journaling,
    /// References the kernel holds per inode (open handles; with kernel-side
    /// opens, its lookups): an unlinked inode is freed only after the last.
    pub(crate) open_files: Mutex<OpenFiles>,
    /// The kernel's lookup counts: numbers not to reuse yet (`lookups.rs`).
    pub(crate) lookups: Lookups,
    /// Most blocks one write(2) allocates in one operation (a longer one goes
    /// in pieces: `Volume::write`); set from the journal at a read-write mount.
    pub(crate) piece_blocks: u64,
}

impl Writer {
    /// A writer with nothing started: `start_writing` adds the write lock
    /// and the journal on a read-write mount.
    pub(crate) fn new(lazy: bool) -> Self {
        Writer {
            state: None,
            journaling: Journaling::new(lazy),
            open_files: Default::default(),
            lookups: Default::default(),
            piece_blocks: u64::MAX,
        }
    }
}
