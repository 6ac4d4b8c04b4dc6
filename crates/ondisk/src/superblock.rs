//! The ext4 superblock: 1024 bytes at byte 1024 of the volume.

use crate::bytes::need;
use crate::csum::crc32c;
use crate::{le_struct, Corruption, FormatError, Location, Result};

pub const SUPERBLOCK_OFFSET: u64 = 1024;
pub const SUPERBLOCK_SIZE: usize = 1024;
pub const EXT4_MAGIC: u16 = 0xEF53;
const CHECKSUM_OFFSET: usize = 0x3FC;

/// Feature bits, by the three words that hold them.
pub mod feature {
    pub mod compat {
        pub const DIR_PREALLOC: u32 = 0x1;
        pub const IMAGIC_INODES: u32 = 0x2;
        pub const HAS_JOURNAL: u32 = 0x4;
        pub const EXT_ATTR: u32 = 0x8;
        pub const RESIZE_INODE: u32 = 0x10;
        pub const DIR_INDEX: u32 = 0x20;
        pub const SPARSE_SUPER2: u32 = 0x200;
        pub const FAST_COMMIT: u32 = 0x400;
        pub const STABLE_INODES: u32 = 0x800;
        pub const ORPHAN_FILE: u32 = 0x1000;
    }
    pub mod incompat {
        pub const COMPRESSION: u32 = 0x1;
        pub const FILETYPE: u32 = 0x2;
        pub const RECOVER: u32 = 0x4;
        pub const JOURNAL_DEV: u32 = 0x8;
        pub const META_BG: u32 = 0x10;
        pub const EXTENTS: u32 = 0x40;
        pub const BIT64: u32 = 0x80;
        pub const MMP: u32 = 0x100;
        pub const FLEX_BG: u32 = 0x200;
        pub const EA_INODE: u32 = 0x400;
        pub const DIRDATA: u32 = 0x1000;
        pub const CSUM_SEED: u32 = 0x2000;
        pub const LARGEDIR: u32 = 0x4000;
        pub const INLINE_DATA: u32 = 0x8000;
        pub const ENCRYPT: u32 = 0x10000;
        pub const CASEFOLD: u32 = 0x20000;
    }
    pub mod ro_compat {
        pub const SPARSE_SUPER: u32 = 0x1;
        pub const LARGE_FILE: u32 = 0x2;
        pub const BTREE_DIR: u32 = 0x4;
        pub const HUGE_FILE: u32 = 0x8;
        pub const GDT_CSUM: u32 = 0x10;
        pub const DIR_NLINK: u32 = 0x20;
        pub const EXTRA_ISIZE: u32 = 0x40;
        pub const HAS_SNAPSHOT: u32 = 0x80;
        pub const QUOTA: u32 = 0x100;
        pub const BIGALLOC: u32 = 0x200;
        pub const METADATA_CSUM: u32 = 0x400;
        pub const REPLICA: u32 = 0x800;
        pub const READONLY: u32 = 0x1000;
        pub const PROJECT: u32 = 0x2000;
        pub const SHARED_BLOCKS: u32 = 0x4000;
        pub const VERITY: u32 = 0x8000;
        pub const ORPHAN_PRESENT: u32 = 0x10000;
    }
}

/// Incompat features this implementation understands; any other bit refuses the mount.
pub const SUPPORTED_INCOMPAT: u32 = feature::incompat::FILETYPE
    | feature::incompat::RECOVER
    | feature::incompat::META_BG
    | feature::incompat::EXTENTS
    | feature::incompat::BIT64
    | feature::incompat::FLEX_BG
    | feature::incompat::CSUM_SEED
    | feature::incompat::LARGEDIR
    | feature::incompat::INLINE_DATA;

/// `s_flags` bits.
pub const FLAG_SIGNED_HASH: u32 = 0x1;
pub const FLAG_UNSIGNED_HASH: u32 = 0x2;

/// `s_state` bits.
pub const STATE_VALID: u16 = 0x1;
pub const STATE_ERROR: u16 = 0x2;

