//! Linear directory blocks: a chain of `ext4_dir_entry_2` records, and, with
//! metadata_csum, a 12-byte tail holding the block's crc32c.

use crate::bytes::{le16, le32, need, put_le16, put_le32};
use crate::csum::crc32c;
use crate::{Corruption, FormatError, Location, Result};

pub const ENTRY_HEADER: usize = 8;
pub const TAIL_SIZE: usize = 12;
const TAIL_FT: u8 = 0xDE;
pub const MAX_NAME_LEN: usize = 255;

/// `file_type` values in directory entries.
pub mod ftype {
    pub const UNKNOWN: u8 = 0;
    pub const REG: u8 = 1;
    pub const DIR: u8 = 2;
    pub const CHR: u8 = 3;
    pub const BLK: u8 = 4;
    pub const FIFO: u8 = 5;
    pub const SOCK: u8 = 6;
    pub const SYMLINK: u8 = 7;
}

/// One entry as stored: `rec_len` spans the entry and the free space after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry<'a> {
    /// Offset of the entry in its buffer.
    pub offset: usize,
    /// 0 for an unused slot.
    pub inode: u32,
    pub rec_len: usize,
    pub file_type: u8,
    pub name: &'a [u8],
}

/// Space an entry with a name of `name_len` bytes needs (rounded to 4).
pub fn entry_size(name_len: usize) -> usize {
    (ENTRY_HEADER + name_len + 3) & !3
}

/// Decode `rec_len` as the kernel does (65536-byte blocks store 0 or 65535 for a full block).
pub fn rec_len_from_disk(raw: u16, block_size: usize) -> usize {
    if block_size >= 65536 && (raw == 0xFFFF || raw == 0) {
        return block_size;
    }
    usize::from(raw & 0xFFFC) | (usize::from(raw & 3) << 16)
}

pub fn rec_len_to_disk(len: usize, block_size: usize) -> u16 {
    if len >= 65536 && block_size >= 65536 {
        return if len == block_size { 0xFFFF } else { 0 };
    }
    (len & 0xFFFC) as u16 | ((len >> 16) & 3) as u16
}

/// Iterate over the entries of a directory buffer (a block, or inline data).
/// `has_filetype` says whether the high byte of name_len is a file type.
pub struct DirIter<'a> {
    buf: &'a [u8],
    pos: usize,
    block_size: usize,
    has_filetype: bool,
    at: Location,
}

impl<'a> DirIter<'a> {
    pub fn new(buf: &'a [u8], block_size: usize, has_filetype: bool, at: Location) -> Self {
        DirIter { buf, pos: 0, block_size, has_filetype, at }
    }
}

impl<'a> Iterator for DirIter<'a> {
    type Item = Result<DirEntry<'a>>;

    // Inlined into the directory scans of the crate using it: a create scans a
    // leaf three times (lookup, name check, insert), about 90 entries each.
    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let r = parse_entry(self.buf, self.pos, self.block_size, self.has_filetype, self.at);
        match &r {
            Ok(e) => self.pos += e.rec_len,
            Err(_) => self.pos = self.buf.len(), // stop after the first bad entry
        }
        Some(r)
    }
}

#[inline]
fn parse_entry(buf: &[u8], pos: usize, block_size: usize, has_filetype: bool, at: Location) -> Result<DirEntry<'_>> {
    const S: &str = "directory entry";
    let bad = |field: &'static str, value: u64| FormatError::corrupt(S, at, Corruption::BadField { field, value });
    need(S, &buf[pos..], ENTRY_HEADER).map_err(|e| e.at(at))?;
    let inode = le32(buf, pos);
    let rec_len = rec_len_from_disk(le16(buf, pos + 4), block_size);
    let name_len = usize::from(buf[pos + 6]) | if has_filetype { 0 } else { usize::from(buf[pos + 7]) << 8 };
    let file_type = if has_filetype { buf[pos + 7] } else { ftype::UNKNOWN };
    if rec_len < ENTRY_HEADER || !rec_len.is_multiple_of(4) || pos + rec_len > buf.len() {
        return Err(bad("rec_len", rec_len as u64));
    }
    if ENTRY_HEADER + name_len > rec_len || (inode != 0 && name_len == 0) {
        return Err(bad("name_len", name_len as u64));
    }
    Ok(DirEntry {
        offset: pos,
        inode,
        rec_len,
        file_type,
        name: &buf[pos + ENTRY_HEADER..pos + ENTRY_HEADER + name_len],
    })
}

