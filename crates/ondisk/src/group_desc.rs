//! Block group descriptors: 32 bytes, or `desc_size` (64) with the 64bit feature.

use crate::bytes::{lo_hi, need};
use crate::csum::{crc16, crc32c};
use crate::superblock::{feature, Superblock};
use crate::{le_struct, Corruption, FormatError, Location, Result};

const CHECKSUM_OFFSET: usize = 0x1E;

/// `bg_flags` bits.
pub const BG_INODE_UNINIT: u16 = 0x1;
pub const BG_BLOCK_UNINIT: u16 = 0x2;
pub const BG_INODE_ZEROED: u16 = 0x4;

le_struct! {
    /// Raw fields of `struct ext4_group_desc`; the `_hi` halves exist only in 64-byte descriptors.
    pub struct GroupDescFields {
        block_bitmap_lo: u32 = 0x00,
        inode_bitmap_lo: u32 = 0x04,
        inode_table_lo: u32 = 0x08,
        free_blocks_count_lo: u16 = 0x0C,
        free_inodes_count_lo: u16 = 0x0E,
        used_dirs_count_lo: u16 = 0x10,
        /// INODE_UNINIT / BLOCK_UNINIT / INODE_ZEROED.
        flags: u16 = 0x12,
        exclude_bitmap_lo: u32 = 0x14,
        block_bitmap_csum_lo: u16 = 0x18,
        inode_bitmap_csum_lo: u16 = 0x1A,
        /// Inodes at the end of the table never used (with uninit_bg / metadata_csum).
        itable_unused_lo: u16 = 0x1C,
        /// crc16 (gdt_csum) or low 16 bits of crc32c (metadata_csum).
        checksum: u16 = 0x1E,
    }
}

le_struct! {
    /// The upper halves in a 64-byte descriptor.
    pub struct GroupDescHiFields {
        block_bitmap_hi: u32 = 0x20,
        inode_bitmap_hi: u32 = 0x24,
        inode_table_hi: u32 = 0x28,
        free_blocks_count_hi: u16 = 0x2C,
        free_inodes_count_hi: u16 = 0x2E,
        used_dirs_count_hi: u16 = 0x30,
        itable_unused_hi: u16 = 0x32,
        exclude_bitmap_hi: u32 = 0x34,
        block_bitmap_csum_hi: u16 = 0x38,
        inode_bitmap_csum_hi: u16 = 0x3A,
    }
}

/// One group descriptor with its full-width values.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GroupDesc {
    pub lo: GroupDescFields,
    pub hi: GroupDescHiFields,
    /// Bytes past the modelled fields (reserved), kept for byte-exact rewrites.
    /// Shared: descriptors are copied on every allocation, the tail never changes.
    pub tail: std::sync::Arc<[u8]>,
}

impl GroupDesc {
    /// Parse descriptor `group` from `buf` (exactly `sb.desc_size()` bytes) and verify its checksum.
    pub fn parse(sb: &Superblock, group: u32, buf: &[u8]) -> Result<Self> {
        let size = sb.desc_size();
        need("group descriptor", buf, size).map_err(|e| e.at(Location::Group(group)))?;
        let lo = GroupDescFields::read_fields(buf);
        let hi = if size >= GroupDescHiFields::FIELDS_END {
            GroupDescHiFields::read_fields(buf)
        } else {
            GroupDescHiFields::default()
        };
        let tail = buf[GroupDescHiFields::FIELDS_END.min(size)..size].into();
        let gd = GroupDesc { lo, hi, tail };
        if let Some(computed) = checksum(sb, group, &buf[..size]) {
            if computed != gd.lo.checksum {
                return Err(FormatError::corrupt(
                    "group descriptor",
                    Location::Group(group),
                    Corruption::BadChecksum { stored: u32::from(gd.lo.checksum), computed: u32::from(computed) },
                ));
            }
        }
        Ok(gd)
    }