le_struct! {
    /// Raw superblock fields (names follow the kernel's `struct ext4_super_block`).
    pub struct SuperblockFields {
        /// Total inode count.
        inodes_count: u32 = 0x00,
        /// Total block count, low 32 bits.
        blocks_count_lo: u32 = 0x04,
        /// Blocks reserved for the superuser, low 32 bits.
        r_blocks_count_lo: u32 = 0x08,
        /// Free block count, low 32 bits (the group descriptors hold the truth).
        free_blocks_count_lo: u32 = 0x0C,
        /// Free inode count.
        free_inodes_count: u32 = 0x10,
        /// First data block: 1 for 1 KiB blocks, else 0.
        first_data_block: u32 = 0x14,
        /// Block size is 2^(10 + this).
        log_block_size: u32 = 0x18,
        /// Cluster size is 2^(10 + this) with bigalloc.
        log_cluster_size: u32 = 0x1C,
        blocks_per_group: u32 = 0x20,
        clusters_per_group: u32 = 0x24,
        inodes_per_group: u32 = 0x28,
        /// Last mount time, seconds.
        mtime: u32 = 0x2C,
        /// Last write time, seconds.
        wtime: u32 = 0x30,
        mnt_count: u16 = 0x34,
        max_mnt_count: u16 = 0x36,
        /// 0xEF53.
        magic: u16 = 0x38,
        /// Clean (1) / errors (2) / orphans being recovered (4).
        state: u16 = 0x3A,
        /// What to do on error: continue, remount-ro, panic.
        errors: u16 = 0x3C,
        minor_rev_level: u16 = 0x3E,
        lastcheck: u32 = 0x40,
        checkinterval: u32 = 0x44,
        creator_os: u32 = 0x48,
        /// 0 = original (128-byte inodes, first inode 11), 1 = dynamic.
        rev_level: u32 = 0x4C,
        def_resuid: u16 = 0x50,
        def_resgid: u16 = 0x52,
        /// First non-reserved inode.
        first_ino: u32 = 0x54,
        /// Inode record size in the inode table.
        inode_size: u16 = 0x58,
        /// Group holding this copy of the superblock.
        block_group_nr: u16 = 0x5A,
        feature_compat: u32 = 0x5C,
        feature_incompat: u32 = 0x60,
        feature_ro_compat: u32 = 0x64,
        uuid: [u8; 16] = 0x68,
        volume_name: [u8; 16] = 0x78,
        last_mounted: [u8; 64] = 0x88,
        algorithm_usage_bitmap: u32 = 0xC8,
        prealloc_blocks: u8 = 0xCC,
        prealloc_dir_blocks: u8 = 0xCD,
        /// Blocks reserved after the group descriptors for online growth.
        reserved_gdt_blocks: u16 = 0xCE,
        journal_uuid: [u8; 16] = 0xD0,
        /// Inode number of the journal (8).
        journal_inum: u32 = 0xE0,
        journal_dev: u32 = 0xE4,
        /// Head of the orphan inode list.
        last_orphan: u32 = 0xE8,
        /// Seed for the directory-index hash.
        hash_seed: [u32; 4] = 0xEC,
        /// Default htree hash algorithm.
        def_hash_version: u8 = 0xFC,
        jnl_backup_type: u8 = 0xFD,
        /// Group descriptor size (64 with the 64bit feature).
        desc_size: u16 = 0xFE,
        default_mount_opts: u32 = 0x100,
        /// First metablock group, with meta_bg.
        first_meta_bg: u32 = 0x104,
        mkfs_time: u32 = 0x108,
        /// Backup of the journal inode's i_block and size.
        jnl_blocks: [u32; 17] = 0x10C,
        blocks_count_hi: u32 = 0x150,
        r_blocks_count_hi: u32 = 0x154,
        free_blocks_count_hi: u32 = 0x158,
        min_extra_isize: u16 = 0x15C,
        want_extra_isize: u16 = 0x15E,
        /// Signed / unsigned hash, test filesystem.
        flags: u32 = 0x160,
        raid_stride: u16 = 0x164,
        mmp_interval: u16 = 0x166,
        mmp_block: u64 = 0x168,
        raid_stripe_width: u32 = 0x170,
        /// Flexible block group size is 2^this.
        log_groups_per_flex: u8 = 0x174,
        /// 1 = crc32c.
        checksum_type: u8 = 0x175,
        /// KiB written over the volume's lifetime.
        kbytes_written: u64 = 0x178,
        error_count: u32 = 0x194,
        first_error_time: u32 = 0x198,
        last_error_time: u32 = 0x1CC,
        mount_opts: [u8; 64] = 0x200,
        usr_quota_inum: u32 = 0x240,
        grp_quota_inum: u32 = 0x244,
        /// Overhead blocks/clusters, if mkfs recorded it (0 = compute it).
        overhead_clusters: u32 = 0x248,
        /// Groups with superblock backups, with sparse_super2.
        backup_bgs: [u32; 2] = 0x24C,
        /// Lost+found inode, for e2fsck.
        lpf_ino: u32 = 0x268,
        prj_quota_inum: u32 = 0x26C,
        /// crc32c(~0, uuid) stored, with the csum_seed feature.
        checksum_seed: u32 = 0x270,
        wtime_hi: u8 = 0x274,
        mtime_hi: u8 = 0x275,
        mkfs_time_hi: u8 = 0x276,
        lastcheck_hi: u8 = 0x277,
        /// Filename charset encoding, with casefold.
        encoding: u16 = 0x27C,
        encoding_flags: u16 = 0x27E,
        orphan_file_inum: u32 = 0x280,
        /// crc32c of the superblock up to this field.
        checksum: u32 = 0x3FC,
    }
}

