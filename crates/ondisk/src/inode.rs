//! Inodes: the 128-byte base record plus the extra fields that follow it when
//! the inode size is larger (timestamps' nanoseconds, checksum high half, ...).

use crate::bytes::{le16, lo_hi, need, put_le16, put_le32};
use crate::csum::crc32c;
use crate::superblock::{feature, Superblock};
use crate::{le_struct, Corruption, FormatError, Location, Result};

pub const ROOT_INO: u32 = 2;
pub const JOURNAL_INO: u32 = 8;
pub const GOOD_OLD_INODE_SIZE: usize = 128;
const CSUM_LO_OFFSET: usize = 0x7C;
const CSUM_HI_OFFSET: usize = 0x82;
/// Size of `i_block`: 15 block pointers, or an extent root, or inline bytes.
pub const I_BLOCK_SIZE: usize = 60;

/// File type bits of `i_mode`.
pub mod mode {
    pub const S_IFMT: u16 = 0xF000;
    pub const S_IFSOCK: u16 = 0xC000;
    pub const S_IFLNK: u16 = 0xA000;
    pub const S_IFREG: u16 = 0x8000;
    pub const S_IFBLK: u16 = 0x6000;
    pub const S_IFDIR: u16 = 0x4000;
    pub const S_IFCHR: u16 = 0x2000;
    pub const S_IFIFO: u16 = 0x1000;
    pub const S_ISUID: u16 = 0o4000;
    pub const S_ISGID: u16 = 0o2000;
    pub const S_ISVTX: u16 = 0o1000;
}

/// `i_flags` bits that change how the inode is read.
pub mod flags {
    pub const SECRM: u32 = 0x1;
    pub const UNRM: u32 = 0x2;
    pub const COMPR: u32 = 0x4;
    /// Writes are synchronous.
    pub const SYNC: u32 = 0x8;
    /// No change at all: data, names, attributes.
    pub const IMMUTABLE: u32 = 0x10;
    /// Data may only be appended; the name may not go.
    pub const APPEND: u32 = 0x20;
    pub const NODUMP: u32 = 0x40;
    pub const NOATIME: u32 = 0x80;
    pub const NOCOMPR: u32 = 0x400;
    pub const JOURNAL_DATA: u32 = 0x4000;
    pub const NOTAIL: u32 = 0x8000;
    /// Directory changes are synchronous.
    pub const DIRSYNC: u32 = 0x10000;
    pub const TOPDIR: u32 = 0x20000;
    pub const DAX: u32 = 0x0200_0000;
    pub const PROJINHERIT: u32 = 0x2000_0000;
    pub const ENCRYPT: u32 = 0x800;
    /// Directory has an htree index.
    pub const INDEX: u32 = 0x1000;
    /// i_blocks counts file-system blocks, not 512-byte sectors.
    pub const HUGE_FILE: u32 = 0x40000;
    /// i_block holds an extent tree root.
    pub const EXTENTS: u32 = 0x80000;
    pub const VERITY: u32 = 0x100000;
    /// The inode stores a large xattr value (ea_inode feature).
    pub const EA_INODE: u32 = 0x200000;
    /// Contents live in i_block and the system.data xattr.
    pub const INLINE_DATA: u32 = 0x10000000;
    pub const CASEFOLD: u32 = 0x40000000;
}

le_struct! {
    /// The fixed 128-byte part of `struct ext4_inode`.
    pub struct InodeBase {
        /// File type and permission bits.
        mode: u16 = 0x00,
        uid_lo: u16 = 0x02,
        size_lo: u32 = 0x04,
        atime: u32 = 0x08,
        ctime: u32 = 0x0C,
        mtime: u32 = 0x10,
        /// Deletion time; also the next link of the orphan list.
        dtime: u32 = 0x14,
        gid_lo: u16 = 0x18,
        links_count: u16 = 0x1A,
        blocks_lo: u32 = 0x1C,
        flags: u32 = 0x20,
        /// i_version low half (osd1).
        version_lo: u32 = 0x24,
        /// Block map, extent root, inline data or fast symlink target.
        block: [u8; 60] = 0x28,
        generation: u32 = 0x64,
        file_acl_lo: u32 = 0x68,
        size_hi: u32 = 0x6C,
        blocks_hi: u16 = 0x74,
        file_acl_hi: u16 = 0x76,
        uid_hi: u16 = 0x78,
        gid_hi: u16 = 0x7A,
        checksum_lo: u16 = 0x7C,
    }
}

