//! Finding the journal inside the volume and replaying it in memory.

use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::journal_info::{run_phys, JournalInfo};
use crate::overlay::{JournalCopy, Overlay};
use crate::volume::Volume;
use blockdev::IoClass;
use journal::JournalReader;
use ondisk::inode::{Inode, JOURNAL_INO};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// Reads journal blocks through the journal inode's block map.
struct Reader<'a> {
    vol: &'a Volume,
    runs: &'a [(u64, u64, u64)],
    len_blocks: u64,
}

impl JournalReader for Reader<'_> {
    fn block_size(&self) -> u32 {
        self.vol.block_size()
    }
    fn len_blocks(&self) -> u64 {
        self.len_blocks
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()> {
        let phys = run_phys(self.runs, jblock).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("journal block {jblock} is not mapped"))
        })?;
        self.vol.dev.read_at(phys * u64::from(self.vol.block_size()), buf, IoClass::Journal)
    }
}

/// Locate the journal (if the volume has one), and if it needs recovery,
/// replay it into the volume's overlay and re-read what recovery changed.
pub(crate) fn open_journal(vol: &mut Volume) -> Result<Option<JournalInfo>> {
    if !vol.sb.has_journal() {
        return Ok(None);
    }
    let jino = vol.sb.f.journal_inum;
    if jino == 0 {
        return Err(FsError::Unsupported("external journal device".into()));
    }
    let inode = vol.inode(jino)?;
    let bs = u64::from(vol.block_size());
    let inode_blocks = inode.size() / bs;
    if inode_blocks > vol.sb.blocks_count() {
        return Err(journal_corrupt(&inode, "journal larger than the volume", inode_blocks));
    }
    // The superblock first, through its own mapping: its s_maxlen bounds the
    // walk of the rest (jbd2 trusts the smaller of it and the inode's size).
    let first = journal_runs(vol, &inode, 1)?;
    let mut sb_buf = vec![0u8; bs as usize];
    Reader { vol, runs: &first, len_blocks: 1 }
        .read_block(0, &mut sb_buf)
        .map_err(|e| FsError::io("reading the journal superblock", e))?;
    let superblock = ondisk::jbd2::Superblock::parse(&sb_buf)?;
    superblock.validate(inode_blocks)?;
    let len_blocks = u64::from(superblock.max_len);
    if len_blocks < JBD2_MIN_JOURNAL_BLOCKS {
        return Err(journal_corrupt(&inode, "journal too short (s_maxlen)", len_blocks));
    }
    let runs = journal_runs(vol, &inode, len_blocks)?;
    debug_assert_eq!(jino, JOURNAL_INO);
    let mut info = JournalInfo {
        superblock,
        len_blocks,
        runs,
        needed_recovery: false,
        replayed_transactions: 0,
        replayed_blocks: 0,
        revoke_records: 0,
        used_blocks: 0,
        head: 0,
        recovery: None,
        from_snapshot: false,
        snapshot_refused: None,
    };

    if vol.sb.needs_recovery() {
        let reader = Reader { vol, runs: &info.runs, len_blocks };
        let scan_err = |e| match e {
            journal::Error::Format(f) => FsError::Format(f),
            journal::Error::Io { jblock, source } => FsError::io(format!("reading journal block {jblock}"), source),
            other => FsError::Unsupported(format!("journal recovery: {other}")),
        };
        let rec = match snapshot_recovery(vol, &reader, &info.superblock).map_err(scan_err)? {
            Ok(Some(rec)) => {
                info.from_snapshot = true;
                rec
            }
            verdict => {
                info.snapshot_refused = verdict.err();
                journal::recover(&reader).map_err(scan_err)?
            }
        };
        info.needed_recovery = rec.needed;
        info.replayed_transactions = rec.transactions;
        info.replayed_blocks = rec.blocks.len();
        info.revoke_records = rec.revoke_records;
        info.used_blocks = rec.extents.iter().map(|t| t.blocks).sum();
        info.head = rec.extents.last().map_or(u64::from(info.superblock.start), |t| t.end);
        let mut map = HashMap::with_capacity(rec.blocks.len());
        for (&blk, copy) in &rec.blocks {
            let phys = info.phys(copy.jblock).ok_or_else(|| {
                FsError::io(format!("journal block {} is not mapped", copy.jblock), io::ErrorKind::InvalidData.into())
            })?;
            map.insert(blk, JournalCopy { phys, escaped: copy.escaped });
        }
        if !map.is_empty() {
            vol.core.overlay = Overlay::new(map);
            reload_after_replay(vol)?;
        }
        if !vol.opts.read_only {
            info.recovery = Some(rec);
        }
    }
    Ok(Some(info))
}

/// A lazy read-write mount may use the jmap snapshot instead of scanning the
/// log. The file is removed first, whatever its verdict: it describes the
/// log only until the next commit, and a crash after that must never find it.
/// It is read only if no one but root or us could have written it, and used
/// only if it matches the log (`journal::snapshot::decode`); `Ok(Err(why))`
/// when there was one and it was not used.
fn snapshot_recovery(
    vol: &Volume,
    reader: &Reader<'_>,
    sb: &ondisk::jbd2::Superblock,
) -> std::result::Result<std::result::Result<Option<journal::Recovery>, String>, journal::Error> {
    let Some(path) = vol.opts.jmap_snapshot.as_ref().filter(|_| vol.writer.journaling.is_lazy() && !vol.opts.read_only)
    else {
        return Ok(Ok(None));
    };
    let bytes = match crate::safefile::read_trusted(path, journal::snapshot::max_len(reader.len_blocks())) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(Ok(None)),
        Err(e) => {
            let _ = std::fs::remove_file(path);
            return Ok(Err(format!("jmap snapshot not read: {e}")));
        }
    };
    let _ = std::fs::remove_file(path);
    Ok(journal::snapshot::decode(&bytes, sb, reader)?
        .map(Some)
        .map_err(|why| format!("jmap snapshot {} {why}", path.display())))
}

