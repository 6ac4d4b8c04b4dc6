//! One fuzz target per on-disk parser of crates/ondisk. Each input starts
//! with a control byte; unless its bit 0x80 is set the harness first fixes
//! the structure's magic numbers and checksums, so that random bytes reach
//! the parser's body. Parsing must never panic; what parses must be written
//! back by the structure's writer (where it has one) and parse again to the
//! same value, and the checksums the harness set must verify.
//!
//! Input layouts (after the control byte; missing bytes read as zeros):
//!
//! | target          | parameters                                   | then                         |
//! |-----------------|----------------------------------------------|------------------------------|
//! | superblock      |                                              | 1024-byte superblock         |
//! | group_desc      | 1024-byte superblock, group (u32 le)         | descriptor (desc_size bytes) |
//! | inode           | 1024-byte superblock, inode number (u32 le)  | record (inode_size bytes)    |
//! | bitmap          | 1024-byte superblock, from, limit, max (u32) | bitmap bytes                 |
//! | extent          | inode seed (u32 le)                          | node: 60 bytes = root, else a block |
//! | dir             | inode seed (u32 le)                          | directory block              |
//! | htree           | inode seed (u32 le), hash seed (16 bytes)    | dx root or node block        |
//! | xattr_block     | seed (u32 le), block number (u64 le)         | xattr block                  |
//! | xattr_ibody     |                                              | in-inode xattr area          |
//! | jbd2_superblock | journal length in blocks (u32 le)            | 1024-byte journal superblock |
//! | jbd2_descriptor, jbd2_commit, jbd2_revoke | layout byte, journal uuid (16 bytes) | one journal block |
//!
//! Blocks whose size is not given take the input's length rounded up to a
//! power of two from 1024 to 65536 (zero padded). Control bits per target
//! are described at each function.
//!
//! This file is shared, with `#[path]`, by the fuzz crate and by ondisk's
//! regression tests (crates/ondisk/tests/fuzz_inputs.rs): it may use only
//! `ondisk`, std and `crate::image`.

use ondisk::bytes::{le16, put_be32, put_le16, put_le32};
use ondisk::csum::crc32c;
use ondisk::superblock::{feature, Superblock};
use ondisk::Location;

/// Control bit: leave magic numbers and checksums as the input has them.
pub const KEEP: u8 = 0x80;

/// Reads parameters off the front of an input; zeros once it runs out.
pub struct Input<'a> {
    d: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(d: &'a [u8]) -> Self {
        Input { d }
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let k = n.min(self.d.len());
        let mut v = self.d[..k].to_vec();
        v.resize(n, 0);
        self.d = &self.d[k..];
        v
    }
    pub fn u8(&mut self) -> u8 {
        self.bytes(1)[0]
    }
    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.bytes(4).try_into().unwrap())
    }
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.bytes(8).try_into().unwrap())
    }
    pub fn rest(self) -> &'a [u8] {
        self.d
    }
}

/// `rest` as a block: its length rounded up to a power of two in 1024..=65536.
fn as_block(rest: &[u8]) -> Vec<u8> {
    let bs = rest.len().max(1024).next_power_of_two().min(65536);
    let mut b = rest[..rest.len().min(bs)].to_vec();
    b.resize(bs, 0);
    b
}

/// Fix a superblock's magic and (with metadata_csum) checksum type and checksum.
fn fix_superblock(raw: &mut [u8]) {
    put_le16(raw, 0x38, ondisk::superblock::EXT4_MAGIC);
    if ondisk::bytes::le32(raw, 0x64) & feature::ro_compat::METADATA_CSUM != 0 {
        raw[0x175] = 1;
        let c = crc32c(!0, &raw[..0x3FC]);
        put_le32(raw, 0x3FC, c);
    }
}

/// The superblock parameter of a target, fixed unless `ctl` says keep.
fn superblock_param(inp: &mut Input, ctl: u8) -> Option<Superblock> {
    let mut raw = inp.bytes(1024);
    if ctl & KEEP == 0 {
        fix_superblock(&mut raw);
    }
    Superblock::parse(&raw).ok()
}

