//! Whole images for the `volume` and `journal` targets: a compact input form
//! (so that a 10 MiB image whose blocks are mostly zeros is a few KiB of fuzz
//! input), and checksum fix-ups over a whole ext4 image or jbd2 journal, so
//! that mutated metadata gets past its checksum to the code that uses it.
//!
//! Input form (`decode`): `[size in KiB: u16 le]` then records
//! `[index: u16 le][len: u16 le][len bytes]`: the KiB-aligned piece `index`
//! of the image begins with those bytes (at most 1024; the rest are zeros).
//! A truncated last record keeps what is there. `fuzz/tools/seed.py`
//! encodes images this way.
//!
//! This file is shared, with `#[path]`, by the fuzz crate and by the
//! engine's regression tests (crates/fs/tests/fuzz_inputs.rs): it may use
//! only `ondisk` and std.

use ondisk::bytes::{be32, le16, le32, put_be32, put_le16, put_le32};
use ondisk::csum::crc32c;
use ondisk::inode::Inode;
use ondisk::superblock::{feature, Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

pub const PIECE: usize = 1024;
/// Largest image an input may describe.
pub const MAX_KIB: usize = 10240;

/// The image an input describes.
pub fn decode(data: &[u8]) -> Vec<u8> {
    if data.len() < 2 {
        return Vec::new();
    }
    let kib = usize::from(le16(data, 0)).clamp(2, MAX_KIB);
    let mut img = vec![0u8; kib * PIECE];
    let mut pos = 2;
    while pos + 4 <= data.len() {
        let index = usize::from(le16(data, pos));
        let len = usize::from(le16(data, pos + 2)).min(PIECE);
        pos += 4;
        let bytes = &data[pos..data.len().min(pos + len)];
        pos += bytes.len();
        if index < kib {
            img[index * PIECE..index * PIECE + bytes.len()].copy_from_slice(bytes);
        }
    }
    img
}

/// The input form of `img` (its length a multiple of 1 KiB, at most 10 MiB).
pub fn encode(img: &[u8]) -> Vec<u8> {
    let kib = img.len() / PIECE;
    let mut out = (kib as u16).to_le_bytes().to_vec();
    for (i, piece) in img.chunks(PIECE).enumerate() {
        let used = piece.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        if used > 0 {
            out.extend_from_slice(&(i as u16).to_le_bytes());
            out.extend_from_slice(&(used as u16).to_le_bytes());
            out.extend_from_slice(&piece[..used]);
        }
    }
    out
}

/// Caps on the fix-up walk, so that a mutated geometry cannot make it slow.
const MAX_GROUPS: u64 = 256;
const MAX_INODES: u64 = 8192;
const MAX_NODES: usize = 512;
const MAX_DIR_BLOCKS: u64 = 512;

/// `bs`-sized block `blk` of `img`, if it lies inside.
fn block_mut(img: &mut [u8], blk: u64, bs: usize) -> Option<&mut [u8]> {
    let start = usize::try_from(blk).ok()?.checked_mul(bs)?;
    img.get_mut(start..start.checked_add(bs)?)
}

/// Set the superblock's magic and checksum, then every checksum a read of
/// the volume meets: bitmaps and group descriptors, extent blocks, directory
/// blocks (linear and htree), xattr blocks, inode records and the journal's
/// blocks. Structures too damaged to locate are left as they are.
pub fn fix_ext4(img: &mut [u8]) {
    if img.len() < SUPERBLOCK_OFFSET as usize + SUPERBLOCK_SIZE {
        return;
    }
    let sbr = &mut img[SUPERBLOCK_OFFSET as usize..SUPERBLOCK_OFFSET as usize + SUPERBLOCK_SIZE];
    put_le16(sbr, 0x38, ondisk::superblock::EXT4_MAGIC);
    if le32(sbr, 0x64) & feature::ro_compat::METADATA_CSUM != 0 {
        sbr[0x175] = 1; // s_checksum_type: crc32c
        let c = crc32c(!0, &sbr[..0x3FC]);
        put_le32(sbr, 0x3FC, c);
    }
    let Ok(sb) = Superblock::parse(sbr) else { return };
    let bs = sb.block_size() as usize;
    let csum = sb.has_metadata_csum();

    // Bitmaps, then the descriptors whose checksums cover theirs.
    let groups = u64::from(sb.group_count()).min(MAX_GROUPS);
    let dsize = sb.desc_size();
    let per_block = (bs / dsize) as u64;
    let mut tables = Vec::new();
    for g in 0..groups {
        let dblk = ondisk::group_desc::descriptor_block(&sb, g / per_block);
        let off = (g % per_block) as usize * dsize;
        let Some(raw) = block_mut(img, dblk, bs).map(|b| b[off..off + dsize].to_vec()) else { continue };
        let mut gd = ondisk::group_desc::GroupDesc {
            lo: ondisk::group_desc::GroupDescFields::read_fields(&raw),
            hi: if dsize >= ondisk::group_desc::GroupDescHiFields::FIELDS_END {
                ondisk::group_desc::GroupDescHiFields::read_fields(&raw)
            } else {
                Default::default()
            },
            tail: raw[ondisk::group_desc::GroupDescHiFields::FIELDS_END.min(dsize)..].into(),
        };
        if csum {
            for (blk, kind) in
                [(gd.block_bitmap(), ondisk::bitmap::Kind::Block), (gd.inode_bitmap(), ondisk::bitmap::Kind::Inode)]
            {
                if let Some(bits) = block_mut(img, blk, bs) {
                    let bits = bits.to_vec();
                    ondisk::bitmap::set_checksum(&sb, &mut gd, &bits, kind);
                }
            }
        }
        let bytes = gd.to_bytes(&sb, g as u32);
        if let Some(b) = block_mut(img, dblk, bs) {
            b[off..off + dsize].copy_from_slice(&bytes);
        }
        tables.push((g, gd.inode_table()));
    }

    // Inodes: what hangs off each in-use one, then its own record.
    let isz = usize::from(sb.inode_size());
    let ipg = u64::from(sb.f.inodes_per_group);
    let mut seen = 0u64;
    let journal_ino = if sb.f.journal_inum != 0 { sb.f.journal_inum } else { ondisk::inode::JOURNAL_INO };
    for (g, table) in tables {
        for i in 0..ipg {
            seen += 1;
            if seen > MAX_INODES {
                return;
            }
            let ino = match u32::try_from(g * ipg + i + 1) {
                Ok(n) => n,
                Err(_) => return,
            };
            let Some(byte) = table.checked_mul(bs as u64).and_then(|t| t.checked_add(i * isz as u64)) else { continue };
            let Ok(byte) = usize::try_from(byte) else { continue };
            if byte.checked_add(isz).is_none_or(|end| end > img.len()) {
                continue;
            }
            let rec = img[byte..byte + isz].to_vec();
            if le16(&rec, 0) == 0 && le16(&rec, 0x1A) == 0 {
                continue; // mode and links zero: unused
            }
            let generation = le32(&rec, 0x64);
            let seed = Inode::csum_seed(&sb, ino, generation);
            let flags = le32(&rec, 0x20);
            let mode = le16(&rec, 0);
            let is_dir = mode & 0xF000 == 0x4000;
            if csum {
                let mut runs = Vec::new();
                if flags & ondisk::inode::flags::EXTENTS != 0 && flags & ondisk::inode::flags::INLINE_DATA == 0 {
                    fix_extent_tree(img, &rec[0x28..0x28 + 60], bs, seed, &mut runs);
                } else if flags & ondisk::inode::flags::INLINE_DATA == 0 && is_dir {
                    for k in 0..12 {
                        let b = le32(&rec, 0x28 + 4 * k);
                        if b != 0 {
                            runs.push((k as u64, u64::from(b), 1));
                        }
                    }
                }
                if is_dir {
                    let index = flags & ondisk::inode::flags::INDEX != 0;
                    fix_dir_blocks(img, &runs, bs, seed, index);
                }
                let acl = u64::from(le32(&rec, 0x68)) | u64::from(le16(&rec, 0x76)) << 32;
                if acl != 0 {
                    if let Some(b) = block_mut(img, acl, bs) {
                        if le32(b, 0) == ondisk::xattr::XATTR_MAGIC {
                            ondisk::xattr::set_block_checksum(b, acl, sb.csum_seed());
                        }
                    }
                }
                fix_inode(&mut img[byte..byte + isz], seed);
            }
            if ino == journal_ino && sb.has_journal() {
                let mut runs = Vec::new();
                if flags & ondisk::inode::flags::EXTENTS != 0 {
                    fix_extent_tree(img, &rec[0x28..0x28 + 60], bs, seed, &mut runs);
                }
                let mut offsets = Vec::new();
                for (lblk, pblk, len) in runs {
                    for k in 0..len {
                        if offsets.len() as u64 != lblk + k {
                            break; // a hole or disorder: stop where the journal stops being contiguous in logical order
                        }
                        match pblk.checked_add(k).and_then(|b| b.checked_mul(bs as u64)) {
                            Some(o) if o + bs as u64 <= img.len() as u64 => offsets.push(o as usize),
                            _ => break,
                        }
                    }
                }
                fix_journal(img, &offsets, bs);
            }
        }
    }
}

/// Set the checksum of an inode record (crc32c over the record with the
/// checksum fields zero, seeded with the inode's seed).
pub fn fix_inode(rec: &mut [u8], seed: u32) {
    let extra = if rec.len() > 128 { usize::from(le16(rec, 0x80)) } else { 0 };
    let hi = rec.len() > 128 && 128 + extra >= 0x84 && rec.len() >= 0x84;
    put_le16(rec, 0x7C, 0);
    if hi {
        put_le16(rec, 0x82, 0);
    }
    let c = crc32c(seed, rec);
    put_le16(rec, 0x7C, c as u16);
    if hi {
        put_le16(rec, 0x82, (c >> 16) as u16);
    }
}

/// Walk the extent tree rooted at `root`, fixing each non-root node's tail;
/// collect the leaves' (logical, physical, length) runs.
fn fix_extent_tree(img: &mut [u8], root: &[u8], bs: usize, seed: u32, runs: &mut Vec<(u64, u64, u64)>) {
    let mut stack = vec![root.to_vec()];
    let mut nodes = 0;
    while let Some(node) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES || node.len() < 12 || le16(&node, 0) != ondisk::extent::EXTENT_MAGIC {
            continue;
        }
        let entries = usize::from(le16(&node, 2)).min((node.len() - 12) / 12);
        let depth = le16(&node, 6);
        for i in 0..entries {
            let e = &node[12 + 12 * i..24 + 12 * i];
            if depth == 0 {
                let raw = le16(e, 4);
                let len = if raw > 32768 { raw - 32768 } else { raw };
                let start = u64::from(le16(e, 6)) << 32 | u64::from(le32(e, 8));
                runs.push((u64::from(le32(e, 0)), start, u64::from(len)));
            } else {
                let child = u64::from(le16(e, 8)) << 32 | u64::from(le32(e, 4));
                if let Some(b) = block_mut(img, child, bs) {
                    if le16(b, 0) == ondisk::extent::EXTENT_MAGIC && 12 + usize::from(le16(b, 4)) * 12 + 4 <= bs {
                        ondisk::extent::set_block_checksum(b, seed);
                    }
                    stack.push(b.to_vec());
                }
            }
        }
    }
}

