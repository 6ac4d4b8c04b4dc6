//! Leaving inline data (feature `inline_data`: a small file's bytes or a small
//! directory's entries live in `i_block` and the in-inode `system.data`
//! attribute).
//!
//! Writes keep a small regular file inline, as the kernel does: an empty file
//! (no bytes, no blocks) or an inline one whose contents after the write still
//! fit in i_block and the in-inode attribute area becomes or stays inline
//! (`write_inline`). Every other change first converts the inode to an
//! ordinary extent-mapped one, as the kernel does when inline contents outgrow
//! the inode: truncates, fallocate, and every directory change (directories we
//! create are never inline; the format allows that).

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::inode::{flags, Inode, GOOD_OLD_INODE_SIZE, I_BLOCK_SIZE};
use ondisk::superblock::feature;
use ondisk::xattr::{self, Xattr};
use ondisk::{Corruption, FormatError, Location};

/// Name index of `system.*` attributes that are not ACLs (`system.data`).
const SYSTEM_INDEX: u8 = 7;

fn is_inline_data(x: &Xattr) -> bool {
    x.name_index == SYSTEM_INDEX && x.suffix == b"data"
}

/// `system.data` holding `value`: the bytes past i_block's 60.
fn inline_data(value: Vec<u8>) -> Xattr {
    Xattr { name_index: SYSTEM_INDEX, suffix: b"data".to_vec(), value, value_inum: 0 }
}

/// The most bytes a regular file can keep inline in `inode` beside the
/// attributes `others`: i_block, plus what the in-inode attribute area has
/// left for `system.data`'s value once its entry, the area's magic and
/// terminator, and every other attribute are counted (as if all stayed in
/// the inode, so going inline never pushes one out to a block). 0 when not
/// even an empty `system.data` fits.
pub(crate) fn inline_capacity(inode: &Inode, others: &[Xattr]) -> usize {
    let area_start = GOOD_OLD_INODE_SIZE + inode.extra.as_ref().map_or(0, |e| usize::from(e.extra_isize));
    let area_len = inode.raw.len().saturating_sub(area_start);
    let fixed = 8 + xattr::footprint(&inline_data(Vec::new())) + others.iter().map(xattr::footprint).sum::<usize>();
    if area_len < fixed {
        return 0;
    }
    // Values are padded to 4 bytes in the area.
    I_BLOCK_SIZE + ((area_len - fixed) & !3)
}

impl Volume {
    /// Write `data` at `offset` of a regular file and keep it inline, when
    /// the volume has inline_data, the file is inline or empty (no bytes and
    /// no blocks, as a new file), and its contents after the write fit in the
    /// inode. Returns false, having changed nothing, otherwise. The caller
    /// sets the times first; this writes the inode.
    pub(crate) fn write_inline(
        &self,
        ws: &mut WriteState,
        inode: &mut Inode,
        offset: u64,
        data: &[u8],
    ) -> Result<bool> {
        if !self.sb.has_incompat(feature::incompat::INLINE_DATA)
            || !inode.is_reg()
            || inode.has_flag(flags::ENCRYPT | flags::VERITY)
        {
            return Ok(false);
        }
        let inline = inode.has_flag(flags::INLINE_DATA);
        if !inline && !self.is_empty_file(inode) {
            return Ok(false);
        }
        let others = self.xattrs_without_inline_data(inode)?;
        let end = offset.checked_add(data.len() as u64).ok_or_else(|| FsError::Invalid("offset overflow".into()))?;
        let size = end.max(inode.size());
        if size > inline_capacity(inode, &others) as u64 {
            return Ok(false);
        }
        let mut contents = if inline { self.inline_contents(inode)? } else { Vec::new() };
        // size <= capacity, a few KiB: the casts cannot truncate.
        contents.resize(size as usize, 0);
        contents[offset as usize..end as usize].copy_from_slice(data);
        let head = contents.len().min(I_BLOCK_SIZE);
        let mut block = [0u8; I_BLOCK_SIZE];
        block[..head].copy_from_slice(&contents[..head]);
        inode.base.block = block;
        inode.set_flags((inode.base.flags & !flags::EXTENTS) | flags::INLINE_DATA);
        inode.set_size(size);
        let mut all = others;
        // Always present on an inline inode, empty when i_block holds everything (e2fsck and the kernel expect it).
        all.push(inline_data(contents.split_off(head)));
        self.store_xattrs(ws, inode, all)?;
        Ok(true)
    }

