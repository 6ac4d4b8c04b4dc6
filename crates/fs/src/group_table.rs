//! The parsed group descriptors, with their free counts summed and kept up
//! to date as descriptors change: a delayed write checks its reservation
//! against the volume's free blocks on every call, and summing 16,000
//! descriptors (a 2 TB volume) each time made that O(groups).

use ondisk::group_desc::GroupDesc;

#[derive(Default)]
pub(crate) struct GroupTable {
    descs: Vec<GroupDesc>,
    free_blocks: u64,
    free_inodes: u64,
    /// (first inode-table block, group), sorted: which group's table holds a
    /// block (tables never move while mounted).
    tables: Vec<(u64, u32)>,
}

impl GroupTable {
    pub(crate) fn new(descs: Vec<GroupDesc>) -> Self {
        let free_blocks = descs.iter().map(|g| u64::from(g.free_blocks_count())).sum();
        let free_inodes = descs.iter().map(|g| u64::from(g.free_inodes_count())).sum();
        let mut tables: Vec<(u64, u32)> = descs.iter().zip(0u32..).map(|(g, i)| (g.inode_table(), i)).collect();
        tables.sort_unstable();
        GroupTable { descs, free_blocks, free_inodes, tables }
    }

    /// The group whose inode table (`blocks_per_table` long) holds `blk`.
    pub(crate) fn table_holding(&self, blk: u64, blocks_per_table: u64) -> Option<u32> {
        let i = self.tables.partition_point(|&(start, _)| start <= blk).checked_sub(1)?;
        let (start, g) = self.tables[i];
        (blk < start + blocks_per_table).then_some(g)
    }

    /// Make `gd` group `g`'s descriptor; the totals follow.
    pub(crate) fn set(&mut self, g: usize, gd: GroupDesc) {
        let old = &self.descs[g];
        debug_assert_eq!(old.inode_table(), gd.inode_table(), "an inode table moved while mounted");
        self.free_blocks = self.free_blocks - u64::from(old.free_blocks_count()) + u64::from(gd.free_blocks_count());
        self.free_inodes = self.free_inodes - u64::from(old.free_inodes_count()) + u64::from(gd.free_inodes_count());
        self.descs[g] = gd;
        // The full sum, checked where it is cheap (debug builds, small volumes).
        debug_assert!(
            self.descs.len() > 1024
                || self.free_blocks == self.descs.iter().map(|g| u64::from(g.free_blocks_count())).sum::<u64>()
        );
    }

    /// Free blocks and free inodes over every group.
    pub(crate) fn free_counts(&self) -> (u64, u64) {
        (self.free_blocks, self.free_inodes)
    }
}

/// Reads see a slice of descriptors; changes go through [`GroupTable::set`].
impl std::ops::Deref for GroupTable {
    type Target = [GroupDesc];

    fn deref(&self) -> &[GroupDesc] {
        &self.descs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(free_blocks: u32, free_inodes: u32) -> GroupDesc {
        let mut gd = GroupDesc::default();
        gd.set_free_blocks_count(free_blocks);
        gd.set_free_inodes_count(free_inodes);
        gd
    }

    #[test]
    fn totals_follow_every_change() {
        let mut t = GroupTable::new(vec![desc(100, 10), desc(200, 20), desc(0, 0)]);
        assert_eq!(t.free_counts(), (300, 30));
        t.set(1, desc(150, 25));
        assert_eq!(t.free_counts(), (250, 35));
        t.set(2, desc(70_000, 8192));
        assert_eq!(t.free_counts(), (70_250, 8227));
        assert_eq!(t.len(), 3);
        assert_eq!(t[2].free_blocks_count(), 70_000);
    }

    #[test]
    fn the_table_holding_a_block_is_found_in_any_layout() {
        // flex_bg packs tables together, out of group order after a resize.
        let starts = [1000u64, 1512, 40, 2024];
        let t = GroupTable::new(
            starts
                .iter()
                .map(|&s| {
                    let mut gd = GroupDesc::default();
                    gd.set_inode_table(s);
                    gd
                })
                .collect(),
        );
        let per_table = 512;
        assert_eq!(t.table_holding(39, per_table), None);
        assert_eq!(t.table_holding(40, per_table), Some(2));
        assert_eq!(t.table_holding(551, per_table), Some(2));
        assert_eq!(t.table_holding(552, per_table), None, "between tables");
        assert_eq!(t.table_holding(1000, per_table), Some(0));
        assert_eq!(t.table_holding(1511, per_table), Some(0));
        assert_eq!(t.table_holding(1512, per_table), Some(1));
        assert_eq!(t.table_holding(2535, per_table), Some(3));
        assert_eq!(t.table_holding(2536, per_table), None, "past the last table");
    }
}
