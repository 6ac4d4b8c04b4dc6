//! The 12-byte header that starts every jbd2 metadata block (`journal_header_t`).
//!
//! | offset | size | field         | meaning                                   |
//! |--------|------|---------------|-------------------------------------------|
//! | 0x0    | 4    | `h_magic`     | 0xC03B3998, big-endian                    |
//! | 0x4    | 4    | `h_blocktype` | 1 descriptor, 2 commit, 3/4 superblock v1/v2, 5 revoke |
//! | 0x8    | 4    | `h_sequence`  | transaction the block belongs to          |

use crate::bytes::{be32, need, put_be32};
use crate::{Corruption, FormatError, Location, Result};

/// jbd2's magic number (`JBD2_MAGIC_NUMBER`).
pub const MAGIC: u32 = 0xC03B_3998;
/// Size of the common header in bytes.
pub const HEADER_SIZE: usize = 12;

const STRUCTURE: &str = "jbd2 block header";

/// The kind of a journal metadata block (`h_blocktype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockType {
    /// 1: descriptor block, tags naming the data blocks that follow it.
    Descriptor,
    /// 2: commit block, ends a transaction.
    Commit,
    /// 3: journal superblock, version 1 (no feature fields).
    SuperblockV1,
    /// 4: journal superblock, version 2.
    SuperblockV2,
    /// 5: revoke block, static blocks not to replay.
    Revoke,
    /// Any other value (recovery treats it as the end of the log).
    Other(u32),
}

impl BlockType {
    /// Decode `h_blocktype`.
    pub fn from_raw(v: u32) -> BlockType {
        match v {
            1 => BlockType::Descriptor,
            2 => BlockType::Commit,
            3 => BlockType::SuperblockV1,
            4 => BlockType::SuperblockV2,
            5 => BlockType::Revoke,
            other => BlockType::Other(other),
        }
    }

    /// Encode as `h_blocktype`.
    pub fn raw(self) -> u32 {
        match self {
            BlockType::Descriptor => 1,
            BlockType::Commit => 2,
            BlockType::SuperblockV1 => 3,
            BlockType::SuperblockV2 => 4,
            BlockType::Revoke => 5,
            BlockType::Other(v) => v,
        }
    }
}

/// A parsed header (its magic has been checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// `h_blocktype`: what the rest of the block holds.
    pub block_type: BlockType,
    /// `h_sequence`: the transaction ID the block belongs to.
    pub sequence: u32,
}

impl Header {
    /// Parse a header; fails on a short buffer or a wrong magic number.
    pub fn parse(buf: &[u8]) -> Result<Header> {
        need(STRUCTURE, buf, HEADER_SIZE)?;
        let magic = be32(buf, 0);
        if magic != MAGIC {
            return Err(FormatError::corrupt(
                STRUCTURE,
                Location::Unknown,
                Corruption::BadMagic { found: u64::from(magic) },
            ));
        }
        Ok(Header { block_type: BlockType::from_raw(be32(buf, 4)), sequence: be32(buf, 8) })
    }

    /// The header if `buf` starts with the journal magic, else `None` (a data
    /// block or unwritten space, which recovery takes as the end of the log).
    pub fn peek(buf: &[u8]) -> Option<Header> {
        Header::parse(buf).ok()
    }

    /// Parse and require a given block type.
    pub(crate) fn expect(structure: &'static str, buf: &[u8], want: BlockType) -> Result<Header> {
        let h = Header::parse(buf).map_err(|e| match e {
            FormatError::Corrupt { at, why, .. } => FormatError::Corrupt { structure, at, why },
            other => other,
        })?;
        if h.block_type != want {
            return Err(FormatError::corrupt(
                structure,
                Location::Unknown,
                Corruption::BadField { field: "h_blocktype", value: u64::from(h.block_type.raw()) },
            ));
        }
        Ok(h)
    }

    /// Write the header (magic, type, sequence) into the first 12 bytes.
    pub fn write_to(&self, buf: &mut [u8]) -> Result<()> {
        need(STRUCTURE, buf, HEADER_SIZE)?;
        put_be32(buf, 0, MAGIC);
        put_be32(buf, 4, self.block_type.raw());
        put_be32(buf, 8, self.sequence);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_valid() {
        let b = [0xC0, 0x3B, 0x39, 0x98, 0, 0, 0, 2, 0, 0, 1, 0];
        let h = Header::parse(&b).unwrap();
        assert_eq!(h, Header { block_type: BlockType::Commit, sequence: 256 });
    }

    #[test]
    fn rejects_truncated_and_bad_magic() {
        assert!(matches!(
            Header::parse(&[0xC0, 0x3B]),
            Err(FormatError::Corrupt { why: Corruption::Truncated { need: 12, have: 2 }, .. })
        ));
        let b = [0x98, 0x39, 0x3B, 0xC0, 0, 0, 0, 1, 0, 0, 0, 0];
        assert!(matches!(
            Header::parse(&b),
            Err(FormatError::Corrupt { why: Corruption::BadMagic { found: 0x9839_3BC0 }, .. })
        ));
        assert_eq!(Header::peek(&b), None);
    }

    #[test]
    fn expect_checks_type() {
        let mut b = [0u8; 12];
        Header { block_type: BlockType::Revoke, sequence: 3 }.write_to(&mut b).unwrap();
        assert!(Header::expect("x", &b, BlockType::Revoke).is_ok());
        assert!(Header::expect("x", &b, BlockType::Commit).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(t in any::<u32>(), seq in any::<u32>()) {
            let h = Header { block_type: BlockType::from_raw(t), sequence: seq };
            let mut b = [0u8; 12];
            h.write_to(&mut b).unwrap();
            prop_assert_eq!(Header::parse(&b).unwrap(), h);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..20)) {
            let _ = Header::parse(&b);
        }
    }
}