    /// No bytes and no blocks (a new file): it may go inline.
    pub(super) fn is_empty_file(&self, inode: &Inode) -> bool {
        let xattr_sectors = if inode.file_acl() != 0 { u64::from(self.block_size() / 512) } else { 0 };
        inode.size() == 0 && inode.blocks_512(&self.sb).saturating_sub(xattr_sectors) == 0
    }

    /// Make an inline regular file extent-mapped, its bytes moved to data
    /// blocks. Does nothing to inodes without inline data.
    pub(crate) fn convert_inline_file(&self, ws: &mut WriteState, inode: &mut Inode) -> Result<()> {
        if !inode.has_flag(flags::INLINE_DATA) {
            return Ok(());
        }
        // Read everything before changing anything: a failure leaves the inode as it was.
        let other_xattrs = self.xattrs_without_inline_data(inode)?;
        let data = self.inline_contents(inode)?;
        self.leave_inline(inode)?;
        if !data.is_empty() {
            let bs = self.block_size() as usize;
            let nblocks = data.len().div_ceil(bs);
            let mut buf = data;
            buf.resize(nblocks * bs, 0);
            // Ordered mode: the bytes reach their blocks before the inode pointing there commits.
            for (lblk, pblk, len, _) in self.ensure_mapped(ws, inode, 0, nblocks as u64)? {
                let from = lblk as usize * bs;
                let to = from + len as usize * bs;
                self.tails.forget_range(inode.ino, lblk, len);
                self.dev
                    .write_at(pblk * bs as u64, &buf[from..to], IoClass::Data)
                    .map_err(|e| FsError::io(format!("writing converted inline data at block {pblk}"), e))?;
            }
        }
        self.store_xattrs(ws, inode, other_xattrs)
    }

    /// Make an inline directory an ordinary one-block directory holding the
    /// same entries. Does nothing to directories without inline data.
    pub(crate) fn convert_inline_dir(&self, ws: &mut WriteState, dir: &mut Inode) -> Result<()> {
        if !dir.has_flag(flags::INLINE_DATA) {
            return Ok(());
        }
        // Its entries move into a block: learnt again when next listed.
        self.kb_change(&mut ws.kb_changes, crate::stepahead::KbChange::Forget { dir: dir.ino });
        let other_xattrs = self.xattrs_without_inline_data(dir)?;
        // The inline listing yields "." and ".." (from the parent number in
        // i_block's first word) and then every entry of i_block and system.data.
        let mut entries = Vec::new();
        self.read_dir(dir, 0, &mut |e| {
            entries.push(e);
            true
        })?;
        let parent = ondisk::bytes::le32(&dir.base.block, 0);
        let mut block = self.init_dir_block(dir, parent);
        for e in entries.iter().filter(|e| e.name != b"." && e.name != b"..") {
            if !self.insert_into_leaf(&mut block, e.ino, e.file_type, &e.name)? {
                // Inline areas are smaller than a block; only a corrupt inode gets here.
                return Err(FsError::Format(FormatError::corrupt(
                    "inline directory",
                    Location::Inode(u64::from(dir.ino)),
                    Corruption::BadField { field: "entries exceed a block", value: entries.len() as u64 },
                )));
            }
        }
        self.finish_leaf(dir, &mut block);
        self.leave_inline(dir)?;
        let runs = self.ensure_mapped(ws, dir, 0, 1)?;
        self.install(ws, runs[0].1, block);
        let size = u64::from(self.block_size());
        dir.set_size(size);
        self.store_xattrs(ws, dir, other_xattrs)
    }

    /// The inode's attributes minus `system.data`, which must go with the flag.
    pub(super) fn xattrs_without_inline_data(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut all = self.all_xattrs(inode)?;
        all.retain(|x| !is_inline_data(x));
        Ok(all)
    }

    /// Drop the inline flag and give the inode an empty extent root.
    fn leave_inline(&self, inode: &mut Inode) -> Result<()> {
        if !self.sb.has_incompat(feature::incompat::EXTENTS) {
            return Err(FsError::Unsupported("converting inline data on a volume without extents".into()));
        }
        inode.remove_flags(flags::INLINE_DATA);
        inode.base.block = [0; I_BLOCK_SIZE];
        self.init_extent_root(inode);
        Ok(())
    }
}
