//! Journal overlay: static block -> the journal block holding its newest copy.
//!
//! A read-only mount of a volume whose journal needs recovery replays the log
//! here instead of on disk: every read of a block in the map is served from
//! the journal. (Lazy journaling's jmap generalises the same indirection.)

use crate::error::{FsError, Result};
use blockdev::{BlockDevice, IoClass};
use std::collections::HashMap;

/// Where a replayed copy lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalCopy {
    /// Physical block (device address) of the copy.
    pub phys: u64,
    /// jbd2 zeroed the block's first four bytes because they looked like its magic.
    pub escaped: bool,
}

#[derive(Default, Debug)]
pub struct Overlay {
    map: HashMap<u64, JournalCopy>,
}

impl Overlay {
    pub fn new(map: HashMap<u64, JournalCopy>) -> Self {
        Overlay { map }
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn get(&self, blk: u64) -> Option<JournalCopy> {
        self.map.get(&blk).copied()
    }

    /// If `blk` has a journal copy, replace `buf` (one block) with it.
    pub fn apply(&self, dev: &dyn BlockDevice, blk: u64, buf: &mut [u8]) -> Result<()> {
        let Some(copy) = self.get(blk) else { return Ok(()) };
        let bs = buf.len() as u64;
        dev.read_at(copy.phys * bs, buf, IoClass::Journal)
            .map_err(|e| FsError::io(format!("reading the journal copy of block {blk}"), e))?;
        if copy.escaped {
            buf[..4].copy_from_slice(&ondisk::jbd2::MAGIC.to_be_bytes());
        }
        Ok(())
    }
}
