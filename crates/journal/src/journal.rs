//! The journal object (the kernel's `fs/jbd2/journal.c`): where the journal
//! lies on the device, its superblock, and the state of the circular log.
//!
//! The log occupies journal blocks `[s_first, j_last)` where `j_last` is
//! `s_maxlen` minus the fast-commit area (never used here). Live transactions
//! run from the *tail* (oldest transaction not yet checkpointed) to the
//! *head* (where the next transaction goes), wrapping at `j_last`. The
//! superblock records the tail (`s_start`, 0 when the journal is empty) and
//! the tail's sequence (`s_sequence`); recovery starts there.
//!
//! Life cycle, as jbd2 and ext4 use it:
//! 1. [`Journal::load`] reads and validates the superblock;
//! 2. if [`Journal::needs_recovery`], the caller runs [`Journal::recover`] and
//!    (read-write mount) either [`Journal::replay_to_disk`], which writes the
//!    copies home, flushes and marks the journal empty, or (lazy mode)
//!    [`Journal::resume`], which continues the recovered log as it is;
//! 3. [`Journal::commit`] appends transactions; [`Journal::checkpoint`] writes
//!    them home and moves the tail when room is needed;
//! 4. at clean unmount, checkpoint everything and [`Journal::empty`].

use std::collections::VecDeque;
use std::io;

use blockdev::{BlockDevice, IoClass, ReadRequest, WriteRequest};
use ondisk::jbd2::{BlockType, Layout, Superblock, MAGIC};
use ondisk::Location;

use crate::jmap::{Jmap, JmapStats, JBLOCK_LIMIT};
use crate::{tid_gt, Error, JournalReader, Recovery};

/// Blocks of the log jbd2 never hands out (`jbd2_log_space_left` keeps 32 back
/// "for rounding errors"); it also guarantees the head never reaches the tail,
/// so a full log is never mistaken for an empty one.
pub const RESERVED_BLOCKS: u64 = 32;

/// Where the journal's blocks are on the device: runs of (first journal
/// block, first device block, length) as the journal inode's extents give them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalMap {
    runs: Vec<(u64, u64, u64)>,
    len_blocks: u64,
    block_size: u32,
}

impl JournalMap {
    /// Check and keep the runs: sorted, contiguous from journal block 0,
    /// covering exactly `len_blocks` blocks, non-overlapping on the device.
    pub fn new(runs: Vec<(u64, u64, u64)>, len_blocks: u64, block_size: u32) -> Result<Self, Error> {
        if !block_size.is_power_of_two() || !(1024..=65536).contains(&block_size) {
            return Err(Error::Invalid(format!("block size {block_size}")));
        }
        let mut next = 0u64;
        for &(l, _, n) in &runs {
            if l != next || n == 0 {
                return Err(Error::Invalid(format!(
                    "journal runs must be contiguous from block 0 (run at {l} of {n}, expected {next})"
                )));
            }
            next = l.checked_add(n).ok_or_else(|| Error::Invalid("journal run overflows".into()))?;
        }
        if next != len_blocks {
            return Err(Error::Invalid(format!("journal runs cover {next} blocks, journal has {len_blocks}")));
        }
        let mut phys: Vec<(u64, u64)> = runs.iter().map(|r| (r.1, r.2)).collect();
        phys.sort_unstable();
        for w in phys.windows(2) {
            if w[0].0.saturating_add(w[0].1) > w[1].0 {
                return Err(Error::Invalid("journal runs overlap on the device".into()));
            }
        }
        Ok(JournalMap { runs, len_blocks, block_size })
    }

    /// One contiguous run: journal blocks `0..len` at device block `phys`.
    pub fn contiguous(phys: u64, len_blocks: u64, block_size: u32) -> Result<Self, Error> {
        Self::new(vec![(0, phys, len_blocks)], len_blocks, block_size)
    }

    /// Device block of journal block `jblock`.
    pub fn phys(&self, jblock: u64) -> Option<u64> {
        let i = self.runs.partition_point(|r| r.0 <= jblock);
        let (l, p, n) = *self.runs.get(i.checked_sub(1)?)?;
        (jblock < l + n).then(|| p + (jblock - l))
    }

    /// Journal blocks starting at `jblock` that are contiguous on the device
    /// (at most `max`), so a write can cover them in one request.
    pub(crate) fn contiguous_from(&self, jblock: u64, max: u64) -> u64 {
        let i = self.runs.partition_point(|r| r.0 <= jblock);
        match i.checked_sub(1).and_then(|i| self.runs.get(i)) {
            Some(&(l, _, n)) if jblock < l + n => (l + n - jblock).min(max),
            _ => 0,
        }
    }

