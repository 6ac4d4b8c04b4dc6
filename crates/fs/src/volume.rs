//! A mounted ext4 volume: geometry, group descriptors, and the one path every
//! metadata block takes (buffer cache, then the journal overlay, then the device).

use crate::cache::{Block, BufferCache, CacheStats};
use crate::error::{FsError, Result};
use crate::overlay::Overlay;
use blockdev::{BlockDevice, IoClass};
use ondisk::group_desc::GroupDesc;
use ondisk::inode::Inode;
use ondisk::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ondisk::{Corruption, FormatError, Location};
use parking_lot::RwLock;
use std::sync::Arc;

/// How a volume is opened.
#[derive(Clone, Debug)]
pub struct VolumeOptions {
    pub read_only: bool,
    /// Buffer cache size in bytes.
    pub cache_bytes: usize,
    /// Inode-table blocks read at once on a miss (the kernel's `inode_readahead_blks`, 32).
    pub inode_readahead_blocks: u32,
    /// Directory blocks read at once when a directory is scanned.
    pub dir_readahead_blocks: u32,
    /// Commit the running transaction at least this often (`commit=`, 5 s).
    pub commit_interval: std::time::Duration,
    /// Write committed metadata home after this long (`dirty_expire=`, 30 s).
    pub dirty_expire: std::time::Duration,
    /// Lazy writeback journaling (`journal=lazy`): committed metadata stays
    /// in the journal, found through the jmap, and is never written home by
    /// write-back (docs/LAZY.md).
    pub lazy: bool,
    /// How the lazy-mode cleaner works.
    pub cleaner: crate::write::CleanerPolicy,
    /// Lazy mode: where the jmap snapshot lives (written at unmount, used
    /// instead of scanning the log at the next read-write lazy mount).
    pub jmap_snapshot: Option<std::path::PathBuf>,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            read_only: true,
            cache_bytes: 256 << 20,
            inode_readahead_blocks: 32,
            dir_readahead_blocks: 16,
            commit_interval: std::time::Duration::from_secs(5),
            dirty_expire: std::time::Duration::from_secs(30),
            lazy: false,
            cleaner: Default::default(),
            jmap_snapshot: None,
        }
    }
}

pub struct Volume {
    pub(crate) dev: Arc<dyn BlockDevice>,
    pub sb: Superblock,
    /// Parsed mirror of the group descriptor blocks (the blocks are the truth on disk).
    pub(crate) groups: RwLock<Vec<GroupDesc>>,
    pub(crate) block_size: u32,
    pub(crate) cache: BufferCache,
    pub(crate) overlay: Overlay,
    pub(crate) opts: VolumeOptions,
    /// Inode-table blocks per group.
    pub(crate) itb_per_group: u64,
    pub(crate) journal: Option<crate::journal_glue::JournalInfo>,
    /// The jbd2 journal of a read-write volume. Its own lock, not the write
    /// lock: in lazy mode, readers look up the newest copy of a block in its
    /// jmap (shared), while a commit or a tail move excludes them.
    pub(crate) jbd2: Option<RwLock<crate::write::Jbd2>>,
    /// Present on read-write volumes: the write lock and what it guards.
    pub(crate) write: Option<parking_lot::Mutex<crate::write::WriteState>>,
    /// Open handles per inode: an unlinked inode is freed only after its last close.
    pub(crate) open_files: parking_lot::Mutex<std::collections::HashMap<u32, u32>>,
}

impl std::fmt::Debug for Volume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Volume").field("blocks", &self.sb.blocks_count()).finish()
    }
}

