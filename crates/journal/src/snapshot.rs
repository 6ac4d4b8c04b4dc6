//! The jmap snapshot: what a recovery scan of a live log would find, saved
//! so that the next mount need not scan (lazy mode's mount time).
//!
//! A snapshot is the journal's live state at a moment: its transactions
//! (sequence, extent, size, commit time) and every static block's live copy
//! (journal block, escape flag, owning transaction), stamped with the journal
//! superblock's UUID, `s_start` and `s_sequence`, and the head and next
//! transaction ID. It lives outside the volume (no format change) and is
//! trusted only if:
//! - its checksum (crc32c over everything before it) is right (this only
//!   catches damage: anyone can compute it);
//! - the stamp matches the journal superblock as it is now;
//! - the log ends at the stamped head: the block there is not a journal
//!   block of the transaction that would follow (a mount that committed
//!   after the snapshot was taken left one there);
//! - it is what a scan of the log would rebuild ([`crate::recovery::verify`]):
//!   the transactions and every copy are checked against the descriptor,
//!   revoke and commit blocks of the log, so a snapshot written by anyone
//!   but us at our last unmount (a file forged beside the image) is refused.
//!   That reads the log's metadata blocks, not its data blocks.
//!
//! The caller removes the file before the first new commit, so a crash
//! afterwards can never bring back a snapshot older than the log.
//!
//! Decoded, it is a [`Recovery`] like the scan's, so replay, the in-memory
//! overlay and [`crate::Journal::resume`] take it unchanged.
//!
//! Layout (little-endian): magic, version, uuid, s_start, s_sequence, head,
//! end_sequence, next_sequence, transaction count, entry count, then the
//! transactions (sequence u32, start u64, end u64, blocks u64, commit_sec u64),
//! then the entries (static u64, jblock u64, sequence u32, escaped u8), then
//! the crc32c (u32).

use crate::recovery::{RecoveredTransaction, Recovery, ReplayedCopy};
use crate::{Error, JournalReader};
use ondisk::jbd2::header::Header;
use ondisk::jbd2::Superblock;
use std::collections::BTreeMap;

const MAGIC: &[u8; 8] = b"E4LZJMAP";
const VERSION: u32 = 1;
const FIXED: usize = 8 + 4 + 16 + 8 + 4 + 8 + 4 + 4 + 8 + 8;
const TXN: usize = 4 + 8 + 8 + 8 + 8;
const ENTRY: usize = 8 + 8 + 4 + 1;

/// Why a snapshot was not used (the caller then scans the log).
#[derive(Debug, PartialEq, Eq)]
pub enum Stale {
    Malformed(&'static str),
    Checksum,
    /// The journal superblock is not the one the snapshot was taken of.
    Stamp,
    /// Transactions were committed after the snapshot.
    LogMovedOn,
    /// The snapshot does not describe the log: why.
    Mismatch(String),
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::Malformed(why) => write!(f, "malformed: {why}"),
            Stale::Checksum => f.write_str("bad checksum"),
            Stale::Stamp => f.write_str("taken of another journal state"),
            Stale::LogMovedOn => f.write_str("the log has moved on since"),
            Stale::Mismatch(why) => write!(f, "does not match the log: {why}"),
        }
    }
}

/// The largest snapshot of a journal of `len_blocks` blocks: one transaction
/// and one copy per block at most (a bound for reading the file).
pub fn max_len(len_blocks: u64) -> u64 {
    (FIXED + 4) as u64 + len_blocks.saturating_mul((TXN + ENTRY) as u64)
}

