//! Writing a transaction to the log (the kernel's `fs/jbd2/commit.c`).
//!
//! Layout of one transaction, from the head, wrapping at the end of the log:
//! revoke blocks, then descriptor blocks each followed by the copies its tags
//! describe, then the commit block. Ordering (jbd2 without async_commit):
//! every block but the commit block is written, then a flush (the barrier),
//! then the commit block, then a flush. Recovery replays a transaction only
//! if its commit block is valid, so a crash anywhere before the second flush
//! completes leaves either the whole transaction or none of it.
//!
//! Tags: the first tag of each descriptor carries the journal uuid, the others
//! SAME_UUID; the last one LAST_TAG; a copy whose first 4 bytes are the jbd2
//! magic is escaped (magic zeroed in the log, ESCAPE set). With csum v2/v3
//! each tag holds crc32c(seed, sequence, copy) (v2: the low 16 bits) and
//! descriptor/revoke tails and the commit block carry their own checksums;
//! with csum v1 the commit block holds crc32_be over descriptors and copies.

use std::time::{SystemTime, UNIX_EPOCH};

use blockdev::BlockDevice;
use ondisk::jbd2::descriptor::{FLAG_ESCAPE, FLAG_LAST_TAG, FLAG_SAME_UUID};
use ondisk::jbd2::{
    commit as commit_block, crc32_be, data_block_checksum, Checksum, CommitBlock, DescriptorBlock, Tag,
    FEATURE_INCOMPAT_REVOKE, MAGIC,
};

use crate::journal::{write_jblocks, LiveTransaction};
use crate::revoke::write_revoke_blocks;
use crate::transaction::{tags_per_descriptor, Transaction};
use crate::{tid_gt, Error, Journal};

/// Where one block of a committed transaction landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedBlock {
    /// Static (file-system) block number.
    pub block: u64,
    /// Journal block holding the copy.
    pub jblock: u64,
    /// The copy was escaped (first 4 bytes zeroed in the log).
    pub escaped: bool,
}

/// What a commit wrote: lazy journaling keeps `blocks` as its S -> J map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    pub sequence: u32,
    /// First journal block of the transaction.
    pub start: u64,
    /// Journal block of the commit block.
    pub commit_block: u64,
    /// Journal block after the commit block (the new head).
    pub end: u64,
    /// Journal blocks written (revokes, descriptors, copies, commit).
    pub journal_blocks: u64,
    /// Every logged block, in log order.
    pub blocks: Vec<LoggedBlock>,
    /// Revoked static blocks.
    pub revoked: Vec<u64>,
    /// Commit time written in the commit block (seconds, nanoseconds).
    pub commit_time: (u64, u32),
}

impl<D: BlockDevice> Journal<D> {
    /// Commit `txn`: write it at the head with jbd2's ordering and make it
    /// durable. Returns `Ok(None)` for an empty transaction (nothing written).
    /// Fails with [`Error::NoSpace`] when the log lacks room (checkpoint and
    /// retry: nothing was written). An I/O error aborts the journal (further
    /// commits fail with [`Error::Aborted`]) as jbd2 does: a half-written
    /// transaction cannot be followed by another in the same log.
    pub fn commit(&mut self, txn: &Transaction) -> Result<Option<CommitInfo>, Error> {
        if self.needs_recovery {
            return Err(Error::NeedsRecovery);
        }
        if self.aborted {
            return Err(Error::Aborted);
        }
        if txn.is_empty() {
            return Ok(None);
        }
        self.check_transaction(txn)?;
        let needed = txn.journal_blocks(&self.layout);
        let available = self.space_left();
        if needed > available {
            return Err(Error::NoSpace { needed, available });
        }
        let result = self.write_transaction(txn, needed);
        if result.is_err() {
            self.aborted = true;
        }
        debug_assert!(
            self.used() + crate::journal::RESERVED_BLOCKS <= self.last - self.first + 1,
            "commit keeps the reserve (bar resume's block)"
        );
        result.map(Some)
    }

    fn check_transaction(&self, txn: &Transaction) -> Result<(), Error> {
        if txn.block_size() != self.map.block_size() {
            return Err(Error::Invalid(format!(
                "transaction of {}-byte blocks for a journal of {}-byte blocks",
                txn.block_size(),
                self.map.block_size()
            )));
        }
        if txn.revoked_len() > 0 && !self.sb.has_incompat(FEATURE_INCOMPAT_REVOKE) {
            return Err(Error::Format(ondisk::FormatError::Unsupported {
                what: "revoke records in a journal without the revoke feature".into(),
            }));
        }
        if !self.layout.is_64bit {
            if let Some((b, _)) = txn.blocks().find(|(b, _)| *b > u64::from(u32::MAX)) {
                return Err(Error::Invalid(format!("block {b} needs a journal with the 64bit feature")));
            }
        }
        Ok(())
    }