/// Write an entry header and name at `pos`.
pub fn write_entry(buf: &mut [u8], pos: usize, inode: u32, rec_len: usize, file_type: u8, name: &[u8]) {
    debug_assert!(name.len() <= MAX_NAME_LEN && entry_size(name.len()) <= rec_len);
    let bs = buf.len();
    put_le32(buf, pos, inode);
    put_le16(buf, pos + 4, rec_len_to_disk(rec_len, bs));
    buf[pos + 6] = name.len() as u8;
    buf[pos + 7] = file_type;
    buf[pos + ENTRY_HEADER..pos + ENTRY_HEADER + name.len()].copy_from_slice(name);
}

/// Change the record length of the entry at `pos` (its name stays).
pub fn set_rec_len(buf: &mut [u8], pos: usize, rec_len: usize) {
    let bs = buf.len();
    put_le16(buf, pos + 4, rec_len_to_disk(rec_len, bs));
}

/// Whether the block ends with a checksum tail.
pub fn has_tail(block: &[u8]) -> bool {
    let n = block.len();
    n >= TAIL_SIZE
        && le32(block, n - 12) == 0
        && le16(block, n - 8) == TAIL_SIZE as u16
        && block[n - 6] == 0
        && block[n - 5] == TAIL_FT
}

/// Verify the tail checksum of a leaf directory block.
pub fn verify_tail(block: &[u8], inode_seed: u32, at: Location) -> Result<()> {
    if !has_tail(block) {
        return Err(FormatError::corrupt(
            "directory block",
            at,
            Corruption::BadField { field: "checksum tail", value: 0 },
        ));
    }
    let n = block.len();
    let stored = le32(block, n - 4);
    let computed = crc32c(inode_seed, &block[..n - TAIL_SIZE]);
    if stored != computed {
        return Err(FormatError::corrupt("directory block", at, Corruption::BadChecksum { stored, computed }));
    }
    Ok(())
}

/// Write the tail record and its checksum at the end of `block`.
pub fn set_tail(block: &mut [u8], inode_seed: u32) {
    let n = block.len();
    put_le32(block, n - 12, 0);
    put_le16(block, n - 8, TAIL_SIZE as u16);
    block[n - 6] = 0;
    block[n - 5] = TAIL_FT;
    let c = crc32c(inode_seed, &block[..n - TAIL_SIZE]);
    put_le32(block, n - 4, c);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block_with(names: &[(&[u8], u32)], bs: usize, tail: bool) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        let end = if tail { bs - TAIL_SIZE } else { bs };
        let mut pos = 0;
        for (i, (name, ino)) in names.iter().enumerate() {
            let len = if i + 1 == names.len() { end - pos } else { entry_size(name.len()) };
            write_entry(&mut b, pos, *ino, len, ftype::REG, name);
            pos += len;
        }
        if tail {
            set_tail(&mut b, 42);
        }
        b
    }

    #[test]
    fn iterate_entries_and_tail() {
        let b = block_with(&[(b".", 2), (b"..", 2), (b"hello", 12)], 1024, true);
        let names: Vec<_> = DirIter::new(&b, 1024, true, Location::Unknown)
            .map(|e| e.unwrap())
            .filter(|e| e.inode != 0)
            .map(|e| e.name.to_vec())
            .collect();
        assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"hello".to_vec()]);
        verify_tail(&b, 42, Location::Block(9)).unwrap();
        assert!(verify_tail(&b, 43, Location::Block(9)).is_err());
    }

    #[test]
    fn bad_rec_len_is_an_error_not_a_loop() {
        let mut b = block_with(&[(b"a", 11)], 1024, false);
        put_le16(&mut b, 4, 0);
        let v: Vec<_> = DirIter::new(&b, 1024, true, Location::Unknown).collect();
        assert_eq!(v.len(), 1);
        assert!(v[0].is_err());
    }

    #[test]
    fn rec_len_encoding_for_64k_blocks() {
        assert_eq!(rec_len_from_disk(rec_len_to_disk(65536, 65536), 65536), 65536);
        assert_eq!(rec_len_from_disk(rec_len_to_disk(4096, 65536), 65536), 4096);
        assert_eq!(rec_len_from_disk(12, 4096), 12);
    }

    proptest! {
        #[test]
        fn iteration_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            for e in DirIter::new(&bytes, 4096, true, Location::Unknown) { let _ = e; }
            let _ = verify_tail(&bytes, 0, Location::Unknown);
        }
    }
}
