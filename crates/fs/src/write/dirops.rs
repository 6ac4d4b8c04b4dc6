//! Changing directories: adding, removing and retargeting entries.
//!
//! Linear directories take a new entry in the first block with room, else a
//! new block at the end. A one-block directory that fills up becomes hashed
//! (as the kernel's make_indexed_dir does) when the volume has dir_index;
//! hashed directories insert into the leaf their hash selects and split a
//! full leaf in two by hash.

use super::WriteState;
use crate::error::{FsError, Result};
use crate::stepahead::KbChange;
use crate::volume::Volume;
use ondisk::dir::{self as odir, entry_size, write_entry, DirIter, TAIL_SIZE};
use ondisk::htree::{self, DxEntry, DxNode};
use ondisk::inode::{flags, Inode};
use ondisk::superblock::feature;
use ondisk::Location;

/// One parsed live entry of a leaf block, with its hash when the directory is hashed.
struct Rec {
    ino: u32,
    ft: u8,
    name: Vec<u8>,
    hash: u32,
}

impl Volume {
    /// Usable bytes of a leaf block (the checksum tail excluded).
    fn leaf_space(&self) -> usize {
        self.block_size() as usize - if self.sb.has_metadata_csum() { TAIL_SIZE } else { 0 }
    }

    pub(super) fn finish_leaf(&self, dir: &Inode, data: &mut [u8]) {
        if let Some(seed) = self.dir_csum_seed(dir) {
            odir::set_tail(data, seed);
        }
    }

    /// Physical block of directory block `lblk`.
    fn dir_pblk(&self, dir: &Inode, lblk: u64) -> Result<u64> {
        match self.map_block(dir, lblk, 1)? {
            crate::bmap::Mapping::Mapped { pblk, .. } => Ok(pblk),
            crate::bmap::Mapping::Hole { .. } => Err(FsError::Format(ondisk::FormatError::corrupt(
                "directory",
                Location::Inode(u64::from(dir.ino)),
                ondisk::Corruption::BadField { field: "hole in directory", value: lblk },
            ))),
        }
    }

    /// Try to put the entry into leaf block `data`; false if it has no room.
    pub(super) fn insert_into_leaf(&self, data: &mut [u8], ino: u32, ft: u8, name: &[u8]) -> Result<bool> {
        let need = entry_size(name.len());
        let space = self.leaf_space();
        let mut found = None;
        for e in DirIter::new(&data[..space], self.block_size() as usize, self.has_filetype(), Location::Unknown) {
            let e = e?;
            let used = if e.inode == 0 { 0 } else { entry_size(e.name.len()) };
            if e.rec_len - used >= need {
                found = Some((e.offset, e.rec_len, used));
                break;
            }
        }
        let Some((off, rec_len, used)) = found else { return Ok(false) };
        let bs = self.block_size() as usize;
        let buf = &mut data[..bs];
        if used == 0 {
            write_entry(buf, off, ino, rec_len, ft, name);
        } else {
            // The entry keeps its name and gives up the space past it.
            odir::set_rec_len(buf, off, used);
            write_entry(buf, off + used, ino, rec_len - used, ft, name);
        }
        Ok(true)
    }

    /// Add the entry to `dir`'s leaf block at `(lblk, pblk)` if it has room
    /// (true), as a new version of the block; a full leaf stays as it was.
    fn insert_into_leaf_block(
        &self,
        ws: &mut WriteState,
        dir: &Inode,
        (lblk, pblk): (u64, u64),
        ino: u32,
        ft: u8,
        name: &[u8],
    ) -> Result<bool> {
        let mut data = self.meta(pblk)?;
        let bytes = ws.spare.make_mut(&mut data);
        if !self.insert_into_leaf(bytes, ino, ft, name)? {
            return Ok(false);
        }
        self.finish_leaf(dir, bytes);
        self.install(ws, pblk, data);
        self.kb_change(&mut ws.kb_changes, KbChange::Entry { dir: dir.ino, name: name.to_vec(), child: ino, lblk });
        Ok(true)
    }

