//! Test support: an in-memory journal and a builder that writes transactions
//! with the ondisk serialisers (as jbd2's commit code lays them out).
#![allow(dead_code)]

pub mod dev;
pub mod tools;

use std::io;

use journal::JournalReader;
use ondisk::jbd2::descriptor::{FLAG_ESCAPE, FLAG_LAST_TAG, FLAG_SAME_UUID};
use ondisk::jbd2::*;

/// A journal held in memory.
#[derive(Clone)]
pub struct MemJournal {
    pub bs: u32,
    pub bytes: Vec<u8>,
}

impl MemJournal {
    pub fn block(&self, n: u64) -> &[u8] {
        let bs = self.bs as usize;
        &self.bytes[n as usize * bs..(n as usize + 1) * bs]
    }
    pub fn block_mut(&mut self, n: u64) -> &mut [u8] {
        let bs = self.bs as usize;
        &mut self.bytes[n as usize * bs..(n as usize + 1) * bs]
    }
}

impl JournalReader for MemJournal {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn len_blocks(&self) -> u64 {
        (self.bytes.len() / self.bs as usize) as u64
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()> {
        if jblock >= self.len_blocks() {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "past journal end"));
        }
        buf.copy_from_slice(self.block(jblock));
        Ok(())
    }
}

/// Revoke and checksum v3, with 64-bit tags and with 32-bit ones.
pub const V3_64: u32 = FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V3;
pub const V3_32: u32 = FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_CSUM_V3;

/// Writes a journal transaction by transaction.
pub struct Builder {
    pub sb: Superblock,
    pub layout: Layout,
    pub j: MemJournal,
    pub pos: u64,
    pub seq: u32,
    pub time: u64,
    /// Running v1 crc32_be of the current transaction.
    crc: u32,
}

impl Builder {
    pub fn new(bs: u32, nblocks: u32, compat: u32, incompat: u32) -> Builder {
        Self::with_start(bs, nblocks, compat, incompat, 1, 100)
    }

    /// A journal whose log starts at `start` with transaction `seq`.
    pub fn with_start(bs: u32, nblocks: u32, compat: u32, incompat: u32, start: u32, seq: u32) -> Builder {
        let csum = incompat & (FEATURE_INCOMPAT_CSUM_V2 | FEATURE_INCOMPAT_CSUM_V3) != 0;
        let sb = Superblock {
            version: BlockType::SuperblockV2,
            header_sequence: 0,
            block_size: bs,
            max_len: nblocks,
            first: 1,
            sequence: seq,
            start,
            errno: 0,
            feature_compat: compat,
            feature_incompat: incompat,
            feature_ro_compat: 0,
            uuid: *b"0123456789abcdef",
            nr_users: 1,
            dynsuper: 0,
            max_transaction: 0,
            max_trans_data: 0,
            checksum_type: if csum { superblock::CHECKSUM_TYPE_CRC32C } else { 0 },
            num_fc_blocks: 0,
            head: 0,
            checksum: 0,
            users: [0; 768],
        };
        let layout = sb.layout();
        Builder {
            j: MemJournal { bs, bytes: vec![0; bs as usize * nblocks as usize] },
            layout,
            pos: u64::from(start),
            seq,
            time: 1_000,
            sb,
            crc: !0,
        }
    }

    fn put(&mut self, block: &[u8]) -> u64 {
        let at = self.pos;
        self.j.block_mut(at).copy_from_slice(block);
        self.pos += 1;
        if self.pos >= u64::from(self.sb.log_end()) {
            self.pos = u64::from(self.sb.first);
        }
        at
    }

    /// One descriptor block with its data blocks; returns the data blocks' journal numbers.
    pub fn data(&mut self, items: &[(u64, Vec<u8>)]) -> Vec<u64> {
        let bs = self.j.bs as usize;
        let mut tags = Vec::new();
        let mut copies = Vec::new();
        for (i, (blk, data)) in items.iter().enumerate() {
            let mut copy = data.clone();
            let mut flags = if i == 0 { 0 } else { FLAG_SAME_UUID };
            if copy[..4] == MAGIC.to_be_bytes() {
                copy[..4].fill(0);
                flags |= FLAG_ESCAPE;
            }
            if i + 1 == items.len() {
                flags |= FLAG_LAST_TAG;
            }
            let full = data_block_checksum(self.layout.seed, self.seq, &copy);
            let checksum = match self.layout.checksum {
                Checksum::V3 => full,
                Checksum::V2 => full & 0xFFFF,
                _ => 0,
            };
            let uuid = if i == 0 { Some(self.sb.uuid) } else { None };
            tags.push(Tag { block: *blk, flags, checksum, uuid });
            copies.push(copy);
        }
        let mut b = vec![0u8; bs];
        DescriptorBlock { sequence: self.seq, tags }.write_to(&mut b, &self.layout).unwrap();
        self.crc = crc32_be(self.crc, &b);
        self.put(&b);
        copies
            .iter()
            .map(|c| {
                self.crc = crc32_be(self.crc, c);
                self.put(c)
            })
            .collect()
    }

    pub fn revoke(&mut self, blocks: &[u64]) -> u64 {
        let mut b = vec![0u8; self.j.bs as usize];
        RevokeBlock { sequence: self.seq, blocks: blocks.to_vec() }.write_to(&mut b, &self.layout).unwrap();
        self.put(&b)
    }

    /// The commit block; returns its journal block number.
    pub fn commit(&mut self) -> u64 {
        let mut c = CommitBlock {
            sequence: self.seq,
            checksum_type: 0,
            checksum_size: 0,
            checksums: [0; 8],
            commit_sec: self.time,
            commit_nsec: 0,
        };
        if self.layout.checksum == Checksum::V1 {
            c.checksum_type = commit::CHECKSUM_TYPE_CRC32;
            c.checksum_size = commit::CRC32_CHECKSUM_SIZE;
            c.checksums[0] = self.crc;
        }
        let mut b = vec![0u8; self.j.bs as usize];
        c.write_to(&mut b, &self.layout).unwrap();
        self.seq = self.seq.wrapping_add(1);
        self.time += 1;
        self.crc = !0;
        self.put(&b)
    }

    /// Write the superblock and return the journal.
    pub fn finish(mut self) -> MemJournal {
        let bs = self.j.bs as usize;
        let mut b = vec![0u8; bs];
        self.sb.write_to(&mut b).unwrap();
        self.j.bytes[..bs].copy_from_slice(&b);
        self.j
    }
}

/// A block of `bs` bytes filled with `v`.
pub fn fill(bs: u32, v: u8) -> Vec<u8> {
    vec![v; bs as usize]
}
