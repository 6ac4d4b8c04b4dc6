//! Request classes for kernel file systems, from the volume layout. ext4's
//! structures are read with `ondisk`, XFS's few fields here.
//!
//! The kernel does not tell the image server what a request carries, so the
//! server reads the volume's own description: for ext4, the journal's extents
//! (from the superblock's backup of the journal inode, `s_jnl_blocks`) and the
//! static metadata (superblock and group-descriptor copies, bitmaps, inode
//! tables, from the group descriptors); for XFS, the internal log
//! (`sb_logstart`, `sb_logblocks`) and the AG headers. Anything else counts as
//! data — directory, extent-tree and xattr blocks of the kernel's ext4 are
//! floating metadata this cannot see (docs/DISKMODELS.md).

use blockdev::IoClass;
use ondisk::extent::ExtentNode;
use ondisk::group_desc::{group_has_super, GroupDesc};
use ondisk::superblock::Superblock;
use ondisk::Location;

#[derive(Clone, Debug, Default)]
pub struct Layout {
    kind: &'static str,
    /// Sorted, merged byte ranges [start, end).
    journal: Vec<(u64, u64)>,
    metadata: Vec<(u64, u64)>,
}

fn le16(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 2).map_or(0, |s| u16::from_le_bytes([s[0], s[1]]) as u64)
}
fn be16(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 2).map_or(0, |s| u16::from_be_bytes([s[0], s[1]]) as u64)
}
fn be32(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 4).map_or(0, |s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as u64)
}
fn be64(b: &[u8], o: usize) -> u64 {
    b.get(o..o + 8).map_or(0, |s| {
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        u64::from_be_bytes(a)
    })
}

