//! Descriptor blocks: a header (type 1) followed by tags, one per data block
//! that follows the descriptor in the log, in order.
//!
//! Tag formats (`journal_block_tag3_t` with csum v3, else `journal_block_tag_t`):
//!
//! | csum v3 (16 bytes)             | others (8/10/12/14 bytes, see [`Layout::tag_bytes`]) |
//! |--------------------------------|-------------------------------------|
//! | 0x0 `t_blocknr` (low 32 bits)  | 0x0 `t_blocknr` (low 32 bits)       |
//! | 0x4 `t_flags` (be32)           | 0x4 `t_checksum` (be16, csum v2)    |
//! | 0x8 `t_blocknr_high` (64BIT)   | 0x6 `t_flags` (be16)                |
//! | 0xC `t_checksum` (be32)        | 0x8 `t_blocknr_high` (64BIT only)   |
//!
//! A tag without [`FLAG_SAME_UUID`] is followed by a 16-byte uuid; the tag with
//! [`FLAG_LAST_TAG`] ends the list (else it ends when no further tag fits before
//! the 4-byte checksum tail that csum v2/v3 put at the end of the block).
//! The tail holds crc32c(seed, block with tail zeroed).

use super::header::{BlockType, Header, HEADER_SIZE};
use super::{be16, put_be16, Checksum, Layout};
use crate::bytes::{be32, need, put_be32};
use crate::{Corruption, FormatError, Location, Result};

const STRUCTURE: &str = "jbd2 descriptor block";

/// Tag flag: the data block began with the journal magic, which was replaced
/// by zeros in the journal copy; replay must restore it.
pub const FLAG_ESCAPE: u32 = 0x1;
/// Tag flag: no uuid follows this tag (same uuid as the previous one).
pub const FLAG_SAME_UUID: u32 = 0x2;
/// Tag flag: the block was deleted by this transaction (unused by recovery).
pub const FLAG_DELETED: u32 = 0x4;
/// Tag flag: the last tag in this descriptor block.
pub const FLAG_LAST_TAG: u32 = 0x8;

/// One descriptor tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag {
    /// `t_blocknr` (| `t_blocknr_high` << 32 with 64BIT): the static file-system
    /// block the following data block is a copy of.
    pub block: u64,
    /// `t_flags`: ESCAPE, SAME_UUID, DELETED, LAST_TAG (16 bits except in tag3).
    pub flags: u32,
    /// `t_checksum`: csum v3 crc32c of sequence + data block; csum v2 its low 16 bits; else 0.
    pub checksum: u32,
    /// The 16-byte uuid after a tag without SAME_UUID (None when it does not fit in the block).
    pub uuid: Option<[u8; 16]>,
}

impl Tag {
    /// Whether replay must restore the journal magic in the first 4 bytes.
    pub fn escaped(&self) -> bool {
        self.flags & FLAG_ESCAPE != 0
    }
    /// Whether this tag ends the descriptor.
    pub fn is_last(&self) -> bool {
        self.flags & FLAG_LAST_TAG != 0
    }
    /// Whether a uuid follows the tag.
    pub fn has_uuid(&self) -> bool {
        self.flags & FLAG_SAME_UUID == 0
    }

    /// Whether `data`'s checksum matches this tag (always true without v2/v3).
    pub fn checksum_matches(&self, layout: &Layout, sequence: u32, data: &[u8]) -> bool {
        match layout.checksum {
            Checksum::V3 => self.checksum == super::data_block_checksum(layout.seed, sequence, data),
            Checksum::V2 => self.checksum == super::data_block_checksum(layout.seed, sequence, data) & 0xFFFF,
            Checksum::None | Checksum::V1 => true,
        }
    }

    fn parse(b: &[u8], layout: &Layout) -> Tag {
        let (flags, checksum) = if layout.checksum == Checksum::V3 {
            (be32(b, 4), be32(b, 12))
        } else {
            (u32::from(be16(b, 6)), u32::from(be16(b, 4)))
        };
        let high = if layout.is_64bit { u64::from(be32(b, 8)) } else { 0 };
        Tag { block: u64::from(be32(b, 0)) | (high << 32), flags, checksum, uuid: None }
    }

