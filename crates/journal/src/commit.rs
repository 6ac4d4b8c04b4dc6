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

use blockdev::{AlignedBuf, BlockDevice, DIRECT_ALIGN};
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
        let per_descriptor = tags_per_descriptor(&layout);
        let mut out = self.stage_for(needed - 1, per_descriptor);
        let mut revoke_blocks = Vec::new();
        write_revoke_blocks(&layout, seq, &revoked, &mut revoke_blocks)?;
        for block in revoke_blocks.chunks(bs) {
            self.room_for(&mut out, start, bs)?;
            out.buf.as_mut()[out.filled..out.filled + bs].copy_from_slice(block);
            out.filled += bs;
        }

        let mut crc32_sum = !0u32;
        let mut logged = Vec::with_capacity(txn.len());
        let all: Vec<(u64, &[u8])> = txn.blocks().collect();
        for group in all.chunks(per_descriptor) {
            // A descriptor and its copies are staged together: its tags
            // carry the copies' checksums.
            self.room_for(&mut out, start, (group.len() + 1) * bs)?;
            let desc_at = out.filled;
            let staged = out.buf.as_mut();
            staged[desc_at..desc_at + bs].fill(0);
            let mut at = desc_at + bs;
            let mut tags = Vec::with_capacity(group.len());
            for (i, (block, data)) in group.iter().enumerate() {
                let copy = &mut staged[at..at + bs];
                copy.copy_from_slice(data);
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
                let index = out.written + (at / bs) as u64;
                logged.push(LoggedBlock { block: *block, jblock: self.advance(start, index), escaped });
                at += bs;
            }
            DescriptorBlock { sequence: seq, tags }.write_to(&mut staged[desc_at..desc_at + bs], &layout)?;
            if layout.checksum == Checksum::V1 {
                crc32_sum = crc32_be(crc32_sum, &staged[desc_at..at]);
            }
            out.filled = at;
        }
        self.stream_out(&mut out, start)?;
        debug_assert_eq!(out.written, needed - 1);
        // Kept for the next commit unless one descriptor's group made it
        // larger than the usual size (64 KiB blocks: hundreds of MiB).
        if out.buf.capacity() <= STAGE_BYTES + DIRECT_ALIGN {
            self.stage = Some(out.buf);
        }
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

/// A transaction on its way to the log: staged in a bounded, aligned buffer
/// and written a chunk at a time. A commit at unmount can be tens of MiB: a
/// buffer its size cost a page fault per page, and on a direct-I/O device an
/// unaligned one a second copy.
pub(crate) struct Staging {
    buf: AlignedBuf,
    /// Bytes staged in `buf`.
    filled: usize,
    /// Blocks of the transaction already written before `buf`'s.
    written: u64,
}

/// Bytes staged before a write, unless one descriptor's group is larger.
const STAGE_BYTES: usize = 4 << 20;

impl<D: BlockDevice> Journal<D> {
    /// The staging buffer for `blocks` journal blocks: the one kept from the
    /// last commit when it is large enough.
    fn stage_for(&mut self, blocks: u64, per_descriptor: usize) -> Staging {
        let bs = self.layout.block_bytes();
        let group = (per_descriptor + 1) * bs;
        let want = (blocks as usize * bs).min(STAGE_BYTES.max(group));
        let buf = match self.stage.take() {
            Some(mut b) if b.capacity() >= want => {
                b.set_len(want);
                b
            }
            _ => AlignedBuf::new(want, DIRECT_ALIGN),
        };
        Staging { buf, filled: 0, written: 0 }
    }

    /// Make room for `bytes` more in `out`, writing what it holds first if
    /// they do not fit.
    fn room_for(&self, out: &mut Staging, start: u64, bytes: usize) -> Result<(), Error> {
        debug_assert!(bytes <= out.buf.as_slice().len(), "a group must fit the staging buffer");
        if out.filled + bytes > out.buf.as_slice().len() {
            self.stream_out(out, start)?;
        }
        Ok(())
    }

    /// Write what `out` holds at its place in the transaction starting at
    /// `start`, split where the log wraps.
    fn stream_out(&self, out: &mut Staging, start: u64) -> Result<(), Error> {
        let bs = self.layout.block_bytes();
        let staged = &out.buf.as_slice()[..out.filled];
        let at = self.advance(start, out.written);
        let to_end = ((self.last - at) as usize * bs).min(staged.len());
        write_jblocks(&self.dev, &self.map, at, &staged[..to_end])?;
        write_jblocks(&self.dev, &self.map, self.first, &staged[to_end..])?;
        out.written += (out.filled / bs) as u64;
        out.filled = 0;
        Ok(())
    }
}