/// The ext4 superblock, and the geometry every later layer derives from it.
pub fn superblock(data: &[u8]) {
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let mut raw = inp.bytes(1024);
    if ctl & KEEP == 0 {
        fix_superblock(&mut raw);
    }
    let Ok(sb) = Superblock::parse(&raw) else { return };
    let _ = sb.check_supported();
    let _ =
        (sb.feature_names(), sb.csum_seed(), sb.first_ino(), sb.inode_size(), sb.needs_recovery(), sb.has_journal());
    let _ = (sb.blocks_count(), sb.r_blocks_count(), sb.free_blocks_count());
    let groups = sb.group_count();
    let per_block = u64::from(sb.block_size()) / sb.desc_size() as u64;
    assert!(per_block >= 1, "a descriptor larger than a block parsed");
    for i in 0..u64::from(groups).div_ceil(per_block).min(64) {
        let _ = ondisk::group_desc::descriptor_block(&sb, i);
    }
    for g in (0..groups.min(512)).chain([groups.saturating_sub(1), groups, u32::MAX]) {
        let _ = ondisk::group_desc::group_has_super(&sb, g);
    }
    let out = sb.to_bytes();
    assert_eq!(&out[..], &raw[..], "a parsed superblock is written back byte for byte");
    let back = Superblock::parse(&out).expect("a written superblock parses");
    assert_eq!(back, sb);
}

/// A group descriptor, with its crc16 or crc32c checksum.
pub fn group_desc(data: &[u8]) {
    use ondisk::group_desc::{GroupDesc, GroupDescFields, GroupDescHiFields};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let Some(sb) = superblock_param(&mut inp, ctl) else { return };
    let group = inp.u32();
    let size = sb.desc_size();
    let mut raw = inp.bytes(size);
    if ctl & KEEP == 0 {
        let gd = GroupDesc {
            lo: GroupDescFields::read_fields(&raw),
            hi: if size >= GroupDescHiFields::FIELDS_END {
                GroupDescHiFields::read_fields(&raw)
            } else {
                Default::default()
            },
            tail: raw[GroupDescHiFields::FIELDS_END.min(size)..].into(),
        };
        raw = gd.to_bytes(&sb, group);
    }
    let gd = match GroupDesc::parse(&sb, group, &raw) {
        Ok(gd) => gd,
        Err(e) => {
            assert!(ctl & KEEP != 0, "a descriptor with its checksum set fails: {e}");
            return;
        }
    };
    let _ = (gd.block_bitmap(), gd.inode_bitmap(), gd.inode_table(), gd.free_blocks_count(), gd.free_inodes_count());
    let _ = (gd.used_dirs_count(), gd.itable_unused(), gd.has_flag(ondisk::group_desc::BG_BLOCK_UNINIT));
    let out = gd.to_bytes(&sb, group);
    assert_eq!(out, raw, "a parsed descriptor is written back byte for byte");
    assert_eq!(GroupDesc::parse(&sb, group, &out).expect("a written descriptor parses"), gd);
    let mut again = gd.clone();
    again.set_free_blocks_count(gd.free_blocks_count());
    again.set_free_inodes_count(gd.free_inodes_count());
    again.set_used_dirs_count(gd.used_dirs_count());
    again.set_itable_unused(gd.itable_unused());
    assert_eq!(again, gd, "the 32-bit counts split into the same halves");
}

