//! How a volume is opened: the options every part of it reads.

/// How much of the log a lazy-mode metadata miss reads at once by default
/// (at most a 32nd of the cache; `log_readahead_kb=`): one sequential request
/// of 256 KiB costs a disk about what two random 4 KiB reads do (see
/// docs/LAZY.md, "Reading from the log").
pub const JOURNAL_READAHEAD_BYTES: u64 = 256 << 10;

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
    /// Lazy mode: bytes of the log a metadata miss reads from its block's
    /// copy on (at most a 32nd of the cache), JOURNAL_READAHEAD_BYTES.
    pub log_readahead_bytes: u64,
    /// Commit the running transaction at least this often (`commit=`, 5 s).
    pub commit_interval: std::time::Duration,
    /// Write committed metadata home after this long (`dirty_expire=`, 30 s).
    pub dirty_expire: std::time::Duration,
    /// Lazy writeback journaling (`journal=lazy`): committed metadata stays
    /// in the journal, found through the jmap, and is never written home by
    /// write-back (docs/LAZY.md).
    pub lazy: bool,
    /// How the lazy-mode cleaner works.
    pub cleaner: crate::journaling::CleanerPolicy,
    /// Lazy mode: where the jmap snapshot lives (written at unmount, used
    /// instead of scanning the log at the next read-write lazy mount).
    pub jmap_snapshot: Option<std::path::PathBuf>,
    /// StepAhead prefetching (mount option `stepahead`; docs/STEPAHEAD.md).
    pub stepahead: Option<crate::stepahead::state::StepAheadOptions>,
    /// File data written in pieces under 1 MiB waits in memory, up to this
    /// many bytes, and goes to the device sorted and merged at the next commit
    /// (`writeback_mb=`; 0 writes it at once). See blockdev::DataWriteback.
    pub data_writeback_bytes: usize,
    /// Delayed allocation (`delalloc_mb=`; 0 turns it off): file data written
    /// into holes waits in memory without blocks, up to this many bytes,
    /// and gets its blocks when it goes out (`write/delalloc.rs`).
    pub delalloc_bytes: u64,
    /// Delayed data goes out once it has waited this long (`data_expire=`,
    /// 5 s). Shorter than the kernel's 30 s dirty_expire on purpose: sync(2)
    /// and syncfs(2) never reach a FUSE daemon (the kernel sends FUSE_SYNCFS
    /// to virtiofs only), so time is the only bound on what a crash loses.
    pub data_expire: std::time::Duration,
    /// Blocks held back for extent-tree blocks on extent volumes, as the
    /// kernel's `reserved_clusters` (its sysfs tunable); None for its
    /// default, 2% of the volume and at most 4096. Tests set 0 to reach a
    /// volume with no free block at all.
    pub reserved_blocks: Option<u64>,
}

impl Default for VolumeOptions {
    fn default() -> Self {
        VolumeOptions {
            read_only: true,
            cache_bytes: 256 << 20,
            inode_readahead_blocks: 32,
            dir_readahead_blocks: 16,
            log_readahead_bytes: JOURNAL_READAHEAD_BYTES,
            commit_interval: std::time::Duration::from_secs(5),
            dirty_expire: std::time::Duration::from_secs(30),
            lazy: false,
            cleaner: Default::default(),
            jmap_snapshot: None,
            stepahead: None,
            data_writeback_bytes: 64 << 20,
            delalloc_bytes: 256 << 20,
            data_expire: std::time::Duration::from_secs(5),
            reserved_blocks: None,
        }
    }
}
