//! Hashed directory index (htree / dx) blocks. The root (directory block 0)
//! begins with fake "." and ".." entries followed by `dx_root_info` and a
//! count/limit header; interior nodes begin with one empty fake entry. Both
//! then hold sorted (hash, block) pairs; with metadata_csum a `dx_tail`
//! follows the `limit` entries.

use crate::bytes::{le16, le32, need, put_le16, put_le32};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

const ROOT_INFO_OFFSET: usize = 0x18;
const ROOT_ENTRIES_OFFSET: usize = 0x20;
const NODE_ENTRIES_OFFSET: usize = 0x08;
const ENTRY_SIZE: usize = 8;
const TAIL_SIZE: usize = 8;

/// One index entry: names hashing to >= `hash` live under `block` (logical block of the directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DxEntry {
    /// Lowest hash in the subtree; the lowest bit marks a hash collision continuing from the previous block.
    pub hash: u32,
    pub block: u32,
}

/// A parsed index node (root or interior).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DxNode {
    /// Hash algorithm (root only).
    pub hash_version: u8,
    /// Levels of interior nodes below the root (root only).
    pub indirect_levels: u8,
    pub limit: u16,
    /// Entries; the first one's hash is implicit (0).
    pub entries: Vec<DxEntry>,
    /// Where the count/limit header starts in the block.
    pub entries_offset: usize,
}

impl DxNode {
    /// Parse the root block of an indexed directory.
    pub fn parse_root(block: &[u8], at: Location) -> Result<Self> {
        const S: &str = "htree root";
        need(S, block, ROOT_ENTRIES_OFFSET + ENTRY_SIZE).map_err(|e| e.at(at))?;
        let info_len = block[ROOT_INFO_OFFSET + 5];
        if info_len != 8 {
            return Err(FormatError::corrupt(
                S,
                at,
                Corruption::BadField { field: "info_length", value: u64::from(info_len) },
            ));
        }
        let hash_version = block[ROOT_INFO_OFFSET + 4];
        let indirect_levels = block[ROOT_INFO_OFFSET + 6];
        let mut node = Self::parse_entries(block, ROOT_ENTRIES_OFFSET, S, at)?;
        node.hash_version = hash_version;
        node.indirect_levels = indirect_levels;
        Ok(node)
    }

    /// Parse an interior index block.
    pub fn parse_node(block: &[u8], at: Location) -> Result<Self> {
        const S: &str = "htree node";
        need(S, block, NODE_ENTRIES_OFFSET + ENTRY_SIZE).map_err(|e| e.at(at))?;
        // The fake entry spans the block and has no inode.
        if le32(block, 0) != 0 {
            return Err(FormatError::corrupt(
                S,
                at,
                Corruption::BadField { field: "fake inode", value: u64::from(le32(block, 0)) },
            ));
        }
        Self::parse_entries(block, NODE_ENTRIES_OFFSET, S, at)
    }

    fn parse_entries(block: &[u8], off: usize, s: &'static str, at: Location) -> Result<Self> {
        let limit = le16(block, off);
        let count = le16(block, off + 2);
        let max = (block.len() - off) / ENTRY_SIZE;
        if limit == 0 || usize::from(limit) > max {
            return Err(FormatError::corrupt(
                s,
                at,
                Corruption::BadField { field: "dx limit", value: u64::from(limit) },
            ));
        }
        if count == 0 || count > limit {
            return Err(FormatError::corrupt(
                s,
                at,
                Corruption::BadField { field: "dx count", value: u64::from(count) },
            ));
        }
        let mut entries = Vec::with_capacity(usize::from(count));
        for i in 0..usize::from(count) {
            let p = off + i * ENTRY_SIZE;
            let hash = if i == 0 { 0 } else { le32(block, p) };
            if let Some(prev) = entries.last() {
                let prev: &DxEntry = prev;
                if hash < prev.hash {
                    return Err(FormatError::corrupt(
                        s,
                        at,
                        Corruption::BadField { field: "dx hash order", value: u64::from(hash) },
                    ));
                }
            }
            entries.push(DxEntry { hash, block: le32(block, p + 4) });
        }
        Ok(DxNode { hash_version: 0, indirect_levels: 0, limit, entries, entries_offset: off })
    }

    /// Index of the entry whose subtree may hold `hash`: the last entry with hash <= target.
    pub fn find(&self, hash: u32) -> usize {
        // entries[0] stands for -infinity; the rest are sorted.
        let rest = &self.entries[1..];
        rest.partition_point(|e| e.hash <= hash)
    }