    pub fn runs(&self) -> &[(u64, u64, u64)] {
        &self.runs
    }
    pub fn len_blocks(&self) -> u64 {
        self.len_blocks
    }
    pub fn block_size(&self) -> u32 {
        self.block_size
    }
}

/// Where the newest committed copy of a static block lives in the log (an
/// entry of the jmap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogCopy {
    pub jblock: u64,
    /// The copy had the jbd2 magic in its first 4 bytes, zeroed in the log.
    pub escaped: bool,
    pub sequence: u32,
}

/// A committed transaction still in the log (not yet checkpointed). Its live
/// blocks (those whose newest copy it holds and which are still needed) are in
/// the jmap: [`Journal::live_count`], [`Journal::live_blocks`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveTransaction {
    pub sequence: u32,
    /// First journal block of the transaction.
    pub start: u64,
    /// Journal block after its commit block.
    pub end: u64,
    /// Journal blocks it occupies (descriptors, copies, revokes, commit).
    pub blocks: u64,
}

/// Where a newest copy lies: static block, journal block, device block, and
/// whether it was escaped (undo with [`unescape`] after reading).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyAt {
    pub block: u64,
    pub jblock: u64,
    pub phys: u64,
    pub escaped: bool,
}

/// How full the log is, in journal blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fill {
    /// Blocks of the circular log (`j_last - s_first`).
    pub log_blocks: u64,
    /// Blocks held by live transactions (tail to head).
    pub used: u64,
    /// Blocks a new transaction may use (free minus [`RESERVED_BLOCKS`]).
    pub space_left: u64,
    /// Largest transaction jbd2 would build (a quarter of the journal).
    pub max_transaction: u64,
    /// Live transactions.
    pub live_transactions: usize,
}

/// A jbd2 journal on a block device. Methods that change the log take
/// `&mut self`: the fs layer keeps the journal behind one lock (commits and
/// checkpoints are serialised in jbd2 too) while operations fill a
/// [`crate::Running`] transaction concurrently.
pub struct Journal<D: BlockDevice> {
    pub(crate) dev: D,
    pub(crate) map: JournalMap,
    pub(crate) sb: Superblock,
    /// Journal block 0 as read (bytes past the 1024-byte superblock kept).
    pub(crate) sb_block: Vec<u8>,
    pub(crate) layout: Layout,
    /// `s_first`: first block of the log.
    pub(crate) first: u64,
    /// `j_last`: one past the last block of the log.
    pub(crate) last: u64,
    /// Where the next transaction starts.
    pub(crate) head: u64,
    /// Start of the oldest live transaction (== head when none).
    pub(crate) tail: u64,
    /// Sequence of the oldest live transaction (== next_sequence when none).
    pub(crate) tail_sequence: u32,
    /// Sequence the next committed transaction gets.
    pub(crate) next_sequence: u32,
    pub(crate) live: VecDeque<LiveTransaction>,
    /// Static block -> its newest committed copy in the live log, for every
    /// block still needed from the log (ordered mode: not yet written home;
    /// lazy mode: all of them), with each transaction's live list.
    pub(crate) jmap: Jmap,
    /// Journal block -> 1 + the static block it holds a copy of (0: none
    /// known), for reading a stretch of the log ahead
    /// ([`Self::live_copies_from`]). Set at commit and resume and never
    /// cleared: an entry counts only while the jmap agrees. 8 bytes per
    /// journal block (2 MiB for a 1 GiB log of 4 KiB blocks).
    pub(crate) owners: Vec<u64>,
    pub(crate) needs_recovery: bool,
    /// A write failed mid-transaction: no further commit is safe (jbd2 aborts).
    pub(crate) aborted: bool,
    /// Commit time of the last commit; commit times never go backwards
    /// (recovery uses them to tell stale blocks from corruption).
    pub(crate) last_commit_sec: u64,
    /// The staging buffer of the last commit, kept for the next (at most
    /// 4 MiB: a larger one, made for one large descriptor group, goes).
    pub(crate) stage: Option<blockdev::AlignedBuf>,
}

