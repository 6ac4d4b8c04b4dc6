//! The journal superblock (`journal_superblock_t`), in journal block 0.
//!
//! Version 1 (block type 3) defines the fields up to `s_errno`; version 2
//! (block type 4) adds features, uuid, users and a checksum. 1024 bytes:
//!
//! | offset | field                | offset | field                  |
//! |--------|----------------------|--------|------------------------|
//! | 0x00   | header (12 bytes)    | 0x40   | `s_nr_users`           |
//! | 0x0C   | `s_blocksize`        | 0x44   | `s_dynsuper`           |
//! | 0x10   | `s_maxlen`           | 0x48   | `s_max_transaction`    |
//! | 0x14   | `s_first`            | 0x4C   | `s_max_trans_data`     |
//! | 0x18   | `s_sequence`         | 0x50   | `s_checksum_type` (u8) |
//! | 0x1C   | `s_start`            | 0x54   | `s_num_fc_blks`        |
//! | 0x20   | `s_errno`            | 0x58   | `s_head`               |
//! | 0x24   | `s_feature_compat`   | 0x5C   | padding (40 x u32)     |
//! | 0x28   | `s_feature_incompat` | 0xFC   | `s_checksum`           |
//! | 0x2C   | `s_feature_ro_compat`| 0x100  | `s_users` (48 x 16)    |
//! | 0x30   | `s_uuid` (16 bytes)  |        |                        |

use super::header::{BlockType, Header};
use super::{Checksum, Layout};
use crate::bytes::{be32, need, put_be32};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

const STRUCTURE: &str = "jbd2 superblock";

/// On-disk size of the journal superblock.
pub const SUPERBLOCK_SIZE: usize = 1024;
/// `s_checksum_type` value for crc32c (`JBD2_CRC32C_CHKSUM`).
pub const CHECKSUM_TYPE_CRC32C: u8 = 4;
/// Fast-commit blocks when `s_num_fc_blks` is 0 (`JBD2_DEFAULT_FAST_COMMIT_BLOCKS`).
pub const DEFAULT_FAST_COMMIT_BLOCKS: u32 = 256;
/// Smallest journal the kernel accepts (`JBD2_MIN_JOURNAL_BLOCKS`).
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
const CHECKSUM_OFFSET: usize = 0xFC;

/// A parsed journal superblock. Fields a v1 superblock lacks read as zero.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Header block type: [`BlockType::SuperblockV1`] or [`BlockType::SuperblockV2`].
    pub version: BlockType,
    /// Header `h_sequence` (unused by jbd2, normally 0).
    pub header_sequence: u32,
    /// `s_blocksize`: journal block size in bytes (the file system's block size).
    pub block_size: u32,
    /// `s_maxlen`: total number of blocks in the journal, superblock included.
    pub max_len: u32,
    /// `s_first`: first block of log information (block after the superblock, normally 1).
    pub first: u32,
    /// `s_sequence`: first transaction ID expected in the log (at `s_start`).
    pub sequence: u32,
    /// `s_start`: journal block where the log starts; 0 means the journal is clean.
    pub start: u32,
    /// `s_errno`: error recorded by jbd2_journal_abort (negative errno), or 0.
    pub errno: i32,
    /// `s_feature_compat`: compatible features (CHECKSUM 0x1).
    pub feature_compat: u32,
    /// `s_feature_incompat`: incompatible features (REVOKE 0x1, 64BIT 0x2,
    /// ASYNC_COMMIT 0x4, CSUM_V2 0x8, CSUM_V3 0x10, FAST_COMMIT 0x20).
    pub feature_incompat: u32,
    /// `s_feature_ro_compat`: read-only compatible features (none defined).
    pub feature_ro_compat: u32,
    /// `s_uuid`: the journal's uuid; seeds checksums; for an internal journal
    /// it equals the file system uuid only by convention (mkfs copies it).
    pub uuid: [u8; 16],
    /// `s_nr_users`: number of file systems sharing the journal (1 for internal).
    pub nr_users: u32,
    /// `s_dynsuper`: block of a dynamic superblock copy (unused).
    pub dynsuper: u32,
    /// `s_max_transaction`: limit on blocks per transaction (0 = none; unused).
    pub max_transaction: u32,
    /// `s_max_trans_data`: limit on data blocks per transaction (unused).
    pub max_trans_data: u32,
    /// `s_checksum_type`: checksum algorithm for v2/v3 (4 = crc32c).
    pub checksum_type: u8,
    /// `s_num_fc_blks`: fast-commit blocks at the end of the journal (0 = 256 when
    /// FAST_COMMIT is set).
    pub num_fc_blocks: u32,
    /// `s_head`: block of the log head as last written (informational, newer kernels).
    pub head: u32,
    /// `s_checksum`: crc32c(~0, superblock with this field zeroed), v2/v3 only.
    pub checksum: u32,
    /// `s_users`: uuids of the file systems sharing the journal (48 x 16 bytes).
    pub users: [u8; 768],
}

