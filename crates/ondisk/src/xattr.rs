//! Extended attributes: entries in the inode's tail (after a 4-byte magic) or
//! in one external block (32-byte header). Values live in the same area.

use crate::bytes::{le16, le32, need, put_le32};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

pub const XATTR_MAGIC: u32 = 0xEA02_0000;
pub const BLOCK_HEADER_SIZE: usize = 32;
const ENTRY_HEADER: usize = 16;
const BLOCK_CSUM_OFFSET: usize = 0x10;

/// Name prefixes by `e_name_index`.
pub fn prefix(index: u8) -> Option<&'static str> {
    Some(match index {
        1 => "user.",
        2 => "system.posix_acl_access",
        3 => "system.posix_acl_default",
        4 => "trusted.",
        6 => "security.",
        7 => "system.",
        8 => "system.richacl",
        _ => return None,
    })
}

/// One attribute with its full name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr {
    pub name_index: u8,
    /// Name without its prefix.
    pub suffix: Vec<u8>,
    pub value: Vec<u8>,
    /// Non-zero when the value is stored in a separate inode (ea_inode feature).
    pub value_inum: u32,
}

impl Xattr {
    /// The name as user space sees it (prefix + suffix), or None for an unknown index.
    pub fn full_name(&self) -> Option<Vec<u8>> {
        let mut n = prefix(self.name_index)?.as_bytes().to_vec();
        n.extend_from_slice(&self.suffix);
        Some(n)
    }
}

/// Parse the entries in `area`. `entries_start` is where the first entry is;
/// value offsets are relative to `values_base` (the first entry for in-inode
/// attributes, the block start for a block).
fn parse_entries(area: &[u8], entries_start: usize, values_base: usize, at: Location) -> Result<Vec<Xattr>> {
    const S: &str = "xattr entry";
    let bad = |field: &'static str, value: u64| FormatError::corrupt(S, at, Corruption::BadField { field, value });
    let mut out = Vec::new();
    let mut pos = entries_start;
    loop {
        if pos + 4 > area.len() {
            return Err(bad("entry table end", pos as u64));
        }
        if le32(area, pos) == 0 {
            return Ok(out); // end of entries
        }
        need(S, &area[pos..], ENTRY_HEADER).map_err(|e| e.at(at))?;
        let name_len = usize::from(area[pos]);
        let name_index = area[pos + 1];
        let value_offs = usize::from(le16(area, pos + 2));
        let value_inum = le32(area, pos + 4);
        let value_size = le32(area, pos + 8) as usize;
        let name_end = pos + ENTRY_HEADER + name_len;
        if name_end > area.len() {
            return Err(bad("name length", name_len as u64));
        }
        let suffix = area[pos + ENTRY_HEADER..name_end].to_vec();
        let value = if value_inum != 0 {
            Vec::new()
        } else {
            let start = values_base + value_offs;
            match start.checked_add(value_size) {
                Some(end) if end <= area.len() => area[start..end].to_vec(),
                _ => return Err(bad("value offset", value_offs as u64)),
            }
        };
        out.push(Xattr { name_index, suffix, value, value_inum });
        pos = (name_end + 3) & !3;
    }
}

/// Attributes stored in an inode's tail (`area` = bytes after the extra fields).
pub fn parse_inode_area(area: &[u8], at: Location) -> Result<Vec<Xattr>> {
    if area.len() < 4 || le32(area, 0) != XATTR_MAGIC {
        return Ok(Vec::new()); // no in-inode attributes
    }
    parse_entries(area, 4, 4, at)
}

/// Attributes in an external block, checking magic and (with metadata_csum) the checksum.
pub fn parse_block(block: &[u8], block_nr: u64, csum_seed: Option<u32>) -> Result<Vec<Xattr>> {
    const S: &str = "xattr block";
    let at = Location::Block(block_nr);
    need(S, block, BLOCK_HEADER_SIZE + 4).map_err(|e| e.at(at))?;
    let magic = le32(block, 0);
    if magic != XATTR_MAGIC {
        return Err(FormatError::corrupt(S, at, Corruption::BadMagic { found: u64::from(magic) }));
    }
    if le32(block, 8) != 1 {
        return Err(FormatError::corrupt(
            S,
            at,
            Corruption::BadField { field: "h_blocks", value: u64::from(le32(block, 8)) },
        ));
    }
    if let Some(seed) = csum_seed {
        let stored = le32(block, BLOCK_CSUM_OFFSET);
        let computed = block_checksum(block, block_nr, seed);
        if stored != computed {
            return Err(FormatError::corrupt(S, at, Corruption::BadChecksum { stored, computed }));
        }
    }
    parse_entries(block, BLOCK_HEADER_SIZE, 0, at)
}

