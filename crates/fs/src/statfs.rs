//! statfs(2) figures, computed as the kernel's ext4 does so that `df` agrees.

use crate::volume::Volume;
use ondisk::group_desc::group_has_super;
use ondisk::superblock::feature;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
}

impl Volume {
    pub fn statfs(&self) -> StatFs {
        let total = self.sb.blocks_count();
        let overhead = self.overhead_blocks();
        let (bfree, ffree) = self.free_counts();
        // Free numbers the kernel still holds are not free for a create.
        let ffree = ffree.saturating_sub(self.free_but_held_inodes());
        // Freed by the running transaction: free already, reusable after its commit.
        let bfree = bfree + self.deferred_free_blocks();
        // Reserved for delayed data and the tree blocks its write-back may
        // need: used, as the kernel counts its dirty clusters (and, before
        // 3.10, the metadata it reserved for them). Other allocations may
        // not take them either.
        let bfree = bfree.saturating_sub(self.delayed.blocks() + self.delayed.tree_blocks());
        let reserved = self.sb.r_blocks_count() + self.kernel_reserve_blocks();
        StatFs {
            blocks: total.saturating_sub(overhead),
            bfree,
            bavail: bfree.saturating_sub(reserved),
            files: u64::from(self.sb.f.inodes_count),
            ffree,
            bsize: self.block_size,
            namelen: 255,
        }
    }

    /// The blocks the kernel holds back on extent volumes for extent-tree
    /// blocks (s_resv_clusters): 2% of the volume, at most 4096, unless
    /// `VolumeOptions::reserved_blocks` says otherwise. Not counted as
    /// available; only tree blocks may take them (`write/alloc.rs`).
    pub(crate) fn kernel_reserve_blocks(&self) -> u64 {
        if !self.sb.has_incompat(feature::incompat::EXTENTS) {
            return 0;
        }
        self.opts.reserved_blocks.unwrap_or((self.sb.blocks_count() / 50).min(4096))
    }

    /// Inodes free in the bitmaps that the allocator skips: the kernel still
    /// holds lookups of them (`lookups.rs`).
    fn free_but_held_inodes(&self) -> u64 {
        self.free_but_held().0.len() as u64
    }

    /// Whether a new inode can be allocated now (a free one nobody holds).
    pub(crate) fn inode_available(&self) -> bool {
        self.free_counts().1 > self.free_but_held_inodes()
    }

    /// The numbers behind [`Self::free_but_held_inodes`], and the release
    /// count read with them (`Lookups::freed_held`). A listed number is held
    /// (it leaves the list with its last lookup), so only the bitmap is
    /// checked: asking the lookups again could miss a FORGET in between.
    pub(crate) fn free_but_held(&self) -> (Vec<u32>, u64) {
        let ipg = self.sb.f.inodes_per_group;
        let free_on_disk = |ino: u32| {
            let (g, idx) = ((ino - 1) / ipg, ((ino - 1) % ipg) as usize);
            self.inode_bitmap(g).is_ok_and(|bits| !ondisk::bitmap::test(&bits, idx))
        };
        let (listed, releases) = self.writer.lookups.freed_held();
        (listed.into_iter().filter(|&ino| free_on_disk(ino)).collect(), releases)
    }

    /// Free blocks and free inodes: the sums of the group descriptors (the
    /// superblock's own counts are only updated at commit, as the kernel does).
    pub(crate) fn free_counts(&self) -> (u64, u64) {
        self.groups.read().free_counts()
    }

    /// Blocks used by the file system's own structures: the superblock's
    /// recorded figure, else the kernel's estimate (per group: superblock
    /// backup, descriptor blocks, inode table, two bitmaps; plus the journal).
    fn overhead_blocks(&self) -> u64 {
        let recorded = u64::from(self.sb.f.overhead_clusters);
        if recorded != 0 && recorded < self.sb.blocks_count() {
            return recorded;
        }
        let mut total = u64::from(self.sb.f.first_data_block);
        let per_block = u64::from(self.block_size) / self.sb.desc_size() as u64;
        let gdb_count = u64::from(self.group_count()).div_ceil(per_block);
        let meta_bg = self.sb.has_incompat(feature::incompat::META_BG);
        let first_meta_bg = u64::from(self.sb.f.first_meta_bg);
        for g in 0..self.group_count() {
            let has_super = group_has_super(&self.sb, g);
            let metagroup = u64::from(g) / per_block;
            let gdb = if !meta_bg || metagroup < first_meta_bg {
                match (has_super, meta_bg) {
                    (false, _) => 0,
                    (true, true) => first_meta_bg,
                    (true, false) => gdb_count,
                }
            } else {
                let first = metagroup * per_block;
                let g = u64::from(g);
                u64::from(g == first || g == first + 1 || g == first + per_block - 1)
            };
            total += u64::from(has_super) + gdb + self.itb_per_group + 2;
        }
        if let Some(j) = &self.journal {
            total += j.len_blocks;
        }
        total
    }
}