/// An inode record, its timestamps, and the extent root and xattr area inside it.
pub fn inode(data: &[u8]) {
    use ondisk::inode::{flags, Inode, Timestamp};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let Some(sb) = superblock_param(&mut inp, ctl) else { return };
    let ino = inp.u32();
    let mut rec = inp.bytes(usize::from(sb.inode_size()));
    if ctl & KEEP == 0 && sb.has_metadata_csum() {
        let seed = Inode::csum_seed(&sb, ino, ondisk::bytes::le32(&rec, 0x64));
        crate::image::fix_inode(&mut rec, seed);
    }
    let inode = match Inode::parse(&sb, ino, &rec) {
        Ok(i) => i,
        Err(_) => return,
    };
    let _ = (inode.size(), inode.uid(), inode.gid(), inode.links_count(), inode.file_acl(), inode.blocks_512(&sb));
    let _ = (inode.rdev(), inode.is_dir(), inode.is_reg(), inode.is_symlink(), inode.crtime());
    for off in [0x80, 0x84, 0x90, 0x98, 0x9C, 0xA0, 0x400] {
        let _ = inode.extra_field_fits(off, 4);
    }
    for t in [inode.atime(), inode.mtime(), inode.ctime()] {
        let (base, extra) = t.encode();
        let with_extra = Timestamp::decode(base, Some(extra));
        assert_eq!(with_extra.encode(), (base, extra));
    }
    let out = inode.to_bytes(&sb);
    assert_eq!(out, rec, "a parsed inode is written back byte for byte");
    let back = Inode::parse(&sb, ino, &out).expect("a written inode parses");
    assert_eq!(back, inode);
    if let Some(w) = inode.as_written(&out) {
        assert_eq!(w, back, "as_written agrees with parsing the record");
    }
    if inode.has_flag(flags::EXTENTS) {
        if let Ok(node) = ondisk::extent::ExtentNode::parse(&inode.base.block, Location::Inode(u64::from(ino))) {
            extent_round_trip(&node, 60);
        }
    }
    if let Ok(v) = ondisk::xattr::parse_inode_area(inode.inline_xattr_area(), Location::Inode(u64::from(ino))) {
        xattr_checks(&v);
    }
}

/// Write `node` into a fresh buffer of `size` bytes; it must parse to itself.
/// Split in two, both halves must parse and keep their order.
fn extent_round_trip(node: &ondisk::extent::ExtentNode, size: usize) {
    use ondisk::extent::ExtentNode;
    let mut buf = vec![0u8; size];
    node.write(&mut buf);
    let back = ExtentNode::parse(&buf, Location::Unknown).expect("a written extent node parses");
    assert_eq!(&back, node);
    assert_eq!(usize::from(node.header().entries), node.len());
    if node.len() >= 2 {
        let mut left = node.clone();
        let right = left.split_off(node.len() / 2, node.header().max);
        assert_eq!(left.len() + right.len(), node.len());
        assert!(left.first_key() < right.first_key() || left.first_key().is_none());
        for half in [&left, &right] {
            let mut b = vec![0u8; size];
            half.write(&mut b);
            assert_eq!(&ExtentNode::parse(&b, Location::Unknown).expect("a split half parses"), half);
        }
    }
}

/// An extent tree node: control bit 0x01 leaves a block's tail checksum alone.
pub fn extent(data: &[u8]) {
    use ondisk::extent::{self, ExtentNode};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let seed = inp.u32();
    let rest = inp.rest();
    let mut buf = if rest.len() <= 60 {
        let mut b = rest.to_vec();
        b.resize(60, 0);
        b
    } else {
        as_block(rest)
    };
    let fix = ctl & KEEP == 0;
    if fix {
        put_le16(&mut buf, 0, extent::EXTENT_MAGIC);
    }
    if buf.len() > 60 {
        let tail_fits = 12 + usize::from(le16(&buf, 4)) * 12 + 4 <= buf.len();
        if fix && ctl & 1 == 0 && tail_fits {
            extent::set_block_checksum(&mut buf, seed);
            extent::verify_block_checksum(&buf, seed, Location::Unknown).expect("a tail just set verifies");
        } else {
            let _ = extent::verify_block_checksum(&buf, seed, Location::Unknown);
        }
    }
    if let Ok(node) = ExtentNode::parse(&buf, Location::Block(7)) {
        assert!(12 + usize::from(node.header().max) * 12 <= buf.len());
        extent_round_trip(&node, buf.len());
    }
}