/// crc32c(seed, le64 block number, block with the checksum field zeroed).
pub fn block_checksum(block: &[u8], block_nr: u64, seed: u32) -> u32 {
    let c = crc32c(seed, &block_nr.to_le_bytes());
    let c = crc32c(c, &block[..BLOCK_CSUM_OFFSET]);
    let c = crc32c(c, &[0u8; 4]);
    crc32c(c, &block[BLOCK_CSUM_OFFSET + 4..])
}

pub fn set_block_checksum(block: &mut [u8], block_nr: u64, seed: u32) {
    let c = block_checksum(block, block_nr, seed);
    put_le32(block, BLOCK_CSUM_OFFSET, c);
}

/// Convert an ACL from ext4's compact on-disk form to the form the VFS's
/// `system.posix_acl_*` xattrs carry (version 2, 8-byte entries).
pub fn acl_disk_to_xattr(disk: &[u8]) -> Result<Vec<u8>> {
    const S: &str = "posix acl";
    let bad =
        |v: u64| FormatError::corrupt(S, Location::Unknown, Corruption::BadField { field: "acl entry", value: v });
    need(S, disk, 4)?;
    if le32(disk, 0) != 1 {
        return Err(bad(u64::from(le32(disk, 0))));
    }
    let mut out = 2u32.to_le_bytes().to_vec();
    let mut pos = 4;
    while pos < disk.len() {
        need(S, &disk[pos..], 4)?;
        let tag = le16(disk, pos);
        let perm = le16(disk, pos + 2);
        let id = match tag {
            // ACL_USER_OBJ, ACL_GROUP_OBJ, ACL_MASK, ACL_OTHER: short entries.
            0x01 | 0x04 | 0x10 | 0x20 => {
                pos += 4;
                u32::MAX
            }
            // ACL_USER, ACL_GROUP: with an id.
            0x02 | 0x08 => {
                need(S, &disk[pos..], 8)?;
                pos += 8;
                le32(disk, pos - 4)
            }
            t => return Err(bad(u64::from(t))),
        };
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block_with(entries: &[(u8, &[u8], &[u8])]) -> Vec<u8> {
        let mut b = vec![0u8; 1024];
        put_le32(&mut b, 0, XATTR_MAGIC);
        put_le32(&mut b, 4, 1);
        put_le32(&mut b, 8, 1);
        let mut pos = BLOCK_HEADER_SIZE;
        let mut vend = b.len();
        for (idx, name, value) in entries {
            vend -= (value.len() + 3) & !3;
            b[pos] = name.len() as u8;
            b[pos + 1] = *idx;
            b[pos + 2..pos + 4].copy_from_slice(&(vend as u16).to_le_bytes());
            put_le32(&mut b, pos + 8, value.len() as u32);
            b[pos + 16..pos + 16 + name.len()].copy_from_slice(name);
            b[vend..vend + value.len()].copy_from_slice(value);
            pos = (pos + 16 + name.len() + 3) & !3;
        }
        b
    }

    #[test]
    fn block_parse_and_checksum() {
        let mut b = block_with(&[(1, b"color", b"blue"), (6, b"selinux", b"ctx")]);
        set_block_checksum(&mut b, 77, 5);
        let v = parse_block(&b, 77, Some(5)).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].full_name().unwrap(), b"user.color");
        assert_eq!(v[0].value, b"blue");
        assert_eq!(v[1].full_name().unwrap(), b"security.selinux");
        assert!(parse_block(&b, 78, Some(5)).is_err(), "block number is in the checksum");
    }

    #[test]
    fn value_outside_area_is_corrupt() {
        let mut b = block_with(&[(1, b"a", b"x")]);
        b[BLOCK_HEADER_SIZE + 2..BLOCK_HEADER_SIZE + 4].copy_from_slice(&2000u16.to_le_bytes());
        assert!(parse_block(&b, 1, None).is_err());
    }

    #[test]
    fn acl_conversion() {
        let mut disk = 1u32.to_le_bytes().to_vec();
        disk.extend_from_slice(&[1, 0, 6, 0]); // user::rw-
        disk.extend_from_slice(&[2, 0, 4, 0, 0xe8, 3, 0, 0]); // user:1000:r--
        disk.extend_from_slice(&[0x20, 0, 4, 0]); // other::r--
        let x = acl_disk_to_xattr(&disk).unwrap();
        assert_eq!(x.len(), 4 + 3 * 8);
        assert_eq!(le32(&x, 0), 2);
        assert_eq!(le32(&x, 4 + 4), u32::MAX);
        assert_eq!(le32(&x, 12 + 4), 1000);
    }

    proptest! {
        #[test]
        fn parsing_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = parse_inode_area(&bytes, Location::Unknown);
            let _ = parse_block(&bytes, 0, Some(0));
            let _ = acl_disk_to_xattr(&bytes);
        }
    }
}

