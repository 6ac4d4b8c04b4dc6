//! Commit blocks (`struct commit_header`), which end a transaction.
//!
//! | offset | size | field            | meaning                                      |
//! |--------|------|------------------|----------------------------------------------|
//! | 0x00   | 12   | header           | block type 2, transaction sequence           |
//! | 0x0C   | 1    | `h_chksum_type`  | 1 crc32 (compat CHECKSUM, "v1"), else 0       |
//! | 0x0D   | 1    | `h_chksum_size`  | 4 with crc32, else 0                          |
//! | 0x0E   | 2    | padding          |                                              |
//! | 0x10   | 32   | `h_chksum[8]`    | [0]: v1 crc32_be of the transaction's blocks, or v2/v3 crc32c of this block |
//! | 0x30   | 8    | `h_commit_sec`   | commit time, seconds                         |
//! | 0x38   | 4    | `h_commit_nsec`  | commit time, nanoseconds                     |
//!
//! With csum v2/v3, `h_chksum[0]` = crc32c(seed, whole journal block with
//! `h_chksum[0]` zeroed); type and size stay 0.

use super::header::{BlockType, Header};
use super::Layout;
use crate::bytes::{be32, be64, need, put_be32, put_be64};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

const STRUCTURE: &str = "jbd2 commit block";
/// Bytes of the commit header that carry fields.
pub const COMMIT_HEADER_SIZE: usize = 0x3C;
/// `h_chksum_type` for crc32 (`JBD2_CRC32_CHKSUM`), used by compat CHECKSUM.
pub const CHECKSUM_TYPE_CRC32: u8 = 1;
/// `h_chksum_type` for md5 (defined, never written by Linux).
pub const CHECKSUM_TYPE_MD5: u8 = 2;
/// `h_chksum_type` for sha1 (defined, never written by Linux).
pub const CHECKSUM_TYPE_SHA1: u8 = 3;
/// `h_chksum_type` for crc32c.
pub const CHECKSUM_TYPE_CRC32C: u8 = 4;
/// `h_chksum_size` for crc32 (`JBD2_CRC32_CHKSUM_SIZE`).
pub const CRC32_CHECKSUM_SIZE: u8 = 4;
const CHKSUM_OFFSET: usize = 0x10;

/// A parsed commit block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitBlock {
    /// Header `h_sequence`: the transaction this block commits.
    pub sequence: u32,
    /// `h_chksum_type`: 1 (crc32) with compat CHECKSUM, else 0.
    pub checksum_type: u8,
    /// `h_chksum_size`: bytes of checksum in `h_chksum` (4 for crc32), else 0.
    pub checksum_size: u8,
    /// `h_chksum`: 8 big-endian words; only `[0]` is used (v1 or v2/v3 checksum).
    pub checksums: [u32; 8],
    /// `h_commit_sec`: commit time in seconds since the epoch.
    pub commit_sec: u64,
    /// `h_commit_nsec`: nanoseconds part of the commit time.
    pub commit_nsec: u32,
}

impl CommitBlock {
    /// Parse (needs the first 60 bytes; checksum not verified, see [`verify_checksum`]).
    pub fn parse(buf: &[u8]) -> Result<CommitBlock> {
        need(STRUCTURE, buf, COMMIT_HEADER_SIZE)?;
        let header = Header::expect(STRUCTURE, buf, BlockType::Commit)?;
        let mut checksums = [0u32; 8];
        for (i, c) in checksums.iter_mut().enumerate() {
            *c = be32(buf, CHKSUM_OFFSET + 4 * i);
        }
        Ok(CommitBlock {
            sequence: header.sequence,
            checksum_type: buf[0x0C],
            checksum_size: buf[0x0D],
            checksums,
            commit_sec: be64(buf, 0x30),
            commit_nsec: be32(buf, 0x38),
        })
    }

    /// Serialise into one journal block (zero filled); with csum v2/v3 sets
    /// `h_chksum[0]` to the block checksum (overriding `checksums[0]`).
    pub fn write_to(&self, buf: &mut [u8], layout: &Layout) -> Result<()> {
        need(STRUCTURE, buf, layout.block_bytes().max(COMMIT_HEADER_SIZE))?;
        let buf = &mut buf[..layout.block_bytes().max(COMMIT_HEADER_SIZE)];
        buf.fill(0);
        Header { block_type: BlockType::Commit, sequence: self.sequence }.write_to(buf)?;
        buf[0x0C] = self.checksum_type;
        buf[0x0D] = self.checksum_size;
        for (i, c) in self.checksums.iter().enumerate() {
            put_be32(buf, CHKSUM_OFFSET + 4 * i, *c);
        }
        put_be64(buf, 0x30, self.commit_sec);
        put_be32(buf, 0x38, self.commit_nsec);
        if layout.checksum.is_v2_or_v3() {
            let c = block_checksum(layout.seed, buf);
            put_be32(buf, CHKSUM_OFFSET, c);
        }
        Ok(())
    }
}