    /// Write count/limit and entries at `entries_offset` (root info is written by the caller).
    pub fn write_entries(&self, block: &mut [u8]) {
        let off = self.entries_offset;
        put_le16(block, off, self.limit);
        put_le16(block, off + 2, self.entries.len() as u16);
        for (i, e) in self.entries.iter().enumerate() {
            let p = off + i * ENTRY_SIZE;
            if i > 0 {
                put_le32(block, p, e.hash);
            }
            put_le32(block, p + 4, e.block);
        }
    }
}

/// Offset of the dx tail for a node whose entries start at `off` with capacity `limit`.
fn tail_offset(off: usize, limit: u16) -> usize {
    off + usize::from(limit) * ENTRY_SIZE
}

fn dx_checksum(block: &[u8], off: usize, count: u16, tail: usize, inode_seed: u32) -> u32 {
    let size = off + usize::from(count) * ENTRY_SIZE;
    let c = crc32c(inode_seed, &block[..size]);
    let c = crc32c(c, &block[tail..tail + 4]);
    crc32c(c, &[0u8; 4])
}

/// Verify the dx tail of a root (`off` = 0x20) or interior (`off` = 8) block.
pub fn verify_tail(block: &[u8], off: usize, inode_seed: u32, at: Location) -> Result<()> {
    need("htree block", block, off + 4).map_err(|e| e.at(at))?;
    let limit = le16(block, off);
    let count = le16(block, off + 2);
    let tail = tail_offset(off, limit);
    if tail + TAIL_SIZE > block.len() || count > limit {
        return Err(FormatError::corrupt(
            "htree block",
            at,
            Corruption::BadField { field: "dx tail", value: tail as u64 },
        ));
    }
    let stored = le32(block, tail + 4);
    let computed = dx_checksum(block, off, count, tail, inode_seed);
    if stored != computed {
        return Err(FormatError::corrupt("htree block", at, Corruption::BadChecksum { stored, computed }));
    }
    Ok(())
}

/// Set the dx tail checksum of a root or interior block.
pub fn set_tail(block: &mut [u8], off: usize, inode_seed: u32) {
    let limit = le16(block, off);
    let count = le16(block, off + 2);
    let tail = tail_offset(off, limit);
    put_le32(block, tail, 0);
    let c = dx_checksum(block, off, count, tail, inode_seed);
    put_le32(block, tail + 4, c);
}

/// Offsets of the entry tables, for callers that verify tails.
pub const ROOT_OFFSET: usize = ROOT_ENTRIES_OFFSET;
pub const NODE_OFFSET: usize = NODE_ENTRIES_OFFSET;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn root_block(bs: usize, entries: &[(u32, u32)], csum: bool) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        b[ROOT_INFO_OFFSET + 4] = 1; // half_md4
        b[ROOT_INFO_OFFSET + 5] = 8;
        let limit = ((bs - ROOT_ENTRIES_OFFSET - if csum { TAIL_SIZE } else { 0 }) / ENTRY_SIZE) as u16;
        let node = DxNode {
            hash_version: 1,
            indirect_levels: 0,
            limit,
            entries: entries.iter().map(|&(hash, block)| DxEntry { hash, block }).collect(),
            entries_offset: ROOT_ENTRIES_OFFSET,
        };
        node.write_entries(&mut b);
        if csum {
            set_tail(&mut b, ROOT_ENTRIES_OFFSET, 99);
        }
        b
    }

    #[test]
    fn root_round_trip_find_and_checksum() {
        let b = root_block(4096, &[(0, 1), (0x1000, 2), (0x8000, 3)], true);
        let n = DxNode::parse_root(&b, Location::Unknown).unwrap();
        assert_eq!(n.entries.len(), 3);
        assert_eq!(n.find(0), 0);
        assert_eq!(n.find(0x0fff), 0);
        assert_eq!(n.find(0x1000), 1);
        assert_eq!(n.find(0xffff_fff0), 2);
        verify_tail(&b, ROOT_OFFSET, 99, Location::Unknown).unwrap();
        assert!(verify_tail(&b, ROOT_OFFSET, 98, Location::Unknown).is_err());
    }

    #[test]
    fn unsorted_or_overfull_index_is_corrupt() {
        let b = root_block(1024, &[(0, 1), (0x5000, 2), (0x1000, 3)], false);
        assert!(DxNode::parse_root(&b, Location::Unknown).is_err());
        let mut b = root_block(1024, &[(0, 1)], false);
        put_le16(&mut b, ROOT_ENTRIES_OFFSET, 5000);
        assert!(DxNode::parse_root(&b, Location::Unknown).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            let _ = DxNode::parse_root(&bytes, Location::Unknown);
            let _ = DxNode::parse_node(&bytes, Location::Unknown);
            let _ = verify_tail(&bytes, 8, 0, Location::Unknown);
        }
    }
}