    /// Add `name` -> `ino` to `dir` (the caller checked it is not there).
    pub(crate) fn add_entry(&self, ws: &mut WriteState, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        if name.len() > odir::MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        let ft = if self.has_filetype() { ft } else { 0 };
        self.convert_inline_dir(ws, dir)?;
        if self.is_htree(dir) {
            return self.add_entry_htree(ws, dir, name, ino, ft);
        }
        let nblocks = self.dir_blocks(dir);
        for lblk in 0..nblocks {
            let pblk = self.dir_pblk(dir, lblk)?;
            if self.insert_into_leaf_block(ws, dir, (lblk, pblk), ino, ft, name)? {
                return Ok(());
            }
        }
        if nblocks == 1 && self.sb.has_compat(feature::compat::DIR_INDEX) {
            self.make_indexed(ws, dir)?;
            return self.add_entry_htree(ws, dir, name, ino, ft);
        }
        // Append a block holding just the new entry.
        let (lblk, pblk) = self.grow_dir(ws, dir)?;
        debug_assert_eq!(lblk, nblocks);
        let mut data = self.fresh_block();
        let space = self.leaf_space();
        write_entry(&mut data, 0, ino, space, ft, name);
        self.finish_leaf(dir, &mut data);
        self.install(ws, pblk, data);
        self.kb_change(&mut ws.kb_changes, KbChange::Entry { dir: dir.ino, name: name.to_vec(), child: ino, lblk });
        Ok(())
    }

    /// Map one more block at the end of `dir`; returns (logical, physical).
    fn grow_dir(&self, ws: &mut WriteState, dir: &mut Inode) -> Result<(u64, u64)> {
        let lblk = self.dir_blocks(dir);
        let runs = self.ensure_mapped(ws, dir, lblk, 1)?;
        let bs = u64::from(self.block_size());
        let size = (lblk + 1) * bs;
        dir.set_size(size);
        self.kb_change(&mut ws.kb_changes, KbChange::Grown { dir: dir.ino, lblk, pblk: runs[0].1 });
        if ondisk::bytes::le16(&dir.base.block, 6) > 0 && dir.has_flag(flags::EXTENTS) {
            // Its extent tree has interior blocks, which may just have changed.
            self.kb_change(&mut ws.kb_changes, KbChange::Forget { dir: dir.ino });
        }
        Ok((lblk, runs[0].1))
    }

    fn leaf_records(&self, data: &[u8], version: u8) -> Result<Vec<Rec>> {
        let mut out = Vec::new();
        for e in
            DirIter::new(&data[..self.leaf_space()], self.block_size() as usize, self.has_filetype(), Location::Unknown)
        {
            let e = e?;
            if e.inode != 0 {
                let hash = self.name_hash(version, e.name).map_or(0, |h| h.major);
                out.push(Rec { ino: e.inode, ft: e.file_type, name: e.name.to_vec(), hash });
            }
        }
        Ok(out)
    }

    /// Pack records into a fresh leaf block.
    fn pack_leaf(&self, dir: &Inode, recs: &[Rec]) -> Vec<u8> {
        let mut data = self.fresh_block();
        let space = self.leaf_space();
        let mut pos = 0;
        for (i, r) in recs.iter().enumerate() {
            let len = if i + 1 == recs.len() { space - pos } else { entry_size(r.name.len()) };
            write_entry(&mut data, pos, r.ino, len, r.ft, &r.name);
            pos += len;
        }
        if recs.is_empty() {
            write_entry(&mut data, 0, 0, space, 0, b"");
        }
        self.finish_leaf(dir, &mut data);
        data
    }