impl<D: BlockDevice> Journal<D> {
    /// Read and validate the journal superblock through `map`. A clean
    /// journal is ready to write (new transactions start at `s_first` with
    /// sequence `s_sequence + 1`, as jbd2); one with `s_start != 0` must be
    /// recovered first ([`Self::needs_recovery`]).
    pub fn load(dev: D, map: JournalMap) -> Result<Self, Error> {
        let bs = map.block_size();
        let mut block = vec![0u8; bs as usize];
        read_jblock(&dev, &map, 0, &mut block)?;
        let sb = Superblock::parse(&block).map_err(|e| e.at(Location::JournalBlock(0)))?;
        if sb.block_size != bs {
            return Err(Error::Geometry {
                what: "block size",
                reader: u64::from(bs),
                superblock: u64::from(sb.block_size),
            });
        }
        sb.validate(map.len_blocks())?;
        if sb.version == BlockType::SuperblockV2 && sb.nr_users > 1 {
            return Err(Error::Format(ondisk::FormatError::Unsupported {
                what: format!("a journal shared by {} file systems", sb.nr_users),
            }));
        }
        let layout = sb.layout();
        let first = u64::from(sb.first);
        let last = u64::from(sb.log_end());
        if last > u64::from(JBLOCK_LIMIT) {
            // The jmap keeps journal blocks in 31 bits (mke2fs makes
            // journals of at most 10,240,000 blocks).
            return Err(Error::Format(ondisk::FormatError::Unsupported {
                what: format!("a journal of {last} blocks (at most {JBLOCK_LIMIT})"),
            }));
        }
        if last - first <= RESERVED_BLOCKS + 2 {
            return Err(Error::Geometry {
                what: "log length",
                reader: last - first,
                superblock: u64::from(sb.max_len),
            });
        }
        let needs_recovery = sb.start != 0;
        let next = sb.sequence.wrapping_add(1);
        Ok(Journal {
            dev,
            map,
            layout,
            first,
            last,
            head: first,
            tail: first,
            tail_sequence: next,
            next_sequence: next,
            live: VecDeque::new(),
            jmap: Jmap::new(),
            owners: vec![0; last as usize],
            needs_recovery,
            aborted: false,
            last_commit_sec: 0,
            sb_block: block,
            sb,
            stage: None,
        })
    }

    /// The log was left by a crash: recover before writing.
    pub fn needs_recovery(&self) -> bool {
        self.needs_recovery
    }

    /// Run jbd2's recovery passes over this journal (reads only).
    pub fn recover(&self) -> Result<Recovery, Error> {
        crate::recover(self)
    }

    /// Write every replayed copy to its static location (class `Metadata`),
    /// flush, then mark the journal empty with the sequence advanced past
    /// everything in the log (`recovery.next_sequence`), as jbd2's
    /// `jbd2_journal_recover` followed by `journal_reset`/`mark_journal_empty`.
    /// Returns the number of blocks written. Blocks beyond the device fail;
    /// the fs layer should reject blocks beyond the file system first.
    pub fn replay_to_disk(&mut self, recovery: &Recovery) -> Result<u64, Error> {
        if !self.live.is_empty() {
            // Resumed and committed to since: emptying would drop those commits.
            return Err(Error::Invalid("replay_to_disk on a live log (use checkpoint and empty)".into()));
        }
        let bs = self.map.block_size() as usize;
        let mut buf = vec![0u8; bs];
        let mut written = 0;
        for (&block, copy) in &recovery.blocks {
            crate::recovery::read_copy(self, copy, &mut buf)?;
            self.write_home(block, &buf)?;
            written += 1;
        }
        self.dev.flush().map_err(Error::Flush)?;
        if tid_gt(recovery.next_sequence, self.next_sequence) {
            self.next_sequence = recovery.next_sequence;
        }
        self.live.clear();
        self.jmap.clear();
        self.needs_recovery = false;
        self.mark_empty()?;
        Ok(written)
    }