le_struct! {
    /// Fields after the base record, present when `extra_isize` covers them.
    pub struct InodeExtra {
        /// Bytes used past 128 by these fields; in-inode xattrs start after them.
        extra_isize: u16 = 0x80,
        checksum_hi: u16 = 0x82,
        /// Extra bits for each timestamp: 2 epoch bits, then 30 bits of nanoseconds.
        ctime_extra: u32 = 0x84,
        mtime_extra: u32 = 0x88,
        atime_extra: u32 = 0x8C,
        crtime: u32 = 0x90,
        crtime_extra: u32 = 0x94,
        version_hi: u32 = 0x98,
        projid: u32 = 0x9C,
    }
}

/// A timestamp with nanoseconds, as ext4 encodes it (seconds may be negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Timestamp {
    pub sec: i64,
    pub nsec: u32,
}

impl Timestamp {
    /// Decode the 32-bit seconds and the optional extra word.
    pub fn decode(base: u32, extra: Option<u32>) -> Self {
        let mut sec = i64::from(base as i32);
        let mut nsec = 0;
        if let Some(x) = extra {
            sec += i64::from(x & 3) << 32;
            nsec = x >> 2;
        }
        Timestamp { sec, nsec }
    }

    /// Encode as (seconds word, extra word).
    pub fn encode(self) -> (u32, u32) {
        let base = self.sec as i32 as u32;
        let epoch = ((self.sec - i64::from(base as i32)) >> 32) as u32 & 3;
        (base, epoch | (self.nsec << 2))
    }

    /// What the kernel's `timestamp_truncate` makes of a time on ext4:
    /// seconds clamped to the range the inode can store (1901..2446 with the
    /// extra word's epoch bits, 1901..2038 without), nanoseconds dropped at
    /// either limit or without the extra word. Unclamped, a time outside the
    /// range would wrap into another epoch.
    pub fn clamped(self, extra: bool) -> Timestamp {
        let min = i64::from(i32::MIN);
        let max = if extra { (1i64 << 34) - 1 + min } else { i64::from(i32::MAX) };
        let sec = self.sec.clamp(min, max);
        let nsec = if sec == min || sec == max || !extra { 0 } else { self.nsec };
        Timestamp { sec, nsec }
    }
}

/// One of an inode's timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeField {
    Access,
    Modify,
    Change,
    /// i_crtime: only in records whose extra fields reach it.
    Birth,
}

impl TimeField {
    /// Offset of the field's extra word (nanoseconds and epoch bits).
    fn extra_offset(self) -> usize {
        match self {
            TimeField::Change => 0x84,
            TimeField::Modify => 0x88,
            TimeField::Access => 0x8C,
            TimeField::Birth => 0x94,
        }
    }
}

/// One inode record, parsed. `raw` keeps the whole record (xattrs live in its tail).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub ino: u32,
    pub base: InodeBase,
    /// Present when the record is larger than 128 bytes.
    pub extra: Option<InodeExtra>,
    pub raw: Vec<u8>,
}