/// A directory block: control bit 0x01 = no filetype feature (name_len is
/// 16 bits), 0x02 = no checksum tail (else one is set before parsing).
pub fn dir(data: &[u8]) {
    use ondisk::dir::{self, DirIter};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let seed = inp.u32();
    let mut buf = as_block(inp.rest());
    let bs = buf.len();
    let filetype = ctl & 1 == 0;
    if ctl & KEEP == 0 && ctl & 2 == 0 {
        dir::set_tail(&mut buf, seed);
        assert!(dir::has_tail(&buf));
        dir::verify_tail(&buf, seed, Location::Unknown).expect("a tail just set verifies");
    } else {
        let _ = dir::verify_tail(&buf, seed, Location::Unknown);
    }
    let mut entries = Vec::new();
    let mut all_ok = true;
    let mut expect = 0;
    for e in DirIter::new(&buf, bs, filetype, Location::Block(9)) {
        match e {
            Ok(e) => {
                assert_eq!(e.offset, expect, "entries follow each other");
                assert!(e.rec_len >= dir::ENTRY_HEADER + e.name.len() && e.offset + e.rec_len <= bs);
                expect = e.offset + e.rec_len;
                entries.push(e);
            }
            Err(_) => all_ok = false,
        }
    }
    if all_ok && filetype {
        // Written back entry by entry, the block lists the same entries.
        let mut out = vec![0u8; bs];
        for e in &entries {
            dir::write_entry(&mut out, e.offset, e.inode, e.rec_len, e.file_type, e.name);
        }
        let again: Vec<_> =
            DirIter::new(&out, bs, true, Location::Unknown).map(|e| e.expect("a written entry parses")).collect();
        assert_eq!(again, entries);
    }
    for e in &entries {
        let raw = dir::rec_len_to_disk(e.rec_len, bs);
        assert_eq!(dir::rec_len_from_disk(raw, bs), e.rec_len);
    }
}

/// An htree root (control bit 0x01 clear) or index node (set). Bit 0x02
/// sets the limit to the block's capacity (and the count within it), so
/// more inputs reach the entries. Names in the rest are hashed too.
pub fn htree(data: &[u8]) {
    use ondisk::htree::{self, DxNode};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let seed = inp.u32();
    let hash_seed: [u32; 4] = std::array::from_fn(|_| inp.u32());
    let mut buf = as_block(inp.rest());
    let bs = buf.len();
    let root = ctl & 1 == 0;
    let off = if root { htree::ROOT_OFFSET } else { htree::NODE_OFFSET };
    if ctl & KEEP == 0 {
        if root {
            buf[0x18 + 5] = 8; // dx_root_info.info_length
        } else {
            put_le32(&mut buf, 0, 0);
            put_le16(&mut buf, 4, ondisk::dir::rec_len_to_disk(bs, bs));
        }
        if ctl & 2 != 0 {
            let limit = ((bs - off - 8) / 8) as u16;
            put_le16(&mut buf, off, limit);
            let count = le16(&buf, off + 2);
            put_le16(&mut buf, off + 2, count.clamp(1, limit));
        }
        let (limit, count) = (le16(&buf, off), le16(&buf, off + 2));
        if off + usize::from(limit) * 8 + 8 <= bs && count <= limit {
            htree::set_tail(&mut buf, off, seed);
            htree::verify_tail(&buf, off, seed, Location::Unknown).expect("a tail just set verifies");
        }
    } else {
        let _ = htree::verify_tail(&buf, off, seed, Location::Unknown);
    }
    let parsed =
        if root { DxNode::parse_root(&buf, Location::Unknown) } else { DxNode::parse_node(&buf, Location::Unknown) };
    if let Ok(node) = parsed {
        assert!(!node.entries.is_empty() && node.entries.len() <= usize::from(node.limit));
        for e in node.entries.iter().map(|e| e.hash).chain([0, 1, u32::MAX]) {
            for h in [e, e.wrapping_sub(1), e.wrapping_add(1)] {
                let i = node.find(h);
                assert!(i < node.entries.len());
                assert!(i == 0 || node.entries[i].hash <= h, "find lands on an entry whose range holds the hash");
                assert!(node.entries.get(i + 1).is_none_or(|n| n.hash > h));
            }
        }
        let mut out = buf.clone();
        node.write_entries(&mut out);
        let back = if root {
            DxNode::parse_root(&out, Location::Unknown)
        } else {
            DxNode::parse_node(&out, Location::Unknown)
        };
        assert_eq!(back.expect("written entries parse"), node);
    }
    // Names: the rest split at zero bytes.
    for name in buf.split(|&b| b == 0).filter(|n| !n.is_empty()).take(16) {
        let name = &name[..name.len().min(255)];
        for v in 0..=7 {
            let h = ondisk::hash::dirhash(name, v, &hash_seed);
            assert_eq!(h.is_some(), v < 6, "hash version {v}");
        }
    }
}