impl Superblock {
    /// Parse from the start of journal block 0. Checks magic, block type and,
    /// with csum v2/v3, the checksum; semantic checks are in [`Superblock::validate`].
    pub fn parse(buf: &[u8]) -> Result<Superblock> {
        need(STRUCTURE, buf, SUPERBLOCK_SIZE)?;
        let header = Header::parse(buf).map_err(|e| match e {
            FormatError::Corrupt { at, why, .. } => FormatError::Corrupt { structure: STRUCTURE, at, why },
            other => other,
        })?;
        let v2 = match header.block_type {
            BlockType::SuperblockV1 => false,
            BlockType::SuperblockV2 => true,
            other => {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    Location::JournalBlock(0),
                    Corruption::BadField { field: "h_blocktype", value: u64::from(other.raw()) },
                ))
            }
        };
        let v2_u32 = |off| if v2 { be32(buf, off) } else { 0 };
        let mut uuid = [0u8; 16];
        let mut users = [0u8; 768];
        if v2 {
            uuid.copy_from_slice(&buf[0x30..0x40]);
            users.copy_from_slice(&buf[0x100..0x400]);
        }
        let sb = Superblock {
            version: header.block_type,
            header_sequence: header.sequence,
            block_size: be32(buf, 0x0C),
            max_len: be32(buf, 0x10),
            first: be32(buf, 0x14),
            sequence: be32(buf, 0x18),
            start: be32(buf, 0x1C),
            errno: be32(buf, 0x20) as i32,
            feature_compat: v2_u32(0x24),
            feature_incompat: v2_u32(0x28),
            feature_ro_compat: v2_u32(0x2C),
            uuid,
            nr_users: v2_u32(0x40),
            dynsuper: v2_u32(0x44),
            max_transaction: v2_u32(0x48),
            max_trans_data: v2_u32(0x4C),
            checksum_type: if v2 { buf[0x50] } else { 0 },
            num_fc_blocks: v2_u32(0x54),
            head: v2_u32(0x58),
            checksum: v2_u32(CHECKSUM_OFFSET),
            users,
        };
        if sb.has_csum_v2_or_v3() {
            let computed = superblock_checksum(&buf[..SUPERBLOCK_SIZE]);
            if computed != sb.checksum {
                return Err(FormatError::corrupt(
                    STRUCTURE,
                    Location::JournalBlock(0),
                    Corruption::BadChecksum { stored: sb.checksum, computed },
                ));
            }
        }
        Ok(sb)
    }

    /// Serialise into the first 1024 bytes of `buf`, setting `s_checksum`
    /// when csum v2/v3 is on. Only the fields are written: the padding and
    /// any field this version does not model keep the bytes `buf` has (the
    /// block as read, when rewriting a journal's superblock), as the kernel
    /// keeps them. The jbd2_superblock fuzz target found the padding zeroed,
    /// so that a rewritten superblock's checksum no longer covered what was
    /// on disk.
    pub fn write_to(&self, buf: &mut [u8]) -> Result<()> {
        need(STRUCTURE, buf, SUPERBLOCK_SIZE)?;
        let b = &mut buf[..SUPERBLOCK_SIZE];
        Header { block_type: self.version, sequence: self.header_sequence }.write_to(b)?;
        put_be32(b, 0x0C, self.block_size);
        put_be32(b, 0x10, self.max_len);
        put_be32(b, 0x14, self.first);
        put_be32(b, 0x18, self.sequence);
        put_be32(b, 0x1C, self.start);
        put_be32(b, 0x20, self.errno as u32);
        if self.version == BlockType::SuperblockV2 {
            put_be32(b, 0x24, self.feature_compat);
            put_be32(b, 0x28, self.feature_incompat);
            put_be32(b, 0x2C, self.feature_ro_compat);
            b[0x30..0x40].copy_from_slice(&self.uuid);
            put_be32(b, 0x40, self.nr_users);
            put_be32(b, 0x44, self.dynsuper);
            put_be32(b, 0x48, self.max_transaction);
            put_be32(b, 0x4C, self.max_trans_data);
            b[0x50] = self.checksum_type;
            put_be32(b, 0x54, self.num_fc_blocks);
            put_be32(b, 0x58, self.head);
            b[0x100..0x400].copy_from_slice(&self.users);
            let c = if self.has_csum_v2_or_v3() { superblock_checksum(b) } else { self.checksum };
            put_be32(b, CHECKSUM_OFFSET, c);
        }
        Ok(())
    }

    /// Whether an incompat feature bit is set.
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.feature_incompat & bit != 0
    }

    fn has_csum_v2_or_v3(&self) -> bool {
        self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V2) || self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V3)
    }

    /// The checksum scheme (v3 wins over v2 over v1; [`validate`](Self::validate)
    /// rejects combinations).
    pub fn checksum_kind(&self) -> Checksum {
        if self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V3) {
            Checksum::V3
        } else if self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V2) {
            Checksum::V2
        } else if self.feature_compat & super::FEATURE_COMPAT_CHECKSUM != 0 {
            Checksum::V1
        } else {
            Checksum::None
        }
    }

    /// Parameters for parsing the journal's other blocks.
    pub fn layout(&self) -> Layout {
        Layout {
            block_size: self.block_size,
            checksum: self.checksum_kind(),
            is_64bit: self.has_incompat(super::FEATURE_INCOMPAT_64BIT),
            seed: super::csum_seed(&self.uuid),
        }
    }

    /// Number of fast-commit blocks at the end of the journal (0 without FAST_COMMIT).
    pub fn fast_commit_blocks(&self) -> u32 {
        if !self.has_incompat(super::FEATURE_INCOMPAT_FAST_COMMIT) {
            0
        } else if self.num_fc_blocks == 0 {
            DEFAULT_FAST_COMMIT_BLOCKS
        } else {
            self.num_fc_blocks
        }
    }

    /// One past the last block of the circular log (jbd2's `j_last`): `s_maxlen`
    /// minus the fast-commit area. Fast-commit blocks start at `log_end() + 1`
    /// (jbd2's `j_fc_first = j_last + 1`), so block `log_end()` is unused.
    pub fn log_end(&self) -> u32 {
        self.max_len.saturating_sub(self.fast_commit_blocks())
    }

    /// The checks jbd2 makes when loading a journal: known features, consistent
    /// checksum settings, block size, and `s_first`/`s_start` inside the log.
    /// `journal_blocks` is the size of the journal as the file system sees it.
    pub fn validate(&self, journal_blocks: u64) -> Result<()> {
        let bad = |field: &'static str, value: u64| {
            Err(FormatError::corrupt(STRUCTURE, Location::JournalBlock(0), Corruption::BadField { field, value }))
        };
        if self.feature_incompat & !super::KNOWN_INCOMPAT != 0 {
            return Err(FormatError::Unsupported {
                what: format!("jbd2 incompat features {:#x}", self.feature_incompat & !super::KNOWN_INCOMPAT),
            });
        }
        if self.feature_ro_compat & !super::KNOWN_RO_COMPAT != 0 {
            return Err(FormatError::Unsupported {
                what: format!("jbd2 ro_compat features {:#x}", self.feature_ro_compat),
            });
        }
        if !self.block_size.is_power_of_two() || !(1024..=65536).contains(&self.block_size) {
            return bad("s_blocksize", u64::from(self.block_size));
        }
        let v2 = self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V2);
        let v3 = self.has_incompat(super::FEATURE_INCOMPAT_CSUM_V3);
        if v2 && v3 {
            return bad("s_feature_incompat (csum v2 and v3)", u64::from(self.feature_incompat));
        }
        if (v2 || v3) && self.feature_compat & super::FEATURE_COMPAT_CHECKSUM != 0 {
            return bad("s_feature_compat (csum v1 with v2/v3)", u64::from(self.feature_compat));
        }
        if (v2 || v3) && self.checksum_type != CHECKSUM_TYPE_CRC32C {
            return bad("s_checksum_type", u64::from(self.checksum_type));
        }
        if u64::from(self.max_len) > journal_blocks {
            return bad("s_maxlen", u64::from(self.max_len));
        }
        let end = self.log_end();
        if self.first == 0 || self.first >= end {
            return bad("s_first", u64::from(self.first));
        }
        if self.start != 0 && (self.start < self.first || self.start >= end) {
            return bad("s_start", u64::from(self.start));
        }
        Ok(())
    }
}

