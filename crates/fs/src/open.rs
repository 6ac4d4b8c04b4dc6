//! Opening a volume: the superblock and group descriptors read and checked,
//! the journal found (and replayed in memory if it needs recovery), the
//! system zone built, the root checked, and a read-write volume's write
//! path started.

use crate::cache::BufferCache;
use crate::error::{FsError, Result};
use crate::options::VolumeOptions;
use crate::overlay::Overlay;
use crate::read_core::{ReadCore, DATA_LOCK_SHARDS, INODE_CACHE_ENTRIES};
use crate::system_zone::SystemZone;
use crate::volume::Volume;
use crate::write::writer::Writer;
use blockdev::{BlockDevice, IoClass};
use ondisk::superblock::{Superblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ondisk::{Corruption, FormatError, Location};
use parking_lot::RwLock;
use std::sync::Arc;

impl Volume {
    /// Open the ext4 volume on `dev`: read and check the superblock and group
    /// descriptors, locate the journal and, if it needs recovery, replay it in
    /// memory (the device is never written by a read-only open).
    pub fn open(dev: Arc<dyn BlockDevice>, opts: VolumeOptions) -> Result<Volume> {
        let lazy = opts.lazy;
        if dev.size() < SUPERBLOCK_OFFSET + SUPERBLOCK_SIZE as u64 {
            return Err(FormatError::corrupt(
                "superblock",
                Location::Byte(SUPERBLOCK_OFFSET),
                Corruption::Truncated {
                    need: (SUPERBLOCK_OFFSET as usize) + SUPERBLOCK_SIZE,
                    have: dev.size() as usize,
                },
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
                Corruption::BadField {
                    field: "block count (device is smaller than the volume)",
                    value: sb.blocks_count(),
                },
            )));
        }
        let itb_per_group =
            (u64::from(sb.f.inodes_per_group) * u64::from(sb.inode_size())).div_ceil(u64::from(block_size));
        let cache_blocks = (opts.cache_bytes / block_size as usize).max(64);
        // Delayed data's free blocks kept for reuse: a quarter of its limit.
        let spare_bytes = opts.delalloc_bytes / 4;
        // Files' last blocks kept in memory, beside the cache: up to a
        // sixteenth of its size more (4,096 files of 4 KiB blocks beside 256 MiB).
        let tail_blocks = opts.cache_bytes / 16 / block_size as usize;
        let stepahead = opts.stepahead.map(crate::stepahead::state::StepAhead::new);
        let core = ReadCore {
            dev,
            sb,
            groups: RwLock::new(Default::default()),
            block_size,
            cache: BufferCache::new(cache_blocks),
            inodes: crate::inode_cache::InodeCache::new(INODE_CACHE_ENTRIES),
            negative: Default::default(),
            overlay: Overlay::default(),
            opts,
            itb_per_group,
            journal: None,
            lazy_log: None,
            stepahead,
            translation: Default::default(),
            reads_in_flight: Default::default(),
            data_locks: (0..DATA_LOCK_SHARDS).map(|_| RwLock::new(())).collect(),
            system_zone: Default::default(),
            delayed: crate::delayed::Delayed::new(block_size, spare_bytes),
            tails: crate::tails::Tails::new(tail_blocks),
        };
        let mut vol = Volume { core, writer: Writer::new(lazy) };
        *vol.core.groups.get_mut() = crate::group_table::GroupTable::new(vol.read_group_descriptors()?);
        vol.core.journal = crate::journal_glue::open_journal(&mut vol)?;
        let core = &mut vol.core;
        core.system_zone = SystemZone::build(
            &core.sb,
            &core.groups.read(),
            core.itb_per_group,
            core.journal.as_ref().map(|j| (core.sb.f.journal_inum, j.runs.as_slice())),
        );
        vol.check_root()?;
        if !vol.opts.read_only {
            vol.start_writing()?;
        }
        Ok(vol)
    }
}