// ---------------------------------------------------------------------------
// Writing.

const ENTRY_ROUND: usize = 3;

fn entry_len(x: &Xattr) -> usize {
    (ENTRY_HEADER + x.suffix.len() + ENTRY_ROUND) & !ENTRY_ROUND
}

fn value_len(x: &Xattr) -> usize {
    (x.value.len() + ENTRY_ROUND) & !ENTRY_ROUND
}

/// Bytes an attribute takes in an area: its entry and its padded value.
pub fn footprint(x: &Xattr) -> usize {
    entry_len(x) + value_len(x)
}

/// The entry hash e2fsck checks (e2fsprogs' `ext2fs_ext_attr_hash_entry`,
/// unsigned-char variant as current kernels compute it).
pub fn entry_hash(x: &Xattr) -> u32 {
    let mut h = 0u32;
    for &c in &x.suffix {
        h = (h << 5) ^ (h >> 27) ^ u32::from(c);
    }
    if x.value_inum == 0 && !x.value.is_empty() {
        let mut padded = x.value.clone();
        padded.resize(value_len(x), 0);
        for w in padded.chunks(4) {
            h = (h << 16) ^ (h >> 16) ^ le32(w, 0);
        }
    }
    h
}

/// Order the kernel keeps entries in (it stops its search at the first entry
/// sorting after the name): by index, then name length, then name.
pub fn sort_entries(v: &mut [Xattr]) {
    v.sort_by(|a, b| (a.name_index, a.suffix.len(), &a.suffix).cmp(&(b.name_index, b.suffix.len(), &b.suffix)));
}

/// Lay entries out in `area`: entry table from `entries_start`, values packed
/// from the end, offsets relative to `values_base`. None if they do not fit.
fn write_entries(area: &mut [u8], entries_start: usize, values_base: usize, entries: &[Xattr]) -> Option<()> {
    let mut pos = entries_start;
    let mut vend = area.len();
    for x in entries {
        let (el, vl) = (entry_len(x), value_len(x));
        // Room for this entry plus the 4-byte terminator, below the values.
        if pos + el + 4 > vend.checked_sub(vl)? {
            return None;
        }
        vend -= vl;
        area[vend..vend + x.value.len()].copy_from_slice(&x.value);
        area[vend + x.value.len()..vend + vl].fill(0);
        area[pos] = x.suffix.len() as u8;
        area[pos + 1] = x.name_index;
        // An empty value's offset is 0, as the kernel writes it; but an entry
        // with no name, index 0 and offset 0 starts with four zero bytes, the
        // end-of-entries mark: every entry after it would vanish. Such an
        // entry (the kernel keeps one it finds) gets offset 4 instead, which
        // a zero-length value may point anywhere in the area.
        let offs = match (x.value.is_empty(), x.suffix.is_empty() && x.name_index == 0) {
            (false, _) => (vend - values_base) as u16,
            (true, false) => 0,
            (true, true) => 4,
        };
        crate::bytes::put_le16(area, pos + 2, offs);
        put_le32(area, pos + 4, 0);
        put_le32(area, pos + 8, x.value.len() as u32);
        put_le32(area, pos + 12, entry_hash(x));
        area[pos + ENTRY_HEADER..pos + ENTRY_HEADER + x.suffix.len()].copy_from_slice(&x.suffix);
        area[pos + ENTRY_HEADER + x.suffix.len()..pos + el].fill(0);
        pos += el;
    }
    put_le32(area, pos, 0); // end of entries
    Some(())
}

/// The in-inode attribute area (bytes after the extra fields) holding `entries`
/// (empty: all zeros, no magic). None if they do not fit in `len` bytes.
pub fn build_inode_area(entries: &[Xattr], len: usize) -> Option<Vec<u8>> {
    let mut area = vec![0u8; len];
    if entries.is_empty() {
        return Some(area);
    }
    if len < 8 {
        return None;
    }
    put_le32(&mut area, 0, XATTR_MAGIC);
    write_entries(&mut area, 4, 4, entries)?;
    Some(area)
}

