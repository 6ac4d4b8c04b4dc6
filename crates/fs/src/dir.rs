//! Directories: iteration (readdir) and name lookup, for linear, hashed
//! (htree) and inline directories.
//!
//! Readdir cookies are byte positions: for block directories, the position of
//! the next entry in the directory file; for inline directories, 1 and 2 after
//! the synthesised "." and "..", then positions in the inline area (+ 60 for
//! the part kept in the system.data attribute).

use crate::bmap::Mapping;
use crate::error::{FsError, Result};
use crate::negative::Seen;
use crate::read_core::ReadCore;
use ondisk::dir::{self as odir, DirIter, MAX_NAME_LEN};
use ondisk::hash;
use ondisk::htree::{self, DxNode};
use ondisk::inode::{flags, Inode};
use ondisk::superblock::feature;
use ondisk::{Corruption, FormatError, Location};

/// One directory entry as a scan sees it, its name borrowed from the block:
/// lookups compare names without copying each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirEntryRef<'a> {
    pub ino: u32,
    pub file_type: u8,
    pub name: &'a [u8],
    pub next: u64,
}

impl DirEntryRef<'_> {
    pub fn to_owned(&self) -> DirEntry {
        DirEntry { ino: self.ino, file_type: self.file_type, name: self.name.to_vec(), next: self.next }
    }
}

/// One directory entry handed to readdir callers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u32,
    /// `ondisk::dir::ftype` value (UNKNOWN on volumes without the filetype feature).
    pub file_type: u8,
    pub name: Vec<u8>,
    /// Cookie that resumes iteration after this entry.
    pub next: u64,
}

/// Where a name is in a directory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Found {
    pub ino: u32,
    pub file_type: u8,
    /// The directory block holding the entry, and the entry's offset in it.
    pub lblk: u64,
    pub offset: usize,
}

const INLINE_DOT: u64 = 1;
const INLINE_DOTDOT: u64 = 2;
/// Start of the entries in `i_block` (after the 4-byte parent inode number).
const INLINE_IBLOCK_START: usize = 4;
const INLINE_IBLOCK_END: usize = ondisk::inode::I_BLOCK_SIZE;

impl ReadCore {
    /// The htree hash of `name` for a directory whose root names `version`
    /// (the superblock's unsigned flag selects the unsigned variants).
    pub(crate) fn name_hash(&self, version: u8, name: &[u8]) -> Option<hash::NameHash> {
        let mut version = version;
        if version <= hash::version::TEA && self.sb.f.flags & ondisk::superblock::FLAG_UNSIGNED_HASH != 0 {
            version += 3;
        }
        hash::dirhash(name, version, &self.sb.f.hash_seed)
    }

    pub(crate) fn has_filetype(&self) -> bool {
        self.sb.has_incompat(feature::incompat::FILETYPE)
    }

    pub(crate) fn is_htree(&self, dir: &Inode) -> bool {
        dir.has_flag(flags::INDEX) && self.sb.has_compat(feature::compat::DIR_INDEX)
    }

    /// Number of blocks in a block directory.
    pub(crate) fn dir_blocks(&self, dir: &Inode) -> u64 {
        dir.size() / u64::from(self.block_size)
    }

    /// Read directory block `lblk`, verifying its checksum as a leaf or index block.
    /// `seen` records what was read (a lookup's, for the negative-lookup memo).
    fn dir_block(
        &self,
        dir: &Inode,
        lblk: u64,
        seed: Option<u32>,
        seen: &mut Seen,
    ) -> Result<Option<crate::cache::Block>> {
        let nblocks = self.dir_blocks(dir);
        if lblk >= nblocks {
            // Past the size (an htree root in a directory smaller than a block, say): nothing there.
            seen.note_partial();
            return Ok(None);
        }
        match self.map_block(dir, lblk, nblocks - lblk)? {
            Mapping::Hole { .. } => {
                seen.note_partial();
                Ok(None)
            }
            Mapping::Mapped { pblk, len, .. } => {
                let ra = len.min(u64::from(self.opts.dir_readahead_blocks.max(1)));
                let data = self.meta_readahead(pblk, pblk, ra)?;
                if let Some(seed) = seed {
                    self.verify_once(pblk, &data, |d| self.verify_dir_block(dir, lblk, pblk, d, seed))?;
                }
                seen.note(pblk, &data);
                Ok(Some(data))
            }
        }
    }