    /// Continue a recovered log as it is, writing nothing home (lazy mode's
    /// mount): the replayed transactions become the live transactions, every
    /// surviving copy (revokes honoured, newest wins) enters the jmap, and new
    /// commits follow the last valid one. The superblock keeps `s_start` and
    /// `s_sequence` at the tail, so the kernel and e2fsck still replay the
    /// whole log. `recovery` must be [`Self::recover`]'s result for this
    /// journal as loaded (nothing committed since). A clean journal has
    /// nothing to continue: only the checks run.
    ///
    /// Writes one journal block: an empty transaction (a lone commit block)
    /// with the ID recovery could not complete (`end_sequence`) at the head,
    /// so that new transactions carry `recovery.next_sequence` and the IDs in
    /// the log stay consecutive, as recovery requires. Why not simply reuse
    /// that ID for the next real transaction: the blocks after the head may be
    /// what a torn transaction with that very ID left, and a torn transaction
    /// is exactly where a device that lost or reordered writes across a flush
    /// may have kept a valid commit block behind missing blocks; a new
    /// transaction with the same ID, torn in turn, would be read as continuing
    /// into those blocks up to that commit (garbage replayed, undetected
    /// without data checksums). The lone commit block is one block carrying
    /// its own header (and checksum): after a crash it is either absent, and
    /// the log ends at the head as it does now, or whole. Past it recovery
    /// expects `end_sequence + 1`, an ID this journal never wrote (IDs only
    /// grow: each recovery skips the torn one, and a commit starts only after
    /// the previous one is durable; jbd2 relies on the same after its own
    /// recovery), so no leftover block can extend a new transaction. A crash
    /// while continuing costs one more such block at the next mount.
    ///
    /// That block may come from the [`RESERVED_BLOCKS`] (a log our commits
    /// filled to the reserve must stay resumable); only a log with no free
    /// block but the one keeping the head off the tail fails, with
    /// [`Error::NoSpace`] and nothing changed.
    pub fn resume(&mut self, recovery: &Recovery) -> Result<(), Error> {
        if self.aborted {
            return Err(Error::Aborted);
        }
        if recovery.superblock != self.sb || !self.live.is_empty() || !self.jmap.is_empty() {
            return Err(Error::Invalid("resume needs the recovery of this journal as loaded".into()));
        }
        if !recovery.needed {
            debug_assert!(!self.needs_recovery);
            return Ok(());
        }
        let log_blocks = self.last - self.first;
        let used: u64 = recovery.extents.iter().map(|t| t.blocks).sum();
        // One free block must stay between head and tail (full != empty).
        let available = log_blocks.saturating_sub(used).saturating_sub(1);
        if available < 1 {
            return Err(Error::NoSpace { needed: 1, available });
        }
        let mut jmap = Jmap::with_capacity(recovery.blocks.len());
        for (&block, copy) in &recovery.blocks {
            debug_assert!(recovery.extents.iter().any(|t| t.sequence == copy.sequence));
            let jblock = u32::try_from(copy.jblock)
                .ok()
                .filter(|&j| j < JBLOCK_LIMIT)
                .ok_or_else(|| Error::Invalid(format!("journal block {} of block {block}", copy.jblock)))?;
            jmap.insert(block, jblock, copy.escaped, copy.sequence);
            self.owners[jblock as usize] = block + 1;
        }
        self.jmap = jmap;
        self.live = recovery
            .extents
            .iter()
            .map(|t| LiveTransaction { sequence: t.sequence, start: t.start, end: t.end, blocks: t.blocks })
            .collect();
        self.tail = u64::from(self.sb.start);
        self.tail_sequence = self.sb.sequence;
        self.head = recovery.head;
        self.next_sequence = recovery.end_sequence;
        if let Some(t) = recovery.extents.last() {
            self.last_commit_sec = self.last_commit_sec.max(t.commit_sec);
        }
        self.needs_recovery = false;
        debug_assert_eq!(self.used(), used);
        let bs = self.map.block_size();
        let filler = self.write_transaction(&crate::Transaction::new(bs), 1);
        if filler.is_err() {
            self.aborted = true;
        }
        filler?;
        debug_assert_eq!(self.next_sequence, recovery.next_sequence);
        Ok(())
    }

    /// Mark the journal empty (`s_start = 0`) once every transaction is home:
    /// what a clean unmount leaves. `s_sequence` records the next sequence so
    /// sequences keep increasing across mounts; the log restarts at `s_first`.
    pub fn empty(&mut self) -> Result<(), Error> {
        if self.needs_recovery {
            return Err(Error::NeedsRecovery);
        }
        if !self.live.is_empty() {
            return Err(Error::NotCheckpointed { live_transactions: self.live.len() });
        }
        self.mark_empty()
    }

    fn mark_empty(&mut self) -> Result<(), Error> {
        debug_assert!(self.live.is_empty());
        self.sb.start = 0;
        self.sb.sequence = self.next_sequence;
        self.sb.head = self.head as u32;
        self.write_superblock(true)?;
        self.head = self.first;
        self.tail = self.first;
        self.tail_sequence = self.next_sequence;
        debug_assert!(self.jmap.is_empty(), "no live transaction, no live block");
        self.jmap.clear();
        Ok(())
    }

