//! Block and inode allocation bitmaps, and their checksums (kept in the group
//! descriptor: low 16 bits always, high 16 bits in 64-byte descriptors).

use crate::csum::crc32c;
use crate::group_desc::GroupDesc;
use crate::superblock::Superblock;
use crate::{Corruption, FormatError, Location, Result};

pub fn test(bits: &[u8], i: usize) -> bool {
    bits[i / 8] & (1 << (i % 8)) != 0
}

pub fn set(bits: &mut [u8], i: usize) {
    bits[i / 8] |= 1 << (i % 8);
}

pub fn clear(bits: &mut [u8], i: usize) {
    bits[i / 8] &= !(1 << (i % 8));
}

/// First bit at or after `from`, below `limit`, that is set (`want`) or clear.
/// Aligned 64-bit words are tested whole: allocation scans bitmaps that are
/// mostly full, once per allocation.
fn find_bit(bits: &[u8], from: usize, limit: usize, want: bool) -> Option<usize> {
    let limit = limit.min(bits.len() * 8);
    let mut i = from;
    while i < limit {
        if i.is_multiple_of(64) && i + 64 <= limit {
            let word = u64::from_le_bytes(bits[i / 8..i / 8 + 8].try_into().expect("an 8-byte slice"));
            let hits = if want { word } else { !word };
            if hits == 0 {
                i += 64;
                continue;
            }
            return Some(i + hits.trailing_zeros() as usize);
        }
        if test(bits, i) == want {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// First clear bit at or after `from`, below `limit`.
pub fn find_zero(bits: &[u8], from: usize, limit: usize) -> Option<usize> {
    find_bit(bits, from, limit, false)
}

/// Length of the run of clear bits starting at `from` (at most `max`, below `limit`).
pub fn zero_run(bits: &[u8], from: usize, limit: usize, max: usize) -> usize {
    let end = limit.min(from.saturating_add(max)).max(from);
    find_bit(bits, from, end, true).unwrap_or(end.min(bits.len() * 8).max(from)) - from
}

pub fn count_zeros(bits: &[u8], limit: usize) -> usize {
    (0..limit).filter(|&i| !test(bits, i)).count()
}

/// Which bitmap a checksum covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Block,
    Inode,
}

impl Kind {
    /// Bytes of the bitmap the checksum covers.
    fn covered(self, sb: &Superblock) -> usize {
        match self {
            Kind::Block => sb.f.clusters_per_group as usize / 8,
            Kind::Inode => sb.f.inodes_per_group as usize / 8,
        }
    }
}

fn stored(sb: &Superblock, gd: &GroupDesc, kind: Kind) -> u32 {
    let (lo, hi) = match kind {
        Kind::Block => (gd.lo.block_bitmap_csum_lo, gd.hi.block_bitmap_csum_hi),
        Kind::Inode => (gd.lo.inode_bitmap_csum_lo, gd.hi.inode_bitmap_csum_hi),
    };
    if sb.desc_size() >= 64 {
        u32::from(lo) | (u32::from(hi) << 16)
    } else {
        u32::from(lo)
    }
}

/// crc32c(csum_seed, bitmap), truncated as the descriptor stores it.
pub fn checksum(sb: &Superblock, bits: &[u8], kind: Kind) -> u32 {
    let c = crc32c(sb.csum_seed(), &bits[..kind.covered(sb).min(bits.len())]);
    if sb.desc_size() >= 64 {
        c
    } else {
        c & 0xFFFF
    }
}

/// Verify a bitmap against the checksum in its group descriptor (metadata_csum only).
pub fn verify(sb: &Superblock, gd: &GroupDesc, group: u32, bits: &[u8], kind: Kind) -> Result<()> {
    if !sb.has_metadata_csum() {
        return Ok(());
    }
    let s = stored(sb, gd, kind);
    let c = checksum(sb, bits, kind);
    if s != c {
        let what = if kind == Kind::Block { "block bitmap" } else { "inode bitmap" };
        return Err(FormatError::corrupt(
            what,
            Location::Group(group),
            Corruption::BadChecksum { stored: s, computed: c },
        ));
    }
    Ok(())
}

/// Store the bitmap's checksum in its group descriptor (metadata_csum only).
pub fn set_checksum(sb: &Superblock, gd: &mut GroupDesc, bits: &[u8], kind: Kind) {
    if !sb.has_metadata_csum() {
        return;
    }
    let c = checksum(sb, bits, kind);
    let (lo, hi) = ((c & 0xFFFF) as u16, (c >> 16) as u16);
    match kind {
        Kind::Block => {
            gd.lo.block_bitmap_csum_lo = lo;
            gd.hi.block_bitmap_csum_hi = hi;
        }
        Kind::Inode => {
            gd.lo.inode_bitmap_csum_lo = lo;
            gd.hi.inode_bitmap_csum_hi = hi;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superblock::tests::sample;

    #[test]
    fn bit_ops_and_searches() {
        let mut b = vec![0u8; 16];
        for i in 0..20 {
            set(&mut b, i);
        }
        assert_eq!(find_zero(&b, 0, 128), Some(20));
        assert_eq!(zero_run(&b, 20, 128, 1000), 108);
        clear(&mut b, 5);
        assert_eq!(find_zero(&b, 0, 128), Some(5));
        assert_eq!(count_zeros(&b, 128), 109);
        assert_eq!(find_zero(&[0xFF; 2], 0, 16), None);
    }

    fn naive_find_zero(bits: &[u8], from: usize, limit: usize) -> Option<usize> {
        (from..limit).find(|&i| !test(bits, i))
    }

    fn naive_zero_run(bits: &[u8], from: usize, limit: usize, max: usize) -> usize {
        (from..limit).take(max).take_while(|&i| !test(bits, i)).count()
    }

    proptest::proptest! {
        /// The word-at-a-time searches agree with bit-at-a-time ones, on
        /// bitmaps of full and empty words with a few bits flipped.
        #[test]
        fn searches_match_a_bit_by_bit_scan(
            words in proptest::collection::vec(proptest::prop_oneof![proptest::prelude::Just(u64::MAX), proptest::prelude::Just(0u64), proptest::prelude::any::<u64>()], 1..8),
            from in 0usize..512, limit in 0usize..512, max in 0usize..600,
        ) {
            let bits: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let limit = limit.min(bits.len() * 8);
            proptest::prop_assert_eq!(find_zero(&bits, from, limit), naive_find_zero(&bits, from, limit));
            proptest::prop_assert_eq!(zero_run(&bits, from, limit, max), naive_zero_run(&bits, from, limit, max));
        }
    }

    #[test]
    fn checksum_round_trip_through_descriptor() {
        let sb = sample();
        let mut gd = GroupDesc::default();
        let mut bits = vec![0u8; sb.block_size() as usize];
        set(&mut bits, 3);
        set_checksum(&sb, &mut gd, &bits, Kind::Block);
        verify(&sb, &gd, 0, &bits, Kind::Block).unwrap();
        set(&mut bits, 4);
        assert!(verify(&sb, &gd, 0, &bits, Kind::Block).is_err());
        // The inode checksum is independent of the block one.
        set_checksum(&sb, &mut gd, &bits, Kind::Inode);
        verify(&sb, &gd, 0, &bits, Kind::Inode).unwrap();
    }
}