/// Checks on parsed attributes: names, sizes, hashes, ACL conversions.
fn xattr_checks(v: &[ondisk::xattr::Xattr]) {
    use ondisk::xattr;
    for x in v {
        let _ = (x.full_name(), xattr::footprint(x), xattr::entry_hash(x));
        if matches!(x.name_index, 2 | 3) {
            if let Ok(vfs) = xattr::acl_disk_to_xattr(&x.value) {
                let disk = xattr::acl_xattr_to_disk(&vfs).expect("a converted ACL converts back");
                assert_eq!(disk, x.value, "ACL round trip");
            }
        }
    }
}

/// An external xattr block: control bit 0x01 leaves the checksum unset
/// and parses without one.
pub fn xattr_block(data: &[u8]) {
    use ondisk::xattr;
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let seed = inp.u32();
    let blk = inp.u64();
    let mut buf = as_block(inp.rest());
    let with_csum = ctl & 1 == 0;
    if ctl & KEEP == 0 {
        put_le32(&mut buf, 0, xattr::XATTR_MAGIC);
        put_le32(&mut buf, 8, 1);
        if with_csum {
            xattr::set_block_checksum(&mut buf, blk, seed);
        }
    }
    let csum = with_csum.then_some(seed);
    let Ok(v) = xattr::parse_block(&buf, blk, csum) else { return };
    xattr_checks(&v);
    if v.iter().all(|x| x.value_inum == 0) {
        let mut sorted = v.clone();
        xattr::sort_entries(&mut sorted);
        if let Some(b) = xattr::build_block(&sorted, buf.len(), blk, csum) {
            assert_eq!(xattr::parse_block(&b, blk, csum).expect("a built block parses"), sorted);
        }
    }
}

/// The xattr area after an inode's extra fields.
pub fn xattr_ibody(data: &[u8]) {
    use ondisk::xattr;
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let rest = inp.rest();
    let mut area = rest[..rest.len().min(1024 - 128)].to_vec();
    if ctl & KEEP == 0 && area.len() >= 4 {
        put_le32(&mut area, 0, xattr::XATTR_MAGIC);
    }
    let Ok(v) = xattr::parse_inode_area(&area, Location::Inode(12)) else { return };
    xattr_checks(&v);
    if v.iter().all(|x| x.value_inum == 0) {
        let mut sorted = v.clone();
        xattr::sort_entries(&mut sorted);
        if let Some(a) = xattr::build_inode_area(&sorted, area.len()) {
            assert_eq!(xattr::parse_inode_area(&a, Location::Unknown).expect("a built area parses"), sorted);
        }
    }
}

/// Block bitmaps and inode bitmaps: the word-at-a-time searches against a
/// bit-by-bit model, and the checksums kept in the descriptor.
pub fn bitmap(data: &[u8]) {
    use ondisk::bitmap::{self, Kind};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let Some(sb) = superblock_param(&mut inp, ctl) else { return };
    let (from, limit, max) = (inp.u32() as usize, inp.u32() as usize, inp.u32() as usize);
    let mut bits = inp.rest().to_vec();
    bits.truncate(sb.block_size() as usize);
    let nbits = bits.len() * 8;
    let (from, limit, max) = (from % (nbits + 130), limit % (nbits + 130), max % (nbits + 130));
    let set = |i: usize| i < nbits && bitmap::test(&bits, i);
    match bitmap::find_zero(&bits, from, limit) {
        Some(i) => {
            assert!(i >= from && i < limit && i < nbits && !set(i), "find_zero({from}, {limit}) = {i}");
            assert!((from..i).all(set), "find_zero({from}, {limit}) skipped a zero");
        }
        None => assert!((from..limit.min(nbits)).all(set), "find_zero({from}, {limit}) missed a zero"),
    }
    let run = bitmap::zero_run(&bits, from, limit, max);
    let end = limit.min(from.saturating_add(max)).min(nbits);
    let model = (from..end.max(from)).take_while(|&i| !set(i)).count();
    assert_eq!(run, model, "zero_run({from}, {limit}, {max})");
    let zeros = bitmap::count_zeros(&bits, limit.min(nbits));
    assert_eq!(zeros, (0..limit.min(nbits)).filter(|&i| !set(i)).count());
    if nbits > 0 {
        let i = from % nbits;
        let mut b = bits.clone();
        bitmap::set(&mut b, i);
        assert!(bitmap::test(&b, i));
        bitmap::clear(&mut b, i);
        assert!(!bitmap::test(&b, i));
    }
    for kind in [Kind::Block, Kind::Inode] {
        let mut gd = ondisk::group_desc::GroupDesc::default();
        bitmap::set_checksum(&sb, &mut gd, &bits, kind);
        bitmap::verify(&sb, &gd, 0, &bits, kind).expect("a checksum just set verifies");
        let _ = bitmap::checksum(&sb, &bits, kind);
    }
}