    fn verify_dir_block(&self, dir: &Inode, lblk: u64, pblk: u64, data: &[u8], seed: u32) -> Result<()> {
        let at = Location::Block(pblk);
        if self.is_htree(dir) {
            let first_rec = odir::rec_len_from_disk(ondisk::bytes::le16(data, 4), data.len());
            if lblk == 0 {
                return Ok(htree::verify_tail(data, htree::ROOT_OFFSET, seed, at)?);
            }
            if first_rec == data.len() {
                return Ok(htree::verify_tail(data, htree::NODE_OFFSET, seed, at)?);
            }
        }
        Ok(odir::verify_tail(data, seed, at)?)
    }

    pub(crate) fn dir_csum_seed(&self, dir: &Inode) -> Option<u32> {
        self.sb.has_metadata_csum().then(|| Inode::csum_seed(&self.sb, dir.ino, dir.base.generation))
    }

    /// Call `emit` for each live entry from cookie `start` on, until it returns false.
    pub fn read_dir(&self, dir: &Inode, start: u64, emit: &mut dyn FnMut(DirEntry) -> bool) -> Result<()> {
        self.scan_dir(dir, start, &mut |e| emit(e.to_owned()))
    }

    /// [`ReadCore::read_dir`] with borrowed names.
    pub fn scan_dir(&self, dir: &Inode, start: u64, emit: &mut dyn FnMut(&DirEntryRef) -> bool) -> Result<()> {
        self.scan_dir_seen(dir, start, &mut Seen::new(false), emit)
    }

    fn scan_dir_seen(
        &self,
        dir: &Inode,
        start: u64,
        seen: &mut Seen,
        emit: &mut dyn FnMut(&DirEntryRef) -> bool,
    ) -> Result<()> {
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        if dir.has_flag(flags::INLINE_DATA) {
            seen.note_partial();
            return self.read_inline_dir(dir, start, emit);
        }
        let bs = u64::from(self.block_size);
        let seed = self.dir_csum_seed(dir);
        let has_ft = self.has_filetype();
        let nblocks = self.dir_blocks(dir);
        let mut lblk = start / bs;
        while lblk < nblocks {
            let Some(data) = self.dir_block(dir, lblk, seed, seen)? else {
                lblk += self.dir_step(dir, lblk, nblocks)?;
                continue;
            };
            let base = lblk * bs;
            let at = Location::Block(lblk);
            for e in DirIter::new(&data, bs as usize, has_ft, at) {
                let e = e?;
                let pos = base + e.offset as u64;
                if pos < start || e.inode == 0 {
                    continue;
                }
                let entry =
                    DirEntryRef { ino: e.inode, file_type: e.file_type, name: e.name, next: pos + e.rec_len as u64 };
                if !emit(&entry) {
                    return Ok(());
                }
            }
            lblk += 1;
        }
        Ok(())
    }