/// crc32c(~0, superblock with `s_checksum` zeroed), over the 1024-byte structure.
pub fn superblock_checksum(sb: &[u8]) -> u32 {
    let c = crc32c(!0, &sb[..CHECKSUM_OFFSET]);
    let c = crc32c(c, &[0u8; 4]);
    crc32c(c, &sb[CHECKSUM_OFFSET + 4..SUPERBLOCK_SIZE])
}

#[cfg(test)]
pub(crate) fn sample(incompat: u32) -> Superblock {
    Superblock {
        version: BlockType::SuperblockV2,
        header_sequence: 0,
        block_size: 4096,
        max_len: 16384,
        first: 1,
        sequence: 42,
        start: 17,
        errno: 0,
        feature_compat: 0,
        feature_incompat: incompat,
        feature_ro_compat: 0,
        uuid: [0x11; 16],
        nr_users: 1,
        dynsuper: 0,
        max_transaction: 0,
        max_trans_data: 0,
        checksum_type: if incompat & 0x18 != 0 { CHECKSUM_TYPE_CRC32C } else { 0 },
        num_fc_blocks: 0,
        head: 0,
        checksum: 0,
        users: [0; 768],
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use proptest::prelude::*;

    const V3_64: u32 = FEATURE_INCOMPAT_REVOKE | FEATURE_INCOMPAT_64BIT | FEATURE_INCOMPAT_CSUM_V3;

    fn bytes(sb: &Superblock) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        sb.write_to(&mut b).unwrap();
        b
    }

    /// Found by the jbd2_superblock fuzz target: rewriting a superblock read
    /// from disk zeroed its padding, so the bytes and the checksum changed.
    #[test]
    fn rewriting_keeps_the_bytes_it_does_not_model() {
        let mut b = bytes(&sample(V3_64));
        b[0x60] = 0x5A; // s_padding
        b[0x51] = 0x01; // s_padding2
        let c = superblock_checksum(&b);
        b[CHECKSUM_OFFSET..CHECKSUM_OFFSET + 4].copy_from_slice(&c.to_be_bytes());
        let sb = Superblock::parse(&b).unwrap();
        let mut out = b.clone();
        sb.write_to(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn round_trip_sets_checksum() {
        let sb = sample(V3_64);
        let b = bytes(&sb);
        let back = Superblock::parse(&b).unwrap();
        assert_eq!(back.checksum, superblock_checksum(&b));
        assert_eq!(Superblock { checksum: back.checksum, ..sb }, back);
        assert_eq!(back.layout().tag_bytes(), 16);
        assert!(back.validate(16384).is_ok());
    }

    #[test]
    fn field_offsets() {
        let b = bytes(&sample(V3_64));
        assert_eq!(&b[0..4], &[0xC0, 0x3B, 0x39, 0x98]);
        assert_eq!(be32(&b, 4), 4);
        assert_eq!(be32(&b, 0x0C), 4096);
        assert_eq!(be32(&b, 0x18), 42);
        assert_eq!(be32(&b, 0x1C), 17);
        assert_eq!(be32(&b, 0x28), V3_64);
        assert_eq!(b[0x50], 4);
    }

    #[test]
    fn rejects_bad_checksum_truncated_and_type() {
        let mut b = bytes(&sample(V3_64));
        b[0x1C] ^= 1;
        assert!(matches!(Superblock::parse(&b), Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })));
        assert!(matches!(
            Superblock::parse(&b[..1000]),
            Err(FormatError::Corrupt { why: Corruption::Truncated { .. }, .. })
        ));
        let mut b = bytes(&sample(0));
        put_be32(&mut b, 4, 1);
        assert!(matches!(
            Superblock::parse(&b),
            Err(FormatError::Corrupt { why: Corruption::BadField { field: "h_blocktype", .. }, .. })
        ));
    }

    #[test]
    fn v1_reads_features_as_zero() {
        let mut b = bytes(&sample(V3_64));
        put_be32(&mut b, 4, 3);
        let sb = Superblock::parse(&b).unwrap();
        assert_eq!(sb.version, BlockType::SuperblockV1);
        assert_eq!(sb.feature_incompat, 0);
        assert_eq!(sb.checksum_kind(), Checksum::None);
    }

    #[test]
    fn validate_rules() {
        let ok = sample(V3_64);
        assert!(matches!(
            Superblock { feature_incompat: V3_64 | 0x100, ..ok.clone() }.validate(16384),
            Err(FormatError::Unsupported { .. })
        ));
        assert!(Superblock { feature_incompat: V3_64 | FEATURE_INCOMPAT_CSUM_V2, ..ok.clone() }
            .validate(16384)
            .is_err());
        assert!(Superblock { feature_compat: 1, ..ok.clone() }.validate(16384).is_err());
        assert!(Superblock { block_size: 3000, ..ok.clone() }.validate(16384).is_err());
        assert!(Superblock { first: 0, ..ok.clone() }.validate(16384).is_err());
        assert!(Superblock { start: 16384, ..ok.clone() }.validate(16384).is_err());
        assert!(ok.validate(100).is_err());
        let fc = Superblock { feature_incompat: V3_64 | FEATURE_INCOMPAT_FAST_COMMIT, ..ok.clone() };
        assert_eq!(fc.log_end(), 16384 - 256);
        assert!(Superblock { start: 16384 - 10, ..fc }.validate(16384).is_err());
    }

    proptest! {
        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100)) {
            if let Ok(sb) = Superblock::parse(&b) {
                let _ = sb.validate(1 << 20);
                let _ = sb.layout();
            }
        }

        #[test]
        fn round_trips(seq in any::<u32>(), start in any::<u32>(), incompat in 0u32..0x40, uuid in any::<[u8; 16]>()) {
            let incompat = if incompat & 0x18 == 0x18 { incompat & !0x8 } else { incompat };
            let sb = Superblock { sequence: seq, start, uuid, ..sample(incompat) };
            let b = bytes(&sb);
            let back = Superblock::parse(&b).unwrap();
            prop_assert_eq!(Superblock { checksum: back.checksum, ..sb }, back);
        }
    }
}