    fn write(&self, b: &mut [u8], layout: &Layout) {
        put_be32(b, 0, self.block as u32);
        if layout.is_64bit {
            put_be32(b, 8, (self.block >> 32) as u32);
        }
        if layout.checksum == Checksum::V3 {
            put_be32(b, 4, self.flags);
            put_be32(b, 12, self.checksum);
        } else {
            put_be16(b, 6, self.flags as u16);
            put_be16(b, 4, self.checksum as u16);
        }
    }
}

/// A parsed descriptor block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorBlock {
    /// Header `h_sequence`: the transaction the block belongs to.
    pub sequence: u32,
    /// The tags, in log order, exactly as jbd2's recovery walks them: up to and
    /// including the first LAST_TAG, or as many as fit.
    pub tags: Vec<Tag>,
}

impl DescriptorBlock {
    /// Parse one journal block (`buf` must hold `layout.block_size` bytes). The
    /// tail checksum is not verified here: see [`verify_checksum`].
    pub fn parse(buf: &[u8], layout: &Layout) -> Result<DescriptorBlock> {
        need(STRUCTURE, buf, layout.block_bytes())?;
        let header = Header::expect(STRUCTURE, buf, BlockType::Descriptor)?;
        let buf = &buf[..layout.block_bytes()];
        let size = buf.len() - layout.tail_bytes();
        let tag_bytes = layout.tag_bytes();
        let mut tags = Vec::new();
        let mut off = HEADER_SIZE;
        while off + tag_bytes <= size {
            let mut tag = Tag::parse(&buf[off..off + tag_bytes], layout);
            off += tag_bytes;
            if tag.has_uuid() {
                if let Some(u) = buf.get(off..off + 16) {
                    let mut uuid = [0u8; 16];
                    uuid.copy_from_slice(u);
                    tag.uuid = Some(uuid);
                }
                off += 16;
            }
            let last = tag.is_last();
            tags.push(tag);
            if last {
                break;
            }
        }
        debug_assert!(tags.len() <= buf.len() / tag_bytes);
        Ok(DescriptorBlock { sequence: header.sequence, tags })
    }

    /// Number of bytes the tags take (tags plus uuids), for checking fit.
    pub fn tags_bytes(&self, layout: &Layout) -> usize {
        self.tags.iter().map(|t| layout.tag_bytes() + if t.has_uuid() { 16 } else { 0 }).sum()
    }

    /// Serialise into one journal block: header, tags (flags as given; a tag
    /// without SAME_UUID gets its uuid, or zeros), zero fill, and the tail
    /// checksum with csum v2/v3. Fails if the tags do not fit.
    pub fn write_to(&self, buf: &mut [u8], layout: &Layout) -> Result<()> {
        need(STRUCTURE, buf, layout.block_bytes())?;
        let buf = &mut buf[..layout.block_bytes()];
        let room = buf.len() - layout.tail_bytes();
        let want = HEADER_SIZE + self.tags_bytes(layout);
        if want > room {
            return Err(FormatError::corrupt(
                STRUCTURE,
                Location::Unknown,
                Corruption::Truncated { need: want + layout.tail_bytes(), have: buf.len() },
            ));
        }
        buf.fill(0);
        Header { block_type: BlockType::Descriptor, sequence: self.sequence }.write_to(buf)?;
        let mut off = HEADER_SIZE;
        for tag in &self.tags {
            tag.write(&mut buf[off..off + layout.tag_bytes()], layout);
            off += layout.tag_bytes();
            if tag.has_uuid() {
                buf[off..off + 16].copy_from_slice(&tag.uuid.unwrap_or([0; 16]));
                off += 16;
            }
        }
        super::set_tail(buf, layout);
        Ok(())
    }
}