impl Volume {
    /// Open the ext4 volume on `dev`: read and check the superblock and group
    /// descriptors, locate the journal and, if it needs recovery, replay it in
    /// memory (the device is never written by a read-only open).
    pub fn open(dev: Arc<dyn BlockDevice>, opts: VolumeOptions) -> Result<Volume> {
        if dev.size() < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64 {
            return Err(FormatError::corrupt(
                "superblock",
                Location::Byte(SUPERBLOCK_OFFSET),
                Corruption::Truncated { need: (SUPERBLOCK_OFFSET as usize) + SUPERBLOCK_SIZE, have: dev.size() as usize },
            )
            .into());
        }
        let mut raw = vec![0u8; SUPERBLOCK_SIZE];
        dev.read_at(SUPERBLOCK_OFFSET, &mut raw, IoClass::Metadata)
            .map_err(|e| FsError::io("reading the superblock", e))?;
        let sb = Superblock::parse(&raw)?;
        sb.check_supported()?;
        let block_size = sb.block_size();
        let needed = sb.blocks_count().saturating_mul(u64::from(block_size));
        if needed > dev.size() {
            return Err(FsError::Format(FormatError::corrupt(
                "superblock",
                Location::Byte(SUPERBLOCK_OFFSET),
                Corruption::BadField { field: "block count (device is smaller than the volume)", value: sb.blocks_count() },
            )));
        }
        let itb_per_group = (u64::from(sb.f.inodes_per_group) * u64::from(sb.inode_size())).div_ceil(u64::from(block_size));
        let cache_blocks = (opts.cache_bytes / block_size as usize).max(64);
        let mut vol = Volume {
            dev,
            sb,
            groups: RwLock::new(Vec::new()),
            block_size,
            cache: BufferCache::new(cache_blocks),
            overlay: Overlay::default(),
            opts,
            itb_per_group,
            journal: None,
            jbd2: None,
            write: None,
            open_files: Default::default(),
        };
        *vol.groups.get_mut() = vol.read_group_descriptors()?;
        vol.journal = crate::journal_glue::open_journal(&mut vol)?;
        if !vol.opts.read_only {
            vol.start_writing()?;
        }
        Ok(vol)
    }

    pub(crate) fn reload_group_descriptors(&self) -> Result<Vec<GroupDesc>> {
        self.read_group_descriptors()
    }

    fn read_group_descriptors(&self) -> Result<Vec<GroupDesc>> {
        let count = self.sb.group_count();
        let dsize = self.sb.desc_size();
        let per_block = self.block_size as usize / dsize;
        let mut groups = Vec::with_capacity(count as usize);
        let blocks = (count as usize).div_ceil(per_block);
        for i in 0..blocks {
            let blk = ondisk::group_desc::descriptor_block(&self.sb, i as u64);
            let data = self.meta(blk)?;
            for j in 0..per_block {
                let g = (i * per_block + j) as u32;
                if g >= count {
                    break;
                }
                let gd = GroupDesc::parse(&self.sb, g, &data[j * dsize..(j + 1) * dsize])?;
                self.check_group(g, &gd)?;
                groups.push(gd);
            }
        }
        Ok(groups)
    }

    /// Bitmaps and inode tables must lie inside the volume.
    fn check_group(&self, g: u32, gd: &GroupDesc) -> Result<()> {
        let total = self.sb.blocks_count();
        let first = u64::from(self.sb.f.first_data_block);
        let bad = |field: &'static str, value: u64| {
            FsError::Format(FormatError::corrupt("group descriptor", Location::Group(g), Corruption::BadField { field, value }))
        };
        for (field, b) in [("block bitmap", gd.block_bitmap()), ("inode bitmap", gd.inode_bitmap())] {
            if b < first || b >= total {
                return Err(bad(field, b));
            }
        }
        let it = gd.inode_table();
        if it < first || it.checked_add(self.itb_per_group).map_or(true, |end| end > total) {
            return Err(bad("inode table", it));
        }
        Ok(())
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    pub fn group_count(&self) -> u32 {
        self.sb.group_count()
    }

    /// A copy of group `g`'s descriptor.
    pub fn group(&self, g: u32) -> GroupDesc {
        self.groups.read()[g as usize].clone()
    }

    pub fn device(&self) -> &Arc<dyn BlockDevice> {
        &self.dev
    }

    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// Fail unless `blk` is a block of this volume.
    pub(crate) fn check_block(&self, blk: u64, structure: &'static str) -> Result<()> {
        if blk < u64::from(self.sb.f.first_data_block) || blk >= self.sb.blocks_count() {
            return Err(FsError::Format(FormatError::corrupt(
                structure,
                Location::Block(blk),
                Corruption::BadField { field: "block number", value: blk },
            )));
        }
        Ok(())
    }

