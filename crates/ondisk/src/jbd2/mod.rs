//! jbd2 journal structures (see crates/journal for the journal's behaviour).
//!
//! jbd2 is big-endian throughout, unlike ext4. Every journal block that is not a
//! data copy starts with the 12-byte [`Header`]; the journal's first block holds
//! the [`Superblock`]. A transaction is one or more descriptor blocks (each
//! followed by the data blocks its tags describe), revoke blocks, and one commit
//! block, all carrying the transaction's sequence number.
//!
//! Format facts come from the kernel's `Documentation/filesystems/ext4/journal.rst`
//! and `include/linux/jbd2.h`; see `docs/JOURNAL.md` for the summary.
//!
//! Parsing is structural: `parse` never verifies the per-block checksums of
//! descriptor, revoke and commit blocks, because recovery treats each failure
//! differently; each module has a `verify_*` function instead. The journal
//! superblock, whose bad checksum is always fatal, is verified by its parser.

pub mod commit;
pub mod descriptor;
pub mod header;
pub mod revoke;
pub mod superblock;

pub use commit::CommitBlock;
pub use descriptor::{DescriptorBlock, Tag};
pub use header::{BlockType, Header, HEADER_SIZE, MAGIC};
pub use revoke::RevokeBlock;
pub use superblock::Superblock;

use crate::csum::crc32c;

/// Compat feature: commit blocks carry a crc32 (big-endian, "v1") of the
/// transaction's descriptor and data blocks.
pub const FEATURE_COMPAT_CHECKSUM: u32 = 0x1;
/// Incompat feature: the journal has revoke blocks.
pub const FEATURE_INCOMPAT_REVOKE: u32 = 0x1;
/// Incompat feature: block numbers in tags and revoke records are 64-bit.
pub const FEATURE_INCOMPAT_64BIT: u32 = 0x2;
/// Incompat feature: commit blocks may be written without waiting for the
/// transaction's other blocks (a bad commit checksum then is not corruption).
pub const FEATURE_INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
/// Incompat feature: checksum v2 (crc32c, 16-bit tag checksums).
pub const FEATURE_INCOMPAT_CSUM_V2: u32 = 0x8;
/// Incompat feature: checksum v3 (crc32c, 16-byte tags with 32-bit checksums).
pub const FEATURE_INCOMPAT_CSUM_V3: u32 = 0x10;
/// Incompat feature: a fast-commit area at the end of the journal.
pub const FEATURE_INCOMPAT_FAST_COMMIT: u32 = 0x20;

/// Compat features this implementation understands.
pub const KNOWN_COMPAT: u32 = FEATURE_COMPAT_CHECKSUM;
/// Incompat features this implementation understands (at least for parsing).
pub const KNOWN_INCOMPAT: u32 = FEATURE_INCOMPAT_REVOKE
    | FEATURE_INCOMPAT_64BIT
    | FEATURE_INCOMPAT_ASYNC_COMMIT
    | FEATURE_INCOMPAT_CSUM_V2
    | FEATURE_INCOMPAT_CSUM_V3
    | FEATURE_INCOMPAT_FAST_COMMIT;
/// Read-only compat features this implementation understands (jbd2 defines none).
pub const KNOWN_RO_COMPAT: u32 = 0;

/// Which checksum scheme the journal uses (a function of its feature bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checksum {
    /// No checksums.
    None,
    /// Compat CHECKSUM: commit blocks carry a big-endian crc32 over the
    /// transaction's descriptor and data blocks; nothing else is checksummed.
    V1,
    /// CSUM_V2: crc32c on superblock, descriptor/revoke tails, commit blocks and
    /// (low 16 bits) data blocks.
    V2,
    /// CSUM_V3: as v2 but tags are 16 bytes with full 32-bit data checksums.
    V3,
}

impl Checksum {
    /// True for v2 and v3, the crc32c schemes with per-block checksums.
    pub fn is_v2_or_v3(self) -> bool {
        matches!(self, Checksum::V2 | Checksum::V3)
    }
}

/// Everything needed to parse and checksum journal blocks, derived from the
/// journal superblock by [`Superblock::layout`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Journal block size in bytes (equal to the file system's block size).
    pub block_size: u32,
    /// Checksum scheme.
    pub checksum: Checksum,
    /// Whether block numbers are 64-bit (incompat 64BIT).
    pub is_64bit: bool,
    /// crc32c seed: crc32c(~0, journal uuid); only meaningful for v2/v3.
    pub seed: u32,
}

impl Layout {
    /// Size of one descriptor tag in bytes, as jbd2's `journal_tag_bytes`:
    /// 16 with csum v3; else 12 (+2 with csum v2), minus 4 without 64BIT.
    pub fn tag_bytes(&self) -> usize {
        if self.checksum == Checksum::V3 {
            return 16;
        }
        let mut size = 12;
        if self.checksum == Checksum::V2 {
            size += 2;
        }
        if self.is_64bit {
            size
        } else {
            size - 4
        }
    }