    /// Turn on journal features, as ext4 does at every mount with
    /// `jbd2_journal_set_features` (mkfs leaves the journal superblock with
    /// none): see [`ext4_features`]. Setting CSUM_V3 clears CSUM_V2 and the
    /// v1 compat CHECKSUM and sets the crc32c checksum type. Only while the
    /// log is empty, since the tag format must not change under a live log,
    /// except REVOKE alone, which changes no format (jbd2 sets it on a live
    /// log at the first revoke; a resumed kernel log may lack it). Features
    /// already on are no change. A v1 superblock has no feature fields and is
    /// refused. The superblock is written at once.
    pub fn set_features(&mut self, compat: u32, incompat: u32) -> Result<(), Error> {
        use ondisk::jbd2::{
            superblock::CHECKSUM_TYPE_CRC32C, FEATURE_COMPAT_CHECKSUM, FEATURE_INCOMPAT_CSUM_V2,
            FEATURE_INCOMPAT_CSUM_V3, FEATURE_INCOMPAT_REVOKE, KNOWN_COMPAT, KNOWN_INCOMPAT,
        };
        if self.needs_recovery {
            return Err(Error::NeedsRecovery);
        }
        if compat & !KNOWN_COMPAT != 0 || incompat & !KNOWN_INCOMPAT != 0 {
            return Err(Error::Format(ondisk::FormatError::Unsupported {
                what: format!("jbd2 features compat {compat:#x} incompat {incompat:#x}"),
            }));
        }
        let (old_compat, old_incompat) = (self.sb.feature_compat, self.sb.feature_incompat);
        let (new_compat, new_incompat) = (compat & !old_compat, incompat & !old_incompat);
        if (new_compat, new_incompat) == (0, 0) {
            return Ok(());
        }
        let live_log = !self.live.is_empty() || self.sb.start != 0;
        if live_log && (new_compat, new_incompat) != (0, FEATURE_INCOMPAT_REVOKE) {
            return Err(Error::NotCheckpointed { live_transactions: self.live.len() });
        }
        if self.sb.version != BlockType::SuperblockV2 {
            return Err(Error::Format(ondisk::FormatError::Unsupported {
                what: "features on a v1 journal superblock".into(),
            }));
        }
        let mut sb = self.sb.clone();
        sb.feature_compat |= compat;
        sb.feature_incompat |= incompat;
        if incompat & FEATURE_INCOMPAT_CSUM_V3 != 0 {
            sb.feature_incompat &= !FEATURE_INCOMPAT_CSUM_V2;
            sb.feature_compat &= !FEATURE_COMPAT_CHECKSUM;
        }
        if sb.feature_incompat & (FEATURE_INCOMPAT_CSUM_V2 | FEATURE_INCOMPAT_CSUM_V3) != 0 {
            sb.checksum_type = CHECKSUM_TYPE_CRC32C;
        }
        sb.validate(self.map.len_blocks())?;
        self.sb = sb;
        self.layout = self.sb.layout();
        self.write_superblock(true)
    }

    /// Serialise the in-memory superblock (checksum set) into block 0 and
    /// write it; with `flush`, flush before and after so it is ordered after
    /// everything written before (jbd2 uses PREFLUSH|FUA for tail updates).
    pub(crate) fn write_superblock(&mut self, flush: bool) -> Result<(), Error> {
        self.sb.write_to(&mut self.sb_block)?;
        if flush {
            self.dev.flush().map_err(Error::Flush)?;
        }
        write_jblocks(&self.dev, &self.map, 0, &self.sb_block)?;
        if flush {
            self.dev.flush().map_err(Error::Flush)?;
        }
        Ok(())
    }

    /// Write one run of whole blocks to their static locations from `block`
    /// on, as one request (class `Metadata`).
    pub(crate) fn write_home(&self, block: u64, data: &[u8]) -> Result<(), Error> {
        self.write_home_batch(&[(block, data)])
    }

    /// Write runs of whole blocks home, (first block, contents) each, all
    /// submitted at once (class `Metadata`). An error names the first run's
    /// block: which runs landed is unknown, and the caller fails the
    /// checkpoint without moving the tail.
    pub(crate) fn write_home_batch(&self, runs: &[(u64, &[u8])]) -> Result<(), Error> {
        let bs = u64::from(self.map.block_size());
        let mut requests = Vec::with_capacity(runs.len());
        for &(block, data) in runs {
            debug_assert!(!data.is_empty() && (data.len() as u64).is_multiple_of(bs), "home writes are whole blocks");
            let offset = block
                .checked_mul(bs)
                .filter(|o| o.checked_add(data.len() as u64).is_some_and(|e| e <= self.dev.size()))
                .ok_or_else(|| Error::HomeIo {
                    block,
                    source: io::Error::new(io::ErrorKind::InvalidInput, "block is beyond the device"),
                })?;
            requests.push(WriteRequest { offset, bufs: vec![data], class: IoClass::Metadata });
        }
        let first = runs.first().map_or(0, |r| r.0);
        self.dev.write_batch(&requests).map_err(|source| Error::HomeIo { block: first, source })
    }

