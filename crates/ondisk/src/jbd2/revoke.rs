//! Revoke blocks (`jbd2_journal_revoke_header_t` + records): static blocks
//! whose copies in this and earlier transactions must not be replayed.
//!
//! | offset | size | field     | meaning                                        |
//! |--------|------|-----------|------------------------------------------------|
//! | 0x00   | 12   | header    | block type 5, transaction sequence             |
//! | 0x0C   | 4    | `r_count` | bytes used in the block, header included       |
//! | 0x10   | ...  | records   | be32 block numbers, or be64 with 64BIT          |
//!
//! With csum v2/v3 the last 4 bytes are a tail: crc32c(seed, block with tail zeroed).

use super::header::{BlockType, Header};
use super::Layout;
use crate::bytes::{be32, be64, need, put_be32, put_be64};
use crate::{Corruption, FormatError, Location, Result};

const STRUCTURE: &str = "jbd2 revoke block";
/// Size of the revoke header (common header + `r_count`).
pub const REVOKE_HEADER_SIZE: usize = 16;

/// A parsed revoke block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RevokeBlock {
    /// Header `h_sequence`: the revoking transaction.
    pub sequence: u32,
    /// The revoked static block numbers, in order.
    pub blocks: Vec<u64>,
}

impl RevokeBlock {
    /// How many records fit in one block.
    pub fn capacity(layout: &Layout) -> usize {
        (layout.block_bytes().saturating_sub(REVOKE_HEADER_SIZE + layout.tail_bytes())) / layout.revoke_record_bytes()
    }

    /// Parse one journal block. Like jbd2, an `r_count` larger than the block
    /// (minus the tail) is corruption; records are read while a whole one fits
    /// below `r_count`. The tail checksum is checked by [`verify_checksum`].
    pub fn parse(buf: &[u8], layout: &Layout) -> Result<RevokeBlock> {
        need(STRUCTURE, buf, layout.block_bytes().max(REVOKE_HEADER_SIZE))?;
        let header = Header::expect(STRUCTURE, buf, BlockType::Revoke)?;
        let count = be32(buf, 12) as usize;
        if count > layout.block_bytes().saturating_sub(layout.tail_bytes()) {
            return Err(FormatError::corrupt(
                STRUCTURE,
                Location::Unknown,
                Corruption::BadField { field: "r_count", value: count as u64 },
            ));
        }
        let rec = layout.revoke_record_bytes();
        let mut blocks = Vec::new();
        let mut off = REVOKE_HEADER_SIZE;
        while off + rec <= count {
            blocks.push(if rec == 8 { be64(buf, off) } else { u64::from(be32(buf, off)) });
            off += rec;
        }
        Ok(RevokeBlock { sequence: header.sequence, blocks })
    }

    /// Serialise into one journal block, with `r_count` and the tail checksum.
    /// Fails if the records do not fit.
    pub fn write_to(&self, buf: &mut [u8], layout: &Layout) -> Result<()> {
        need(STRUCTURE, buf, layout.block_bytes().max(REVOKE_HEADER_SIZE))?;
        if self.blocks.len() > Self::capacity(layout) {
            return Err(FormatError::corrupt(
                STRUCTURE,
                Location::Unknown,
                Corruption::Truncated {
                    need: REVOKE_HEADER_SIZE + self.blocks.len() * layout.revoke_record_bytes() + layout.tail_bytes(),
                    have: layout.block_bytes(),
                },
            ));
        }
        let buf = &mut buf[..layout.block_bytes()];
        buf.fill(0);
        Header { block_type: BlockType::Revoke, sequence: self.sequence }.write_to(buf)?;
        let rec = layout.revoke_record_bytes();
        let mut off = REVOKE_HEADER_SIZE;
        for &b in &self.blocks {
            if rec == 8 {
                put_be64(buf, off, b);
            } else {
                put_be32(buf, off, b as u32);
            }
            off += rec;
        }
        put_be32(buf, 12, off as u32);
        super::set_tail(buf, layout);
        Ok(())
    }
}

/// Verify the tail checksum of a revoke block (Ok without csum v2/v3).
pub fn verify_checksum(buf: &[u8], layout: &Layout) -> Result<()> {
    super::verify_tail(STRUCTURE, buf, layout)
}

#[cfg(test)]
mod tests {
    use super::super::{test_layout, Checksum};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_64_and_32() {
        for is64 in [true, false] {
            let l = test_layout(1024, Checksum::V3, is64);
            let r = RevokeBlock { sequence: 5, blocks: vec![1, 2, 0xFFFF_FFFF] };
            let mut b = vec![0u8; 1024];
            r.write_to(&mut b, &l).unwrap();
            assert_eq!(be32(&b, 12) as usize, 16 + 3 * l.revoke_record_bytes());
            assert_eq!(RevokeBlock::parse(&b, &l).unwrap(), r);
            assert!(verify_checksum(&b, &l).is_ok());
        }
    }

    #[test]
    fn capacity_and_overflow() {
        let l = test_layout(1024, Checksum::V3, true);
        assert_eq!(RevokeBlock::capacity(&l), (1024 - 20) / 8);
        let full = RevokeBlock { sequence: 1, blocks: (0..125).collect() };
        let mut b = vec![0u8; 1024];
        full.write_to(&mut b, &l).unwrap();
        assert_eq!(RevokeBlock::parse(&b, &l).unwrap(), full);
        let over = RevokeBlock { sequence: 1, blocks: (0..126).collect() };
        assert!(over.write_to(&mut b, &l).is_err());
    }

    #[test]
    fn detects_corruption() {
        let l = test_layout(1024, Checksum::V2, true);
        let mut b = vec![0u8; 1024];
        RevokeBlock { sequence: 1, blocks: vec![9] }.write_to(&mut b, &l).unwrap();
        b[17] ^= 1;
        assert!(matches!(
            verify_checksum(&b, &l),
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })
        ));
        put_be32(&mut b, 12, 1021);
        assert!(matches!(
            RevokeBlock::parse(&b, &l),
            Err(FormatError::Corrupt { why: Corruption::BadField { field: "r_count", .. }, .. })
        ));
        assert!(RevokeBlock::parse(&b[..100], &l).is_err());
        // r_count smaller than the header: no records.
        put_be32(&mut b, 12, 3);
        assert!(RevokeBlock::parse(&b, &l).unwrap().blocks.is_empty());
    }

    proptest! {
        #[test]
        fn round_trips(blocks in proptest::collection::vec(any::<u64>(), 0..120), is64 in any::<bool>(), seq in any::<u32>()) {
            let l = test_layout(1024, Checksum::V3, is64);
            let blocks: Vec<u64> = if is64 { blocks } else { blocks.iter().map(|b| b & 0xFFFF_FFFF).collect() };
            let r = RevokeBlock { sequence: seq, blocks };
            let mut b = vec![0u8; 1024];
            r.write_to(&mut b, &l).unwrap();
            prop_assert_eq!(RevokeBlock::parse(&b, &l).unwrap(), r);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100), is64 in any::<bool>()) {
            let l = test_layout(1024, Checksum::None, is64);
            let mut b = b;
            if b.len() >= 8 { b[..4].copy_from_slice(&super::super::MAGIC.to_be_bytes()); put_be32(&mut b, 4, 5); }
            if let Ok(r) = RevokeBlock::parse(&b, &l) { prop_assert!(r.blocks.len() <= 1024 / 4); }
        }
    }
}
