//! Extent trees: a 12-byte header followed by index entries (interior nodes)
//! or extents (leaves). The root lives in the inode's `i_block`; other nodes
//! fill a block and end with a crc32c tail.

use crate::bytes::{le16, le32, need, put_le16, put_le32};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

pub const EXTENT_MAGIC: u16 = 0xF30A;
pub const HEADER_SIZE: usize = 12;
pub const ENTRY_SIZE: usize = 12;
/// Longest initialized extent; longer lengths mark uninitialized (preallocated) extents.
pub const MAX_INIT_LEN: u16 = 32768;
/// The kernel never builds trees deeper than this.
pub const MAX_DEPTH: u16 = 5;

/// Node header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentHeader {
    /// Number of valid entries.
    pub entries: u16,
    /// Capacity of the node in entries.
    pub max: u16,
    /// 0 for a leaf; otherwise the height above the leaves.
    pub depth: u16,
    pub generation: u32,
}

/// Interior entry: the subtree at `leaf` covers logical blocks from `block` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtentIndex {
    pub block: u32,
    pub leaf: u64,
}

/// Leaf entry: `len` logical blocks from `block` map to physical blocks from `start`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub block: u32,
    pub len: u16,
    pub start: u64,
    /// Preallocated but not written: reads as zeros.
    pub uninit: bool,
}

impl Extent {
    pub fn end(&self) -> u64 {
        u64::from(self.block) + u64::from(self.len)
    }
}

/// A parsed node: its header and either index entries or extents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExtentNode {
    Index(ExtentHeader, Vec<ExtentIndex>),
    Leaf(ExtentHeader, Vec<Extent>),
}

impl ExtentNode {
    pub fn header(&self) -> &ExtentHeader {
        match self {
            ExtentNode::Index(h, _) | ExtentNode::Leaf(h, _) => h,
        }
    }