    /// Advance a log position by `n`, wrapping at the end of the log.
    pub(crate) fn advance(&self, pos: u64, n: u64) -> u64 {
        debug_assert!(pos >= self.first && pos < self.last);
        self.first + (pos - self.first + n) % (self.last - self.first)
    }

    /// Blocks from the tail to the head.
    pub(crate) fn used(&self) -> u64 {
        let len = self.last - self.first;
        let used = (self.head + len - self.tail) % len;
        debug_assert_eq!(
            used,
            self.live.iter().map(|t| t.blocks).sum::<u64>(),
            "tail..head must be exactly the live transactions"
        );
        used
    }

    /// How full the log is.
    pub fn fill(&self) -> Fill {
        let log_blocks = self.last - self.first;
        let used = self.used();
        Fill {
            log_blocks,
            used,
            space_left: (log_blocks - used).saturating_sub(RESERVED_BLOCKS),
            max_transaction: self.max_transaction_blocks(),
            live_transactions: self.live.len(),
        }
    }

    /// Blocks a new transaction may take now.
    pub fn space_left(&self) -> u64 {
        self.fill().space_left
    }

    /// jbd2's `j_max_transaction_buffers`: a quarter of the journal (without
    /// the fast-commit area). A transaction reaching it should be committed;
    /// the journal needs checkpointing when less than this is left.
    pub fn max_transaction_blocks(&self) -> u64 {
        (u64::from(self.sb.max_len) - u64::from(self.sb.fast_commit_blocks())) / 4
    }

    /// Whether a transaction of the maximum size might not fit: jbd2
    /// checkpoints at this point (`__jbd2_log_wait_for_space`).
    pub fn needs_checkpoint(&self) -> bool {
        self.space_left() < self.max_transaction_blocks()
    }

    /// Live (committed, not yet checkpointed) transactions, oldest first.
    pub fn live_transactions(&self) -> impl Iterator<Item = &LiveTransaction> {
        self.live.iter()
    }

    /// The oldest live transaction (the one holding the tail).
    pub fn oldest_live(&self) -> Option<&LiveTransaction> {
        self.live.front()
    }

    /// Number of static blocks whose newest copy live transaction `sequence`
    /// holds (O(live): the jmap keeps no counts, see its documentation).
    pub fn live_count(&self, sequence: u32) -> usize {
        self.jmap.live_count(sequence)
    }

