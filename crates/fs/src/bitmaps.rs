//! Reading allocation bitmaps, checked against their descriptor checksums.
//! Groups flagged BLOCK_UNINIT / INODE_UNINIT have no bitmap on disk yet: the
//! kernel computes one (only the group's own metadata in use); so do we.

use crate::cache::Block;
use crate::error::Result;
use crate::read_core::ReadCore;
use ondisk::bitmap::{self, Kind};
use ondisk::group_desc::{BG_BLOCK_UNINIT, BG_INODE_UNINIT};
use std::sync::Arc;

impl ReadCore {
    /// The block bitmap of group `g` (computed for an uninitialised group).
    pub fn block_bitmap(&self, g: u32) -> Result<Block> {
        let gd = self.group(g);
        if gd.has_flag(BG_BLOCK_UNINIT) {
            return Ok(Arc::from(self.uninit_block_bitmap(g)));
        }
        let data = self.meta(gd.block_bitmap())?;
        self.verify_once(gd.block_bitmap(), &data, |d| Ok(bitmap::verify(&self.sb, &gd, g, d, Kind::Block)?))?;
        Ok(data)
    }

    /// The inode bitmap of group `g` (all free for an uninitialised group).
    pub fn inode_bitmap(&self, g: u32) -> Result<Block> {
        let gd = self.group(g);
        if gd.has_flag(BG_INODE_UNINIT) {
            return Ok(Arc::from(vec![0u8; self.block_size() as usize]));
        }
        let data = self.meta(gd.inode_bitmap())?;
        self.verify_once(gd.inode_bitmap(), &data, |d| Ok(bitmap::verify(&self.sb, &gd, g, d, Kind::Inode)?))?;
        Ok(data)
    }

    /// What the kernel's `ext4_init_block_bitmap` builds: the group's
    /// superblock backup and descriptor blocks, plus any bitmap or inode table
    /// (of any group, with flex_bg) that lies inside this group, are in use;
    /// bits past the end of the volume are set.
    fn uninit_block_bitmap(&self, g: u32) -> Vec<u8> {
        let bs = self.block_size() as usize;
        let mut bits = vec![0u8; bs];
        let bpg = u64::from(self.sb.f.blocks_per_group);
        let first = self.group_first_block(g);
        let end = (first + bpg).min(self.sb.blocks_count());
        let mut mark = |b: u64| {
            if b >= first && b < end {
                bitmap::set(&mut bits, (b - first) as usize);
            }
        };
        for b in first..first + crate::system_zone::base_meta_blocks(&self.sb, g) {
            mark(b);
        }
        for gd in self.groups.read().iter() {
            mark(gd.block_bitmap());
            mark(gd.inode_bitmap());
            for b in gd.inode_table()..gd.inode_table() + self.itb_per_group {
                mark(b);
            }
        }
        for i in (end - first) as usize..bs * 8 {
            bitmap::set(&mut bits, i);
        }
        bits
    }
}