/// The journal's layout from a parameter byte: bits 0-1 block size (1, 2,
/// 4 or 8 KiB), bits 2-3 checksum (none, v1, v2, v3), bit 4 64-bit tags.
pub fn jbd2_layout(inp: &mut Input) -> ondisk::jbd2::Layout {
    use ondisk::jbd2::{csum_seed, Checksum, Layout};
    let b = inp.u8();
    let uuid: [u8; 16] = inp.bytes(16).try_into().unwrap();
    Layout {
        block_size: 1024 << (b & 3),
        checksum: [Checksum::None, Checksum::V1, Checksum::V2, Checksum::V3][usize::from((b >> 2) & 3)],
        is_64bit: b & 0x10 != 0,
        seed: csum_seed(&uuid),
    }
}

/// One journal block of `layout`'s size from the rest of the input, its
/// header's magic and type set unless kept.
fn jbd2_block(inp: Input, layout: &ondisk::jbd2::Layout, ctl: u8, block_type: u32) -> Vec<u8> {
    let rest = inp.rest();
    let mut buf = rest[..rest.len().min(layout.block_bytes())].to_vec();
    buf.resize(layout.block_bytes(), 0);
    if ctl & KEEP == 0 {
        put_be32(&mut buf, 0, ondisk::jbd2::MAGIC);
        put_be32(&mut buf, 4, block_type);
    }
    buf
}

/// The csum v2/v3 tail of a descriptor or revoke block.
fn jbd2_set_tail(b: &mut [u8], seed: u32) {
    let n = b.len();
    put_be32(b, n - 4, 0);
    let c = ondisk::jbd2::tail_checksum(seed, b);
    put_be32(b, n - 4, c);
}

/// The journal superblock and the checks jbd2 makes when loading it.
pub fn jbd2_superblock(data: &[u8]) {
    use ondisk::jbd2::{self, Superblock};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let journal_blocks = inp.u32();
    let mut raw = inp.bytes(1024);
    if ctl & KEEP == 0 {
        put_be32(&mut raw, 0, jbd2::MAGIC);
        if !matches!(ondisk::bytes::be32(&raw, 4), 3 | 4) {
            put_be32(&mut raw, 4, 4);
        }
        if ondisk::bytes::be32(&raw, 0x28) & (jbd2::FEATURE_INCOMPAT_CSUM_V2 | jbd2::FEATURE_INCOMPAT_CSUM_V3) != 0 {
            raw[0x50] = jbd2::superblock::CHECKSUM_TYPE_CRC32C;
            let c = jbd2::superblock::superblock_checksum(&raw);
            put_be32(&mut raw, 0xFC, c);
        }
    }
    let Ok(sb) = Superblock::parse(&raw) else { return };
    let _ = sb.validate(u64::from(journal_blocks));
    let layout = sb.layout();
    let _ =
        (layout.tag_bytes(), layout.tail_bytes(), layout.revoke_record_bytes(), sb.fast_commit_blocks(), sb.log_end());
    // Written over the bytes it was read from, it gives them back, padding included.
    let mut out = raw.clone();
    sb.write_to(&mut out).expect("a 1024-byte buffer takes a superblock");
    assert_eq!(out, raw, "a journal superblock is written back byte for byte");
    assert_eq!(Superblock::parse(&out).expect("a written journal superblock parses"), sb);
}