/// crc32c(seed, block with `h_chksum[0]` zeroed) (csum v2/v3).
pub fn block_checksum(seed: u32, block: &[u8]) -> u32 {
    let c = crc32c(seed, &block[..CHKSUM_OFFSET]);
    let c = crc32c(c, &[0u8; 4]);
    crc32c(c, &block[CHKSUM_OFFSET + 4..])
}

/// Verify a commit block's v2/v3 checksum over the whole journal block (Ok
/// for other schemes: the v1 checksum covers other blocks and is checked by recovery).
pub fn verify_checksum(buf: &[u8], layout: &Layout) -> Result<()> {
    if !layout.checksum.is_v2_or_v3() {
        return Ok(());
    }
    need(STRUCTURE, buf, layout.block_bytes().max(COMMIT_HEADER_SIZE))?;
    let block = &buf[..layout.block_bytes()];
    let stored = be32(block, CHKSUM_OFFSET);
    let computed = block_checksum(layout.seed, block);
    if stored != computed {
        return Err(FormatError::corrupt(STRUCTURE, Location::Unknown, Corruption::BadChecksum { stored, computed }));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{test_layout, Checksum};
    use super::*;
    use proptest::prelude::*;

    fn sample() -> CommitBlock {
        CommitBlock {
            sequence: 77,
            checksum_type: 0,
            checksum_size: 0,
            checksums: [0; 8],
            commit_sec: 1_700_000_000,
            commit_nsec: 123_456_789,
        }
    }

    #[test]
    fn round_trip_v3_sets_checksum() {
        let l = test_layout(1024, Checksum::V3, true);
        let mut b = vec![0u8; 1024];
        sample().write_to(&mut b, &l).unwrap();
        let back = CommitBlock::parse(&b).unwrap();
        assert_eq!(back.checksums[0], block_checksum(l.seed, &b));
        assert_eq!(CommitBlock { checksums: [0; 8], ..back }, sample());
        assert!(verify_checksum(&b, &l).is_ok());
        assert_eq!(be64(&b, 0x30), 1_700_000_000);
        assert_eq!(be32(&b, 0x38), 123_456_789);
    }

    #[test]
    fn detects_corruption() {
        let l = test_layout(1024, Checksum::V2, true);
        let mut b = vec![0u8; 1024];
        sample().write_to(&mut b, &l).unwrap();
        b[1000] = 1;
        assert!(matches!(
            verify_checksum(&b, &l),
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })
        ));
        assert!(matches!(
            CommitBlock::parse(&b[..40]),
            Err(FormatError::Corrupt { why: Corruption::Truncated { .. }, .. })
        ));
        b[7] = 1;
        assert!(CommitBlock::parse(&b).is_err());
        // Without v2/v3 there is nothing to verify in the block itself.
        assert!(verify_checksum(&b, &test_layout(1024, Checksum::V1, true)).is_ok());
    }

    #[test]
    fn v1_fields_kept() {
        let l = test_layout(1024, Checksum::V1, false);
        let c = CommitBlock {
            checksum_type: CHECKSUM_TYPE_CRC32,
            checksum_size: CRC32_CHECKSUM_SIZE,
            checksums: [0xDEAD_BEEF, 0, 0, 0, 0, 0, 0, 0],
            ..sample()
        };
        let mut b = vec![0u8; 1024];
        c.write_to(&mut b, &l).unwrap();
        assert_eq!(CommitBlock::parse(&b).unwrap(), c);
    }

    proptest! {
        #[test]
        fn round_trips(seq in any::<u32>(), sec in any::<u64>(), nsec in any::<u32>(), cs in any::<[u32; 8]>()) {
            let l = test_layout(1024, Checksum::None, true);
            let c = CommitBlock { sequence: seq, checksum_type: 1, checksum_size: 4, checksums: cs, commit_sec: sec, commit_nsec: nsec };
            let mut b = vec![0u8; 1024];
            c.write_to(&mut b, &l).unwrap();
            prop_assert_eq!(CommitBlock::parse(&b).unwrap(), c);
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
            let _ = CommitBlock::parse(&b);
            let _ = verify_checksum(&b, &test_layout(1024, Checksum::V3, true));
        }
    }
}