/// Verify the tail checksum of a descriptor block (Ok without csum v2/v3).
pub fn verify_checksum(buf: &[u8], layout: &Layout) -> Result<()> {
    super::verify_tail(STRUCTURE, buf, layout)
}

#[cfg(test)]
mod tests {
    use super::super::{data_block_checksum, test_layout};
    use super::*;
    use proptest::prelude::*;

    fn tag(block: u64, flags: u32) -> Tag {
        let uuid = if flags & FLAG_SAME_UUID == 0 { Some([9u8; 16]) } else { None };
        Tag { block, flags, checksum: 0x1234_5678, uuid }
    }

    fn layouts() -> Vec<Layout> {
        let mut v = Vec::new();
        for c in [Checksum::None, Checksum::V1, Checksum::V2, Checksum::V3] {
            for b in [false, true] {
                v.push(test_layout(1024, c, b));
            }
        }
        v
    }

    fn normalise(t: &Tag, l: &Layout) -> Tag {
        let mut t = t.clone();
        if !l.is_64bit {
            t.block &= 0xFFFF_FFFF;
        }
        match l.checksum {
            Checksum::V3 => {}
            Checksum::V2 => {
                t.checksum &= 0xFFFF;
                t.flags &= 0xFFFF
            }
            _ => {
                t.checksum &= 0xFFFF;
                t.flags &= 0xFFFF
            }
        }
        t
    }

    #[test]
    fn round_trip_every_format() {
        for l in layouts() {
            let d = DescriptorBlock {
                sequence: 7,
                tags: vec![
                    tag(0x1_0000_0005, 0),
                    tag(6, FLAG_SAME_UUID | FLAG_ESCAPE),
                    tag(7, FLAG_SAME_UUID | FLAG_LAST_TAG),
                ],
            };
            let mut b = vec![0u8; 1024];
            d.write_to(&mut b, &l).unwrap();
            let back = DescriptorBlock::parse(&b, &l).unwrap();
            let want: Vec<Tag> = d.tags.iter().map(|t| normalise(t, &l)).collect();
            assert_eq!(back.tags, want, "{l:?}");
            assert!(verify_checksum(&b, &l).is_ok());
            assert!(back.tags[1].escaped());
        }
    }

    #[test]
    fn v3_byte_layout() {
        let l = test_layout(1024, Checksum::V3, true);
        let d = DescriptorBlock { sequence: 1, tags: vec![tag(0x2_0000_0003, FLAG_LAST_TAG)] };
        let mut b = vec![0u8; 1024];
        d.write_to(&mut b, &l).unwrap();
        assert_eq!(be32(&b, 12), 3);
        assert_eq!(be32(&b, 16), FLAG_LAST_TAG);
        assert_eq!(be32(&b, 20), 2);
        assert_eq!(be32(&b, 24), 0x1234_5678);
        assert_eq!(&b[28..44], &[9u8; 16]);
    }

    #[test]
    fn v2_32bit_tag_is_10_bytes() {
        let l = test_layout(1024, Checksum::V2, false);
        let d =
            DescriptorBlock { sequence: 1, tags: vec![tag(3, FLAG_SAME_UUID), tag(4, FLAG_SAME_UUID | FLAG_LAST_TAG)] };
        let mut b = vec![0u8; 1024];
        d.write_to(&mut b, &l).unwrap();
        assert_eq!(be32(&b, 12), 3);
        assert_eq!(be16(&b, 16), 0x5678);
        assert_eq!(be16(&b, 18), FLAG_SAME_UUID as u16);
        assert_eq!(be32(&b, 22), 4);
    }

    #[test]
    fn no_last_tag_fills_block() {
        // A zeroed descriptor (no LAST_TAG, every tag followed by a uuid) yields
        // as many tags as fit, as jbd2's count_tags does.
        let l = test_layout(1024, Checksum::V3, true);
        let mut b = vec![0u8; 1024];
        Header { block_type: BlockType::Descriptor, sequence: 1 }.write_to(&mut b).unwrap();
        let d = DescriptorBlock::parse(&b, &l).unwrap();
        // Tags start at 12 and take 32 bytes each; the last must end by 1020.
        assert_eq!(d.tags.len(), (1020 - 12 - 16) / 32 + 1);
    }

