//! Journal recovery: the three passes of jbd2's `fs/jbd2/recovery.c`, producing
//! a [`Recovery`] (which journal block holds the newest surviving copy of each
//! static block) instead of writing anything.
//!
//! - **SCAN** walks the log from `s_start` / `s_sequence`, transaction by
//!   transaction, until a block is not a journal block of the expected sequence,
//!   has an unknown type, or a commit block fails its checksum. This fixes the
//!   end of the log (the first transaction *not* to replay).
//! - **REVOKE** walks the same transactions and fills the [`RevokeTable`].
//! - **REPLAY** walks them again and records, for each tag not revoked (revoke
//!   in T cancels copies from every transaction <= T) and whose data checksum
//!   matches, that the static block's newest copy is this journal block.
//!
//! Differences from jbd2 (all documented in docs/JOURNAL.md): nothing is
//! written; an I/O error fails recovery; an async-commit journal stops at the
//! *first* bad commit block; walks longer than the log are reported as a loop.

use std::collections::BTreeMap;

use ondisk::jbd2::descriptor::{self, DescriptorBlock};
use ondisk::jbd2::{
    commit, crc32_be, revoke as revoke_block, BlockType, Checksum, CommitBlock, Header, Layout, RevokeBlock,
    Superblock, FEATURE_INCOMPAT_ASYNC_COMMIT, FEATURE_INCOMPAT_FAST_COMMIT, MAGIC,
};
use ondisk::{Corruption, FormatError, Location};

use crate::revoke::RevokeTable;
use crate::{tid_geq, Error, JournalReader};

/// Where the newest surviving copy of a static block lives in the journal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayedCopy {
    /// Journal-relative block number of the copy.
    pub jblock: u64,
    /// The copy had its first 4 bytes (the journal magic) zeroed: restore them.
    pub escaped: bool,
    /// Transaction that logged the copy.
    pub sequence: u32,
}

/// A copy skipped because its csum v2/v3 data checksum did not match (jbd2
/// skips it, keeps replaying, and fails the recovery at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadDataBlock {
    /// Static block the copy was for.
    pub block: u64,
    /// Journal block holding the bad copy.
    pub jblock: u64,
    /// Transaction that logged it.
    pub sequence: u32,
}

/// Where one replayed transaction lies in the log (what [`crate::Journal::resume`]
/// needs to continue the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveredTransaction {
    pub sequence: u32,
    /// First journal block of the transaction.
    pub start: u64,
    /// Journal block after its commit block.
    pub end: u64,
    /// Journal blocks it occupies (revokes, descriptors, copies, commit).
    pub blocks: u64,
    /// Commit time (seconds) from its commit block.
    pub commit_sec: u64,
}

/// The outcome of recovery.
#[derive(Clone, Debug)]
pub struct Recovery {
    /// False when the journal was clean (`s_start == 0`): nothing to replay.
    pub needed: bool,
    /// The journal superblock as read.
    pub superblock: Superblock,
    /// The layout derived from it.
    pub layout: Layout,
    /// For every static block, its newest surviving copy after revokes.
    pub blocks: BTreeMap<u64, ReplayedCopy>,
    /// First transaction in the log (`s_sequence`).
    pub start_sequence: u32,
    /// First transaction *not* replayed (jbd2's `end_transaction`).
    pub end_sequence: u32,
    /// Sequence the next transaction must use: `end_sequence + 1` after a
    /// recovery (skipping the ID a torn transaction may have used), or
    /// `s_sequence + 1` for a clean journal, as jbd2 does.
    pub next_sequence: u32,
    /// Last transaction replayed, if any.
    pub last_transaction: Option<u32>,
    /// Journal block after the last replayed commit block (where the log
    /// continues); `s_start` when nothing was replayed; for a clean journal
    /// `s_head` if valid, else `s_first`.
    pub head: u64,
    /// Transactions replayed (`end_sequence - start_sequence`).
    pub transactions: u32,
    /// The replayed transactions in log order: the first starts at `s_start`,
    /// each starts where the previous ended, the last ends at `head`.
    pub extents: Vec<RecoveredTransaction>,
    /// Tags replayed (copies written in jbd2 terms, later ones overwriting).
    pub replayed_tags: u64,
    /// Revoke records read.
    pub revoke_records: u64,
    /// Tags skipped because revoked.
    pub revoke_hits: u64,
    /// The transaction whose commit block failed its checksum (jbd2's
    /// `j_failed_commit`); it and later transactions were not replayed.
    pub failed_commit: Option<u32>,
    /// Copies skipped for bad data checksums. Non-empty means the kernel would
    /// refuse to mount (recovery returns -EFSBADCRC after replaying the rest);
    /// e2fsck keeps the rest and marks the file system as having errors.
    pub bad_data_blocks: Vec<BadDataBlock>,
    /// The revoke table built by the REVOKE pass (empty for a clean journal).
    pub revoked: RevokeTable,
}