    /// A metadata block by static address: from the cache, else the journal
    /// overlay, else the device.
    pub fn meta(&self, blk: u64) -> Result<Block> {
        if let Some(b) = self.cache.get(blk) {
            return Ok(b);
        }
        self.check_block(blk, "metadata block")?;
        let seen = self.cache.read_epoch();
        let data: Block = Arc::from(self.read_blocks_uncached(blk, 1, IoClass::Metadata)?);
        self.cache.insert_read(blk, data.clone(), seen);
        Ok(data)
    }

    /// Like [`Volume::meta`], but on a miss read the `count` blocks from `start`
    /// (which must contain `blk`) in one request and cache them all.
    pub(crate) fn meta_readahead(&self, blk: u64, start: u64, count: u64) -> Result<Block> {
        debug_assert!(start <= blk && blk < start + count);
        if let Some(b) = self.cache.get(blk) {
            return Ok(b);
        }
        if count <= 1 {
            return self.meta(blk);
        }
        self.check_block(start, "metadata block")?;
        self.check_block(start + count - 1, "metadata block")?;
        let bs = self.block_size as usize;
        let seen = self.cache.read_epoch();
        let all = self.read_blocks_uncached(start, count, IoClass::Metadata)?;
        let mut wanted = None;
        for i in 0..count {
            let b = start + i;
            let data: Block = Arc::from(&all[i as usize * bs..(i as usize + 1) * bs]);
            if b == blk {
                wanted = Some(data.clone());
            }
            if !self.cache.contains(b) {
                self.cache.insert_read(b, data, seen);
            }
        }
        // OK to unwrap: blk lies in [start, start + count) as asserted above.
        Ok(wanted.expect("readahead range contains the block"))
    }

    /// Read `count` blocks from `start` in one device request, with replayed
    /// journal copies laid over them.
    pub(crate) fn read_blocks_uncached(&self, start: u64, count: u64, class: IoClass) -> Result<Vec<u8>> {
        let mut bufs = self.read_runs_uncached(&[(start, count)], class)?;
        debug_assert_eq!(bufs.len(), 1);
        Ok(bufs.pop().unwrap_or_default())
    }

    /// Read runs `(start, count)` of blocks, one buffer per run: the parts
    /// read from home are submitted together (one request each, in one
    /// `read_batch` when there are several, so the device may reorder them).
    /// In lazy mode, blocks whose newest copy is in the journal come from
    /// there (one by one: the journal has no batched read); otherwise the
    /// replayed overlay is laid over what was read.
    pub(crate) fn read_runs_uncached(&self, runs: &[(u64, u64)], class: IoClass) -> Result<Vec<Vec<u8>>> {
        let bs = u64::from(self.block_size);
        let mut bufs: Vec<Vec<u8>> = runs.iter().map(|&(_, n)| vec![0u8; (n * bs) as usize]).collect();
        // Per run, its parts to read from home: (offset in the run, blocks).
        let mut home: Vec<Vec<(u64, u64)>> = runs.iter().map(|&(_, n)| vec![(0, n)]).collect();
        // Held across the reads: the tail cannot move and free a copy meanwhile.
        let jbd2 = if self.opts.lazy { self.jbd2.as_ref().map(|j| j.read()) } else { None };
        if let Some(j) = &jbd2 {
            for (r, &(start, count)) in runs.iter().enumerate() {
                let parts = &mut home[r];
                parts.clear();
                let buf = &mut bufs[r];
                let mut i = 0;
                while i < count {
                    let off = (i * bs) as usize;
                    if j.read_newest(start + i, &mut buf[off..off + bs as usize]).map_err(crate::write::journal_err)? {
                        i += 1;
                        continue;
                    }
                    let from = i;
                    while i < count && !j.has_copy(start + i) {
                        i += 1;
                    }
                    parts.push((from, i - from));
                }
            }
        }
        self.read_home_parts(runs, &home, &mut bufs, class)?;
        // The jmap already gave the newest copies; the overlay serves the rest.
        let from_jmap = jbd2.is_some();
        drop(jbd2);
        if !from_jmap && !self.overlay.is_empty() {
            for (&(start, count), buf) in runs.iter().zip(bufs.iter_mut()) {
                for i in 0..count {
                    let off = (i * bs) as usize;
                    self.overlay.apply(self, start + i, &mut buf[off..off + bs as usize])?;
                }
            }
        }
        Ok(bufs)
    }

