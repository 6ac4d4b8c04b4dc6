//! A jbd2-compatible journal, one module per life stage as in the kernel's
//! `fs/jbd2/`:
//!
//! - [`journal`]: the [`Journal`] object over the journal's device runs, its
//!   superblock, head/tail/sequence state, space accounting, emptying, and
//!   writing a recovered log home ([`Journal::replay_to_disk`]);
//! - [`transaction`]: a running [`Transaction`] (static block -> newest
//!   contents, plus revoked blocks) and a thread-safe [`Running`] wrapper;
//! - [`commit`]: writing a transaction as revoke, descriptor, data and commit
//!   blocks with jbd2's ordering ([`Journal::commit`]);
//! - [`checkpoint`]: writing committed blocks home and moving the tail;
//! - [`jmap`]: static block -> newest live copy in the log, with each
//!   transaction's live blocks (what checkpoint and lazy mode's cleaner need);
//! - [`recovery`]: the SCAN, REVOKE and REPLAY passes, producing an in-memory
//!   result instead of writing;
//! - [`revoke`]: the revoke table and revoke block writing.
//!
//! Nothing here knows about ext4: the journal's place is given as runs of
//! journal block -> device block (the fs layer maps the journal inode), and
//! recovery reads through a [`JournalReader`] (which [`Journal`] implements).

// The one unsafe code is a test's counting allocator (jmap.rs).
#![cfg_attr(not(test), forbid(unsafe_code))]

use std::fmt;
use std::io;

use ondisk::FormatError;

pub mod checkpoint;
pub mod commit;
pub mod jmap;
pub mod journal;
pub mod recovery;
pub mod revoke;
pub mod snapshot;
pub mod transaction;

pub use checkpoint::{CheckpointGoal, CheckpointStats};
pub use commit::{CommitInfo, LoggedBlock};
pub use jmap::{Jmap, JmapEntry, JmapStats};
pub use journal::{ext4_features, unescape, CopyAt, Fill, Journal, JournalMap, LiveTransaction, LogCopy};
pub use recovery::{recover, BadDataBlock, RecoveredTransaction, Recovery, ReplayedCopy};
pub use revoke::RevokeTable;
pub use transaction::{Running, Transaction};

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

/// Why a journal operation failed.
#[derive(Debug)]
pub enum Error {
    /// Reading or writing a journal block failed.
    Io { jblock: u64, source: io::Error },
    /// Writing a block home (to its static location) failed.
    HomeIo { block: u64, source: io::Error },
    /// A flush (write barrier) failed: nothing written since the last good
    /// flush may be assumed durable.
    Flush(io::Error),
    /// The journal holds a log to replay (`s_start != 0`): run
    /// [`Journal::recover`] and [`Journal::replay_to_disk`] before writing.
    NeedsRecovery,
    /// An earlier commit failed part-way; the journal accepts no more commits
    /// (jbd2 aborts the journal; the next mount recovers).
    Aborted,
    /// The transaction needs more journal blocks than are free: checkpoint first.
    NoSpace { needed: u64, available: u64 },
    /// [`Journal::empty`] with transactions whose blocks are not all home yet.
    NotCheckpointed { live_transactions: usize },
    /// The caller passed something impossible (wrong block length, a block
    /// number the journal format cannot hold, bad journal runs).
    Invalid(String),
    /// A journal structure is corrupt or uses an unsupported feature.
    Format(FormatError),
    /// The reader's geometry disagrees with the journal superblock.
    Geometry { what: &'static str, reader: u64, superblock: u64 },
    /// Two recovery passes ended at different transactions (jbd2 reports -EIO);
    /// only possible if the reader returned different data on re-reads.
    PassMismatch { pass: &'static str, ended: u32, expected: u32 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { jblock, source } => write!(f, "journal block {jblock}: {source}"),
            Error::HomeIo { block, source } => write!(f, "writing block {block} home: {source}"),
            Error::Flush(e) => write!(f, "flushing the device: {e}"),
            Error::NeedsRecovery => write!(f, "the journal needs recovery before it can be written"),
            Error::Aborted => write!(f, "the journal was aborted after a failed commit"),
            Error::NoSpace { needed, available } => {
                write!(f, "transaction needs {needed} journal blocks but only {available} are free (checkpoint first)")
            }
            Error::NotCheckpointed { live_transactions } => {
                write!(f, "cannot empty the journal: {live_transactions} transactions are not checkpointed")
            }
            Error::Invalid(what) => write!(f, "invalid journal request: {what}"),
            Error::Format(e) => write!(f, "journal: {e}"),
            Error::Geometry { what, reader, superblock } => {
                write!(f, "journal {what} is {superblock} in its superblock but {reader} on the device")
            }
            Error::PassMismatch { pass, ended, expected } => {
                write!(f, "journal recovery pass {pass} ended at transaction {ended}, expected {expected}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } | Error::HomeIo { source, .. } | Error::Flush(source) => Some(source),
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