impl Recovery {
    /// Nothing found yet in the log `sb` describes (the starting point of a scan).
    pub fn empty(sb: Superblock) -> Recovery {
        Recovery {
            needed: sb.start != 0,
            layout: sb.layout(),
            blocks: BTreeMap::new(),
            start_sequence: sb.sequence,
            end_sequence: sb.sequence,
            next_sequence: sb.sequence.wrapping_add(1),
            last_transaction: None,
            head: u64::from(sb.first),
            transactions: 0,
            extents: Vec::new(),
            replayed_tags: 0,
            revoke_records: 0,
            revoke_hits: 0,
            failed_commit: None,
            bad_data_blocks: Vec::new(),
            revoked: RevokeTable::new(),
            superblock: sb,
        }
    }

    /// The newest surviving copy of static block `block`, if the journal has one.
    pub fn copy(&self, block: u64) -> Option<&ReplayedCopy> {
        self.blocks.get(&block)
    }

    /// Fill `buf` with the replayed contents of static block `block`; returns
    /// false (and leaves `buf` alone) if the journal holds no copy of it.
    pub fn read_replayed<R: JournalReader + ?Sized>(
        &self,
        reader: &R,
        block: u64,
        buf: &mut [u8],
    ) -> Result<bool, Error> {
        match self.blocks.get(&block) {
            Some(copy) => {
                read_copy(reader, copy, buf)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Whether the kernel's jbd2 would report this recovery as failed (it
    /// still replays everything else): a bad data block checksum.
    pub fn kernel_would_fail(&self) -> bool {
        !self.bad_data_blocks.is_empty()
    }
}

/// Read a journal copy into `buf` and restore an escaped magic number.
pub fn read_copy<R: JournalReader + ?Sized>(reader: &R, copy: &ReplayedCopy, buf: &mut [u8]) -> Result<(), Error> {
    reader.read_block(copy.jblock, buf).map_err(|source| Error::Io { jblock: copy.jblock, source })?;
    if copy.escaped && buf.len() >= 4 {
        buf[..4].copy_from_slice(&MAGIC.to_be_bytes());
    }
    Ok(())
}

/// Recover the journal read through `reader`: read and validate its
/// superblock, then run SCAN, REVOKE and REPLAY in memory.
pub fn recover<R: JournalReader + ?Sized>(reader: &R) -> Result<Recovery, Error> {
    let bs = reader.block_size();
    if !bs.is_power_of_two() || !(1024..=65536).contains(&bs) {
        return Err(Error::Geometry { what: "block size", reader: u64::from(bs), superblock: 0 });
    }
    let mut buf = vec![0u8; bs as usize];
    reader.read_block(0, &mut buf).map_err(|source| Error::Io { jblock: 0, source })?;
    let sb = Superblock::parse(&buf).map_err(|e| e.at(Location::JournalBlock(0)))?;
    if sb.block_size != bs {
        return Err(Error::Geometry {
            what: "block size",
            reader: u64::from(bs),
            superblock: u64::from(sb.block_size),
        });
    }
    sb.validate(reader.len_blocks())?;
    let mut out = Recovery::empty(sb.clone());
    if sb.start == 0 {
        if sb.head >= sb.first && sb.head < sb.log_end() {
            out.head = u64::from(sb.head);
        }
        return Ok(out);
    }

    let mut walk = Walk::new(reader, &sb);
    let mut info = Info::default();
    walk.pass(Pass::Scan, &mut info)?;
    walk.pass(Pass::Revoke, &mut info)?;
    walk.pass(Pass::Replay, &mut info)?;
    let end = info.end.unwrap_or(sb.sequence);
    if sb.has_incompat(FEATURE_INCOMPAT_FAST_COMMIT) {
        walk.check_fast_commit_area(end)?;
    }

    out.end_sequence = end;
    out.next_sequence = end.wrapping_add(1);
    out.transactions = end.wrapping_sub(sb.sequence);
    out.last_transaction = (out.transactions > 0).then(|| end.wrapping_sub(1));
    out.head = info.head.unwrap_or(u64::from(sb.start));
    // With async_commit SCAN may accept commits past the end; they are not replayed.
    info.extents.retain(|t| crate::tid_gt(end, t.sequence));
    debug_assert_eq!(info.extents.len() as u32, out.transactions);
    debug_assert!(info.extents.first().is_none_or(|t| t.start == u64::from(sb.start)));
    debug_assert!(info.extents.windows(2).all(|w| w[0].end == w[1].start));
    debug_assert!(info.extents.last().is_none_or(|t| t.end == out.head));
    out.extents = info.extents;
    out.blocks = info.blocks;
    out.replayed_tags = info.replayed;
    out.revoke_records = info.revoke_records;
    out.revoke_hits = info.revoke_hits;
    out.failed_commit = info.failed_commit;
    out.bad_data_blocks = info.bad;
    out.revoked = info.revokes;
    debug_assert!(out.blocks.values().all(|c| c.jblock >= u64::from(sb.first) && c.jblock < u64::from(sb.log_end())));
    debug_assert!(out.blocks.len() as u64 <= out.replayed_tags);
    Ok(out)
}

/// Check a [`Recovery`] that did not come from a scan (a jmap snapshot,
/// read from a file anyone might have written) against the log itself; on
/// success fill in the revoke table and counts a scan would have given.
///
/// The transactions must follow each other from `s_start`/`s_sequence`
/// without a gap, each block of each must be a journal block of its
/// sequence with valid checksums, ending in its commit block exactly where
/// the recovery says; and the copies must be exactly those the descriptor
/// tags and revoke records of these transactions give (newest copy of each
/// block, revoked ones left out), journal block, escape flag and sequence.
/// That is what the scan would rebuild, read from the descriptor, revoke
/// and commit blocks only: the data blocks are not read, so a copy whose
/// csum v2/v3 data checksum is wrong (which the scan skips) is not noticed
/// (v1 journals, whose commit checksum covers the data, are read whole).
/// The caller checks that the log ends at the recovery's head.
///
/// `Err` says why not; any read or parse error is such a reason too (the
/// scan that follows reports it properly if it is real).
pub fn verify<R: JournalReader + ?Sized>(reader: &R, rec: &mut Recovery) -> Result<(), String> {
    let sb = rec.superblock.clone();
    if !rec.needed || sb.start == 0 {
        return Err("the journal has no live log".into());
    }
    if rec.transactions as usize != rec.extents.len() {
        return Err("transaction count".into());
    }
    let mut walk = Walk::new(reader, &sb);
    let (first, last, layout) = (walk.first, walk.last, walk.layout);
    let read = |walk: &mut Walk<'_, R>, jblock: u64, data: bool| walk.read(jblock, data).map_err(|e| e.to_string());
    let mut pos = u64::from(sb.start);
    let mut seq = sb.sequence;
    let mut total = 0u64;
    let mut tags: Vec<(u64, ReplayedCopy)> = Vec::new();
    let mut revokes = RevokeTable::new();
    let mut revoke_records = 0u64;
    let n = rec.extents.len();
    for (i, t) in rec.extents.iter().enumerate() {
        if t.sequence != seq || t.start != pos {
            return Err(format!(
                "transaction {} at journal block {} where the log continues with {seq} at {pos}",
                t.sequence, t.start
            ));
        }
        if !(first..last).contains(&t.end) || t.blocks == 0 {
            return Err(format!("transaction {seq} ends at journal block {} ({} blocks)", t.end, t.blocks));
        }
        total = total.saturating_add(t.blocks);
        if total >= last - first {
            return Err("the transactions fill more than the log".into());
        }
        let mut used = 0u64;
        let mut crc32_sum = !0u32;
        loop {
            if used == t.blocks {
                return Err(format!("transaction {seq}: no commit block within its {} blocks", t.blocks));
            }
            let this = pos;
            read(&mut walk, this, false)?;
            pos = walk.advance(pos, 1);
            used += 1;
            let header = Header::peek(&walk.buf).filter(|h| h.sequence == seq);
            let Some(header) = header else {
                return Err(format!("journal block {this} is not a block of transaction {seq}"));
            };
            let at = |e: FormatError| format!("journal block {this}: {e}");
            match header.block_type {
                BlockType::Descriptor => {
                    descriptor::verify_checksum(&walk.buf, &layout).map_err(at)?;
                    let desc = DescriptorBlock::parse(&walk.buf, &layout).map_err(at)?;
                    if layout.checksum == Checksum::V1 {
                        crc32_sum = crc32_be(crc32_sum, &walk.buf);
                    }
                    for tag in &desc.tags {
                        if used == t.blocks {
                            return Err(format!(
                                "transaction {seq}: its descriptor at {this} runs past its {} blocks",
                                t.blocks
                            ));
                        }
                        let io = pos;
                        pos = walk.advance(pos, 1);
                        used += 1;
                        if layout.checksum == Checksum::V1 {
                            read(&mut walk, io, true)?;
                            crc32_sum = crc32_be(crc32_sum, &walk.data);
                        }
                        tags.push((tag.block, ReplayedCopy { jblock: io, escaped: tag.escaped(), sequence: seq }));
                    }
                }
                BlockType::Revoke => {
                    revoke_block::verify_checksum(&walk.buf, &layout).map_err(at)?;
                    for b in RevokeBlock::parse(&walk.buf, &layout).map_err(at)?.blocks {
                        revokes.set(b, seq);
                        revoke_records += 1;
                    }
                }
                BlockType::Commit => {
                    if used != t.blocks {
                        return Err(format!(
                            "transaction {seq}: commit block at {this}, {used} blocks in, not {}",
                            t.blocks
                        ));
                    }
                    commit::verify_checksum(&walk.buf, &layout).map_err(at)?;
                    let c = CommitBlock::parse(&walk.buf).map_err(at)?;
                    if layout.checksum == Checksum::V1 {
                        let matches = crc32_sum == c.checksums[0]
                            && c.checksum_type == commit::CHECKSUM_TYPE_CRC32
                            && c.checksum_size == commit::CRC32_CHECKSUM_SIZE;
                        let unused = c.checksum_type == 0 && c.checksum_size == 0 && c.checksums[0] == 0;
                        if !matches && !unused {
                            return Err(format!("transaction {seq}: commit checksum"));
                        }
                    }
                    // Only the newest commit time is recorded (resume keeps it).
                    if i + 1 == n && c.commit_sec != t.commit_sec {
                        return Err(format!(
                            "transaction {seq}: commit time {} where the log has {}",
                            t.commit_sec, c.commit_sec
                        ));
                    }
                    break;
                }
                other => return Err(format!("journal block {this}: a {other:?} block in transaction {seq}")),
            }
        }
        if pos != t.end {
            return Err(format!("transaction {seq} ends at journal block {pos}, not {}", t.end));
        }
        seq = seq.wrapping_add(1);
    }
    if rec.head != pos
        || rec.end_sequence != seq
        || rec.next_sequence != seq.wrapping_add(1)
        || rec.start_sequence != sb.sequence
    {
        return Err(format!(
            "the log ends at journal block {pos} before transaction {seq}; recorded: head {}, end {}, next {}",
            rec.head, rec.end_sequence, rec.next_sequence
        ));
    }
    if sb.has_incompat(FEATURE_INCOMPAT_FAST_COMMIT) {
        walk.check_fast_commit_area(seq).map_err(|e| e.to_string())?;
    }
    // Replay as the scan does: newest copy of each block, revoked ones out.
    let (mut blocks, mut hits, mut replayed) = (BTreeMap::new(), 0u64, 0u64);
    for (block, copy) in tags {
        if revokes.is_revoked(block, copy.sequence) {
            hits += 1;
        } else {
            blocks.insert(block, copy);
            replayed += 1;
        }
    }
    if blocks != rec.blocks {
        let b = blocks.keys().chain(rec.blocks.keys()).find(|b| blocks.get(b) != rec.blocks.get(b));
        return Err(match b {
            Some(b) => format!("block {b}: recorded {:?}, the log has {:?}", rec.blocks.get(b), blocks.get(b)),
            None => "the copies differ".into(),
        });
    }
    rec.revoked = revokes;
    rec.revoke_records = revoke_records;
    rec.revoke_hits = hits;
    rec.replayed_tags = replayed;
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pass {
    Scan,
    Revoke,
    Replay,
}

impl Pass {
    fn name(self) -> &'static str {
        match self {
            Pass::Scan => "SCAN",
            Pass::Revoke => "REVOKE",
            Pass::Replay => "REPLAY",
        }
    }
}

/// What the passes carry between them (jbd2's `struct recovery_info`).
#[derive(Default)]
struct Info {
    /// First transaction not to replay; set by SCAN.
    end: Option<u32>,
    /// Block after the last good commit block; set by SCAN.
    head: Option<u64>,
    failed_commit: Option<u32>,
    revokes: RevokeTable,
    revoke_records: u64,
    revoke_hits: u64,
    replayed: u64,
    blocks: BTreeMap<u64, ReplayedCopy>,
    bad: Vec<BadDataBlock>,
    /// Transactions whose commit SCAN accepted; set by SCAN.
    extents: Vec<RecoveredTransaction>,
}

/// One walk over the circular log.
struct Walk<'a, R: ?Sized> {
    reader: &'a R,
    sb: &'a Superblock,
    layout: Layout,
    /// First log block (`s_first`).
    first: u64,
    /// One past the last log block (`s_maxlen` minus the fast-commit area).
    last: u64,
    buf: Vec<u8>,
    data: Vec<u8>,
}

impl<'a, R: JournalReader + ?Sized> Walk<'a, R> {
    fn new(reader: &'a R, sb: &'a Superblock) -> Self {
        let layout = sb.layout();
        Walk {
            reader,
            sb,
            layout,
            first: u64::from(sb.first),
            last: u64::from(sb.log_end()),
            buf: vec![0u8; layout.block_bytes()],
            data: vec![0u8; layout.block_bytes()],
        }
    }

    /// Advance a log position by `n` blocks, wrapping at the end of the log.
    fn advance(&self, pos: u64, n: u64) -> u64 {
        debug_assert!(pos >= self.first && pos < self.last);
        let len = self.last - self.first;
        self.first + (pos - self.first + n) % len
    }

    fn read(&mut self, jblock: u64, into_data: bool) -> Result<(), Error> {
        let buf = if into_data { &mut self.data } else { &mut self.buf };
        self.reader.read_block(jblock, buf).map_err(|source| Error::Io { jblock, source })
    }

    /// Count `n` more blocks walked; a valid log is at most the whole log area
    /// (plus the block that ends it), so more means a hostile loop.
    fn step(&self, walked: &mut u64, n: u64) -> Result<(), Error> {
        *walked = walked.saturating_add(n);
        if *walked > self.last - self.first + 1 {
            return Err(corrupt("jbd2 log", Location::Unknown, Corruption::Loop));
        }
        Ok(())
    }

    fn pass(&mut self, pass: Pass, info: &mut Info) -> Result<(), Error> {
        let layout = self.layout;
        let is_async = self.sb.has_incompat(FEATURE_INCOMPAT_ASYNC_COMMIT);
        let mut next_tid = self.sb.sequence;
        let mut pos = u64::from(self.sb.start);
        let mut walked = 0u64;
        // v1 (compat CHECKSUM) running crc32_be over descriptor and data blocks.
        let mut crc32_sum = !0u32;
        // A descriptor or revoke block failed its checksum in this transaction:
        // decide at its commit block whether it is stale or corruption.
        let mut need_check_commit_time = false;
        let mut last_commit_time = 0u64;
        let mut head_block: Option<u64> = None;
        // Where the current transaction began, and the blocks walked before it.
        let (mut txn_start, mut walked_before) = (pos, 0u64);

        loop {
            if pass != Pass::Scan {
                if let Some(end) = info.end {
                    if tid_geq(next_tid, end) {
                        break;
                    }
                }
            }
            self.step(&mut walked, 1)?;
            let this = pos;
            self.read(this, false)?;
            pos = self.advance(pos, 1);

            let Some(header) = Header::peek(&self.buf) else {
                break;
            };
            if header.sequence != next_tid {
                break;
            }
            match header.block_type {
                BlockType::Descriptor => {
                    if descriptor::verify_checksum(&self.buf, &layout).is_err() {
                        if pass != Pass::Scan {
                            return Err(bad_checksum(&self.buf, &layout, this));
                        }
                        // Possibly a stale block (lazy journal init): judged at the commit.
                        need_check_commit_time = true;
                    }
                    let desc =
                        DescriptorBlock::parse(&self.buf, &layout).map_err(|e| e.at(Location::JournalBlock(this)))?;
                    let n = desc.tags.len() as u64;
                    if pass != Pass::Replay {
                        if pass == Pass::Scan
                            && layout.checksum == Checksum::V1
                            && !need_check_commit_time
                            && info.end.is_none()
                        {
                            crc32_sum = crc32_be(crc32_sum, &self.buf);
                            for _ in 0..n {
                                self.step(&mut walked, 1)?;
                                let io = pos;
                                pos = self.advance(pos, 1);
                                self.read(io, true)?;
                                crc32_sum = crc32_be(crc32_sum, &self.data);
                            }
                        } else {
                            self.step(&mut walked, n)?;
                            pos = self.advance(pos, n);
                        }
                        continue;
                    }
                    for tag in &desc.tags {
                        self.step(&mut walked, 1)?;
                        let io = pos;
                        pos = self.advance(pos, 1);
                        if info.revokes.is_revoked(tag.block, next_tid) {
                            info.revoke_hits += 1;
                            continue;
                        }
                        if layout.checksum.is_v2_or_v3() {
                            self.read(io, true)?;
                            if !tag.checksum_matches(&layout, header.sequence, &self.data) {
                                info.bad.push(BadDataBlock { block: tag.block, jblock: io, sequence: next_tid });
                                continue;
                            }
                        }
                        let copy = ReplayedCopy { jblock: io, escaped: tag.escaped(), sequence: next_tid };
                        if let Some(old) = info.blocks.insert(tag.block, copy) {
                            debug_assert!(crate::tid_geq(next_tid, old.sequence), "replay goes forward in time");
                        }
                        info.replayed += 1;
                    }
                }
                BlockType::Commit => {
                    let commit = CommitBlock::parse(&self.buf).map_err(|e| e.at(Location::JournalBlock(this)))?;
                    let commit_time = commit.commit_sec;
                    if need_check_commit_time {
                        // A bad descriptor/revoke block: if this commit is not older
                        // than the previous one it belongs to this journal: corruption.
                        if commit_time >= last_commit_time {
                            return Err(corrupt(
                                "jbd2 transaction",
                                Location::JournalBlock(this),
                                Corruption::BadField {
                                    field: "descriptor or revoke checksum",
                                    value: u64::from(next_tid),
                                },
                            ));
                        }
                        // Older: stale blocks of an earlier use of the journal; the log ends here.
                        break;
                    }
                    let mut checksum_error = false;
                    if pass == Pass::Scan && layout.checksum == Checksum::V1 {
                        if info.end.is_some() {
                            info.failed_commit = info.end;
                            break;
                        }
                        let found = commit.checksums[0];
                        let matches = crc32_sum == found
                            && commit.checksum_type == commit::CHECKSUM_TYPE_CRC32
                            && commit.checksum_size == commit::CRC32_CHECKSUM_SIZE;
                        let unused = commit.checksum_type == 0 && commit.checksum_size == 0 && found == 0;
                        if matches || unused {
                            crc32_sum = !0;
                        } else {
                            checksum_error = true;
                        }
                    }
                    if pass == Pass::Scan && !checksum_error && commit::verify_checksum(&self.buf, &layout).is_err() {
                        checksum_error = true;
                    }
                    if checksum_error {
                        if commit_time < last_commit_time {
                            break; // stale commit block: end of log, no error
                        }
                        if info.end.is_none() {
                            info.end = Some(next_tid);
                            info.head = head_block;
                        }
                        if !is_async {
                            info.failed_commit = Some(next_tid);
                            break;
                        }
                    }
                    if pass == Pass::Scan {
                        last_commit_time = commit_time;
                        head_block = Some(pos);
                        info.extents.push(RecoveredTransaction {
                            sequence: next_tid,
                            start: txn_start,
                            end: pos,
                            blocks: walked - walked_before,
                            commit_sec: commit_time,
                        });
                    }
                    (txn_start, walked_before) = (pos, walked);
                    next_tid = next_tid.wrapping_add(1);
                }
                BlockType::Revoke => {
                    if pass == Pass::Scan && revoke_block::verify_checksum(&self.buf, &layout).is_err() {
                        need_check_commit_time = true;
                    }
                    if pass != Pass::Revoke {
                        continue;
                    }
                    let r = RevokeBlock::parse(&self.buf, &layout).map_err(|e| e.at(Location::JournalBlock(this)))?;
                    for b in r.blocks {
                        info.revokes.set(b, next_tid);
                        info.revoke_records += 1;
                    }
                }
                _ => break,
            }
        }

        match pass {
            Pass::Scan => {
                if info.end.is_none() {
                    info.end = Some(next_tid);
                }
                if info.head.is_none() {
                    info.head = head_block;
                }
            }
            _ => {
                let expected = info.end.unwrap_or(next_tid);
                if expected != next_tid {
                    return Err(Error::PassMismatch { pass: pass.name(), ended: next_tid, expected });
                }
            }
        }
        Ok(())
    }

    /// Fast commits are ext4-level deltas (inode and extent changes) replayed by
    /// an ext4 callback after the full-commit passes; we do not replay them.
    /// Refuse unless the fast-commit area provably holds nothing to replay: its
    /// first block is all zeros, or starts with an ext4 fast-commit HEAD tag
    /// (little-endian tag 9, tid at byte 8) for another transaction, which
    /// makes the kernel's replay scan stop at once.
    fn check_fast_commit_area(&mut self, end: u32) -> Result<(), Error> {
        // jbd2 sets j_fc_first = j_last + 1: block `log_end` itself is unused.
        let fc_first = u64::from(self.sb.log_end()) + 1;
        if fc_first >= u64::from(self.sb.max_len) {
            return Ok(());
        }
        self.read(fc_first, true)?;
        let d = &self.data;
        if d.iter().all(|&b| b == 0) {
            return Ok(());
        }
        const EXT4_FC_TAG_HEAD: u16 = 9;
        let tag = u16::from_le_bytes([d[0], d[1]]);
        let tid = u32::from_le_bytes([d[8], d[9], d[10], d[11]]);
        if tag == EXT4_FC_TAG_HEAD && tid != end {
            return Ok(());
        }
        Err(Error::Format(FormatError::Unsupported {
            what: format!("replay of jbd2 fast commits (fast-commit area at journal block {fc_first})"),
        }))
    }
}

fn corrupt(structure: &'static str, at: Location, why: Corruption) -> Error {
    Error::Format(FormatError::corrupt(structure, at, why))
}

fn bad_checksum(buf: &[u8], layout: &Layout, jblock: u64) -> Error {
    match descriptor::verify_checksum(buf, layout) {
        Err(e) => Error::Format(e.at(Location::JournalBlock(jblock))),
        Ok(()) => corrupt(
            "jbd2 descriptor block",
            Location::JournalBlock(jblock),
            Corruption::BadChecksum { stored: 0, computed: 0 },
        ),
    }
}