impl Inode {
    /// Parse inode `ino` from its record (`sb.inode_size()` bytes), checking the
    /// checksum with metadata_csum.
    pub fn parse(sb: &Superblock, ino: u32, buf: &[u8]) -> Result<Self> {
        const S: &str = "inode";
        let size = usize::from(sb.inode_size());
        need(S, buf, size).map_err(|e| e.at(Location::Inode(u64::from(ino))))?;
        let raw = buf[..size].to_vec();
        let base = InodeBase::read_fields(&raw);
        let extra = if size > GOOD_OLD_INODE_SIZE {
            let e = InodeExtra::read_fields(&raw);
            let room = size - GOOD_OLD_INODE_SIZE;
            if usize::from(e.extra_isize) > room || !e.extra_isize.is_multiple_of(4) {
                return Err(FormatError::corrupt(
                    S,
                    Location::Inode(u64::from(ino)),
                    Corruption::BadField { field: "extra_isize", value: u64::from(e.extra_isize) },
                ));
            }
            Some(e)
        } else {
            None
        };
        let inode = Inode { ino, base, extra, raw };
        if sb.has_metadata_csum() {
            let (stored, computed) = inode.checksums(sb);
            if stored != computed {
                return Err(FormatError::corrupt(
                    S,
                    Location::Inode(u64::from(ino)),
                    Corruption::BadChecksum { stored, computed },
                ));
            }
        }
        Ok(inode)
    }

    /// Whether the checksum's high half is stored in this record.
    fn has_csum_hi(&self) -> bool {
        self.extra_field_fits(CSUM_HI_OFFSET, 2)
    }

    /// Whether the extra field at `off` (of `len` bytes) lies within extra_isize.
    pub fn extra_field_fits(&self, off: usize, len: usize) -> bool {
        match &self.extra {
            Some(e) => GOOD_OLD_INODE_SIZE + usize::from(e.extra_isize) >= off + len,
            None => false,
        }
    }

    /// The per-inode checksum seed: crc32c over the inode number and generation.
    pub fn csum_seed(sb: &Superblock, ino: u32, generation: u32) -> u32 {
        let mut both = [0u8; 8];
        both[..4].copy_from_slice(&ino.to_le_bytes());
        both[4..].copy_from_slice(&generation.to_le_bytes());
        crc32c(sb.csum_seed(), &both)
    }

    /// (stored, computed) checksum of the record as parsed, truncated to what
    /// the record can store. Just after parsing, `raw` is exactly what
    /// [`Inode::serialise_into`] would produce, so it is summed as it is.
    fn checksums(&self, sb: &Superblock) -> (u32, u32) {
        let full = self.record_crc(sb, &self.raw);
        let stored_lo = u32::from(self.base.checksum_lo);
        if self.has_csum_hi() {
            let stored_hi = u32::from(self.extra.as_ref().map_or(0, |e| e.checksum_hi));
            (stored_lo | (stored_hi << 16), full)
        } else {
            (stored_lo, full & 0xFFFF)
        }
    }

    /// crc32c of record `rec` with its checksum fields read as zero. This
    /// runs on every inode read: the record is summed in one call from a copy
    /// on the stack (a call per piece around the fields costs more than the copy).
    fn record_crc(&self, sb: &Superblock, rec: &[u8]) -> u32 {
        let mut stack = [0u8; 1024];
        let mut heap = Vec::new();
        let buf: &mut [u8] = if rec.len() <= stack.len() {
            &mut stack[..rec.len()]
        } else {
            heap.resize(rec.len(), 0);
            &mut heap
        };
        buf.copy_from_slice(rec);
        self.zero_and_sum(sb, buf)
    }

    /// Zero the checksum fields of record `rec` and return its crc32c.
    fn zero_and_sum(&self, sb: &Superblock, rec: &mut [u8]) -> u32 {
        put_le16(rec, CSUM_LO_OFFSET, 0);
        if self.has_csum_hi() {
            put_le16(rec, CSUM_HI_OFFSET, 0);
        }
        crc32c(Self::csum_seed(sb, self.ino, self.base.generation), rec)
    }