/// Fix the checksum tails of a directory's blocks: htree root and index
/// nodes (in a hashed directory) or the dirent tail.
fn fix_dir_blocks(img: &mut [u8], runs: &[(u64, u64, u64)], bs: usize, seed: u32, index: bool) {
    let mut done = 0;
    for &(lblk, pblk, len) in runs {
        for k in 0..len {
            done += 1;
            if done > MAX_DIR_BLOCKS {
                return;
            }
            let Some(b) = pblk.checked_add(k).and_then(|p| block_mut(img, p, bs)) else { break };
            let first_rec = ondisk::dir::rec_len_from_disk(le16(b, 4), bs);
            let dx_at = if index && lblk + k == 0 {
                Some(ondisk::htree::ROOT_OFFSET)
            } else if index && first_rec == bs && le32(b, 0) == 0 {
                Some(ondisk::htree::NODE_OFFSET)
            } else {
                None
            };
            match dx_at {
                Some(off) => {
                    let limit = usize::from(le16(b, off));
                    let count = le16(b, off + 2);
                    if off + limit * 8 + 8 <= bs && count <= le16(b, off) {
                        ondisk::htree::set_tail(b, off, seed);
                    }
                }
                None if ondisk::dir::has_tail(b) => ondisk::dir::set_tail(b, seed),
                None => {}
            }
        }
    }
}