    /// Bytes of the checksum tail at the end of descriptor and revoke blocks.
    pub fn tail_bytes(&self) -> usize {
        if self.checksum.is_v2_or_v3() {
            4
        } else {
            0
        }
    }

    /// Bytes of one revoke record: 8 with 64BIT, else 4.
    pub fn revoke_record_bytes(&self) -> usize {
        if self.is_64bit {
            8
        } else {
            4
        }
    }

    /// Block size as a `usize` (for buffer lengths).
    pub fn block_bytes(&self) -> usize {
        self.block_size as usize
    }
}

/// The crc32c seed of a journal: crc32c(~0, uuid), as jbd2's `j_csum_seed`.
pub fn csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c(!0, uuid)
}

/// Checksum of a data block copy as stored in the journal (csum v2/v3 tags):
/// crc32c(crc32c(seed, be32 sequence), block). v2 stores the low 16 bits.
pub fn data_block_checksum(seed: u32, sequence: u32, data: &[u8]) -> u32 {
    crc32c(crc32c(seed, &sequence.to_be_bytes()), data)
}

/// The kernel's `crc32_be` (polynomial 0x04C11DB7, not reflected, no final xor),
/// used by the compat CHECKSUM (v1) commit checksum.
pub fn crc32_be(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        crc ^= u32::from(byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 { (crc << 1) ^ 0x04C1_1DB7 } else { crc << 1 };
        }
    }
    crc
}

/// Checksum of a descriptor or revoke block (csum v2/v3): crc32c(seed, whole
/// block with the 4-byte tail zeroed). `block` must be one journal block.
pub fn tail_checksum(seed: u32, block: &[u8]) -> u32 {
    let split = block.len().saturating_sub(4);
    let c = crc32c(seed, &block[..split]);
    crc32c(c, &[0u8; 4][..block.len() - split])
}

/// Verify the tail checksum of a descriptor or revoke block; always Ok without
/// csum v2/v3.
pub(crate) fn verify_tail(structure: &'static str, block: &[u8], layout: &Layout) -> crate::Result<()> {
    if !layout.checksum.is_v2_or_v3() {
        return Ok(());
    }
    crate::bytes::need(structure, block, layout.block_bytes().max(4))?;
    let block = &block[..layout.block_bytes()];
    let stored = crate::bytes::be32(block, block.len() - 4);
    let computed = tail_checksum(layout.seed, block);
    if stored != computed {
        return Err(crate::FormatError::corrupt(
            structure,
            crate::Location::Unknown,
            crate::Corruption::BadChecksum { stored, computed },
        ));
    }
    Ok(())
}

/// Set the tail checksum of a descriptor or revoke block (no-op without v2/v3).
pub(crate) fn set_tail(block: &mut [u8], layout: &Layout) {
    if !layout.checksum.is_v2_or_v3() || block.len() < 4 {
        return;
    }
    let at = block.len() - 4;
    crate::bytes::put_be32(block, at, 0);
    let c = tail_checksum(layout.seed, block);
    crate::bytes::put_be32(block, at, c);
}

#[inline]
pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

#[inline]
pub(crate) fn put_be16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_be_bytes());
}

/// A layout for tests and tools: the given block size and scheme, 64-bit.
#[cfg(test)]
pub(crate) fn test_layout(block_size: u32, checksum: Checksum, is_64bit: bool) -> Layout {
    Layout { block_size, checksum, is_64bit, seed: csum_seed(&[7u8; 16]) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_sizes_match_jbd2() {
        let l = |c, b| test_layout(4096, c, b).tag_bytes();
        assert_eq!(l(Checksum::V3, true), 16);
        assert_eq!(l(Checksum::V3, false), 16);
        assert_eq!(l(Checksum::V2, true), 14);
        assert_eq!(l(Checksum::V2, false), 10);
        assert_eq!(l(Checksum::None, true), 12);
        assert_eq!(l(Checksum::None, false), 8);
        assert_eq!(l(Checksum::V1, false), 8);
    }

    #[test]
    fn crc32_be_known_vector() {
        // CRC-32/MPEG-2 (init ~0, no reflection, no final xor) of "123456789".
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
    }

    #[test]
    fn tail_checksum_round_trip() {
        let layout = test_layout(1024, Checksum::V3, true);
        let mut b = vec![0xA5u8; 1024];
        set_tail(&mut b, &layout);
        assert!(verify_tail("t", &b, &layout).is_ok());
        b[100] ^= 1;
        assert!(matches!(
            verify_tail("t", &b, &layout),
            Err(crate::FormatError::Corrupt { why: crate::Corruption::BadChecksum { .. }, .. })
        ));
    }
}