/// A parsed superblock: its fields, the raw bytes (so fields we do not model
/// survive a rewrite byte for byte) and the values derived once from them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub f: SuperblockFields,
    raw: std::sync::Arc<[u8; SUPERBLOCK_SIZE]>,
    /// The metadata checksum seed, summed once: every inode, directory block
    /// and bitmap checksum starts from it (the uuid and s_checksum_seed
    /// never change while a volume is in use).
    seed: u32,
}

impl Superblock {
    /// Parse and validate a superblock. `buf` is the 1024 bytes at byte 1024.
    /// The checksum is verified when metadata_csum is on.
    pub fn parse(buf: &[u8]) -> Result<Self> {
        const S: &str = "superblock";
        need(S, buf, SUPERBLOCK_SIZE).map_err(|e| e.at(Location::Byte(SUPERBLOCK_OFFSET)))?;
        let bad = |field: &'static str, value: u64| {
            FormatError::corrupt(S, Location::Byte(SUPERBLOCK_OFFSET), Corruption::BadField { field, value })
        };
        let f = SuperblockFields::read_fields(buf);
        if f.magic != EXT4_MAGIC {
            return Err(FormatError::corrupt(
                S,
                Location::Byte(SUPERBLOCK_OFFSET),
                Corruption::BadMagic { found: u64::from(f.magic) },
            ));
        }
        let mut raw = Box::new([0u8; SUPERBLOCK_SIZE]);
        raw.copy_from_slice(&buf[..SUPERBLOCK_SIZE]);
        let sb = Superblock::derive(f, raw);
        if sb.has_ro_compat(feature::ro_compat::METADATA_CSUM) {
            if sb.f.checksum_type != 1 {
                return Err(bad("checksum type", u64::from(sb.f.checksum_type)));
            }
            let computed = sb.compute_checksum();
            if computed != sb.f.checksum {
                return Err(FormatError::corrupt(
                    S,
                    Location::Byte(SUPERBLOCK_OFFSET),
                    Corruption::BadChecksum { stored: sb.f.checksum, computed },
                ));
            }
        }
        // Geometry checks: everything later divides or shifts by these.
        if sb.f.log_block_size > 6 {
            return Err(bad("log block size", u64::from(sb.f.log_block_size)));
        }
        if sb.f.blocks_per_group == 0 || sb.f.blocks_per_group > 8 * sb.block_size() {
            return Err(bad("blocks per group", u64::from(sb.f.blocks_per_group)));
        }
        if sb.f.inodes_per_group == 0 || sb.f.inodes_per_group > 8 * sb.block_size() {
            return Err(bad("inodes per group", u64::from(sb.f.inodes_per_group)));
        }
        let isz = u32::from(sb.inode_size());
        if isz < 128 || !isz.is_power_of_two() || isz > sb.block_size() {
            return Err(bad("inode size", u64::from(isz)));
        }
        if sb.has_incompat(feature::incompat::BIT64) {
            let ds = sb.f.desc_size;
            if ds < 32 || !ds.is_power_of_two() || u32::from(ds) > sb.block_size() {
                return Err(bad("group descriptor size", u64::from(ds)));
            }
        }
        if sb.blocks_count() <= u64::from(sb.f.first_data_block) {
            return Err(bad("block count", sb.blocks_count()));
        }
        if u64::from(sb.f.first_data_block) != u64::from(sb.block_size() == 1024) {
            return Err(bad("first data block", u64::from(sb.f.first_data_block)));
        }
        // The kernel's "invalid first ino": inodes below it are reserved, and
        // allocation starts above it.
        if sb.first_ino() < 11 || sb.first_ino() > sb.f.inodes_count {
            return Err(bad("first inode", u64::from(sb.first_ino())));
        }
        let groups_by_inodes = u64::from(sb.f.inodes_count).div_ceil(u64::from(sb.f.inodes_per_group));
        if groups_by_inodes != u64::from(sb.group_count()) {
            return Err(bad("inode count", u64::from(sb.f.inodes_count)));
        }
        Ok(sb)
    }

    /// The superblock checksum: crc32c over the bytes before the checksum field.
    pub fn compute_checksum(&self) -> u32 {
        let mut bytes = *self.raw;
        self.f.write_fields(&mut bytes[..]);
        crc32c(!0, &bytes[..CHECKSUM_OFFSET])
    }

    /// Serialise, with the checksum recomputed when metadata_csum is on.
    pub fn to_bytes(&self) -> [u8; SUPERBLOCK_SIZE] {
        let mut out = *self.raw;
        let mut f = self.f.clone();
        if self.has_ro_compat(feature::ro_compat::METADATA_CSUM) {
            f.checksum = self.compute_checksum();
        }
        f.write_fields(&mut out);
        out
    }

    pub fn has_compat(&self, bit: u32) -> bool {
        self.f.feature_compat & bit != 0
    }
    pub fn has_incompat(&self, bit: u32) -> bool {
        self.f.feature_incompat & bit != 0
    }
    pub fn has_ro_compat(&self, bit: u32) -> bool {
        self.f.feature_ro_compat & bit != 0
    }
    pub fn has_metadata_csum(&self) -> bool {
        self.has_ro_compat(feature::ro_compat::METADATA_CSUM)
    }

    pub fn block_size(&self) -> u32 {
        1024 << self.f.log_block_size
    }
    pub fn is_64bit(&self) -> bool {
        self.has_incompat(feature::incompat::BIT64)
    }
    pub fn blocks_count(&self) -> u64 {
        let hi = if self.is_64bit() { self.f.blocks_count_hi } else { 0 };
        crate::bytes::lo_hi(self.f.blocks_count_lo, hi)
    }
    pub fn r_blocks_count(&self) -> u64 {
        let hi = if self.is_64bit() { self.f.r_blocks_count_hi } else { 0 };
        crate::bytes::lo_hi(self.f.r_blocks_count_lo, hi)
    }
    pub fn free_blocks_count(&self) -> u64 {
        let hi = if self.is_64bit() { self.f.free_blocks_count_hi } else { 0 };
        crate::bytes::lo_hi(self.f.free_blocks_count_lo, hi)
    }
    pub fn set_free_blocks_count(&mut self, n: u64) {
        self.f.free_blocks_count_lo = n as u32;
        if self.is_64bit() {
            self.f.free_blocks_count_hi = (n >> 32) as u32;
        }
    }
    pub fn inode_size(&self) -> u16 {
        if self.f.rev_level == 0 {
            128
        } else {
            self.f.inode_size
        }
    }
    pub fn first_ino(&self) -> u32 {
        if self.f.rev_level == 0 {
            11
        } else {
            self.f.first_ino
        }
    }
    /// Group descriptor size in bytes: 32, or `desc_size` with the 64bit feature.
    pub fn desc_size(&self) -> usize {
        if self.is_64bit() {
            usize::from(self.f.desc_size)
        } else {
            32
        }
    }
    pub fn group_count(&self) -> u32 {
        let data = self.blocks_count() - u64::from(self.f.first_data_block);
        data.div_ceil(u64::from(self.f.blocks_per_group)) as u32
    }
    /// The seed every metadata checksum starts from.
    pub fn csum_seed(&self) -> u32 {
        debug_assert_eq!(self.seed, Self::seed_of(&self.f), "the checksum seed changed under a parsed superblock");
        self.seed
    }

    fn seed_of(f: &SuperblockFields) -> u32 {
        if f.feature_incompat & feature::incompat::CSUM_SEED != 0 {
            f.checksum_seed
        } else {
            crc32c(!0, &f.uuid)
        }
    }

    /// The superblock of fields `f` and bytes `raw`, with its derived values.
    fn derive(f: SuperblockFields, raw: Box<[u8; SUPERBLOCK_SIZE]>) -> Self {
        let raw = std::sync::Arc::from(raw);
        let seed = Self::seed_of(&f);
        Superblock { f, raw, seed }
    }
    pub fn needs_recovery(&self) -> bool {
        self.has_incompat(feature::incompat::RECOVER)
    }
    pub fn has_journal(&self) -> bool {
        self.has_compat(feature::compat::HAS_JOURNAL)
    }

    /// Refuse volumes whose incompat features we cannot handle: reading them
    /// would give wrong answers.
    pub fn check_supported(&self) -> Result<()> {
        let unknown = self.f.feature_incompat & !SUPPORTED_INCOMPAT;
        if unknown != 0 {
            let names = incompat_names(unknown);
            return Err(FormatError::Unsupported {
                what: format!("incompatible feature(s) {names} (incompat bits {unknown:#x})"),
            });
        }
        if self.has_ro_compat(feature::ro_compat::BIGALLOC) {
            return Err(FormatError::Unsupported { what: "bigalloc".into() });
        }
        if self.f.rev_level > 1 {
            return Err(FormatError::Unsupported { what: format!("revision level {}", self.f.rev_level) });
        }
        Ok(())
    }

    /// Feature names as `dumpe2fs` prints them.
    pub fn feature_names(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        for &(bit, name) in COMPAT_NAMES {
            if self.f.feature_compat & bit != 0 {
                v.push(name);
            }
        }
        for &(bit, name) in INCOMPAT_NAMES {
            if self.f.feature_incompat & bit != 0 {
                v.push(name);
            }
        }
        for &(bit, name) in RO_COMPAT_NAMES {
            if self.f.feature_ro_compat & bit != 0 {
                v.push(name);
            }
        }
        v
    }
}