/// A descriptor block: its tags as recovery walks them.
pub fn jbd2_descriptor(data: &[u8]) {
    use ondisk::jbd2::{descriptor, DescriptorBlock};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let layout = jbd2_layout(&mut inp);
    let mut buf = jbd2_block(inp, &layout, ctl, 1);
    let fixed = ctl & KEEP == 0 && layout.checksum.is_v2_or_v3();
    if fixed {
        jbd2_set_tail(&mut buf, layout.seed);
    }
    let Ok(d) = DescriptorBlock::parse(&buf, &layout) else { return };
    if fixed {
        descriptor::verify_checksum(&buf, &layout).expect("a tail just set verifies");
    }
    assert!(d.tags.len() <= (layout.block_bytes() - 12) / layout.tag_bytes());
    for t in &d.tags {
        let _ = (t.escaped(), t.is_last(), t.checksum_matches(&layout, d.sequence, &buf));
    }
    let mut out = vec![0u8; layout.block_bytes()];
    if d.write_to(&mut out, &layout).is_ok() {
        assert_eq!(DescriptorBlock::parse(&out, &layout).expect("a written descriptor parses"), d);
        descriptor::verify_checksum(&out, &layout).expect("a written descriptor's tail verifies");
    }
}

/// A commit block and its v2/v3 checksum.
pub fn jbd2_commit(data: &[u8]) {
    use ondisk::jbd2::{commit, CommitBlock};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let layout = jbd2_layout(&mut inp);
    let mut buf = jbd2_block(inp, &layout, ctl, 2);
    let fixed = ctl & KEEP == 0 && layout.checksum.is_v2_or_v3();
    if fixed {
        let c = commit::block_checksum(layout.seed, &buf);
        put_be32(&mut buf, 0x10, c);
    }
    let Ok(c) = CommitBlock::parse(&buf) else { return };
    if fixed {
        commit::verify_checksum(&buf, &layout).expect("a checksum just set verifies");
    }
    let mut out = vec![0u8; layout.block_bytes()];
    c.write_to(&mut out, &layout).expect("a block-sized buffer takes a commit block");
    let mut back = CommitBlock::parse(&out).expect("a written commit block parses");
    commit::verify_checksum(&out, &layout).expect("a written commit block's checksum verifies");
    if layout.checksum.is_v2_or_v3() {
        back.checksums[0] = c.checksums[0];
    }
    assert_eq!(back, c);
}

/// A revoke block. Unless kept, `r_count` is brought inside the block.
pub fn jbd2_revoke(data: &[u8]) {
    use ondisk::jbd2::{revoke, RevokeBlock};
    let mut inp = Input::new(data);
    let ctl = inp.u8();
    let layout = jbd2_layout(&mut inp);
    let mut buf = jbd2_block(inp, &layout, ctl, 5);
    let fixed = ctl & KEEP == 0;
    if fixed {
        let room = (layout.block_bytes() - layout.tail_bytes()) as u32;
        let count = ondisk::bytes::be32(&buf, 12);
        put_be32(&mut buf, 12, if count <= room { count } else { count % (room + 1) });
        if layout.checksum.is_v2_or_v3() {
            jbd2_set_tail(&mut buf, layout.seed);
        }
    }
    let Ok(r) = RevokeBlock::parse(&buf, &layout) else { return };
    if fixed {
        revoke::verify_checksum(&buf, &layout).expect("a tail just set verifies");
    }
    assert!(r.blocks.len() <= RevokeBlock::capacity(&layout));
    let mut out = vec![0u8; layout.block_bytes()];
    r.write_to(&mut out, &layout).expect("parsed records fit a block");
    assert_eq!(RevokeBlock::parse(&out, &layout).expect("a written revoke block parses"), r);
    revoke::verify_checksum(&out, &layout).expect("a written revoke block's tail verifies");
}