    /// Write `txn` (`needed` journal blocks; 1 for the empty transaction
    /// [`Journal::resume`] writes) and account for it.
    pub(crate) fn write_transaction(&mut self, txn: &Transaction, needed: u64) -> Result<CommitInfo, Error> {
        let layout = self.layout;
        let bs = layout.block_bytes();
        let seq = self.next_sequence;
        let start = self.head;
        debug_assert!(self.live.back().is_none_or(|t| tid_gt(seq, t.sequence)));

        // An empty journal (s_start == 0) must point at this transaction before
        // its commit block can be durable: the barrier below orders it
        // (jbd2 updates the superblock first when JBD2_FLUSHED is set).
        if self.sb.start == 0 {
            debug_assert!(self.live.is_empty() && self.tail == self.head);
            self.sb.start = start as u32;
            self.sb.sequence = seq;
            self.write_superblock(false)?;
        }

        let revoked: Vec<u64> = txn.revoked().collect();
        let mut staged: Vec<u8> = Vec::with_capacity((needed as usize - 1) * bs);
        write_revoke_blocks(&layout, seq, &revoked, &mut staged)?;

        let mut crc32_sum = !0u32;
        let mut logged = Vec::with_capacity(txn.len());
        let all: Vec<(u64, &[u8])> = txn.blocks().collect();
        for group in all.chunks(tags_per_descriptor(&layout)) {
            let desc_at = staged.len();
            staged.resize(desc_at + bs, 0);
            let mut tags = Vec::with_capacity(group.len());
            for (i, (block, data)) in group.iter().enumerate() {
                let at = staged.len();
                staged.extend_from_slice(data);
                let copy = &mut staged[at..at + bs];
                let escaped = copy[..4] == MAGIC.to_be_bytes();
                if escaped {
                    copy[..4].fill(0);
                }
                let mut flags = if i == 0 { 0 } else { FLAG_SAME_UUID };
                if escaped {
                    flags |= FLAG_ESCAPE;
                }
                if i + 1 == group.len() {
                    flags |= FLAG_LAST_TAG;
                }
                let checksum = match layout.checksum {
                    Checksum::V3 => data_block_checksum(layout.seed, seq, copy),
                    Checksum::V2 => data_block_checksum(layout.seed, seq, copy) & 0xFFFF,
                    Checksum::None | Checksum::V1 => 0,
                };
                tags.push(Tag { block: *block, flags, checksum, uuid: (i == 0).then_some(self.sb.uuid) });
                let index = (at / bs) as u64;
                logged.push(LoggedBlock { block: *block, jblock: self.advance(start, index), escaped });
            }
            DescriptorBlock { sequence: seq, tags }.write_to(&mut staged[desc_at..desc_at + bs], &layout)?;
            if layout.checksum == Checksum::V1 {
                crc32_sum = crc32_be(crc32_sum, &staged[desc_at..]);
            }
        }
        debug_assert_eq!(staged.len() as u64, (needed - 1) * bs as u64);

        // Everything but the commit block, split where the log wraps.
        let to_end = ((self.last - start) as usize * bs).min(staged.len());
        write_jblocks(&self.dev, &self.map, start, &staged[..to_end])?;
        write_jblocks(&self.dev, &self.map, self.first, &staged[to_end..])?;
        self.dev.flush().map_err(Error::Flush)?;

        let (sec, nsec) = self.commit_time();
        let mut commit = CommitBlock {
            sequence: seq,
            checksum_type: 0,
            checksum_size: 0,
            checksums: [0; 8],
            commit_sec: sec,
            commit_nsec: nsec,
        };
        if layout.checksum == Checksum::V1 {
            commit.checksum_type = commit_block::CHECKSUM_TYPE_CRC32;
            commit.checksum_size = commit_block::CRC32_CHECKSUM_SIZE;
            commit.checksums[0] = crc32_sum;
        }
        let commit_at = self.advance(start, needed - 1);
        let mut cblock = vec![0u8; bs];
        commit.write_to(&mut cblock, &layout)?;
        write_jblocks(&self.dev, &self.map, commit_at, &cblock)?;
        self.dev.flush().map_err(Error::Flush)?;

        // Committed: account for it.
        let end = self.advance(start, needed);
        self.head = end;
        self.next_sequence = seq.wrapping_add(1);
        self.last_commit_sec = sec;
        for &b in &revoked {
            // Older copies will not be replayed and must not be written home:
            // the block may hold file data now.
            self.jmap.remove(b);
        }
        for l in &logged {
            // Supersedes the block's older copy: that transaction no longer
            // needs to write it home (lazy: no longer holds its newest copy).
            // Log positions are below s_maxlen, a u32.
            debug_assert!(l.jblock < u64::from(u32::MAX));
            self.jmap.insert(l.block, l.jblock as u32, l.escaped, seq);
            self.owners[l.jblock as usize] = l.block + 1;
        }
        self.live.push_back(LiveTransaction { sequence: seq, start, end, blocks: needed });
        // The head never reaches the tail (commit keeps RESERVED_BLOCKS back;
        // resume's one-block transaction may take one of them).
        debug_assert!(self.used() < self.last - self.first);
        Ok(CommitInfo {
            sequence: seq,
            start,
            commit_block: commit_at,
            end,
            journal_blocks: needed,
            blocks: logged,
            revoked,
            commit_time: (sec, nsec),
        })
    }

    /// Now, but never before the previous commit: recovery treats an older
    /// commit time after a checksum failure as the end of a stale log.
    fn commit_time(&self) -> (u64, u32) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        if now.as_secs() < self.last_commit_sec {
            (self.last_commit_sec, 0)
        } else {
            (now.as_secs(), now.subsec_nanos())
        }
    }
}