    /// The record's bytes: `raw` with every modelled field written over it.
    fn serialise_into(&self, out: &mut [u8]) {
        out.copy_from_slice(&self.raw);
        self.base.write_fields(out);
        if let Some(e) = &self.extra {
            // Extra fields past extra_isize are not part of the record (xattrs
            // live there): write them all into a scratch copy, keep the declared ones.
            let declared = GOOD_OLD_INODE_SIZE + usize::from(e.extra_isize);
            let end = declared.clamp(GOOD_OLD_INODE_SIZE + 2, InodeExtra::FIELDS_END);
            let mut tmp = [0u8; InodeExtra::FIELDS_END];
            let have = out.len().min(InodeExtra::FIELDS_END);
            tmp[..have].copy_from_slice(&out[..have]);
            e.write_fields(&mut tmp);
            out[GOOD_OLD_INODE_SIZE..end].copy_from_slice(&tmp[GOOD_OLD_INODE_SIZE..end]);
        }
    }

    /// Write the record, with its checksum set (when metadata_csum is on),
    /// into `out` (exactly the record's size: its slot in an inode-table block).
    pub fn write_to(&self, sb: &Superblock, out: &mut [u8]) {
        self.serialise_into(out);
        if sb.has_metadata_csum() {
            let c = self.zero_and_sum(sb, out);
            put_le16(out, CSUM_LO_OFFSET, c as u16);
            if self.has_csum_hi() {
                put_le16(out, CSUM_HI_OFFSET, (c >> 16) as u16);
            }
        }
    }

    /// What [`Inode::parse`] returns for `record`, the bytes [`Inode::write_to`]
    /// just produced from this inode, without parsing them again: the fields
    /// as they are, `raw` the record, the checksum fields as written. None when
    /// that cannot be told without parsing: `extra_isize` leaves some modelled
    /// field out of the record (the record keeps other bytes there).
    pub fn as_written(&self, record: &[u8]) -> Option<Inode> {
        let mut out = Inode { ino: 0, base: InodeBase::default(), extra: None, raw: Vec::with_capacity(record.len()) };
        self.as_written_into(record, &mut out).then_some(out)
    }

    /// [`Inode::as_written`] into `out`, reusing its record buffer; false (and
    /// `out` unchanged) when it declines.
    pub fn as_written_into(&self, record: &[u8], out: &mut Inode) -> bool {
        debug_assert_eq!(record.len(), self.raw.len());
        if let Some(e) = &self.extra {
            // As parse: an extra_isize it would refuse, or one that leaves fields out.
            let isize = usize::from(e.extra_isize);
            if isize % 4 != 0
                || GOOD_OLD_INODE_SIZE + isize > record.len()
                || isize < InodeExtra::FIELDS_END - GOOD_OLD_INODE_SIZE
            {
                return false;
            }
        }
        out.ino = self.ino;
        out.base.clone_from(&self.base);
        out.extra.clone_from(&self.extra);
        out.raw.clear();
        out.raw.extend_from_slice(record);
        out.base.checksum_lo = le16(record, CSUM_LO_OFFSET);
        if let Some(e) = out.extra.as_mut() {
            e.checksum_hi = le16(record, CSUM_HI_OFFSET);
        }
        true
    }

    /// Serialise the record with its checksum set (when metadata_csum is on).
    pub fn to_bytes(&self, sb: &Superblock) -> Vec<u8> {
        let mut out = vec![0u8; self.raw.len()];
        self.write_to(sb, &mut out);
        out
    }