/// Encode the live state given as a recovery-like description.
pub fn encode(
    sb: &Superblock,
    head: u64,
    end_sequence: u32,
    next_sequence: u32,
    txns: &[RecoveredTransaction],
    entries: &[(u64, ReplayedCopy)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(FIXED + txns.len() * TXN + entries.len() * ENTRY + 4);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&sb.uuid);
    out.extend_from_slice(&u64::from(sb.start).to_le_bytes());
    out.extend_from_slice(&sb.sequence.to_le_bytes());
    out.extend_from_slice(&head.to_le_bytes());
    out.extend_from_slice(&end_sequence.to_le_bytes());
    out.extend_from_slice(&next_sequence.to_le_bytes());
    out.extend_from_slice(&(txns.len() as u64).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for t in txns {
        out.extend_from_slice(&t.sequence.to_le_bytes());
        out.extend_from_slice(&t.start.to_le_bytes());
        out.extend_from_slice(&t.end.to_le_bytes());
        out.extend_from_slice(&t.blocks.to_le_bytes());
        out.extend_from_slice(&t.commit_sec.to_le_bytes());
    }
    for (s, c) in entries {
        out.extend_from_slice(&s.to_le_bytes());
        out.extend_from_slice(&c.jblock.to_le_bytes());
        out.extend_from_slice(&c.sequence.to_le_bytes());
        out.push(u8::from(c.escaped));
    }
    let crc = ondisk::csum::crc32c(!0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Little-endian reader over the snapshot bytes.
struct Cursor<'a>(&'a [u8]);

impl Cursor<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], Stale> {
        if self.0.len() < N {
            return Err(Stale::Malformed("truncated"));
        }
        let (a, rest) = self.0.split_at(N);
        self.0 = rest;
        Ok(a.try_into().expect("split at N"))
    }
    fn u32(&mut self) -> Result<u32, Stale> {
        self.take::<4>().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Result<u64, Stale> {
        self.take::<8>().map(u64::from_le_bytes)
    }
}

/// Decode `bytes` for the journal `reader` whose superblock is `sb`, or say why not.
pub fn decode<R: JournalReader + ?Sized>(
    bytes: &[u8],
    sb: &Superblock,
    reader: &R,
) -> Result<Result<Recovery, Stale>, Error> {
    let r = parse(bytes, sb);
    let Ok(mut rec) = r else { return Ok(r) };
    // The log must end at the stamped head: a block of the next transaction
    // there (or of the filler a resume writes) means it moved on.
    if !(u64::from(sb.first)..u64::from(sb.log_end())).contains(&rec.head) {
        return Ok(Err(Stale::Mismatch(format!("head {} outside the log", rec.head))));
    }
    let mut buf = vec![0u8; reader.block_size() as usize];
    reader.read_block(rec.head, &mut buf).map_err(|source| Error::Io { jblock: rec.head, source })?;
    if Header::peek(&buf).is_some_and(|h| h.sequence == rec.end_sequence) {
        return Ok(Err(Stale::LogMovedOn));
    }
    if let Err(why) = crate::recovery::verify(reader, &mut rec) {
        return Ok(Err(Stale::Mismatch(why)));
    }
    Ok(Ok(rec))
}

fn parse(bytes: &[u8], sb: &Superblock) -> Result<Recovery, Stale> {
    if bytes.len() < FIXED + 4 {
        return Err(Stale::Malformed("truncated"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if ondisk::csum::crc32c(!0, body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(Stale::Checksum);
    }
    let mut c = Cursor(body);
    if &c.take::<8>()? != MAGIC || c.u32()? != VERSION {
        return Err(Stale::Malformed("not a jmap snapshot of this version"));
    }
    let uuid = c.take::<16>()?;
    let (start, sequence) = (c.u64()?, c.u32()?);
    if uuid != sb.uuid || start != u64::from(sb.start) || sequence != sb.sequence || sb.start == 0 {
        return Err(Stale::Stamp);
    }
    let (head, end_sequence, next_sequence) = (c.u64()?, c.u32()?, c.u32()?);
    let (ntx, nent) = (c.u64()?, c.u64()?);
    let expected = (ntx as u128) * TXN as u128 + (nent as u128) * ENTRY as u128;
    if expected != c.0.len() as u128 {
        return Err(Stale::Malformed("counts do not match the size"));
    }
    let mut extents = Vec::with_capacity(ntx as usize);
    for _ in 0..ntx {
        extents.push(RecoveredTransaction {
            sequence: c.u32()?,
            start: c.u64()?,
            end: c.u64()?,
            blocks: c.u64()?,
            commit_sec: c.u64()?,
        });
    }
    let mut blocks = BTreeMap::new();
    for _ in 0..nent {
        let s = c.u64()?;
        let (jblock, seq, escaped) = (c.u64()?, c.u32()?, c.take::<1>()?[0] != 0);
        blocks.insert(s, ReplayedCopy { jblock, escaped, sequence: seq });
    }
    if extents.first().is_some_and(|t| t.sequence != sequence) {
        return Err(Stale::Malformed("the first transaction is not the superblock's"));
    }
    let mut rec = Recovery::empty(sb.clone());
    rec.needed = true;
    rec.blocks = blocks;
    rec.start_sequence = sequence;
    rec.end_sequence = end_sequence;
    rec.next_sequence = next_sequence;
    rec.last_transaction = extents.last().map(|t| t.sequence);
    rec.head = head;
    rec.transactions = extents.len() as u32;
    rec.extents = extents;
    Ok(rec)
}
