//! The blocks the file system's own structures occupy, as the kernel's
//! "system zone" (fs/ext4/block_validity.c): every group's superblock backup
//! and descriptor blocks (reserved ones included), the bitmaps and inode
//! tables, and the journal's blocks, which only the journal inode may map.
//!
//! A damaged bitmap or block map must never make a file's data, an extent or
//! xattr block land on them: the allocator, the freeing path and every block
//! map read check runs against this list and report corruption instead.

use crate::error::{FsError, Result};
use ondisk::group_desc::{group_has_super, GroupDesc};
use ondisk::superblock::{feature, Superblock};
use ondisk::{Corruption, FormatError, Location};

/// A run of the journal: (journal block, physical block, length).
type JournalRun = (u64, u64, u64);

/// Sorted, non-overlapping runs [start, end) with the inode allowed to map
/// them (0: none).
#[derive(Debug, Default)]
pub(crate) struct SystemZone {
    runs: Vec<(u64, u64, u32)>,
}

impl SystemZone {
    /// The run overlapping [start, start + len) that `ino` may not use, if any.
    fn conflict(&self, start: u64, len: u64, ino: u32) -> Option<(u64, u64)> {
        let end = start.saturating_add(len);
        let i = self.runs.partition_point(|r| r.1 <= start);
        self.runs[i..].iter().take_while(|r| r.0 < end).find(|r| r.2 == 0 || r.2 != ino).map(|r| (r.0, r.1))
    }
}

impl SystemZone {
    /// The zone of a volume: every group's base metadata (`base_meta_blocks`),
    /// bitmaps and inode table (`itb_per_group` blocks), and the journal's
    /// runs (journal block, physical block, length), owned by `journal_inum`.
    pub(crate) fn build(
        sb: &Superblock,
        groups: &[GroupDesc],
        itb_per_group: u64,
        journal: Option<(u32, &[JournalRun])>,
    ) -> SystemZone {
        let mut runs: Vec<(u64, u64, u32)> = Vec::new();
        for g in 0..sb.group_count() {
            let n = base_meta_blocks(sb, g);
            if n > 0 {
                let first = u64::from(sb.f.first_data_block) + u64::from(g) * u64::from(sb.f.blocks_per_group);
                runs.push((first, first + n, 0));
            }
        }
        for gd in groups {
            runs.push((gd.block_bitmap(), gd.block_bitmap() + 1, 0));
            runs.push((gd.inode_bitmap(), gd.inode_bitmap() + 1, 0));
            runs.push((gd.inode_table(), gd.inode_table() + itb_per_group, 0));
        }
        if let Some((owner, jruns)) = journal {
            runs.extend(jruns.iter().map(|&(_, p, n)| (p, p + n, owner)));
        }
        runs.sort_unstable();
        // Merge touching runs of one owner (flex_bg packs the tables of many groups together).
        let mut merged: Vec<(u64, u64, u32)> = Vec::with_capacity(runs.len());
        for r in runs {
            match merged.last_mut() {
                Some(last) if last.2 == r.2 && r.0 <= last.1 => last.1 = last.1.max(r.1),
                _ => merged.push(r),
            }
        }
        SystemZone { runs: merged }
    }

    /// Blocks [start, start + len) may belong to inode `ino` (0: a block the
    /// allocator hands out): clear of the volume's own metadata.
    pub(crate) fn check(&self, start: u64, len: u64, ino: u32, structure: &'static str) -> Result<()> {
        if let Some((s, _)) = self.conflict(start, len, ino) {
            return Err(FsError::Format(FormatError::corrupt(
                structure,
                Location::Block(start),
                Corruption::BadField { field: "blocks over the file system's own metadata", value: s.max(start) },
            )));
        }
        Ok(())
    }
}

/// Blocks at the start of group `g` before anything allocatable: the
/// superblock backup, the descriptor blocks and the reserved ones (the
/// kernel's ext4_num_base_meta_blocks, meta_bg layouts included).
pub(crate) fn base_meta_blocks(sb: &Superblock, g: u32) -> u64 {
    let has_super = u64::from(group_has_super(sb, g));
    let per_block = u64::from(sb.block_size()) / sb.desc_size() as u64;
    let meta_bg = sb.has_incompat(feature::incompat::META_BG);
    let first_meta_bg = u64::from(sb.f.first_meta_bg);
    let metagroup = u64::from(g) / per_block;
    if !meta_bg || metagroup < first_meta_bg {
        if has_super == 0 {
            return 0;
        }
        let gdt = if meta_bg { first_meta_bg } else { u64::from(sb.group_count()).div_ceil(per_block) };
        return 1 + gdt + u64::from(sb.f.reserved_gdt_blocks);
    }
    // A meta_bg group's descriptor block is kept in its first, second and last group.
    let first = metagroup * per_block;
    let g = u64::from(g);
    has_super + u64::from(g == first || g == first + 1 || g == first + per_block - 1)
}

#[cfg(test)]
mod tests {
    use super::SystemZone;

    #[test]
    fn conflicts_are_found_at_the_edges_and_owners_pass() {
        let z = SystemZone { runs: vec![(0, 10, 0), (20, 30, 8), (40, 41, 0)] };
        assert_eq!(z.conflict(10, 10, 0), None);
        assert_eq!(z.conflict(9, 1, 0), Some((0, 10)));
        assert_eq!(z.conflict(19, 2, 5), Some((20, 30)));
        assert_eq!(z.conflict(19, 2, 8), None, "the journal inode maps its own blocks");
        assert_eq!(z.conflict(35, 10, 8), Some((40, 41)));
        assert_eq!(z.conflict(41, 100, 0), None);
    }
}
