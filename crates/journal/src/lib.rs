//! A jbd2-compatible journal, one module per life stage as in the kernel's
//! `fs/jbd2/`: for now [`recovery`] (the SCAN, REVOKE and REPLAY passes, which
//! produce an in-memory result instead of writing) and [`revoke`] (the revoke table).
//!
//! Nothing here knows about ext4: the caller hands in a [`JournalReader`] that
//! reads journal blocks by journal-relative number (the fs layer maps them
//! through the journal inode's extents).

use std::fmt;
use std::io;

use ondisk::FormatError;

pub mod recovery;
pub mod revoke;

pub use recovery::{recover, BadDataBlock, Recovery, ReplayedCopy};
pub use revoke::RevokeTable;

/// Reads journal blocks by journal-relative block number (block 0 holds the
/// journal superblock).
pub trait JournalReader {
    /// Journal block size in bytes (the file system's block size).
    fn block_size(&self) -> u32;
    /// Number of blocks the journal occupies.
    fn len_blocks(&self) -> u64;
    /// Read journal block `jblock` into `buf` (exactly `block_size` bytes).
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()>;
}

impl<R: JournalReader + ?Sized> JournalReader for &R {
    fn block_size(&self) -> u32 {
        (**self).block_size()
    }
    fn len_blocks(&self) -> u64 {
        (**self).len_blocks()
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_block(jblock, buf)
    }
}

/// Why the journal could not be recovered.
#[derive(Debug)]
pub enum Error {
    /// Reading a journal block failed.
    Io { jblock: u64, source: io::Error },
    /// A journal structure is corrupt or uses an unsupported feature.
    Format(FormatError),
    /// The reader's geometry disagrees with the journal superblock.
    Geometry {
        what: &'static str,
        reader: u64,
        superblock: u64,
    },
    /// Two recovery passes ended at different transactions (jbd2 reports -EIO);
    /// only possible if the reader returned different data on re-reads.
    PassMismatch {
        pass: &'static str,
        ended: u32,
        expected: u32,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { jblock, source } => write!(f, "reading journal block {jblock}: {source}"),
            Error::Format(e) => write!(f, "journal: {e}"),
            Error::Geometry {
                what,
                reader,
                superblock,
            } => {
                write!(
                    f,
                    "journal {what} is {superblock} in its superblock but {reader} on the device"
                )
            }
            Error::PassMismatch {
                pass,
                ended,
                expected,
            } => {
                write!(f, "journal recovery pass {pass} ended at transaction {ended}, expected {expected}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Format(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FormatError> for Error {
    fn from(e: FormatError) -> Self {
        Error::Format(e)
    }
}

/// jbd2 transaction IDs wrap: `a` is after `b` (the kernel's `tid_gt`).
pub fn tid_gt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) > 0
}

/// `a` is at or after `b` (the kernel's `tid_geq`).
pub fn tid_geq(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tids_wrap() {
        assert!(tid_gt(1, 0));
        assert!(tid_gt(0, u32::MAX));
        assert!(!tid_gt(5, 5));
        assert!(tid_geq(5, 5));
        assert!(!tid_geq(u32::MAX, 0));
    }
}