    pub fn header_mut(&mut self) -> &mut ExtentHeader {
        match self {
            ExtentNode::Index(h, _) | ExtentNode::Leaf(h, _) => h,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        match self {
            ExtentNode::Index(_, v) => v.len(),
            ExtentNode::Leaf(_, v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The logical block of the first entry: the key its parent indexes it by.
    pub fn first_key(&self) -> Option<u32> {
        match self {
            ExtentNode::Index(_, v) => v.first().map(|e| e.block),
            ExtentNode::Leaf(_, v) => v.first().map(|e| e.block),
        }
    }

    /// Move the entries from `at` on into a new node of the same depth with
    /// capacity `max` (a split); both headers' counts follow.
    pub fn split_off(&mut self, at: usize, max: u16) -> ExtentNode {
        let h = *self.header();
        let header = |n: usize| ExtentHeader { entries: n as u16, max, depth: h.depth, generation: h.generation };
        let right = match self {
            ExtentNode::Index(_, v) => {
                let r = v.split_off(at);
                ExtentNode::Index(header(r.len()), r)
            }
            ExtentNode::Leaf(_, v) => {
                let r = v.split_off(at);
                ExtentNode::Leaf(header(r.len()), r)
            }
        };
        self.sync_count();
        right
    }

    /// Set the header's entry count from the entries held.
    pub fn sync_count(&mut self) {
        let n = self.len() as u16;
        self.header_mut().entries = n;
    }

    /// Parse a node from `buf` (the 60-byte root or a whole block). Entries
    /// must be sorted by logical block and fit the buffer.
    pub fn parse(buf: &[u8], at: Location) -> Result<Self> {
        const S: &str = "extent node";
        need(S, buf, HEADER_SIZE).map_err(|e| e.at(at))?;
        let bad = |field: &'static str, value: u64| FormatError::corrupt(S, at, Corruption::BadField { field, value });
        let magic = le16(buf, 0);
        if magic != EXTENT_MAGIC {
            return Err(FormatError::corrupt(S, at, Corruption::BadMagic { found: u64::from(magic) }));
        }
        let h =
            ExtentHeader { entries: le16(buf, 2), max: le16(buf, 4), depth: le16(buf, 6), generation: le32(buf, 8) };
        if h.depth > MAX_DEPTH {
            return Err(FormatError::corrupt(S, at, Corruption::TooDeep { depth: u32::from(h.depth) }));
        }
        let capacity = (buf.len() - HEADER_SIZE) / ENTRY_SIZE;
        if usize::from(h.max) > capacity {
            return Err(bad("eh_max", u64::from(h.max)));
        }
        if h.entries > h.max {
            return Err(bad("eh_entries", u64::from(h.entries)));
        }
        let entry = |i: usize| &buf[HEADER_SIZE + i * ENTRY_SIZE..HEADER_SIZE + (i + 1) * ENTRY_SIZE];
        let n = usize::from(h.entries);
        if h.depth == 0 {
            let mut v = Vec::with_capacity(n);
            let mut next = 0u64;
            for i in 0..n {
                let e = entry(i);
                let raw_len = le16(e, 4);
                let (len, uninit) =
                    if raw_len > MAX_INIT_LEN { (raw_len - MAX_INIT_LEN, true) } else { (raw_len, false) };
                let x = Extent {
                    block: le32(e, 0),
                    len,
                    start: u64::from(le16(e, 6)) << 32 | u64::from(le32(e, 8)),
                    uninit,
                };
                if len == 0 {
                    return Err(bad("extent length", 0));
                }
                if u64::from(x.block) < next {
                    return Err(bad("extent order", u64::from(x.block)));
                }
                next = x.end();
                v.push(x);
            }
            Ok(ExtentNode::Leaf(h, v))
        } else {
            let mut v = Vec::with_capacity(n);
            for i in 0..n {
                let e = entry(i);
                let x = ExtentIndex { block: le32(e, 0), leaf: u64::from(le16(e, 8)) << 32 | u64::from(le32(e, 4)) };
                if let Some(prev) = v.last() {
                    let prev: &ExtentIndex = prev;
                    if x.block <= prev.block {
                        return Err(bad("index order", u64::from(x.block)));
                    }
                }
                v.push(x);
            }
            Ok(ExtentNode::Index(h, v))
        }
    }

    /// Serialise into `buf` (60-byte root or whole block); the tail checksum is set separately.
    pub fn write(&self, buf: &mut [u8]) {
        let h = self.header();
        debug_assert!(HEADER_SIZE + usize::from(h.max) * ENTRY_SIZE <= buf.len());
        put_le16(buf, 0, EXTENT_MAGIC);
        put_le16(buf, 4, h.max);
        put_le16(buf, 6, h.depth);
        put_le32(buf, 8, h.generation);
        let mut put_entry = |i: usize, f: &mut dyn FnMut(&mut [u8])| {
            f(&mut buf[HEADER_SIZE + i * ENTRY_SIZE..HEADER_SIZE + (i + 1) * ENTRY_SIZE]);
        };
        let count = match self {
            ExtentNode::Leaf(_, v) => {
                for (i, x) in v.iter().enumerate() {
                    put_entry(i, &mut |e| {
                        put_le32(e, 0, x.block);
                        put_le16(e, 4, if x.uninit { x.len + MAX_INIT_LEN } else { x.len });
                        put_le16(e, 6, (x.start >> 32) as u16);
                        put_le32(e, 8, x.start as u32);
                    });
                }
                v.len()
            }
            ExtentNode::Index(_, v) => {
                for (i, x) in v.iter().enumerate() {
                    put_entry(i, &mut |e| {
                        put_le32(e, 0, x.block);
                        put_le32(e, 4, x.leaf as u32);
                        put_le16(e, 8, (x.leaf >> 32) as u16);
                        put_le16(e, 10, 0);
                    });
                }
                v.len()
            }
        };
        put_le16(buf, 2, count as u16);
    }
}

/// Offset of the crc32c tail in a non-root node of capacity `max`.
fn tail_offset(max: u16) -> usize {
    HEADER_SIZE + usize::from(max) * ENTRY_SIZE
}

/// Verify the tail checksum of a non-root extent block, seeded with the inode's seed.
pub fn verify_block_checksum(block: &[u8], inode_seed: u32, at: Location) -> Result<()> {
    need("extent block", block, HEADER_SIZE).map_err(|e| e.at(at))?;
    let off = tail_offset(le16(block, 4));
    need("extent block", block, off + 4).map_err(|e| e.at(at))?;
    let stored = le32(block, off);
    let computed = crc32c(inode_seed, &block[..off]);
    if stored != computed {
        return Err(FormatError::corrupt("extent block", at, Corruption::BadChecksum { stored, computed }));
    }
    Ok(())
}

/// Set the tail checksum of a non-root extent block.
pub fn set_block_checksum(block: &mut [u8], inode_seed: u32) {
    let off = tail_offset(le16(block, 4));
    let c = crc32c(inode_seed, &block[..off]);
    put_le32(block, off, c);
}

/// The header at the start of `buf` (an inode's i_block holds the root),
/// read without the entries or any check beyond the magic; the depth at
/// most [`MAX_DEPTH`]. For estimates only: the tree itself is checked when
/// it is walked.
pub fn peek_header(buf: &[u8]) -> Option<ExtentHeader> {
    if buf.len() < HEADER_SIZE || le16(buf, 0) != EXTENT_MAGIC {
        return None;
    }
    Some(ExtentHeader {
        entries: le16(buf, 2),
        max: le16(buf, 4),
        depth: le16(buf, 6).min(MAX_DEPTH),
        generation: le32(buf, 8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn peek_header_reads_what_write_wrote() {
        let node = ExtentNode::Index(
            ExtentHeader { entries: 1, max: 4, depth: 2, generation: 7 },
            vec![ExtentIndex { block: 0, leaf: 9 }],
        );
        let mut buf = [0u8; 60];
        node.write(&mut buf);
        assert_eq!(peek_header(&buf), Some(*node.header()));
        put_le16(&mut buf, 6, 40);
        assert_eq!(peek_header(&buf).map(|h| h.depth), Some(MAX_DEPTH), "bounded");
        assert_eq!(peek_header(&[0u8; 60]), None, "no magic: no tree");
    }

    #[test]
    fn leaf_round_trip() {
        let node = ExtentNode::Leaf(
            ExtentHeader { entries: 2, max: 4, depth: 0, generation: 0 },
            vec![
                Extent { block: 0, len: 10, start: 1000, uninit: false },
                Extent { block: 20, len: 5, start: (7 << 32) | 9, uninit: true },
            ],
        );
        let mut buf = [0u8; 60];
        node.write(&mut buf);
        assert_eq!(ExtentNode::parse(&buf, Location::Unknown).unwrap(), node);
    }

    #[test]
    fn block_checksum_round_trip() {
        let node = ExtentNode::Index(
            ExtentHeader { entries: 1, max: 340, depth: 1, generation: 0 },
            vec![ExtentIndex { block: 0, leaf: 555 }],
        );
        let mut blk = vec![0u8; 4096];
        node.write(&mut blk);
        set_block_checksum(&mut blk, 0x1234);
        verify_block_checksum(&blk, 0x1234, Location::Block(1)).unwrap();
        blk[20] ^= 1;
        assert!(verify_block_checksum(&blk, 0x1234, Location::Block(1)).is_err());
    }

    #[test]
    fn rejects_overlap_and_bad_counts() {
        let mut buf = [0u8; 60];
        ExtentNode::Leaf(
            ExtentHeader { entries: 2, max: 4, depth: 0, generation: 0 },
            vec![
                Extent { block: 0, len: 10, start: 1, uninit: false },
                Extent { block: 5, len: 1, start: 2, uninit: false },
            ],
        )
        .write(&mut buf);
        assert!(ExtentNode::parse(&buf, Location::Unknown).is_err());
        put_le16(&mut buf, 4, 200); // max beyond the 60-byte root
        assert!(ExtentNode::parse(&buf, Location::Unknown).is_err());
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ExtentNode::parse(&bytes, Location::Unknown);
            let _ = verify_block_checksum(&bytes, 0, Location::Unknown);
        }
    }
}
