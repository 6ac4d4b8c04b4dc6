//! The read core of a volume: what every reader needs and nothing a writer
//! adds. Geometry, group descriptors, the buffer cache, and the one path
//! every metadata block takes (cache, then lazy mode's log or the replayed
//! journal overlay, then the device); inode reads, and the StepAhead
//! prefetcher, which sees only this. The writer (`write::Writer`) sits
//! beside it in [`crate::Volume`].

use crate::cache::{Block, BufferCache, CacheStats};
use crate::error::{FsError, Result};
use crate::journaling::Jbd2;
use crate::options::VolumeOptions;
use crate::overlay::Overlay;
use blockdev::{BlockDevice, IoClass};
use ondisk::group_desc::GroupDesc;
use ondisk::inode::{Inode, ROOT_INO};
use ondisk::superblock::Superblock;
use ondisk::{Corruption, FormatError, Location};
use parking_lot::RwLock;
use std::sync::Arc;

/// Inodes the write path keeps as it wrote them (about 2 MiB): enough for
/// the ones a workload reads back soon after writing them.
pub(crate) const INODE_CACHE_ENTRIES: usize = 4096;

thread_local! {
    /// Device read submissions this thread made: [`ReadCore::translate`]
    /// tells a lookup served from memory by none made meanwhile.
    static READS_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

pub struct ReadCore {
    pub(crate) dev: Arc<dyn BlockDevice>,
    pub sb: Superblock,
    /// Parsed mirror of the group descriptor blocks (the blocks are the truth on disk).
    pub(crate) groups: RwLock<crate::group_table::GroupTable>,
    pub(crate) block_size: u32,
    pub(crate) cache: BufferCache,
    /// Inodes as the write path last wrote them (read-write volumes).
    pub(crate) inodes: crate::inode_cache::InodeCache,
    /// The last name a lookup did not find (read-write volumes), for the create after it.
    pub(crate) negative: crate::negative::NegativeMemo,
    /// A read-only mount's in-memory replay of a journal that needs recovery.
    pub(crate) overlay: Overlay,
    pub(crate) opts: VolumeOptions,
    /// Inode-table blocks per group.
    pub(crate) itb_per_group: u64,
    /// Where the journal is (None: the volume has none).
    pub(crate) journal: Option<crate::journal_info::JournalInfo>,
    /// Lazy mode's log, where reads find the newest copy of a metadata block
    /// (through its jmap) before the block's home. The writer's journal
    /// (`journaling/`); set when a lazy read-write mount starts it.
    pub(crate) lazy_log: Option<Arc<RwLock<Jbd2>>>,
    /// StepAhead's knowledge base and counters, when it is on.
    pub(crate) stepahead: Option<crate::stepahead::state::StepAhead>,
    /// Path-translation reads served from the cache or not (the hit rate).
    pub(crate) translation: crate::stepahead::state::TranslationCounters,
    /// Device read requests in flight (the prefetcher's congestion signal).
    pub(crate) reads_in_flight: std::sync::atomic::AtomicUsize,
    /// Between readers of a file's data and the operations that change its
    /// block map (the kernel's i_data_sem), by inode number: see [`ReadCore::data_lock`].
    pub(crate) data_locks: Box<[RwLock<()>]>,
    /// Where the file system's own structures are: no file may map them.
    pub(crate) system_zone: crate::system_zone::SystemZone,
    /// File data written but given no blocks yet (delayed allocation), and
    /// the sizes readers see for it: reads overlay it (`delayed.rs`).
    pub(crate) delayed: crate::delayed::Delayed,
    /// The partly filled last block of recently written files (`tails.rs`).
    pub(crate) tails: crate::tails::Tails,
}

/// Shards of [`ReadCore::data_lock`]: two files share one with odds 1 in 256.
pub(crate) const DATA_LOCK_SHARDS: usize = 256;

impl ReadCore {
    /// Whether the volume was opened read-write (it keeps its write path's
    /// caches then, and a reader must see the writer's newest inode).
    pub(crate) fn writable(&self) -> bool {
        !self.opts.read_only
    }

    /// Lazy mode's log, where reads look first (see `lazy_log`).
    pub(crate) fn log(&self) -> Option<&RwLock<Jbd2>> {
        self.lazy_log.as_deref()
    }
}

impl ReadCore {
    /// The lock that orders reads of inode `ino`'s data with changes of its
    /// block map. A change (a write, a truncate, a punch) splits and frees
    /// extent-tree nodes, allocates blocks before their data is written, and
    /// publishes the new root only when the operation ends: it holds the lock
    /// for writing from before it starts to after its inode is written. A read
    /// holds it shared and maps through the inode record current under it.
    pub(crate) fn data_lock(&self, ino: u32) -> &RwLock<()> {
        &self.data_locks[ino as usize % DATA_LOCK_SHARDS]
    }

    /// The largest size a file may have (the kernel's s_maxbytes for extent
    /// files): 2^32 - 1 blocks, the last logical block an extent can start
    /// at; without huge_file also what i_blocks in 512-byte units can count.
    pub fn max_file_size(&self) -> u64 {
        let bits = self.block_size.trailing_zeros();
        let by_extents = ((1u64 << 32) - 1) << bits;
        if self.sb.has_ro_compat(ondisk::superblock::feature::ro_compat::HUGE_FILE) {
            by_extents
        } else {
            by_extents.min((((1u64 << 32) - 1) >> (bits - 9)) << bits)
        }
    }

    /// The kernel's last check before a mount: a root inode that reads
    /// (checksum included) and is a non-empty directory.
    pub(crate) fn check_root(&self) -> Result<()> {
        let root = self
            .inode(ROOT_INO)
            .map_err(|e| FsError::Refused { reason: "get root inode failed", found: e.to_string() })?;
        if !root.is_dir() || root.size() == 0 || root.blocks_512(&self.sb) == 0 {
            let found =
                format!("mode {:o}, size {}, {} blocks", root.base.mode, root.size(), root.blocks_512(&self.sb));
            return Err(FsError::Refused { reason: "corrupt root inode, run e2fsck", found });
        }
        Ok(())
    }

    pub(crate) fn reload_group_descriptors(&self) -> Result<Vec<GroupDesc>> {
        self.read_group_descriptors()
    }

    pub(crate) fn read_group_descriptors(&self) -> Result<Vec<GroupDesc>> {
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
            FsError::Format(FormatError::corrupt(
                "group descriptor",
                Location::Group(g),
                Corruption::BadField { field, value },
            ))
        };
        for (field, b) in [("block bitmap", gd.block_bitmap()), ("inode bitmap", gd.inode_bitmap())] {
            if b < first || b >= total {
                return Err(bad(field, b));
            }
        }
        let it = gd.inode_table();
        if it < first || it.checked_add(self.itb_per_group).is_none_or(|end| end > total) {
            return Err(bad("inode table", it));
        }
        Ok(())
    }

    pub fn block_size(&self) -> u32 {
        self.block_size
    }

    /// The first block of group `g`.
    pub(crate) fn group_first_block(&self, g: u32) -> u64 {
        u64::from(self.sb.f.first_data_block) + u64::from(g) * u64::from(self.sb.f.blocks_per_group)
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

    /// Device reads of files' last blocks saved by keeping them (`tails.rs`).
    pub fn tail_hits(&self) -> u64 {
        self.tails.hits()
    }

    /// File data waiting in memory for delayed allocation, in bytes.
    pub fn delayed_bytes(&self) -> u64 {
        self.delayed.bytes()
    }

    /// Delayed allocation's back-pressure: (writers stalled, seconds).
    pub fn delalloc_stalls(&self) -> (u64, f64) {
        self.delayed.stalls()
    }

    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// Blocks [start, start + len) may belong to inode `ino` (0: a block the
    /// allocator hands out): inside the volume and clear of its metadata.
    pub(crate) fn check_owned(&self, start: u64, len: u64, ino: u32, structure: &'static str) -> Result<()> {
        self.check_block(start, structure)?;
        self.check_block(start.saturating_add(len.max(1) - 1), structure)?;
        self.system_zone.check(start, len, ino, structure)
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
        if let Some(b) = self.journal_readahead(blk)? {
            return Ok(b);
        }
        let seen = self.cache.read_epoch();
        let data: Block = Arc::from(self.read_blocks_uncached(blk, 1, IoClass::Metadata)?);
        self.cache.insert_read(blk, data.clone(), seen);
        Ok(data)
    }

    /// Run `verify` on metadata block `blk` (as read with [`ReadCore::meta`] or
    /// its kin) unless this very copy passed it before or is our own.
    pub(crate) fn verify_once(&self, blk: u64, data: &Block, verify: impl FnOnce(&[u8]) -> Result<()>) -> Result<()> {
        if self.cache.is_verified(blk, data) {
            return Ok(());
        }
        verify(data)?;
        self.cache.mark_verified(blk, data);
        Ok(())
    }

    /// Like [`ReadCore::meta`], but on a miss read the `count` blocks from `start`
    /// (which must contain `blk`) in one request and cache them all.
    pub(crate) fn meta_readahead(&self, blk: u64, start: u64, count: u64) -> Result<Block> {
        debug_assert!(start <= blk && blk < start + count);
        if let Some(b) = self.cache.get(blk) {
            self.translation.count(true);
            return Ok(b);
        }
        // Only path translation (inodes, directory blocks) reads ahead.
        self.translation.count(false);
        if count <= 1 {
            return self.meta(blk);
        }
        // Lazy mode: a block in the log is read with its neighbours there,
        // not with its neighbours at home.
        if let Some(b) = self.journal_readahead(blk)? {
            return Ok(b);
        }
        self.check_block(start, "metadata block")?;
        self.check_block(start + count - 1, "metadata block")?;
        let bs = self.block_size as usize;
        let seen = self.cache.read_epoch();
        let all = self.read_blocks_uncached(start, count, IoClass::Metadata)?;
        let blocks = (start..start + count).zip(all.chunks_exact(bs).map(Block::from));
        // OK to unwrap: blk lies in [start, start + count) as asserted above.
        Ok(self.keep_read(blocks, blk, seen).expect("readahead range contains the block"))
    }

    /// Cache the blocks one read brought (`seen`: the cache's read epoch
    /// before it), leaving alone those cached meanwhile but `blk`, and
    /// return `blk`'s.
    fn keep_read(&self, blocks: impl IntoIterator<Item = (u64, Block)>, blk: u64, seen: u64) -> Option<Block> {
        let mut wanted = None;
        for (b, data) in blocks {
            if b == blk {
                wanted = Some(data.clone());
                self.cache.insert_read(b, data, seen);
            } else if !self.cache.contains(b) {
                self.cache.insert_read(b, data, seen);
            }
        }
        wanted
    }

    /// Lazy mode, `blk` not cached and its newest copy in the log: read the
    /// stretch of the log from that copy on (`log_readahead_bytes`, one
    /// request) and cache every other newest copy it holds. Metadata written
    /// together sits together in the log, so a cold traversal finds its
    /// next blocks there (the paper's "short seeks", without relying on the
    /// drive's own read-ahead). None when `blk` is not in the log.
    fn journal_readahead(&self, blk: u64) -> Result<Option<Block>> {
        let Some(jbd2) = self.log() else { return Ok(None) };
        let bs = u64::from(self.block_size);
        // Held across the read: the tail cannot move and free a copy meanwhile.
        let j = jbd2.read();
        let span = self.log_stretch(&j, blk)?;
        let Some(&first) = span.first() else { return Ok(None) };
        let n = span.last().map_or(1, |c| c.jblock - first.jblock + 1);
        let mut buf = vec![0u8; (n * bs) as usize];
        let seen = self.cache.read_epoch();
        self.submit_reads(&mut [blockdev::ReadRequest {
            offset: first.phys * bs,
            buf: &mut buf,
            class: IoClass::Journal,
        }])?;
        drop(j);
        let blocks = span.iter().map(|c| {
            let at = ((c.jblock - first.jblock) * bs) as usize;
            let mut data = buf[at..at + bs as usize].to_vec();
            if c.escaped {
                journal::unescape(&mut data);
            }
            (c.block, Block::from(data))
        });
        let wanted = self.keep_read(blocks, blk, seen);
        // live_copies_from puts blk's own copy first.
        debug_assert!(wanted.is_some(), "the stretch starts with the block's copy");
        Ok(wanted)
    }

    /// The stretch of the log a read of `blk`'s newest copy brings (lazy
    /// mode): the live copies from that one on, within the readahead window
    /// and as far as the log is contiguous on the device (one request).
    /// Empty when `blk` has no copy in the log.
    pub(crate) fn log_stretch(&self, j: &Jbd2, blk: u64) -> Result<Vec<journal::CopyAt>> {
        let bs = u64::from(self.block_size);
        // A small cache would evict what it reads ahead before it is used.
        let window = self.opts.log_readahead_bytes.min(self.opts.cache_bytes as u64 / 32) / bs;
        let copies = j.live_copies_from(blk, window.max(1)).map_err(crate::error::journal_err)?;
        let Some(&first) = copies.first() else { return Ok(Vec::new()) };
        Ok(copies.into_iter().take_while(|c| c.phys - first.phys == c.jblock - first.jblock).collect())
    }

    /// Read `count` blocks from `start` in one device request, with replayed
    /// journal copies laid over them.
    pub(crate) fn read_blocks_uncached(&self, start: u64, count: u64, class: IoClass) -> Result<Vec<u8>> {
        let mut bufs = self.read_runs_uncached(&[(start, count)], class)?;
        debug_assert_eq!(bufs.len(), 1);
        Ok(bufs.pop().unwrap_or_default())
    }

    /// Read runs `(start, count)` of blocks, one buffer per run, submitted
    /// together: one request per piece, in one `read_batch` when there are
    /// several, so the device may reorder them. In lazy mode, blocks whose
    /// newest copy is in the journal are pieces of their own, read from the
    /// log in the same batch; otherwise the replayed overlay is laid over
    /// what was read.
    pub(crate) fn read_runs_uncached(&self, runs: &[(u64, u64)], class: IoClass) -> Result<Vec<Vec<u8>>> {
        let bs = u64::from(self.block_size);
        let mut bufs: Vec<Vec<u8>> = runs.iter().map(|&(_, n)| vec![0u8; (n * bs) as usize]).collect();
        // Held across the reads: the tail cannot move and free a copy meanwhile.
        let jbd2 = self.log().map(|j| j.read());
        // Per run, the pieces that cover it in order.
        let mut pieces: Vec<Vec<Piece>> = Vec::with_capacity(runs.len());
        for &(start, count) in runs {
            let mut list = Vec::new();
            match &jbd2 {
                None => list.push(Piece { blocks: count, device_block: start, escaped: false, class }),
                Some(j) => {
                    let mut i = 0;
                    while i < count {
                        if let Some((phys, escaped)) =
                            j.newest_copy_location(start + i).map_err(crate::error::journal_err)?
                        {
                            list.push(Piece { blocks: 1, device_block: phys, escaped, class: IoClass::Journal });
                            i += 1;
                            continue;
                        }
                        let from = i;
                        while i < count && !j.has_copy(start + i) {
                            i += 1;
                        }
                        list.push(Piece { blocks: i - from, device_block: start + from, escaped: false, class });
                    }
                }
            }
            pieces.push(list);
        }
        let mut reqs = Vec::new();
        for (buf, list) in bufs.iter_mut().zip(&pieces) {
            let mut rest: &mut [u8] = buf;
            for p in list {
                let (piece, tail) = std::mem::take(&mut rest).split_at_mut((p.blocks * bs) as usize);
                reqs.push(blockdev::ReadRequest { offset: p.device_block * bs, buf: piece, class: p.class });
                rest = tail;
            }
        }
        self.submit_reads(&mut reqs)?;
        drop(reqs);
        let from_jmap = jbd2.is_some();
        drop(jbd2);
        for (buf, list) in bufs.iter_mut().zip(&pieces) {
            let mut at = 0usize;
            for p in list {
                if p.escaped {
                    journal::unescape(&mut buf[at..]);
                }
                at += (p.blocks * bs) as usize;
            }
        }
        // The jmap already gave the newest copies; the overlay serves the rest.
        if !from_jmap && !self.overlay.is_empty() {
            for (&(start, count), buf) in runs.iter().zip(bufs.iter_mut()) {
                for i in 0..count {
                    let off = (i * bs) as usize;
                    self.overlay.apply(&*self.dev, start + i, &mut buf[off..off + bs as usize])?;
                }
            }
        }
        Ok(bufs)
    }

    /// Run one name's translation `f` (its directory searched, its inode
    /// read, its StepAhead hint acted on) and count it as served from
    /// memory when this thread submitted no device read meanwhile.
    pub fn translate<T>(&self, f: impl FnOnce() -> T) -> T {
        let before = Self::reads_here();
        let out = f();
        self.count_translation(Self::reads_here() == before);
        out
    }

    /// Device read submissions this thread has made so far: a caller that
    /// translates several names in a row (readdirplus) counts each one as
    /// served from memory when the figure did not move since the last.
    pub fn reads_here() -> u64 {
        READS_HERE.with(std::cell::Cell::get)
    }

    /// Count one translation, served from memory or not.
    pub fn count_translation(&self, hit: bool) {
        self.translation.count_lookup(hit);
    }

    /// Submit reads: one as a plain read (what every ordinary miss does),
    /// several as one batch. Counted in flight meanwhile, which is how the
    /// prefetcher sees a congested device.
    pub(crate) fn submit_reads(&self, reqs: &mut [blockdev::ReadRequest<'_>]) -> Result<()> {
        let n = reqs.len();
        if n > 0 {
            READS_HERE.with(|c| c.set(c.get() + 1));
        }
        let _in_flight = InFlight::new(&self.reads_in_flight, n);
        match reqs {
            [] => Ok(()),
            [one] => {
                let bs = u64::from(self.block_size);
                self.dev.read_at(one.offset, one.buf, one.class).map_err(|e| {
                    FsError::io(
                        format!("reading {} block(s) at block {}", one.buf.len() as u64 / bs, one.offset / bs),
                        e,
                    )
                })
            }
            many => self.dev.read_batch(many).map_err(|e| FsError::io(format!("reading a batch of {n} block runs"), e)),
        }
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
        // Delayed data: readers see the size it reaches, the disk keeps
        // less. Asked before the record is read: write-back writes the
        // record with the whole size before the store forgets the file, so
        // a reader that finds the file forgotten reads that record. Asked
        // after, a reader (a getattr takes no data lock) could read the old
        // record, then find the file forgotten, and report the old size: the
        // kernel then put the next O_APPEND write there (a review's appends
        // racing stat lost data).
        let waiting = self.delayed.size(ino); // none on a read-only volume
        let (table, blk, off) = self.inode_slot(ino);
        let (ra_start, ra_count) = self.inode_readahead_range(table, blk);
        let data = self.meta_readahead(blk, ra_start, ra_count)?;
        let record = &data[off..off + usize::from(self.sb.inode_size())];
        if !self.writable() {
            return Ok(Inode::parse(&self.sb, ino, record)?);
        }
        let mut inode = match self.inodes.get(ino, record) {
            Some(inode) => inode,
            None => Inode::parse(&self.sb, ino, record)?,
        };
        if let Some(size) = waiting {
            inode.set_size(size);
        }
        Ok(inode)
    }

    /// Block and byte offset of inode `ino`'s record (the number must be valid).
    pub fn inode_location(&self, ino: u32) -> (u64, usize) {
        let (_, blk, off) = self.inode_slot(ino);
        (blk, off)
    }

    /// Where inode `ino`'s record is: its group's inode table (first block,
    /// unused inodes at its end), the block and the byte offset in it. Reads
    /// the descriptor in place: this runs on every inode read.
    fn inode_slot(&self, ino: u32) -> ((u64, u32), u64, usize) {
        let ipg = self.sb.f.inodes_per_group;
        let index = u64::from((ino - 1) % ipg);
        let isz = u64::from(self.sb.inode_size());
        let bs = u64::from(self.block_size);
        let table = {
            let groups = self.groups.read();
            let gd = &groups[((ino - 1) / ipg) as usize];
            (gd.inode_table(), gd.itable_unused())
        };
        let blk = table.0 + index * isz / bs;
        (table, blk, (index * isz % bs) as usize)
    }

    /// What a miss on `blk` reads when it is an inode-table block: its
    /// readahead window `(start, count)`; None for any other block.
    pub(crate) fn inode_window(&self, blk: u64) -> Option<(u64, u64)> {
        let table = {
            let groups = self.groups.read();
            let g = groups.table_holding(blk, self.itb_per_group)?;
            let gd = &groups[g as usize];
            (gd.inode_table(), gd.itable_unused())
        };
        Some(self.inode_readahead_range(table, blk))
    }

    /// The aligned window of the inode table to read around `blk`, limited to
    /// the part of the table in use (as the kernel's inode readahead does).
    fn inode_readahead_range(&self, (table, itable_unused): (u64, u32), blk: u64) -> (u64, u64) {
        let ra = u64::from(self.opts.inode_readahead_blocks.max(1));
        let mut used_inodes = u64::from(self.sb.f.inodes_per_group);
        let has_csum =
            self.sb.has_metadata_csum() || self.sb.has_ro_compat(ondisk::superblock::feature::ro_compat::GDT_CSUM);
        if has_csum {
            used_inodes = used_inodes.saturating_sub(u64::from(itable_unused));
        }
        let inodes_per_block = u64::from(self.block_size) / u64::from(self.sb.inode_size());
        let table_used_end = (table + used_inodes.div_ceil(inodes_per_block)).max(blk + 1);
        let start = (blk & !(ra - 1)).max(table);
        let end = (start + ra).min(table_used_end).max(blk + 1);
        (start, end - start)
    }
}

/// One device request of an uncached read: `blocks` blocks at `device_block`
/// (home, or a journal copy that may need unescaping).
struct Piece {
    blocks: u64,
    device_block: u64,
    escaped: bool,
    class: IoClass,
}

/// Counts requests in flight for as long as it lives.
struct InFlight<'a>(&'a std::sync::atomic::AtomicUsize, usize);

impl<'a> InFlight<'a> {
    fn new(counter: &'a std::sync::atomic::AtomicUsize, n: usize) -> Self {
        counter.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        InFlight(counter, n)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(self.1, std::sync::atomic::Ordering::Relaxed);
    }
}