    /// Read the `parts` of each run from home into its buffer: a single part
    /// as a plain read (what every ordinary miss does), several as one batch.
    fn read_home_parts(&self, runs: &[(u64, u64)], parts: &[Vec<(u64, u64)>], bufs: &mut [Vec<u8>], class: IoClass) -> Result<()> {
        let bs = u64::from(self.block_size);
        let mut reqs = Vec::new();
        for ((&(start, _), run_parts), buf) in runs.iter().zip(parts).zip(bufs.iter_mut()) {
            let mut rest: &mut [u8] = buf;
            let mut pos = 0;
            for &(off, n) in run_parts {
                debug_assert!(off >= pos);
                let (_, tail) = std::mem::take(&mut rest).split_at_mut(((off - pos) * bs) as usize);
                let (piece, tail) = tail.split_at_mut((n * bs) as usize);
                reqs.push(blockdev::ReadRequest { offset: (start + off) * bs, buf: piece, class });
                rest = tail;
                pos = off + n;
            }
        }
        match reqs.as_mut_slice() {
            [] => Ok(()),
            [one] => self.read_home(one.offset / bs, one.buf, class),
            many => {
                let n = many.len();
                self.dev.read_batch(many).map_err(|e| FsError::io(format!("reading a batch of {n} block runs"), e))
            }
        }
    }

    /// Read blocks from their home location, one request.
    fn read_home(&self, start: u64, buf: &mut [u8], class: IoClass) -> Result<()> {
        let bs = u64::from(self.block_size);
        self.dev
            .read_at(start * bs, buf, class)
            .map_err(|e| FsError::io(format!("reading {} block(s) at block {start}", buf.len() as u64 / bs), e))
    }

    /// Read inode `ino` (1-based), checking its range and checksum.
    pub fn inode(&self, ino: u32) -> Result<Inode> {
        if ino == 0 || ino > self.sb.f.inodes_count {
            return Err(FsError::Format(FormatError::corrupt(
                "inode number",
                Location::Inode(u64::from(ino)),
                Corruption::BadField { field: "inode number", value: u64::from(ino) },
            )));
        }
        let (gd, blk, off) = self.inode_slot(ino);
        let (ra_start, ra_count) = self.inode_readahead_range(&gd, blk);
        let data = self.meta_readahead(blk, ra_start, ra_count)?;
        let isz = usize::from(self.sb.inode_size());
        Ok(Inode::parse(&self.sb, ino, &data[off..off + isz])?)
    }

    /// Block and byte offset of inode `ino`'s record (the number must be valid).
    pub fn inode_location(&self, ino: u32) -> (u64, usize) {
        let (_, blk, off) = self.inode_slot(ino);
        (blk, off)
    }

    /// Group descriptor, block and byte offset of inode `ino`'s record.
    fn inode_slot(&self, ino: u32) -> (GroupDesc, u64, usize) {
        let ipg = self.sb.f.inodes_per_group;
        let index = u64::from((ino - 1) % ipg);
        let isz = u64::from(self.sb.inode_size());
        let bs = u64::from(self.block_size);
        let gd = self.group((ino - 1) / ipg);
        let blk = gd.inode_table() + index * isz / bs;
        (gd, blk, (index * isz % bs) as usize)
    }

    /// The aligned window of the inode table to read around `blk`, limited to
    /// the part of the table in use (as the kernel's inode readahead does).
    fn inode_readahead_range(&self, gd: &GroupDesc, blk: u64) -> (u64, u64) {
        let ra = u64::from(self.opts.inode_readahead_blocks.max(1));
        let table = gd.inode_table();
        let mut used_inodes = u64::from(self.sb.f.inodes_per_group);
        let has_csum = self.sb.has_metadata_csum()
            || self.sb.has_ro_compat(ondisk::superblock::feature::ro_compat::GDT_CSUM);
        if has_csum {
            used_inodes = used_inodes.saturating_sub(u64::from(gd.itable_unused()));
        }
        let inodes_per_block = u64::from(self.block_size) / u64::from(self.sb.inode_size());
        let table_used_end = (table + used_inodes.div_ceil(inodes_per_block)).max(blk + 1);
        let start = (blk & !(ra - 1)).max(table);
        let end = (start + ra).min(table_used_end).max(blk + 1);
        (start, end - start)
    }
}