    #[test]
    fn detects_corruption() {
        let l = test_layout(1024, Checksum::V3, true);
        let d = DescriptorBlock { sequence: 1, tags: vec![tag(5, FLAG_LAST_TAG)] };
        let mut b = vec![0u8; 1024];
        d.write_to(&mut b, &l).unwrap();
        b[13] ^= 0x40;
        assert!(matches!(
            verify_checksum(&b, &l),
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. })
        ));
        assert!(matches!(
            DescriptorBlock::parse(&b[..512], &l),
            Err(FormatError::Corrupt { why: Corruption::Truncated { .. }, .. })
        ));
        put_be32(&mut b, 4, 2);
        assert!(matches!(
            DescriptorBlock::parse(&b, &l),
            Err(FormatError::Corrupt { why: Corruption::BadField { .. }, .. })
        ));
    }

    #[test]
    fn too_many_tags_refused() {
        let l = test_layout(1024, Checksum::V3, true);
        let d = DescriptorBlock { sequence: 1, tags: (0..40).map(|i| tag(i, 0)).collect() };
        assert!(d.write_to(&mut vec![0u8; 1024], &l).is_err());
    }

    #[test]
    fn data_checksum_v2_v3() {
        let data = vec![0x5Au8; 1024];
        for c in [Checksum::V2, Checksum::V3] {
            let l = test_layout(1024, c, true);
            let full = data_block_checksum(l.seed, 9, &data);
            let stored = if c == Checksum::V3 { full } else { full & 0xFFFF };
            let t = Tag { block: 1, flags: 0, checksum: stored, uuid: None };
            assert!(t.checksum_matches(&l, 9, &data));
            assert!(!t.checksum_matches(&l, 10, &data));
        }
        let l = test_layout(1024, Checksum::None, true);
        assert!(Tag { block: 1, flags: 0, checksum: 0, uuid: None }.checksum_matches(&l, 1, &data));
    }

    proptest! {
        #[test]
        fn round_trips(blocks in proptest::collection::vec(any::<u64>(), 1..20),
                       esc in any::<u32>(), li in 0usize..8, seq in any::<u32>()) {
            let l = layouts()[li];
            let n = blocks.len();
            let tags: Vec<Tag> = blocks.iter().enumerate().map(|(i, &blk)| {
                let mut f = if i == 0 { 0 } else { FLAG_SAME_UUID };
                if esc >> (i % 32) & 1 == 1 { f |= FLAG_ESCAPE; }
                if i + 1 == n { f |= FLAG_LAST_TAG; }
                tag(blk, f)
            }).collect();
            let d = DescriptorBlock { sequence: seq, tags };
            let mut b = vec![0u8; 1024];
            d.write_to(&mut b, &l).unwrap();
            let back = DescriptorBlock::parse(&b, &l).unwrap();
            let want: Vec<Tag> = d.tags.iter().map(|t| normalise(t, &l)).collect();
            prop_assert_eq!(back.tags, want);
            prop_assert_eq!(back.sequence, seq);
            prop_assert!(verify_checksum(&b, &l).is_ok());
        }

        #[test]
        fn never_panics(b in proptest::collection::vec(any::<u8>(), 0..1100), li in 0usize..8) {
            let l = layouts()[li];
            let mut b = b;
            if b.len() >= 4 { b[..4].copy_from_slice(&super::super::MAGIC.to_be_bytes()); }
            if b.len() >= 8 { put_be32(&mut b, 4, 1); }
            if let Ok(d) = DescriptorBlock::parse(&b, &l) {
                prop_assert!(d.tags.len() <= 1024 / l.tag_bytes());
            }
            let _ = verify_checksum(&b, &l);
        }
    }
}