    pub fn file_type(&self) -> u16 {
        self.base.mode & mode::S_IFMT
    }
    pub fn is_dir(&self) -> bool {
        self.file_type() == mode::S_IFDIR
    }
    pub fn is_reg(&self) -> bool {
        self.file_type() == mode::S_IFREG
    }
    pub fn is_symlink(&self) -> bool {
        self.file_type() == mode::S_IFLNK
    }
    pub fn has_flag(&self, f: u32) -> bool {
        self.base.flags & f != 0
    }
    pub fn size(&self) -> u64 {
        lo_hi(self.base.size_lo, self.base.size_hi)
    }
    pub fn uid(&self) -> u32 {
        u32::from(self.base.uid_lo) | (u32::from(self.base.uid_hi) << 16)
    }
    pub fn gid(&self) -> u32 {
        u32::from(self.base.gid_lo) | (u32::from(self.base.gid_hi) << 16)
    }
    pub fn set_uid(&mut self, uid: u32) {
        self.base.uid_lo = uid as u16;
        self.base.uid_hi = (uid >> 16) as u16;
    }
    pub fn set_gid(&mut self, gid: u32) {
        self.base.gid_lo = gid as u16;
        self.base.gid_hi = (gid >> 16) as u16;
    }
    pub fn set_size(&mut self, size: u64) {
        self.base.size_lo = size as u32;
        self.base.size_hi = (size >> 32) as u32;
    }
    pub fn set_flags(&mut self, flags: u32) {
        self.base.flags = flags;
    }
    pub fn insert_flags(&mut self, flags: u32) {
        self.base.flags |= flags;
    }
    pub fn remove_flags(&mut self, flags: u32) {
        self.base.flags &= !flags;
    }
    /// Set timestamp `field` to `t`, clamped to what this record can hold:
    /// with the nanoseconds and epoch bits where its extra word lies within
    /// extra_isize (as the kernel's EXT4_INODE_SET_XTIME), else whole
    /// seconds. A birth time the record has no room for is not kept.
    pub fn set_time(&mut self, field: TimeField, t: Timestamp) {
        // i_crtime's seconds word is an extra field too (0x90).
        if field == TimeField::Birth && !self.extra_field_fits(0x90, 4) {
            return;
        }
        let extra_fits = self.extra_field_fits(field.extra_offset(), 4);
        let (base, extra) = t.clamped(extra_fits).encode();
        match field {
            TimeField::Access => self.base.atime = base,
            TimeField::Modify => self.base.mtime = base,
            TimeField::Change => self.base.ctime = base,
            TimeField::Birth => {
                if let Some(e) = self.extra.as_mut() {
                    e.crtime = base;
                }
            }
        }
        if let Some(e) = self.extra.as_mut().filter(|_| extra_fits) {
            match field {
                TimeField::Access => e.atime_extra = extra,
                TimeField::Modify => e.mtime_extra = extra,
                TimeField::Change => e.ctime_extra = extra,
                TimeField::Birth => e.crtime_extra = extra,
            }
        }
    }
    /// Store device number `rdev` (`new_encode_dev` layout) as the kernel
    /// does: the old 16-bit form in i_block[0] when major and minor both fit
    /// in a byte, else the new form in i_block[1].
    pub fn set_rdev(&mut self, rdev: u32) {
        let (major, minor) = ((rdev >> 8) & 0xfff, (rdev & 0xff) | ((rdev >> 12) & 0xfff00));
        self.base.block[..8].fill(0);
        if major < 256 && minor < 256 {
            put_le32(&mut self.base.block, 0, (major << 8) | minor);
        } else {
            put_le32(&mut self.base.block, 4, rdev);
        }
    }
    pub fn links_count(&self) -> u16 {
        self.base.links_count
    }
    /// External xattr block, 0 if none.
    pub fn file_acl(&self) -> u64 {
        lo_hi(self.base.file_acl_lo, u32::from(self.base.file_acl_hi))
    }
    /// Space used, in 512-byte units as stat(2) reports it.
    pub fn blocks_512(&self, sb: &Superblock) -> u64 {
        let huge = sb.has_ro_compat(feature::ro_compat::HUGE_FILE);
        let hi = if huge { u32::from(self.base.blocks_hi) } else { 0 };
        let n = lo_hi(self.base.blocks_lo, hi);
        if huge && self.has_flag(flags::HUGE_FILE) {
            n * u64::from(sb.block_size() / 512)
        } else {
            n
        }
    }

    fn extra_word(&self, off: usize, pick: fn(&InodeExtra) -> u32) -> Option<u32> {
        if self.extra_field_fits(off, 4) {
            self.extra.as_ref().map(pick)
        } else {
            None
        }
    }
    pub fn atime(&self) -> Timestamp {
        Timestamp::decode(self.base.atime, self.extra_word(0x8C, |e| e.atime_extra))
    }
    pub fn mtime(&self) -> Timestamp {
        Timestamp::decode(self.base.mtime, self.extra_word(0x88, |e| e.mtime_extra))
    }
    pub fn ctime(&self) -> Timestamp {
        Timestamp::decode(self.base.ctime, self.extra_word(0x84, |e| e.ctime_extra))
    }
    pub fn crtime(&self) -> Option<Timestamp> {
        let base = self.extra_word(0x90, |e| e.crtime)?;
        Some(Timestamp::decode(base, self.extra_word(0x94, |e| e.crtime_extra)))
    }