    /// Turn a full one-block linear directory into a hashed one: block 0
    /// becomes the index root, its entries move to two new leaves split by hash.
    fn make_indexed(&self, ws: &mut WriteState, dir: &mut Inode) -> Result<()> {
        let version = self.sb.f.def_hash_version;
        if self.name_hash(version, b"x").is_none() {
            return Err(FsError::Unsupported(format!("directory hash version {version}")));
        }
        let pblk0 = self.dir_pblk(dir, 0)?;
        let old = self.meta(pblk0)?;
        let mut recs = self.leaf_records(&old, version)?;
        let dot = recs.iter().position(|r| r.name == b".").map(|i| recs.remove(i));
        let dotdot = recs.iter().position(|r| r.name == b"..").map(|i| recs.remove(i));
        let (Some(dot), Some(dotdot)) = (dot, dotdot) else {
            return Err(FsError::Format(ondisk::FormatError::corrupt(
                "directory",
                Location::Inode(u64::from(dir.ino)),
                ondisk::Corruption::BadField { field: "missing . or ..", value: 0 },
            )));
        };
        recs.sort_by_key(|r| r.hash);
        let split = split_point(&recs);
        let (lo, hi) = recs.split_at(split);
        let (l1, p1) = self.grow_dir(ws, dir)?;
        let (l2, p2) = self.grow_dir(ws, dir)?;
        let lo_block = self.pack_leaf(dir, lo);
        let hi_block = self.pack_leaf(dir, hi);
        self.install(ws, p1, lo_block);
        self.install(ws, p2, hi_block);
        self.kb_change(&mut ws.kb_changes, KbChange::Hashed { dir: dir.ino });
        for (recs, lblk) in [(lo, l1), (hi, l2)] {
            for r in recs {
                self.kb_change(
                    &mut ws.kb_changes,
                    KbChange::Entry { dir: dir.ino, name: r.name.clone(), child: r.ino, lblk },
                );
            }
        }
        let hi_hash = hi.first().map_or(u32::MAX - 1, |r| r.hash)
            | u32::from(lo.last().is_some_and(|r| Some(r.hash) == hi.first().map(|h| h.hash)));
        // Root: "." (12 bytes), ".." spanning the rest, dx_root_info, then the index.
        let bs = self.block_size() as usize;
        let mut root = self.fresh_block();
        write_entry(&mut root, 0, dot.ino, 12, dot.ft, b".");
        write_entry(&mut root, 12, dotdot.ino, bs - 12, dotdot.ft, b"..");
        root[0x18 + 4] = version;
        root[0x18 + 5] = 8; // info_length
        root[0x18 + 6] = 0; // indirect levels
        let csum = self.sb.has_metadata_csum();
        let limit = ((bs - htree::ROOT_OFFSET - if csum { 8 } else { 0 }) / 8) as u16;
        let node = DxNode {
            hash_version: version,
            indirect_levels: 0,
            limit,
            entries: vec![DxEntry { hash: 0, block: l1 as u32 }, DxEntry { hash: hi_hash, block: l2 as u32 }],
            entries_offset: htree::ROOT_OFFSET,
        };
        node.write_entries(&mut root);
        if let Some(seed) = self.dir_csum_seed(dir) {
            htree::set_tail(&mut root, htree::ROOT_OFFSET, seed);
        }
        self.install(ws, pblk0, root);
        dir.insert_flags(flags::INDEX);
        Ok(())
    }

    fn add_entry_htree(&self, ws: &mut WriteState, dir: &mut Inode, name: &[u8], ino: u32, ft: u8) -> Result<()> {
        let pblk0 = self.dir_pblk(dir, 0)?;
        let root = DxNode::parse_root(&self.meta(pblk0)?, Location::Block(pblk0))?;
        let version = root.hash_version;
        let h = self
            .name_hash(version, name)
            .ok_or_else(|| FsError::Unsupported(format!("directory hash version {version}")))?;
        // Path of index nodes from the root down: (logical block, node, chosen position).
        let mut path: Vec<(u64, DxNode, usize)> = Vec::new();
        let levels = usize::from(root.indirect_levels);
        let mut node = root;
        let mut lblk = 0u64;
        loop {
            let i = node.find(h.major);
            let child = u64::from(node.entries[i].block);
            path.push((lblk, node, i));
            if path.len() > levels {
                break;
            }
            let cp = self.dir_pblk(dir, child)?;
            node = DxNode::parse_node(&self.meta(cp)?, Location::Block(cp))?;
            lblk = child;
        }
        let (_, parent, pos) = path.last().expect("root");
        let leaf_lblk = u64::from(parent.entries[*pos].block);
        let leaf_pblk = self.dir_pblk(dir, leaf_lblk)?;
        if self.insert_into_leaf_block(ws, dir, (leaf_lblk, leaf_pblk), ino, ft, name)? {
            return Ok(());
        }
        // Split the full leaf by hash into itself and a new block.
        let mut recs = self.leaf_records(&self.meta(leaf_pblk)?, version)?;
        recs.push(Rec { ino, ft, name: name.to_vec(), hash: h.major });
        recs.sort_by_key(|r| r.hash);
        let split = split_point(&recs);
        let (lo, hi) = recs.split_at(split);
        let (new_l, new_p) = self.grow_dir(ws, dir)?;
        let lo_block = self.pack_leaf(dir, lo);
        let hi_block = self.pack_leaf(dir, hi);
        self.install(ws, leaf_pblk, lo_block);
        self.install(ws, new_p, hi_block);
        for (recs, lblk) in [(lo, leaf_lblk), (hi, new_l)] {
            for r in recs {
                self.kb_change(
                    &mut ws.kb_changes,
                    KbChange::Entry { dir: dir.ino, name: r.name.clone(), child: r.ino, lblk },
                );
            }
        }
        let continued = lo.last().map(|r| r.hash) == hi.first().map(|r| r.hash);
        let hi_hash = hi.first().map_or(h.major, |r| r.hash) | u32::from(continued);
        let level = path.len() - 1;
        let at = path[level].2 + 1;
        self.insert_index(ws, dir, &mut path, level, at, DxEntry { hash: hi_hash, block: new_l as u32 })
    }

