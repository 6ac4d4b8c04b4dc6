//! The ext4lazy engine.
//!
//! `Volume` is an opened ext4 volume. Every metadata block goes through one
//! path (`Volume::meta`): buffer cache, then the journal overlay, then the
//! block device. Modules split by concern: block mapping, directories, file
//! contents, xattrs, statfs, journal location and in-memory replay.

mod attr;
mod bitmaps;
mod bmap;
pub mod cache;
mod dir;
mod error;
mod file;
mod journal_glue;
mod overlay;
mod statfs;
mod volume;
mod xattr;

pub use attr::Stat;
pub use bmap::Mapping;
pub use dir::DirEntry;
pub use error::{FsError, Result};
pub use journal_glue::JournalInfo;
pub use ondisk::inode::{Inode, Timestamp, ROOT_INO};
pub use statfs::StatFs;
pub use volume::{Volume, VolumeOptions};

impl Volume {
    pub fn journal(&self) -> Option<&JournalInfo> {
        self.journal.as_ref()
    }

    /// Number of blocks served from the replayed journal instead of their home.
    pub fn replayed_blocks(&self) -> usize {
        self.overlay.len()
    }
}