    /// Inline directories: the parent in i_block's first word, entries after it
    /// and in the system.data attribute. "." and ".." are synthesised.
    fn read_inline_dir(&self, dir: &Inode, start: u64, emit: &mut dyn FnMut(&DirEntryRef) -> bool) -> Result<()> {
        let parent = ondisk::bytes::le32(&dir.base.block, 0);
        if start < INLINE_DOT
            && !emit(&DirEntryRef { ino: dir.ino, file_type: odir::ftype::DIR, name: b".", next: INLINE_DOT })
        {
            return Ok(());
        }
        if start < INLINE_DOTDOT
            && !emit(&DirEntryRef { ino: parent, file_type: odir::ftype::DIR, name: b"..", next: INLINE_DOTDOT })
        {
            return Ok(());
        }
        let extra = self.inline_data_xattr(dir)?;
        let areas: [(&[u8], u64); 2] = [
            (&dir.base.block[INLINE_IBLOCK_START..INLINE_IBLOCK_END], INLINE_IBLOCK_START as u64),
            (&extra, INLINE_IBLOCK_END as u64),
        ];
        let at = Location::Inode(u64::from(dir.ino));
        for (area, base) in areas {
            if area.is_empty() {
                continue;
            }
            for e in DirIter::new(area, self.block_size as usize, self.has_filetype(), at) {
                let e = e?;
                let pos = base + e.offset as u64;
                if pos < start || e.inode == 0 {
                    continue;
                }
                if !emit(&DirEntryRef {
                    ino: e.inode,
                    file_type: e.file_type,
                    name: e.name,
                    next: pos + e.rec_len as u64,
                }) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Find `name` in `dir`: its inode number and file type.
    pub fn lookup(&self, dir: &Inode, name: &[u8]) -> Result<Option<(u32, u8)>> {
        let mut seen = Seen::new(self.writable());
        let found = self.lookup_seen(dir, name, &mut seen)?;
        if found.is_none() {
            self.negative.remember(dir, name, seen);
        }
        Ok(found)
    }

    /// Whether `name` is in `dir`, for a create: the lookup the kernel made just
    /// before usually answers it (`negative.rs`).
    pub(crate) fn name_exists(&self, dir: &Inode, name: &[u8]) -> Result<bool> {
        if self.negative.known_absent(&self.cache, dir, name) {
            return Ok(false);
        }
        Ok(self.lookup_seen(dir, name, &mut Seen::new(false))?.is_some())
    }

    fn lookup_seen(&self, dir: &Inode, name: &[u8], seen: &mut Seen) -> Result<Option<(u32, u8)>> {
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        if name.len() > MAX_NAME_LEN {
            return Err(FsError::NameTooLong);
        }
        if name.is_empty() {
            seen.note_partial();
            return Ok(None);
        }
        if dir.has_flag(flags::INLINE_DATA) {
            return self.find_linear(dir, name, seen);
        }
        if self.is_htree(dir) && (name == b"." || name == b"..") {
            // They live only in the index root (block 0), never in a hashed leaf.
            seen.note_partial();
            return self.find_in_first_block(dir, name);
        }
        if self.is_htree(dir) {
            if let Some(found) = self.find_htree(dir, name, seen)? {
                return Ok(found.map(|f| (f.ino, f.file_type)));
            }
            // Unknown hash version: search linearly, as the kernel falls back.
        }
        self.find_linear(dir, name, seen)
    }

    fn find_in_first_block(&self, dir: &Inode, name: &[u8]) -> Result<Option<(u32, u8)>> {
        let mut found = None;
        let bs = u64::from(self.block_size);
        self.scan_dir(dir, 0, &mut |e| {
            if e.name == name {
                found = Some((e.ino, e.file_type));
            }
            found.is_none() && e.next < bs
        })?;
        Ok(found)
    }

    fn find_linear(&self, dir: &Inode, name: &[u8], seen: &mut Seen) -> Result<Option<(u32, u8)>> {
        let mut found = None;
        self.scan_dir_seen(dir, 0, seen, &mut |e| {
            if e.name == name {
                found = Some((e.ino, e.file_type));
                false
            } else {
                true
            }
        })?;
        Ok(found)
    }

    /// htree lookup. Returns None (outer) when the index cannot be used.
    fn find_htree(&self, dir: &Inode, name: &[u8], seen: &mut Seen) -> Result<Option<Option<Found>>> {
        let seed = self.dir_csum_seed(dir);
        let nblocks = self.dir_blocks(dir);
        let corrupt = |field: &'static str, value: u64| {
            FsError::Format(FormatError::corrupt(
                "htree",
                Location::Inode(u64::from(dir.ino)),
                Corruption::BadField { field, value },
            ))
        };
        let Some(root_blk) = self.dir_block(dir, 0, seed, seen)? else {
            return Err(corrupt("hole at index root", 0));
        };
        let root = DxNode::parse_root(&root_blk, Location::Inode(u64::from(dir.ino)))?;
        let max_levels = if self.sb.has_incompat(feature::incompat::LARGEDIR) { 3 } else { 2 };
        if root.indirect_levels >= max_levels {
            return Err(corrupt("indirect levels", u64::from(root.indirect_levels)));
        }
        let Some(h) = self.name_hash(root.hash_version, name) else {
            return Ok(None);
        };
        // Descend, remembering each level's node and position for collision chains.
        let mut path: Vec<(DxNode, usize)> = Vec::new();
        let mut node = root;
        loop {
            let i = node.find(h.major);
            let child = u64::from(node.entries[i].block);
            if child >= nblocks {
                return Err(corrupt("index block", child));
            }
            let level = path.len();
            path.push((node, i));
            if level == usize::from(path[0].0.indirect_levels) {
                break;
            }
            let Some(data) = self.dir_block(dir, child, seed, seen)? else {
                return Err(corrupt("hole at index node", child));
            };
            node = DxNode::parse_node(&data, Location::Block(child))?;
        }
        loop {
            let (n, i) = path.last().expect("path has the leaf's parent");
            let leaf = u64::from(n.entries[*i].block);
            if let Some(found) = self.search_leaf(dir, leaf, name, seed, seen)? {
                return Ok(Some(Some(found)));
            }
            // A name whose hash equals the next leaf's start hash may continue there.
            if !advance(&mut path, h.major) {
                return Ok(Some(None));
            }
            // Re-read interior nodes below the level that advanced.
            let mut lvl = path.len() - 1;
            while lvl > 0 && path[lvl].1 == usize::MAX {
                lvl -= 1;
            }
            for l in lvl + 1..path.len() {
                let (pn, pi) = &path[l - 1];
                let blk = u64::from(pn.entries[*pi].block);
                let Some(data) = self.dir_block(dir, blk, seed, seen)? else {
                    return Err(corrupt("hole at index node", blk));
                };
                path[l] = (DxNode::parse_node(&data, Location::Block(blk))?, 0);
            }
        }
    }

    fn search_leaf(
        &self,
        dir: &Inode,
        lblk: u64,
        name: &[u8],
        seed: Option<u32>,
        seen: &mut Seen,
    ) -> Result<Option<Found>> {
        let Some(data) = self.dir_block(dir, lblk, seed, seen)? else { return Ok(None) };
        for e in DirIter::new(&data, self.block_size as usize, self.has_filetype(), Location::Block(lblk)) {
            let e = e?;
            if e.inode != 0 && e.name == name {
                return Ok(Some(Found { ino: e.inode, file_type: e.file_type, lblk, offset: e.offset }));
            }
        }
        Ok(None)
    }

    /// Where `name` is in `dir` (a directory in blocks, not inline): through
    /// the index when it has one, as a lookup finds it.
    pub(crate) fn find_entry(&self, dir: &Inode, name: &[u8]) -> Result<Option<Found>> {
        debug_assert!(!dir.has_flag(flags::INLINE_DATA));
        let mut seen = Seen::new(false);
        if self.is_htree(dir) && name != b"." && name != b".." {
            if let Some(found) = self.find_htree(dir, name, &mut seen)? {
                return Ok(found);
            }
        }
        let seed = self.dir_csum_seed(dir);
        let nblocks = self.dir_blocks(dir);
        let mut lblk = 0;
        while lblk < nblocks {
            match self.search_leaf(dir, lblk, name, seed, &mut seen)? {
                Some(found) => return Ok(Some(found)),
                None => lblk += self.dir_step(dir, lblk, nblocks)?,
            }
        }
        Ok(None)
    }

    /// How far a walk over `dir`'s blocks moves on from `lblk`: one block, or
    /// past the hole there (a directory's size may claim far more blocks
    /// than it maps).
    fn dir_step(&self, dir: &Inode, lblk: u64, nblocks: u64) -> Result<u64> {
        Ok(match self.map_block(dir, lblk, nblocks - lblk)? {
            Mapping::Hole { len } => len.max(1),
            Mapping::Mapped { .. } => 1,
        })
    }

    /// The bytes of the system.data attribute of an inline inode (empty if none).
    pub(crate) fn inline_data_xattr(&self, inode: &Inode) -> Result<Vec<u8>> {
        let area = inode.inline_xattr_area();
        let attrs = ondisk::xattr::parse_inode_area(area, Location::Inode(u64::from(inode.ino)))?;
        Ok(attrs.into_iter().find(|x| x.name_index == 7 && x.suffix == b"data").map(|x| x.value).unwrap_or_default())
    }
}

/// Move to the next leaf if it may hold more names with hash `hash` (the
/// kernel's `ext4_htree_next_block`). Levels whose node must be re-read are
/// marked with position `usize::MAX`.
fn advance(path: &mut [(DxNode, usize)], hash: u32) -> bool {
    let mut lvl = path.len();
    loop {
        if lvl == 0 {
            return false;
        }
        lvl -= 1;
        let (n, i) = &mut path[lvl];
        if *i + 1 < n.entries.len() {
            *i += 1;
            let start = n.entries[*i].hash;
            if start & !1 != hash {
                return false;
            }
            for below in path[lvl + 1..].iter_mut() {
                below.1 = usize::MAX;
            }
            return true;
        }
    }
}
