//! The ext4lazy engine.
//!
//! `Volume` is an opened ext4 volume: a read core (`ReadCore`) and a writer.
//! Every metadata block goes through one path (`ReadCore::meta`): buffer
//! cache, then the journal (lazy mode's log, or a read-only mount's replay),
//! then the block device. Modules split by concern: block mapping,
//! directories, file contents, xattrs, statfs, journal location and
//! in-memory replay, the write path, journaling, StepAhead.

#![forbid(unsafe_code)]

pub mod acl;
mod attr;
mod bitmaps;
mod bmap;
pub mod cache;
mod delayed;
mod dir;
mod error;
mod file;
mod group_table;
pub mod inject;
mod inode_cache;
mod intmap;
mod journal_glue;
mod journal_info;
mod journaling;
mod lookups;
mod negative;
mod open;
mod options;
mod overlay;
mod read_core;
pub mod requester;
pub mod safefile;
mod statfs;
pub mod stepahead;
mod system_zone;
mod tails;
mod volume;
mod write;
mod xattr;

pub use acl::Cred;
pub use attr::Stat;
pub use bmap::Mapping;
pub use dir::{DirEntry, DirEntryRef};
pub use error::{FsError, Result};
pub use file::Seek;
pub use journal_glue::JournalStats;
pub use journal_info::JournalInfo;
pub use ondisk::inode::{Inode, Timestamp, ROOT_INO};
pub use options::{VolumeOptions, JOURNAL_READAHEAD_BYTES};
pub use read_core::ReadCore;
pub use statfs::StatFs;
pub use volume::Volume;
pub use write::{CleanerPolicy, CreateKind, Falloc, OpenAccess, SetAttr, WriteStats, XattrMode};

impl Volume {
    pub fn journal(&self) -> Option<&JournalInfo> {
        self.journal.as_ref()
    }

    /// Number of blocks served from the replayed journal instead of their home.
    pub fn replayed_blocks(&self) -> usize {
        self.overlay.len()
    }

    /// A file handle was opened on `ino`.
    pub fn opened(&self, ino: u32) {
        self.hold(ino, 1);
    }

    /// A handle on `ino` was closed; frees the inode if it was its last
    /// handle and its last name is gone.
    pub fn released(&self, ino: u32) -> Result<()> {
        self.unhold(ino, 1)
    }

    /// The kernel holds `n` more references to `ino` that keep it alive when
    /// its last name goes: open handles, or, when the kernel opens files
    /// without telling us (FUSE_NO_OPEN_SUPPORT), its lookups of the inode.
    pub fn hold(&self, ino: u32, n: u64) {
        *self.writer.open_files.lock().held.entry(ino).or_insert(0) += n;
    }

    /// The kernel dropped `n` of those references; the inode is freed with
    /// the last if its last name is gone. Unknown inodes are ignored.
    pub fn unhold(&self, ino: u32, n: u64) -> Result<()> {
        let orphan = {
            let mut open = self.writer.open_files.lock();
            match open.held.get_mut(&ino) {
                Some(held) if *held > n => {
                    *held -= n;
                    false
                }
                Some(_) => {
                    open.held.remove(&ino);
                    open.orphans.remove(&ino)
                }
                None => false,
            }
        };
        // Only an inode marked when it went on the orphan list can be on it:
        // the last close of any other takes no write lock.
        if orphan && self.writer.state.is_some() {
            self.free_if_orphan(ino)?;
        }
        Ok(())
    }

    /// Whether `ino` is held; if so, it is marked as going on the orphan
    /// list (under the same lock as the last release, see `OpenFiles`).
    pub(crate) fn orphan_if_open(&self, ino: u32) -> bool {
        let mut open = self.writer.open_files.lock();
        let held = open.held.contains_key(&ino);
        if held {
            open.orphans.insert(ino);
        }
        held
    }

    pub(crate) fn is_open(&self, ino: u32) -> bool {
        self.writer.open_files.lock().held.contains_key(&ino)
    }

    /// Whether anything holds `ino` alive (see [`Self::hold`]): an inode
    /// with no name and no holder is freed.
    pub fn has_handles(&self, ino: u32) -> bool {
        self.is_open(ino)
    }

    /// The kernel was handed `ino` in an entry (its lookup count grew by
    /// one): until it forgets it, the number is not given to a new inode
    /// (see `lookups.rs`). Read-only volumes keep no counts.
    pub fn looked_up(&self, ino: u32) {
        if self.writer.state.is_some() {
            self.writer.lookups.add(ino, 1);
        }
    }

    /// FORGET: the kernel dropped `n` lookups of `ino`.
    pub fn forgotten(&self, ino: u32, n: u64) {
        if self.writer.state.is_some() {
            self.writer.lookups.sub(ino, n);
        }
    }

    /// Whether the kernel may still send requests on inode number `ino`.
    pub fn kernel_knows(&self, ino: u32) -> bool {
        self.writer.lookups.holds(ino)
    }

    /// Inode numbers the kernel holds lookups of.
    pub fn kernel_known_inodes(&self) -> usize {
        self.writer.lookups.len()
    }
}