fn merge(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

fn overlaps(ranges: &[(u64, u64)], off: u64, len: u64) -> bool {
    let end = off.saturating_add(len.max(1));
    // first range whose end is past off
    let i = ranges.partition_point(|r| r.1 <= off);
    ranges.get(i).is_some_and(|r| r.0 < end)
}

impl Layout {
    /// Read the layout of the volume in the image; an unknown or damaged
    /// volume gives an empty layout (everything counts as data).
    /// `read(offset, buf)` reads raw bytes and says whether it succeeded.
    pub fn probe(mut read: impl FnMut(u64, &mut [u8]) -> bool) -> Layout {
        let mut sb = vec![0u8; 1024];
        if read(1024, &mut sb) && le16(&sb, 0x38) == 0xEF53 {
            if let Some(l) = probe_ext4(&sb, &mut read) {
                return l;
            }
        }
        let mut xsb = vec![0u8; 512];
        if read(0, &mut xsb) && &xsb[0..4] == b"XFSB" {
            if let Some(l) = probe_xfs(&xsb) {
                return l;
            }
        }
        Layout::default()
    }

    pub fn class_of(&self, off: u64, len: u64) -> IoClass {
        if overlaps(&self.journal, off, len) {
            IoClass::Journal
        } else if overlaps(&self.metadata, off, len) {
            IoClass::Metadata
        } else {
            IoClass::Data
        }
    }

    pub fn describe(&self) -> String {
        if self.kind.is_empty() {
            return "unknown (all requests count as data)".into();
        }
        let j: u64 = self.journal.iter().map(|r| r.1 - r.0).sum();
        let m: u64 = self.metadata.iter().map(|r| r.1 - r.0).sum();
        format!(
            "{}: journal {} MiB in {} extents, static metadata {} MiB in {} ranges",
            self.kind,
            j >> 20,
            self.journal.len(),
            m >> 20,
            self.metadata.len()
        )
    }

    /// Journal byte ranges (for plots and tests).
    pub fn journal_ranges(&self) -> &[(u64, u64)] {
        &self.journal
    }

    /// Static-metadata byte ranges (for tools that classify traces the same way).
    pub fn metadata_ranges(&self) -> &[(u64, u64)] {
        &self.metadata
    }
}

fn probe_ext4(sb_bytes: &[u8], read: &mut impl FnMut(u64, &mut [u8]) -> bool) -> Option<Layout> {
    let sb = Superblock::parse(sb_bytes).ok()?;
    let bs = u64::from(sb.block_size());
    let blocks = sb.blocks_count();
    let first_data = u64::from(sb.f.first_data_block);
    let bpg = u64::from(sb.f.blocks_per_group);
    let groups = sb.group_count();
    if groups > 10_000_000 {
        return None;
    }
    let desc_size = sb.desc_size();
    let gdt_blocks = (u64::from(groups) * desc_size as u64).div_ceil(bs);
    let reserved_gdt = u64::from(sb.f.reserved_gdt_blocks);
    let mut meta = Vec::new();
    // superblock and group-descriptor copies
    for g in (0..groups).filter(|&g| group_has_super(&sb, g)) {
        let start = first_data + u64::from(g) * bpg;
        meta.push((start * bs, (start + 1 + gdt_blocks + reserved_gdt) * bs));
    }
    meta.push((0, 2048.max(bs))); // boot block + primary superblock
                                  // bitmaps and inode tables from the descriptors
    let mut gdt = vec![0u8; (gdt_blocks * bs) as usize];
    if read((first_data + 1) * bs, &mut gdt) {
        let itb = (u64::from(sb.f.inodes_per_group) * u64::from(sb.inode_size())).div_ceil(bs);
        for (g, d) in (0..groups).zip(gdt.chunks_exact(desc_size)) {
            let Ok(gd) = GroupDesc::parse(&sb, g, d) else { continue };
            for (b, n) in [(gd.block_bitmap(), 1), (gd.inode_bitmap(), 1), (gd.inode_table(), itb)] {
                if b > 0 && b < blocks {
                    meta.push((b * bs, (b + n) * bs));
                }
            }
        }
    }
    // the journal, from the superblock's copy of the journal inode's i_block
    let mut journal = Vec::new();
    if sb.f.journal_inum != 0 && sb.f.jnl_backup_type == 1 {
        let mut iblock = [0u8; 60];
        for (w, v) in iblock.chunks_exact_mut(4).zip(sb.f.jnl_blocks) {
            w.copy_from_slice(&v.to_le_bytes());
        }
        ext4_extents(&iblock, bs, read, 0, &mut journal);
    }
    Some(Layout { kind: "ext4", journal: merge(journal), metadata: merge(meta) })
}

/// Walk an extent-tree node (the 60-byte i_block root or a tree block).
fn ext4_extents(
    node: &[u8],
    bs: u64,
    read: &mut impl FnMut(u64, &mut [u8]) -> bool,
    level: u32,
    out: &mut Vec<(u64, u64)>,
) {
    if level > 5 {
        return;
    }
    match ExtentNode::parse(node, Location::Inode(8)) {
        Ok(ExtentNode::Leaf(_, extents)) => {
            out.extend(extents.iter().map(|e| (e.start * bs, (e.start + u64::from(e.len)) * bs)));
        }
        Ok(ExtentNode::Index(_, children)) => {
            for c in children {
                let mut blk = vec![0u8; bs as usize];
                if read(c.leaf * bs, &mut blk) {
                    ext4_extents(&blk, bs, read, level + 1, out);
                }
            }
        }
        Err(_) => {}
    }
}

fn probe_xfs(sb: &[u8]) -> Option<Layout> {
    let bs = be32(sb, 4);
    let agblocks = be32(sb, 84);
    let agcount = be32(sb, 88);
    let logblocks = be32(sb, 96);
    let sectsize = be16(sb, 102).max(512);
    let agblklog = sb.get(124).copied().unwrap_or(0) as u32;
    let logstart = be64(sb, 48);
    if bs == 0 || agblocks == 0 || agcount == 0 || agblklog > 40 {
        return None;
    }
    let mut journal = Vec::new();
    if logstart != 0 {
        let agno = logstart >> agblklog;
        let agbno = logstart & ((1u64 << agblklog) - 1);
        let start = (agno * agblocks + agbno) * bs;
        journal.push((start, start + logblocks * bs));
    }
    let meta = (0..agcount).map(|a| (a * agblocks * bs, a * agblocks * bs + 4 * sectsize)).collect();
    Some(Layout { kind: "xfs", journal: merge(journal), metadata: merge(meta) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_and_classify() {
        let l =
            Layout { kind: "x", journal: merge(vec![(100, 200)]), metadata: merge(vec![(0, 10), (5, 50), (300, 400)]) };
        assert_eq!(l.metadata, vec![(0, 50), (300, 400)]);
        assert_eq!(l.class_of(150, 10), IoClass::Journal);
        assert_eq!(l.class_of(40, 20), IoClass::Metadata);
        assert_eq!(l.class_of(50, 50), IoClass::Data);
        assert_eq!(l.class_of(399, 1), IoClass::Metadata);
    }

    #[test]
    fn garbage_gives_an_empty_layout() {
        let l = Layout::probe(|_, b| {
            b.fill(0xff);
            true
        });
        assert_eq!(l.class_of(0, 4096), IoClass::Data);
        let l = Layout::probe(|_, _| false);
        assert!(l.describe().starts_with("unknown"));
    }
}