/// An external attribute block with `entries` (sorted by the caller), its
/// header hash and, with a seed, its checksum. None if they do not fit.
pub fn build_block(entries: &[Xattr], block_size: usize, block_nr: u64, csum_seed: Option<u32>) -> Option<Vec<u8>> {
    let mut b = vec![0u8; block_size];
    put_le32(&mut b, 0, XATTR_MAGIC);
    put_le32(&mut b, 4, 1); // refcount
    put_le32(&mut b, 8, 1); // blocks
    write_entries(&mut b, BLOCK_HEADER_SIZE, 0, entries)?;
    // Header hash over the entry hashes (e2fsprogs' ext2fs_ext_attr_block_rehash).
    let mut h = 0u32;
    for x in entries {
        h = (h << 16) ^ (h >> 16) ^ entry_hash(x);
    }
    put_le32(&mut b, 12, h);
    if let Some(seed) = csum_seed {
        set_block_checksum(&mut b, block_nr, seed);
    }
    Some(b)
}

/// Convert an ACL from the VFS xattr form (version 2) to ext4's compact form.
pub fn acl_xattr_to_disk(x: &[u8]) -> Result<Vec<u8>> {
    const S: &str = "posix acl";
    let bad =
        |v: u64| FormatError::corrupt(S, Location::Unknown, Corruption::BadField { field: "acl entry", value: v });
    need(S, x, 4)?;
    if le32(x, 0) != 2 || !(x.len() - 4).is_multiple_of(8) {
        return Err(bad(u64::from(le32(x, 0))));
    }
    let mut out = 1u32.to_le_bytes().to_vec();
    for e in x[4..].chunks(8) {
        let tag = le16(e, 0);
        out.extend_from_slice(&e[..4]);
        match tag {
            0x01 | 0x04 | 0x10 | 0x20 => {}
            0x02 | 0x08 => out.extend_from_slice(&e[4..8]),
            t => return Err(bad(u64::from(t))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod write_tests {
    use super::*;

    fn x(idx: u8, n: &str, v: &[u8]) -> Xattr {
        Xattr { name_index: idx, suffix: n.as_bytes().to_vec(), value: v.to_vec(), value_inum: 0 }
    }

    #[test]
    fn inode_area_and_block_round_trip() {
        let mut v = vec![x(1, "zeta", b"1"), x(6, "selinux", b"ctx"), x(1, "a", b""), x(1, "beta", &[7u8; 50])];
        sort_entries(&mut v);
        let area = build_inode_area(&v, 156).unwrap();
        assert_eq!(parse_inode_area(&area, Location::Unknown).unwrap(), v);
        let blk = build_block(&v, 1024, 9, Some(3)).unwrap();
        assert_eq!(parse_block(&blk, 9, Some(3)).unwrap(), v);
        assert!(build_inode_area(&v, 60).is_none(), "too small an area is refused");
        assert_eq!(build_inode_area(&[], 100).unwrap(), vec![0u8; 100]);
    }

    /// Found by the xattr_block and xattr_ibody fuzz targets: a nameless
    /// entry of index 0 with an empty value was written as four zero bytes,
    /// the end mark, and the entries after it were lost.
    #[test]
    fn a_nameless_empty_entry_does_not_end_the_list() {
        let mut v = vec![x(0, "", b""), x(1, "kept", b"v")];
        sort_entries(&mut v);
        let area = build_inode_area(&v, 100).unwrap();
        assert_eq!(parse_inode_area(&area, Location::Unknown).unwrap(), v);
        let blk = build_block(&v, 1024, 5, None).unwrap();
        assert_eq!(parse_block(&blk, 5, None).unwrap(), v);
    }

    #[test]
    fn acl_round_trip() {
        let mut disk = 1u32.to_le_bytes().to_vec();
        disk.extend_from_slice(&[1, 0, 6, 0]);
        disk.extend_from_slice(&[2, 0, 4, 0, 0xe8, 3, 0, 0]);
        disk.extend_from_slice(&[0x20, 0, 4, 0]);
        let vfs = acl_disk_to_xattr(&disk).unwrap();
        assert_eq!(acl_xattr_to_disk(&vfs).unwrap(), disk);
    }
}