    /// Serialise to `sb.desc_size()` bytes with the checksum set.
    pub fn to_bytes(&self, sb: &Superblock, group: u32) -> Vec<u8> {
        let size = sb.desc_size();
        let mut out = vec![0u8; size];
        self.lo.write_fields(&mut out);
        if size >= GroupDescHiFields::FIELDS_END {
            self.hi.write_fields(&mut out);
            out[GroupDescHiFields::FIELDS_END..].copy_from_slice(&self.tail);
        }
        if let Some(c) = checksum(sb, group, &out) {
            crate::bytes::put_le16(&mut out, CHECKSUM_OFFSET, c);
        }
        out
    }

    pub fn block_bitmap(&self) -> u64 {
        lo_hi(self.lo.block_bitmap_lo, self.hi.block_bitmap_hi)
    }
    pub fn inode_bitmap(&self) -> u64 {
        lo_hi(self.lo.inode_bitmap_lo, self.hi.inode_bitmap_hi)
    }
    pub fn inode_table(&self) -> u64 {
        lo_hi(self.lo.inode_table_lo, self.hi.inode_table_hi)
    }
    pub fn free_blocks_count(&self) -> u32 {
        u32::from(self.lo.free_blocks_count_lo) | (u32::from(self.hi.free_blocks_count_hi) << 16)
    }
    pub fn free_inodes_count(&self) -> u32 {
        u32::from(self.lo.free_inodes_count_lo) | (u32::from(self.hi.free_inodes_count_hi) << 16)
    }
    pub fn used_dirs_count(&self) -> u32 {
        u32::from(self.lo.used_dirs_count_lo) | (u32::from(self.hi.used_dirs_count_hi) << 16)
    }
    pub fn itable_unused(&self) -> u32 {
        u32::from(self.lo.itable_unused_lo) | (u32::from(self.hi.itable_unused_hi) << 16)
    }
    pub fn has_flag(&self, flag: u16) -> bool {
        self.lo.flags & flag != 0
    }
    pub fn set_free_blocks_count(&mut self, n: u32) {
        (self.lo.free_blocks_count_lo, self.hi.free_blocks_count_hi) = split16(n);
    }
    pub fn set_free_inodes_count(&mut self, n: u32) {
        (self.lo.free_inodes_count_lo, self.hi.free_inodes_count_hi) = split16(n);
    }
    pub fn set_used_dirs_count(&mut self, n: u32) {
        (self.lo.used_dirs_count_lo, self.hi.used_dirs_count_hi) = split16(n);
    }
    pub fn set_itable_unused(&mut self, n: u32) {
        (self.lo.itable_unused_lo, self.hi.itable_unused_hi) = split16(n);
    }
    pub fn set_inode_table(&mut self, blk: u64) {
        (self.lo.inode_table_lo, self.hi.inode_table_hi) = (blk as u32, (blk >> 32) as u32);
    }
}

/// A 32-bit count as the (low, high) 16-bit halves descriptors store.
fn split16(n: u32) -> (u16, u16) {
    (n as u16, (n >> 16) as u16)
}

/// The descriptor checksum the volume's features call for, or None without one.
fn checksum(sb: &Superblock, group: u32, desc: &[u8]) -> Option<u16> {
    let le_group = group.to_le_bytes();
    if sb.has_metadata_csum() {
        let mut c = crc32c(sb.csum_seed(), &le_group);
        c = crc32c(c, &desc[..CHECKSUM_OFFSET]);
        c = crc32c(c, &[0, 0]);
        c = crc32c(c, &desc[CHECKSUM_OFFSET + 2..]);
        Some((c & 0xFFFF) as u16)
    } else if sb.has_ro_compat(feature::ro_compat::GDT_CSUM) {
        let mut c = crc16(!0, &sb.f.uuid);
        c = crc16(c, &le_group);
        c = crc16(c, &desc[..CHECKSUM_OFFSET]);
        if sb.is_64bit() && desc.len() > CHECKSUM_OFFSET + 2 {
            c = crc16(c, &desc[CHECKSUM_OFFSET + 2..]);
        }
        Some(c)
    } else {
        None
    }
}