/// Fix a jbd2 journal laid in `img` at `offsets` (the byte offset of each
/// journal block, in journal order): the superblock's checksum, and in the
/// log every descriptor (its tags' data checksums and its tail), revoke
/// block (tail) and commit block (v2/v3 checksum). Nothing without csum v2/v3.
pub fn fix_journal(img: &mut [u8], offsets: &[usize], bs: usize) {
    use ondisk::jbd2::{self, BlockType, Checksum};
    let Some(&sb_at) = offsets.first() else { return };
    if bs < 1024 || sb_at + bs > img.len() {
        return;
    }
    {
        let jsb = &mut img[sb_at..sb_at + 1024];
        put_be32(jsb, 0, jbd2::MAGIC);
        if !matches!(be32(jsb, 4), 3 | 4) {
            put_be32(jsb, 4, 4);
        }
        if be32(jsb, 0x28) & (jbd2::FEATURE_INCOMPAT_CSUM_V2 | jbd2::FEATURE_INCOMPAT_CSUM_V3) != 0 {
            jsb[0x50] = jbd2::superblock::CHECKSUM_TYPE_CRC32C;
            let c = jbd2::superblock::superblock_checksum(jsb);
            put_be32(jsb, 0xFC, c);
        }
    }
    let Ok(jsb) = jbd2::Superblock::parse(&img[sb_at..sb_at + 1024]) else { return };
    let layout = jsb.layout();
    if layout.block_bytes() != bs || !layout.checksum.is_v2_or_v3() {
        return;
    }
    let end = (jsb.log_end() as usize).min(offsets.len());
    let first = (jsb.first as usize).max(1);
    if first >= end {
        return;
    }
    let mut j = first;
    while j < end {
        let at = offsets[j];
        let Some(h) = jbd2::Header::peek(&img[at..at + bs]) else {
            j += 1;
            continue;
        };
        match h.block_type {
            BlockType::Descriptor => {
                let Ok(d) = jbd2::DescriptorBlock::parse(&img[at..at + bs], &layout) else {
                    j += 1;
                    continue;
                };
                // Tag positions, as the parser walks them.
                let mut off = jbd2::HEADER_SIZE;
                for (n, tag) in d.tags.iter().enumerate() {
                    // The data blocks follow the descriptor, wrapping to s_first at the log's end.
                    let mut k = j + 1 + n;
                    if k >= end {
                        k = k - end + first;
                    }
                    if let Some(&data_at) = offsets.get(k).filter(|_| k < end) {
                        let sum = jbd2::data_block_checksum(layout.seed, h.sequence, &img[data_at..data_at + bs]);
                        let b = &mut img[at..at + bs];
                        if layout.checksum == Checksum::V3 {
                            put_be32(b, off + 12, sum);
                        } else {
                            b[off + 4..off + 6].copy_from_slice(&(sum as u16).to_be_bytes());
                        }
                    }
                    off += layout.tag_bytes() + if tag.has_uuid() { 16 } else { 0 };
                }
                set_tail(&mut img[at..at + bs], layout.seed);
                j += 1 + d.tags.len();
            }
            BlockType::Revoke => {
                set_tail(&mut img[at..at + bs], layout.seed);
                j += 1;
            }
            BlockType::Commit => {
                let c = jbd2::commit::block_checksum(layout.seed, &img[at..at + bs]);
                put_be32(&mut img[at..at + bs], 0x10, c);
                j += 1;
            }
            _ => j += 1,
        }
    }
}

/// The csum v2/v3 tail of a descriptor or revoke block.
fn set_tail(b: &mut [u8], seed: u32) {
    let n = b.len();
    put_be32(b, n - 4, 0);
    let c = ondisk::jbd2::tail_checksum(seed, b);
    put_be32(b, n - 4, c);
}