    /// Insert `entry` at position `at` of index node `path[level]`, splitting
    /// full nodes upward and deepening the tree when the root is full.
    fn insert_index(
        &self,
        ws: &mut WriteState,
        dir: &mut Inode,
        path: &mut Vec<(u64, DxNode, usize)>,
        level: usize,
        at: usize,
        entry: DxEntry,
    ) -> Result<()> {
        let node = &mut path[level].1;
        if node.entries.len() < usize::from(node.limit) {
            node.entries.insert(at, entry);
            let (l, n, _) = &path[level];
            return self.write_index(ws, dir, *l, n);
        }
        if level == 0 {
            let max_levels = if self.sb.has_incompat(feature::incompat::LARGEDIR) { 3 } else { 2 };
            if usize::from(path[0].1.indirect_levels) + 1 >= max_levels {
                return Err(FsError::NoSpace); // as the kernel: "Directory index full"
            }
            // Deepen: the root's entries move to a new node; the root points at it.
            let (new_l, new_p) = self.grow_dir(ws, dir)?;
            self.kb_change(&mut ws.kb_changes, KbChange::IndexNode { dir: dir.ino, pblk: new_p });
            let bs = self.block_size() as usize;
            let limit = ((bs - htree::NODE_OFFSET - if self.sb.has_metadata_csum() { 8 } else { 0 }) / 8) as u16;
            let mut child = DxNode {
                hash_version: 0,
                indirect_levels: 0,
                limit,
                entries: std::mem::take(&mut path[0].1.entries),
                entries_offset: htree::NODE_OFFSET,
            };
            child.entries.insert(at, entry);
            path[0].1.entries = vec![DxEntry { hash: 0, block: new_l as u32 }];
            path[0].1.indirect_levels += 1;
            self.write_index(ws, dir, new_l, &child)?;
            let root = path[0].1.clone();
            return self.write_index(ws, dir, 0, &root);
        }
        // Split this node: the upper half moves to a new node indexed by the parent.
        let (new_l, new_p) = self.grow_dir(ws, dir)?;
        self.kb_change(&mut ws.kb_changes, KbChange::IndexNode { dir: dir.ino, pblk: new_p });
        let node = &mut path[level].1;
        node.entries.insert(at, entry);
        let mid = node.entries.len() / 2;
        let upper: Vec<DxEntry> = node.entries.split_off(mid);
        let key = upper[0].hash;
        let sibling = DxNode {
            hash_version: 0,
            indirect_levels: 0,
            limit: node.limit,
            entries: upper,
            entries_offset: htree::NODE_OFFSET,
        };
        let (l, n, _) = &path[level];
        self.write_index(ws, dir, *l, n)?;
        self.write_index(ws, dir, new_l, &sibling)?;
        let pat = path[level - 1].2 + 1;
        self.insert_index(ws, dir, path, level - 1, pat, DxEntry { hash: key, block: new_l as u32 })
    }

    /// Write an index node: the root keeps its dirents and info; other nodes
    /// get a fresh block with the fake empty entry.
    fn write_index(&self, ws: &mut WriteState, dir: &Inode, lblk: u64, node: &DxNode) -> Result<()> {
        let pblk = self.dir_pblk(dir, lblk)?;
        let bs = self.block_size() as usize;
        let mut data = if lblk == 0 {
            let mut d = self.meta(pblk)?.to_vec();
            d[0x18 + 6] = node.indirect_levels;
            d
        } else {
            let mut d = self.fresh_block();
            ondisk::bytes::put_le16(&mut d, 4, odir::rec_len_to_disk(bs, bs));
            d
        };
        node.write_entries(&mut data);
        if let Some(seed) = self.dir_csum_seed(dir) {
            htree::set_tail(&mut data, node.entries_offset, seed);
        }
        self.install(ws, pblk, data);
        Ok(())
    }