/// Whether `group` holds a superblock backup (and so group descriptor copies).
pub fn group_has_super(sb: &Superblock, group: u32) -> bool {
    if group == 0 {
        return true;
    }
    if sb.has_compat(feature::compat::SPARSE_SUPER2) {
        return group == sb.f.backup_bgs[0] || group == sb.f.backup_bgs[1];
    }
    if group <= 1 || !sb.has_ro_compat(feature::ro_compat::SPARSE_SUPER) {
        return true;
    }
    if group.is_multiple_of(2) {
        return false;
    }
    [3u32, 5, 7].iter().any(|&base| is_power_of(group, base))
}

fn is_power_of(mut n: u32, base: u32) -> bool {
    while n.is_multiple_of(base) && n > 1 {
        n /= base;
    }
    n == 1
}

/// Block holding the descriptors of metablock-group `desc_block_index`
/// (the index of the descriptor block in the primary table).
pub fn descriptor_block(sb: &Superblock, desc_block_index: u64) -> u64 {
    let first = u64::from(sb.f.first_data_block);
    let meta_bg = sb.has_incompat(feature::incompat::META_BG);
    if !meta_bg || desc_block_index < u64::from(sb.f.first_meta_bg) {
        return first + 1 + desc_block_index;
    }
    let per_block = u64::from(sb.block_size()) / sb.desc_size() as u64;
    let group = desc_block_index * per_block;
    let has_super = u64::from(group_has_super(sb, group as u32));
    first + group * u64::from(sb.f.blocks_per_group) + has_super
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superblock::tests::sample;

    fn sample_desc() -> GroupDesc {
        GroupDesc {
            lo: GroupDescFields {
                block_bitmap_lo: 100,
                inode_bitmap_lo: 116,
                inode_table_lo: 132,
                free_blocks_count_lo: 1000,
                free_inodes_count_lo: 500,
                used_dirs_count_lo: 2,
                ..Default::default()
            },
            hi: GroupDescHiFields { inode_table_hi: 1, ..Default::default() },
            tail: vec![0; 4].into(),
        }
    }

    #[test]
    fn round_trip_with_checksum() {
        let sb = sample();
        let gd = sample_desc();
        let bytes = gd.to_bytes(&sb, 7);
        let back = GroupDesc::parse(&sb, 7, &bytes).unwrap();
        assert_eq!(back.inode_table(), (1 << 32) | 132);
        assert_eq!(back.to_bytes(&sb, 7), bytes);
        // The group number is part of the checksum: the same bytes are wrong for another group.
        assert!(GroupDesc::parse(&sb, 8, &bytes).is_err());
        let mut moved = back;
        moved.set_inode_table((5 << 32) | 7);
        assert_eq!(GroupDesc::parse(&sb, 7, &moved.to_bytes(&sb, 7)).unwrap().inode_table(), (5 << 32) | 7);
    }

    #[test]
    fn corrupt_byte_is_detected() {
        let sb = sample();
        let mut bytes = sample_desc().to_bytes(&sb, 0);
        bytes[0x0C] ^= 0x40;
        assert!(matches!(
            GroupDesc::parse(&sb, 0, &bytes),
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })
        ));
        assert!(GroupDesc::parse(&sb, 0, &bytes[..10]).is_err());
    }

    #[test]
    fn sparse_super_backup_groups() {
        let mut sb = sample();
        sb.f.feature_ro_compat |= feature::ro_compat::SPARSE_SUPER;
        let with: Vec<u32> = (0..100).filter(|&g| group_has_super(&sb, g)).collect();
        assert_eq!(with, vec![0, 1, 3, 5, 7, 9, 25, 27, 49, 81]);
    }
}
