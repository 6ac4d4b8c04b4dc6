//! Leaving inline data (feature `inline_data`: a small file's bytes or a small
//! directory's entries live in `i_block` and the in-inode `system.data`
//! attribute).
//!
//! We never change inline contents in place: any modification first converts
//! the inode to an ordinary extent-mapped one, as the kernel does when inline
//! contents outgrow the inode. One code path for every write, truncate and
//! directory change, at the cost of a block for an inode the kernel might have
//! kept inline. Inodes we create are never inline (the format allows that).

use super::WriteState;
use crate::error::{FsError, Result};
use crate::volume::Volume;
use blockdev::IoClass;
use ondisk::inode::{flags, Inode, I_BLOCK_SIZE};
use ondisk::superblock::feature;
use ondisk::xattr::Xattr;
use ondisk::{Corruption, FormatError, Location};

/// Name index of `system.*` attributes that are not ACLs (`system.data`).
const SYSTEM_INDEX: u8 = 7;

fn is_inline_data(x: &Xattr) -> bool {
    x.name_index == SYSTEM_INDEX && x.suffix == b"data"
}

impl Volume {
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
        self.kb_change(ws, crate::stepahead::KbChange::Forget { dir: dir.ino });
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
        dir.base.size_lo = size as u32;
        dir.base.size_hi = (size >> 32) as u32;
        self.store_xattrs(ws, dir, other_xattrs)
    }

    /// The inode's attributes minus `system.data`, which must go with the flag.
    fn xattrs_without_inline_data(&self, inode: &Inode) -> Result<Vec<Xattr>> {
        let mut all = self.all_xattrs(inode)?;
        all.retain(|x| !is_inline_data(x));
        Ok(all)
    }

    /// Drop the inline flag and give the inode an empty extent root.
    fn leave_inline(&self, inode: &mut Inode) -> Result<()> {
        if !self.sb.has_incompat(feature::incompat::EXTENTS) {
            return Err(FsError::Unsupported("converting inline data on a volume without extents".into()));
        }
        inode.base.flags &= !flags::INLINE_DATA;
        inode.base.block = [0; I_BLOCK_SIZE];
        self.init_extent_root(inode);
        Ok(())
    }
}