    /// The in-inode xattr area: bytes after the extra fields, if any.
    pub fn inline_xattr_area(&self) -> &[u8] {
        match &self.extra {
            Some(e) => {
                let start = GOOD_OLD_INODE_SIZE + usize::from(e.extra_isize);
                &self.raw[start.min(self.raw.len())..]
            }
            None => &[],
        }
    }

    /// Device number of a character or block special file, in the
    /// kernel's `new_encode_dev` layout (what stat and FUSE use).
    pub fn rdev(&self) -> u32 {
        let b = &self.base.block;
        let old = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if old != 0 {
            let major = (old >> 8) & 0xFF;
            let minor = old & 0xFF;
            (major << 8) | minor
        } else {
            u32::from_le_bytes([b[4], b[5], b[6], b[7]])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::superblock::tests::sample;

    fn sample_inode(sb: &Superblock) -> Inode {
        let mut raw = vec![0u8; usize::from(sb.inode_size())];
        let base = InodeBase {
            mode: mode::S_IFREG | 0o644,
            size_lo: 12345,
            links_count: 1,
            generation: 77,
            flags: flags::EXTENTS,
            ..Default::default()
        };
        base.write_fields(&mut raw);
        let extra = InodeExtra { extra_isize: 32, mtime_extra: (999 << 2) | 1, ..Default::default() };
        extra.write_fields(&mut raw);
        let ino = Inode { ino: 12, base, extra: Some(extra), raw };
        let bytes = ino.to_bytes(sb);
        Inode::parse(sb, 12, &bytes).unwrap()
    }

    #[test]
    fn as_written_is_what_parse_reads() {
        let sb = sample();
        let mut ino = sample_inode(&sb);
        // Every modelled field changed: the record must carry them all.
        ino.base.size_lo = 777;
        ino.base.links_count = 3;
        ino.base.generation = 78;
        let e = ino.extra.as_mut().unwrap();
        e.crtime = 5;
        e.projid = 9;
        let mut rec = vec![0u8; ino.raw.len()];
        ino.write_to(&sb, &mut rec);
        assert_eq!(ino.as_written(&rec), Some(Inode::parse(&sb, 12, &rec).unwrap()));
        // A short extra_isize leaves crtime..projid out of the record: parse would
        // read other bytes there, so as_written declines.
        ino.extra.as_mut().unwrap().extra_isize = 4;
        ino.write_to(&sb, &mut rec);
        assert_eq!(ino.as_written(&rec), None);
        assert!(Inode::parse(&sb, 12, &rec).is_ok());
        // One parse refuses (not a multiple of 4): declined too.
        ino.extra.as_mut().unwrap().extra_isize = 34;
        ino.write_to(&sb, &mut rec);
        assert!(Inode::parse(&sb, 12, &rec).is_err());
        assert_eq!(ino.as_written(&rec), None);
    }

    #[test]
    fn times_clamp_as_the_kernel_does() {
        let t = |sec, nsec| Timestamp { sec, nsec };
        let min = i64::from(i32::MIN);
        let max = (1i64 << 34) - 1 + min;
        assert_eq!(t(-6_314_732_163, 5).clamped(true), t(min, 0));
        assert_eq!(t(min, 7).clamped(true), t(min, 0));
        assert_eq!(t(min + 1, 7).clamped(true), t(min + 1, 7));
        assert_eq!(t(max + 1, 7).clamped(true), t(max, 0));
        assert_eq!(t(1 << 32, 7).clamped(true), t(1 << 32, 7));
        assert_eq!(t(1 << 32, 7).clamped(false), t(i64::from(i32::MAX), 0));
        assert_eq!(t(5, 7).clamped(false), t(5, 0));
        // Every time in range round-trips through the on-disk encoding.
        for sec in [min + 1, -1, 0, 1 << 31, (1 << 32) + 5, max - 1] {
            let (b, x) = t(sec, 9).clamped(true).encode();
            assert_eq!(Timestamp::decode(b, Some(x)), t(sec, 9));
        }
    }

    #[test]
    fn setters_write_what_the_getters_read_back_through_a_record() {
        let sb = sample();
        let t = Timestamp { sec: (1 << 32) + 7, nsec: 123_456_789 };
        // Each extra_isize decides which extra words exist (ctime's from 8,
        // mtime's from 12, atime's from 16, crtime from 20/24).
        for isize in [0u16, 4, 8, 12, 16, 20, 24, 32] {
            let mut ino = sample_inode(&sb);
            ino.extra.as_mut().unwrap().extra_isize = isize;
            ino.set_size(0x1_2345_6789);
            ino.set_flags(flags::EXTENTS | flags::NOATIME);
            for f in [TimeField::Access, TimeField::Modify, TimeField::Change, TimeField::Birth] {
                ino.set_time(f, t);
            }
            let back = Inode::parse(&sb, 12, &ino.to_bytes(&sb)).unwrap();
            assert_eq!(back.size(), 0x1_2345_6789);
            assert!(back.has_flag(flags::NOATIME));
            let whole = Timestamp { sec: i64::from(i32::MAX), nsec: 0 };
            let want = |off: usize| if usize::from(isize) + 128 >= off + 4 { t } else { whole };
            assert_eq!(back.ctime(), want(0x84), "extra_isize {isize}");
            assert_eq!(back.mtime(), want(0x88), "extra_isize {isize}");
            assert_eq!(back.atime(), want(0x8C), "extra_isize {isize}");
            let birth = match isize {
                0..=16 => None,
                20 => Some(whole),
                _ => Some(t),
            };
            assert_eq!(back.crtime(), birth, "extra_isize {isize}");
        }
        let mut dev = sample_inode(&sb);
        for rdev in [(8 << 8) | 1, (300 << 8) | 5, (1 << 20) | (3 << 8) | 0x42] {
            dev.set_rdev(rdev);
            assert_eq!(Inode::parse(&sb, 12, &dev.to_bytes(&sb)).unwrap().rdev(), rdev, "{rdev:#x}");
        }
    }

    #[test]
    fn round_trip_and_checksum() {
        let sb = sample();
        let ino = sample_inode(&sb);
        let bytes = ino.to_bytes(&sb);
        assert_eq!(Inode::parse(&sb, 12, &bytes).unwrap().to_bytes(&sb), bytes);
        assert_eq!(ino.mtime(), Timestamp { sec: 1 << 32, nsec: 999 });
        // Same bytes read as another inode number fail: the number is in the seed.
        assert!(Inode::parse(&sb, 13, &bytes).is_err());
        let mut bad = bytes.clone();
        bad[4] ^= 1;
        assert!(matches!(
            Inode::parse(&sb, 12, &bad),
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })
        ));
    }

    #[test]
    fn bad_extra_isize_and_short_buffer() {
        let sb = sample();
        let mut bytes = sample_inode(&sb).to_bytes(&sb);
        bytes[0x80] = 0xff;
        assert!(Inode::parse(&sb, 12, &bytes).is_err());
        assert!(Inode::parse(&sb, 12, &bytes[..64]).is_err());
    }

    #[test]
    fn timestamps_round_trip_including_negative_and_post_2038() {
        for &(sec, nsec) in &[(0i64, 0u32), (-1, 5), (1_700_000_000, 123_456_789), (1 << 33, 1), (-(1 << 31), 0)] {
            let t = Timestamp { sec, nsec };
            let (b, x) = t.encode();
            assert_eq!(Timestamp::decode(b, Some(x)), t, "{sec}");
        }
    }
}