/// Recovery may have replaced the superblock and group descriptors: read them again through the overlay.
fn reload_after_replay(vol: &mut Volume) -> Result<()> {
    vol.core.cache = crate::cache::BufferCache::new((vol.opts.cache_bytes / vol.block_size() as usize).max(64));
    let bs = vol.block_size() as usize;
    let sb_blk = ondisk::superblock::SUPERBLOCK_OFFSET / bs as u64;
    let data = vol.meta(sb_blk)?;
    let off = (ondisk::superblock::SUPERBLOCK_OFFSET as usize) % bs;
    let sb = ondisk::superblock::Superblock::parse(&data[off..off + ondisk::superblock::SUPERBLOCK_SIZE])?;
    sb.check_supported()?;
    if sb.blocks_count() != vol.sb.blocks_count() || sb.block_size() != vol.sb.block_size() {
        return Err(FsError::Unsupported("journal replay changes the volume's geometry (online resize)".into()));
    }
    vol.core.sb = sb;
    *vol.core.groups.get_mut() = crate::group_table::GroupTable::new(vol.reload_group_descriptors()?);
    Ok(())
}

/// The kernel's jbd2 refuses journals shorter than this.
const JBD2_MIN_JOURNAL_BLOCKS: u64 = 1024;

fn journal_corrupt(inode: &Inode, field: &'static str, value: u64) -> FsError {
    FsError::Format(ondisk::FormatError::corrupt(
        "journal inode",
        ondisk::Location::Inode(u64::from(inode.ino)),
        ondisk::Corruption::BadField { field, value },
    ))
}

/// The journal's first `len_blocks` blocks as runs (logical, physical,
/// length). No physical block may appear twice: a block map whose
/// indirect blocks share one block would otherwise make a small image
/// claim a journal of millions of runs before anything else is checked.
fn journal_runs(vol: &Volume, inode: &Inode, len_blocks: u64) -> Result<Vec<(u64, u64, u64)>> {
    let mut runs = Vec::new();
    let mut claimed = std::collections::BTreeMap::new();
    let mut l = 0;
    while l < len_blocks {
        match vol.map_block(inode, l, len_blocks - l)? {
            Mapping::Mapped { pblk, len, .. } => {
                let before = claimed.range(..=pblk).next_back().is_some_and(|(&s, &n): (&u64, &u64)| s + n > pblk);
                let after = claimed.range(pblk..).next().is_some_and(|(&s, _)| s < pblk + len);
                if before || after {
                    return Err(journal_corrupt(inode, "journal block mapped twice", pblk));
                }
                claimed.insert(pblk, len);
                runs.push((l, pblk, len));
                l += len;
            }
            Mapping::Hole { .. } => return Err(journal_corrupt(inode, "hole in journal", l)),
        }
    }
    Ok(runs)
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn f<T: Send + Sync>() {}
    f::<Arc<Volume>>();
}

/// The journal's occupancy, as `ext4lazy stat` reports it (issue #5's keys).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    pub journal_blocks: u64,
    /// Blocks held by live transactions (tail to head).
    pub journal_used_blocks: u64,
    /// Journal block where the oldest live transaction starts (0: log empty).
    pub journal_tail: u64,
    /// Journal block where the next transaction will start.
    pub journal_head: u64,
    /// Static blocks whose needed copy is in the log: one jmap entry each.
    pub journal_live_blocks: u64,
    pub jmap_entries: u64,
    /// Memory the jmap holds (read-only: what a mount would allocate for it).
    pub jmap_bytes: u64,
}

impl Volume {
    /// Whether the newest copy of metadata block `block` is in the journal
    /// (committed, and in ordered mode not yet written home).
    pub fn metadata_in_journal(&self, block: u64) -> bool {
        self.writer.journaling.jbd2.as_ref().is_some_and(|j| j.read().has_copy(block))
    }

    /// Journal occupancy: live from the writing journal, else from the
    /// recovery scan done at open.
    pub fn journal_stats(&self) -> Option<JournalStats> {
        let info = self.journal.as_ref()?;
        if let Some(j) = self.writer.journaling.jbd2.as_ref().map(|j| j.read()) {
            let (fill, jmap) = (j.fill(), j.jmap_stats());
            return Some(JournalStats {
                journal_blocks: info.len_blocks,
                journal_used_blocks: fill.used,
                journal_tail: if fill.used == 0 { 0 } else { j.tail() },
                journal_head: j.head(),
                journal_live_blocks: jmap.entries as u64,
                jmap_entries: jmap.entries as u64,
                jmap_bytes: jmap.bytes as u64,
            });
        }
        let n = info.replayed_blocks;
        Some(JournalStats {
            journal_blocks: info.len_blocks,
            journal_used_blocks: info.used_blocks,
            journal_tail: u64::from(info.superblock.start),
            journal_head: info.head,
            journal_live_blocks: n as u64,
            jmap_entries: n as u64,
            jmap_bytes: if n == 0 { 0 } else { journal::Jmap::with_capacity(n).bytes() as u64 },
        })
    }
}