    /// Find the block and offset of `name` in `dir`.
    fn locate(&self, dir: &Inode, name: &[u8]) -> Result<Option<(u64, usize)>> {
        let Some(found) = self.find_entry(dir, name)? else { return Ok(None) };
        Ok(Some((self.dir_pblk(dir, found.lblk)?, found.offset)))
    }

    /// Remove `name` from `dir`: merge its space into the previous entry.
    pub(crate) fn remove_entry(&self, ws: &mut WriteState, dir: &mut Inode, name: &[u8]) -> Result<()> {
        self.convert_inline_dir(ws, dir)?;
        let (pblk, off) = self.locate(dir, name)?.ok_or(FsError::NotFound)?;
        let mut data = self.meta(pblk)?.to_vec();
        let bs = self.block_size() as usize;
        let mut prev = None;
        let mut target = None;
        for e in DirIter::new(&data[..self.leaf_space()], bs, self.has_filetype(), Location::Block(pblk)) {
            let e = e?;
            if e.offset == off {
                target = Some(e.rec_len);
                break;
            }
            prev = Some((e.offset, e.rec_len));
        }
        let rec_len = target.ok_or(FsError::NotFound)?;
        match prev {
            Some((poff, plen)) => {
                let merged = plen + rec_len;
                ondisk::bytes::put_le16(&mut data, poff + 4, odir::rec_len_to_disk(merged, bs));
            }
            None => ondisk::bytes::put_le32(&mut data, off, 0),
        }
        self.finish_leaf(dir, &mut data);
        self.install(ws, pblk, data);
        self.kb_change(&mut ws.kb_changes, KbChange::Removed { dir: dir.ino, name: name.to_vec() });
        Ok(())
    }

    /// Point existing entry `name` at another inode (rename over a target, "..").
    pub(crate) fn retarget_entry(
        &self,
        ws: &mut WriteState,
        dir: &mut Inode,
        name: &[u8],
        ino: u32,
        ft: u8,
    ) -> Result<()> {
        self.kb_change(&mut ws.kb_changes, KbChange::Retarget { dir: dir.ino, name: name.to_vec(), child: ino });
        if dir.has_flag(flags::INLINE_DATA) && name == b".." {
            // An inline directory keeps its parent in i_block's first word.
            ondisk::bytes::put_le32(&mut dir.base.block, 0, ino);
            return self.write_inode(ws, dir);
        }
        self.convert_inline_dir(ws, dir)?;
        let (pblk, off) = self.locate(dir, name)?.ok_or(FsError::NotFound)?;
        let ft = if self.has_filetype() { ft } else { 0 };
        let mut data = self.meta(pblk)?.to_vec();
        ondisk::bytes::put_le32(&mut data, off, ino);
        data[off + 7] = ft;
        if self.is_htree(dir) && pblk == self.dir_pblk(dir, 0)? {
            // ".." lives in the index root, whose checksum is the dx tail.
            if let Some(seed) = self.dir_csum_seed(dir) {
                htree::set_tail(&mut data, htree::ROOT_OFFSET, seed);
            }
        } else {
            self.finish_leaf(dir, &mut data);
        }
        self.install(ws, pblk, data);
        Ok(())
    }

    /// The first block of a new directory: "." and "..".
    pub(crate) fn init_dir_block(&self, dir: &Inode, parent: u32) -> Vec<u8> {
        let mut data = self.fresh_block();
        let ft = if self.has_filetype() { odir::ftype::DIR } else { 0 };
        write_entry(&mut data, 0, dir.ino, 12, ft, b".");
        write_entry(&mut data, 12, parent, self.leaf_space() - 12, ft, b"..");
        self.finish_leaf(dir, &mut data);
        data
    }

    /// Whether a directory holds only "." and "..".
    pub(crate) fn dir_is_empty(&self, dir: &Inode) -> Result<bool> {
        let mut empty = true;
        self.scan_dir(dir, 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                empty = false;
                return false;
            }
            true
        })?;
        Ok(empty)
    }
}

/// Where to split hash-sorted records: the middle, moved so that equal hashes
/// stay together when possible.
fn split_point(recs: &[Rec]) -> usize {
    let mid = recs.len() / 2;
    let mut s = mid;
    while s > 1 && s < recs.len() && recs[s].hash == recs[s - 1].hash {
        s -= 1;
    }
    if s <= 1 {
        s = mid.max(1);
    }
    s.min(recs.len())
}