fn incompat_names(bits: u32) -> String {
    let mut names: Vec<String> =
        INCOMPAT_NAMES.iter().filter(|(b, _)| bits & b != 0).map(|(_, n)| (*n).to_string()).collect();
    let known: u32 = INCOMPAT_NAMES.iter().map(|(b, _)| b).fold(0, |a, b| a | b);
    if bits & !known != 0 {
        names.push(format!("unknown {:#x}", bits & !known));
    }
    names.join(", ")
}

const COMPAT_NAMES: &[(u32, &str)] = &[
    (feature::compat::DIR_PREALLOC, "dir_prealloc"),
    (feature::compat::IMAGIC_INODES, "imagic_inodes"),
    (feature::compat::HAS_JOURNAL, "has_journal"),
    (feature::compat::EXT_ATTR, "ext_attr"),
    (feature::compat::RESIZE_INODE, "resize_inode"),
    (feature::compat::DIR_INDEX, "dir_index"),
    (feature::compat::SPARSE_SUPER2, "sparse_super2"),
    (feature::compat::FAST_COMMIT, "fast_commit"),
    (feature::compat::STABLE_INODES, "stable_inodes"),
    (feature::compat::ORPHAN_FILE, "orphan_file"),
];
const INCOMPAT_NAMES: &[(u32, &str)] = &[
    (feature::incompat::COMPRESSION, "compression"),
    (feature::incompat::FILETYPE, "filetype"),
    (feature::incompat::RECOVER, "needs_recovery"),
    (feature::incompat::JOURNAL_DEV, "journal_dev"),
    (feature::incompat::META_BG, "meta_bg"),
    (feature::incompat::EXTENTS, "extent"),
    (feature::incompat::BIT64, "64bit"),
    (feature::incompat::MMP, "mmp"),
    (feature::incompat::FLEX_BG, "flex_bg"),
    (feature::incompat::EA_INODE, "ea_inode"),
    (feature::incompat::DIRDATA, "dirdata"),
    (feature::incompat::CSUM_SEED, "metadata_csum_seed"),
    (feature::incompat::LARGEDIR, "large_dir"),
    (feature::incompat::INLINE_DATA, "inline_data"),
    (feature::incompat::ENCRYPT, "encrypt"),
    (feature::incompat::CASEFOLD, "casefold"),
];
const RO_COMPAT_NAMES: &[(u32, &str)] = &[
    (feature::ro_compat::SPARSE_SUPER, "sparse_super"),
    (feature::ro_compat::LARGE_FILE, "large_file"),
    (feature::ro_compat::BTREE_DIR, "btree_dir"),
    (feature::ro_compat::HUGE_FILE, "huge_file"),
    (feature::ro_compat::GDT_CSUM, "uninit_bg"),
    (feature::ro_compat::DIR_NLINK, "dir_nlink"),
    (feature::ro_compat::EXTRA_ISIZE, "extra_isize"),
    (feature::ro_compat::HAS_SNAPSHOT, "snapshot"),
    (feature::ro_compat::QUOTA, "quota"),
    (feature::ro_compat::BIGALLOC, "bigalloc"),
    (feature::ro_compat::METADATA_CSUM, "metadata_csum"),
    (feature::ro_compat::REPLICA, "replica"),
    (feature::ro_compat::READONLY, "read-only"),
    (feature::ro_compat::PROJECT, "project"),
    (feature::ro_compat::SHARED_BLOCKS, "shared_blocks"),
    (feature::ro_compat::VERITY, "verity"),
    (feature::ro_compat::ORPHAN_PRESENT, "orphan_present"),
];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal valid superblock: 4 KiB blocks, one group, metadata_csum on.
    pub fn sample() -> Superblock {
        let mut raw = [0u8; SUPERBLOCK_SIZE];
        let f = SuperblockFields {
            inodes_count: 8192,
            blocks_count_lo: 32768,
            first_data_block: 0,
            log_block_size: 2,
            blocks_per_group: 32768,
            clusters_per_group: 32768,
            inodes_per_group: 8192,
            magic: EXT4_MAGIC,
            rev_level: 1,
            first_ino: 11,
            inode_size: 256,
            feature_incompat: feature::incompat::EXTENTS | feature::incompat::BIT64 | feature::incompat::FILETYPE,
            feature_ro_compat: feature::ro_compat::METADATA_CSUM,
            desc_size: 64,
            checksum_type: 1,
            uuid: *b"0123456789abcdef",
            ..Default::default()
        };
        f.write_fields(&mut raw);
        let sb = Superblock::derive(f, Box::new(raw));
        let bytes = sb.to_bytes();
        Superblock::parse(&bytes).expect("sample superblock parses")
    }

    #[test]
    fn round_trip_is_byte_exact() {
        let sb = sample();
        let bytes = sb.to_bytes();
        let again = Superblock::parse(&bytes).unwrap();
        assert_eq!(again, sb);
        assert_eq!(again.to_bytes(), bytes);
    }

    #[test]
    fn checksum_mismatch_is_detected() {
        let mut bytes = sample().to_bytes();
        bytes[0x78] ^= 1; // volume name: covered by the checksum
        match Superblock::parse(&bytes) {
            Err(FormatError::Corrupt { why: Corruption::BadChecksum { .. }, .. }) => {}
            other => panic!("expected checksum error, got {other:?}"),
        }
    }

    #[test]
    fn bad_magic_and_short_buffers_are_errors() {
        let mut bytes = sample().to_bytes();
        bytes[0x38] = 0;
        assert!(matches!(
            Superblock::parse(&bytes),
            Err(FormatError::Corrupt { why: Corruption::BadMagic { .. }, .. })
        ));
        assert!(matches!(
            Superblock::parse(&bytes[..100]),
            Err(FormatError::Corrupt { why: Corruption::Truncated { .. }, .. })
        ));
    }

    #[test]
    fn a_first_inode_outside_the_volume_or_below_the_reserved_is_refused() {
        for first in [0, 10, 8193] {
            let mut sb = sample();
            sb.f.inodes_count = 8192;
            sb.f.first_ino = first;
            let bytes = sb.to_bytes();
            let err = Superblock::parse(&bytes).map(|_| ()).unwrap_err().to_string();
            assert!(err.contains("first inode"), "first_ino {first}: {err}");
        }
    }

    #[test]
    fn unsupported_incompat_feature_is_refused_by_name() {
        let mut sb = sample();
        sb.f.feature_incompat |= feature::incompat::ENCRYPT;
        let err = sb.check_supported().unwrap_err().to_string();
        assert!(err.contains("encrypt"), "{err}");
    }

    #[test]
    fn fields_table_covers_whole_superblock() {
        assert_eq!(SuperblockFields::FIELDS_END, SUPERBLOCK_SIZE);
    }
}