    /// Those blocks, in no particular order (O(live)).
    pub fn live_blocks(&self, sequence: u32) -> impl Iterator<Item = u64> + '_ {
        self.jmap.live_blocks(sequence)
    }

    /// Up to `max` static blocks whose newest copy is in the oldest live
    /// transaction: what the lazy-mode cleaner re-journals so the tail can
    /// pass it.
    pub fn tail_live_blocks(&self, max: usize) -> Vec<u64> {
        match self.live.front() {
            Some(t) => self.jmap.live_blocks(t.sequence).take(max).collect(),
            None => Vec::new(),
        }
    }

    /// The live log as a snapshot (see [`crate::snapshot`]): decoded at the
    /// next mount, it stands for the recovery scan. Only meaningful for a log
    /// the superblock describes as live (`s_start != 0`).
    pub fn snapshot(&self) -> Vec<u8> {
        let n = self.live.len();
        let txns: Vec<crate::RecoveredTransaction> = self
            .live
            .iter()
            .enumerate()
            .map(|(i, t)| crate::RecoveredTransaction {
                sequence: t.sequence,
                start: t.start,
                end: t.end,
                blocks: t.blocks,
                // Only the newest commit time matters (it only ever grows).
                commit_sec: if i + 1 == n { self.last_commit_sec } else { 0 },
            })
            .collect();
        let mut entries = Vec::with_capacity(self.jmap.len());
        for t in &self.live {
            for s in self.jmap.live_blocks(t.sequence) {
                if let Some(e) = self.jmap.get(s) {
                    entries.push((
                        s,
                        crate::ReplayedCopy { jblock: u64::from(e.jblock), escaped: e.escaped, sequence: t.sequence },
                    ));
                }
            }
        }
        crate::snapshot::encode(
            &self.sb,
            self.head,
            self.next_sequence,
            self.next_sequence.wrapping_add(1),
            &txns,
            &entries,
        )
    }

    /// Entries in the jmap and the memory it holds.
    pub fn jmap_stats(&self) -> JmapStats {
        self.jmap.stats()
    }

    /// Whether the live log holds a needed copy of `block` (a jmap lookup,
    /// without the owner search [`Self::newest_copy`] does).
    pub fn has_copy(&self, block: u64) -> bool {
        self.jmap.get(block).is_some()
    }

    /// Newest committed copy of `block` in the live log, if it is still
    /// needed from there (ordered mode: not yet written home).
    pub fn newest_copy(&self, block: u64) -> Option<LogCopy> {
        self.jmap.get(block).map(|e| LogCopy {
            jblock: u64::from(e.jblock),
            escaped: e.escaped,
            sequence: self.owner(u64::from(e.jblock)),
        })
    }

    /// Sequence of the live transaction whose blocks include `jblock` (the
    /// jmap does not store owners): live transactions are consecutive ranges
    /// of the log from the tail, so a binary search over their starts by
    /// distance from the tail finds it. O(log live transactions).
    fn owner(&self, jblock: u64) -> u32 {
        let len = self.last - self.first;
        let from_tail = |j: u64| (j + len - self.tail) % len;
        let d = from_tail(jblock);
        let i = self.live.partition_point(|t| from_tail(t.start) <= d);
        let t = &self.live[i.checked_sub(1).expect("a jmap entry before the tail")];
        debug_assert!(d < from_tail(t.start) + t.blocks, "jmap entry outside the live log");
        t.sequence
    }

    /// Read the newest committed copy of `block` from the log (escape undone).
    pub fn read_newest(&self, block: u64, buf: &mut [u8]) -> Result<bool, Error> {
        // Not newest_copy: the owner's sequence is not needed here.
        let Some(c) = self.jmap.get(block) else {
            return Ok(false);
        };
        read_jblock(&self.dev, &self.map, u64::from(c.jblock), buf)?;
        if c.escaped {
            unescape(buf);
        }
        Ok(true)
    }

    /// Read the newest committed copies of `blocks` from the log into `bufs`
    /// (one block each, in order, escapes undone), all submitted at once so
    /// that the device serves them together; `present[i]` says whether
    /// `blocks[i]` has a copy in the log (its buffer is untouched if not).
    pub(crate) fn read_newest_batch(&self, blocks: &[u64], bufs: &mut [u8], present: &mut [bool]) -> Result<(), Error> {
        let bs = self.map.block_size() as usize;
        debug_assert!(bufs.len() == blocks.len() * bs && present.len() == blocks.len());
        let mut escaped = Vec::new();
        let mut first_jblock = None;
        let mut requests = Vec::with_capacity(blocks.len());
        for ((&block, buf), present) in blocks.iter().zip(bufs.chunks_exact_mut(bs)).zip(present.iter_mut()) {
            *present = false;
            let Some(c) = self.jmap.get(block) else { continue };
            let jblock = u64::from(c.jblock);
            let phys = self.map.phys(jblock).ok_or_else(|| unmapped(jblock))?;
            *present = true;
            first_jblock.get_or_insert(jblock);
            escaped.push(c.escaped);
            requests.push(ReadRequest { offset: phys * bs as u64, buf, class: IoClass::Journal });
        }
        self.dev
            .read_batch(&mut requests)
            .map_err(|source| Error::Io { jblock: first_jblock.unwrap_or_default(), source })?;
        for (r, escaped) in requests.iter_mut().zip(escaped) {
            if escaped {
                unescape(r.buf);
            }
        }
        Ok(())
    }

    /// Where the newest committed copy of `block` lies on the device, for a
    /// caller that reads it together with other blocks: (device block,
    /// escaped). After reading, an escaped copy needs [`unescape`].
    pub fn newest_copy_location(&self, block: u64) -> Result<Option<(u64, bool)>, Error> {
        let Some(c) = self.jmap.get(block) else {
            return Ok(None);
        };
        let jblock = u64::from(c.jblock);
        let phys = self.map.phys(jblock).ok_or_else(|| unmapped(jblock))?;
        Ok(Some((phys, c.escaped)))
    }

    /// The newest copies held by the `count` journal blocks from the one
    /// holding `block`'s newest copy (that one first), stopping at the head
    /// and at the end of the log area: what a read of that stretch of the
    /// log brings for free. Empty when `block` has no copy in the log.
    pub fn live_copies_from(&self, block: u64, count: u64) -> Result<Vec<CopyAt>, Error> {
        let Some(c) = self.jmap.get(block) else {
            return Ok(Vec::new());
        };
        let start = u64::from(c.jblock);
        let mut end = (start + count).min(self.last);
        if start < self.head {
            end = end.min(self.head);
        }
        let mut out = Vec::new();
        for jblock in start..end {
            let Some(s) = self.owners.get(jblock as usize).and_then(|&o| o.checked_sub(1)) else { continue };
            let Some(e) = self.jmap.get(s).filter(|e| u64::from(e.jblock) == jblock) else { continue };
            let phys = self.map.phys(jblock).ok_or_else(|| unmapped(jblock))?;
            out.push(CopyAt { block: s, jblock, phys, escaped: e.escaped });
        }
        debug_assert_eq!(out.first().map(|c| c.block), Some(block));
        Ok(out)
    }

    /// The journal superblock as last written (or read).
    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }
    pub fn layout(&self) -> &Layout {
        &self.layout
    }
    pub fn map(&self) -> &JournalMap {
        &self.map
    }
    pub fn device(&self) -> &D {
        &self.dev
    }
    /// Where the next transaction starts.
    pub fn head(&self) -> u64 {
        self.head
    }
    /// Start of the oldest live transaction (== head when none).
    pub fn tail(&self) -> u64 {
        self.tail
    }
    /// Sequence the next committed transaction gets.
    pub fn next_sequence(&self) -> u32 {
        self.next_sequence
    }
    /// The log area `[s_first, j_last)`.
    pub fn log_area(&self) -> (u64, u64) {
        (self.first, self.last)
    }

    /// Give the device back (e.g. to inspect a recording device in tests).
    pub fn into_device(self) -> D {
        self.dev
    }
}

impl<D: BlockDevice> JournalReader for Journal<D> {
    fn block_size(&self) -> u32 {
        self.map.block_size()
    }
    fn len_blocks(&self) -> u64 {
        self.map.len_blocks()
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()> {
        read_jblock(&self.dev, &self.map, jblock, buf).map_err(|e| match e {
            Error::Io { source, .. } => source,
            other => io::Error::other(other.to_string()),
        })
    }
}

/// The journal features ext4 turns on at mount (`ext4_fill_super` and
/// `set_journal_csum_feature_set`): REVOKE always, 64BIT on a 64bit volume,
/// CSUM_V3 with metadata_csum. Returns (compat, incompat) for
/// [`Journal::set_features`].
pub fn ext4_features(metadata_csum: bool, is_64bit: bool) -> (u32, u32) {
    use ondisk::jbd2::{FEATURE_INCOMPAT_64BIT, FEATURE_INCOMPAT_CSUM_V3, FEATURE_INCOMPAT_REVOKE};
    let mut incompat = FEATURE_INCOMPAT_REVOKE;
    if is_64bit {
        incompat |= FEATURE_INCOMPAT_64BIT;
    }
    if metadata_csum {
        incompat |= FEATURE_INCOMPAT_CSUM_V3;
    }
    (0, incompat)
}

fn unmapped(jblock: u64) -> Error {
    Error::Io { jblock, source: io::Error::new(io::ErrorKind::InvalidData, "journal block is not mapped") }
}

/// Read one journal block (class `Journal`).
/// Undo jbd2's escaping of a logged copy read from the log: a block that
/// began with the journal magic was logged with those bytes zeroed.
pub fn unescape(buf: &mut [u8]) {
    buf[..4].copy_from_slice(&MAGIC.to_be_bytes());
}

pub(crate) fn read_jblock<D: BlockDevice + ?Sized>(
    dev: &D,
    map: &JournalMap,
    jblock: u64,
    buf: &mut [u8],
) -> Result<(), Error> {
    let phys = map.phys(jblock).ok_or_else(|| unmapped(jblock))?;
    dev.read_at(phys * u64::from(map.block_size()), buf, IoClass::Journal)
        .map_err(|source| Error::Io { jblock, source })
}

/// Write `data` (whole blocks) to journal blocks `jblock..`, one request per
/// device-contiguous stretch (class `Journal`). The caller splits at the end
/// of the log: here blocks are journal-consecutive.
pub(crate) fn write_jblocks<D: BlockDevice + ?Sized>(
    dev: &D,
    map: &JournalMap,
    jblock: u64,
    data: &[u8],
) -> Result<(), Error> {
    let bs = map.block_size() as usize;
    debug_assert_eq!(data.len() % bs, 0);
    let mut j = jblock;
    let mut rest = data;
    while !rest.is_empty() {
        let want = (rest.len() / bs) as u64;
        let n = map.contiguous_from(j, want);
        let phys = map.phys(j).filter(|_| n > 0).ok_or_else(|| unmapped(j))?;
        let (now, later) = rest.split_at(n as usize * bs);
        dev.write_at(phys * bs as u64, now, IoClass::Journal).map_err(|source| Error::Io { jblock: j, source })?;
        j += n;
        rest = later;
    }
    Ok(())
}
