//! Operations bigger than a journal transaction.
//!
//! The volumes have the smallest journal mkfs makes (1,024 blocks, so a
//! transaction holds at most 256) and 1 KiB blocks in 256-block groups. A
//! file of one-block extents that spans most of a 128 MiB volume (a depth-2
//! extent tree over about 400 groups) changes more block bitmaps and
//! descriptor blocks when it is freed than one transaction may hold, and so
//! do thousands of orphans freed at mount (their inode-table blocks). Each
//! such operation is split into several transactions (docs/ARCHITECTURE.md,
//! "Operations bigger than a transaction").
//!
//! Every test runs its long operation on a device that records its writes
//! and flushes, checks that it took more than one commit, then cuts the
//! stream just after every flush (the durable state at each commit of the
//! operation's transactions and at each write-back between them) and just
//! before each (the writes since the last flush landing in a shuffled
//! subset), and recovers every image twice: by ext4lazy's mount, which
//! finishes the orphan a cut left, and by the kernel's. The file must be as
//! before the operation or as after it (a punch: each punched block either),
//! and `e2fsck -fn` clean after each recovery. The last cut is the whole
//! stream: the operation's own result.

mod common;

use blockdev::fault::{crash_image, Event, Volatile};
use blockdev::{FaultDevice, FileDevice};
use fs::{CreateKind, Falloc, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

/// 1 KiB blocks, 256-block groups, the smallest journal, few inodes.
const MKFS: &[&str] = &["-b", "1024", "-g", "256", "-J", "size=1", "-N", "4096"];
const BS: u64 = 1024;
/// Blocks of the fragmented file: on a 128 MiB volume they span about 400
/// of its 512 groups.
const FRAG_BLOCKS: u64 = 100_000;
/// Its size: its last block is the last one allocated.
const FULL: u64 = (2 * FRAG_BLOCKS - 1) * BS;
/// One in this many of its blocks is written, the others preallocated
/// (unwritten extents free as written ones do, and leave the image sparse:
/// every cut writes two copies of it).
const WRITTEN_EVERY: u64 = 8;

use common::{open_rw as open, open_rw_on as open_on, rw_options as opts};

fn mode(lazy: bool) -> &'static str {
    if lazy {
        "lazy"
    } else {
        "ordered"
    }
}

/// The commits a volume has made so far.
fn commits(vol: &Volume) -> u64 {
    vol.write_stats().unwrap().commits
}

fn ino_of(vol: &Volume, name: &[u8]) -> Option<u32> {
    vol.lookup(&vol.inode(ROOT_INO).unwrap(), name).unwrap().map(|(ino, _)| ino)
}

/// Make the file `img` hold `bytes`, writing only the pieces that differ
/// from what it holds: a recovery changes a few MiB of an image, and each
/// cut recovers two.
fn sync_image(img: &Path, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(img).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    const CHUNK: usize = 64 << 10;
    let mut cur = vec![0; CHUNK];
    for (i, c) in bytes.chunks(CHUNK).enumerate() {
        let off = (i * CHUNK) as u64;
        f.read_exact_at(&mut cur[..c.len()], off).unwrap();
        if cur[..c.len()] != *c {
            f.write_all_at(c, off).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------
// The fragmented file.

/// What logical block `lblk` of the fragmented file holds: every word names
/// it, so a misplaced block shows; zeros where nothing was written.
fn block_bytes(lblk: u64) -> Vec<u8> {
    if !lblk.is_multiple_of(2) || lblk >= 2 * FRAG_BLOCKS || !(lblk / 2).is_multiple_of(WRITTEN_EVERY) {
        return vec![0; BS as usize];
    }
    let word = (lblk << 8 | 0x5a).to_le_bytes();
    word.iter().copied().cycle().take(BS as usize).collect()
}

/// A new file `frag` with FRAG_BLOCKS blocks at every other logical block:
/// one-block extents, next to each other on disk.
fn fragmented(vol: &Volume) {
    let ino = vol.create(ROOT_INO, b"frag", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    for i in 0..FRAG_BLOCKS {
        let lblk = 2 * i;
        if i % WRITTEN_EVERY == 0 {
            vol.write(ino, lblk * BS, &block_bytes(lblk)).unwrap();
        } else {
            vol.fallocate(ino, lblk * BS, BS, Falloc::Allocate, false).unwrap();
        }
    }
}

/// Check the fragmented file's first `size` bytes, read as `read(offset,
/// len)`: as written, or zeros where `may_be_zero(lblk)`. A sample: 16
/// blocks in every 997 (every position in the pattern's period of 16 is
/// met), and the last 16: each cut reads the file twice.
fn verify(what: &str, size: u64, may_be_zero: impl Fn(u64) -> bool, mut read: impl FnMut(u64, usize) -> Vec<u8>) {
    let (sample, stride) = (16, 997);
    let blocks = size.div_ceil(BS);
    let starts = (0..blocks).step_by(stride).chain([blocks.saturating_sub(sample)]);
    let zeros = vec![0; BS as usize];
    for first in starts {
        let off = first * BS;
        let n = (sample * BS).min(size - off);
        let got = read(off, n as usize);
        assert_eq!(got.len() as u64, n, "{what}: short read at {off}");
        for (k, b) in got.chunks(BS as usize).enumerate() {
            let lblk = first + k as u64;
            let ok = b == &block_bytes(lblk)[..b.len()] || (may_be_zero(lblk) && b == &zeros[..b.len()]);
            assert!(ok, "{what}: block {lblk} differs");
        }
    }
}

/// A long operation on the fragmented file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Long {
    /// To its first block.
    Truncate,
    Unlink,
    /// Everything but its first and last block.
    Punch,
    /// A one-byte file `small` renamed over it.
    RenameOver,
}

impl Long {
    fn run(self, vol: &Volume, ino: u32) -> fs::Result<()> {
        match self {
            Long::Truncate => vol.setattr(ino, &SetAttr { size: Some(BS), ..Default::default() }).map(|_| ()),
            Long::Unlink => vol.unlink(ROOT_INO, b"frag"),
            Long::Punch => vol.fallocate(ino, BS, FULL - 2 * BS, Falloc::PunchHole, true),
            Long::RenameOver => vol.rename(ROOT_INO, b"small", ROOT_INO, b"frag", false, false),
        }
    }

    /// Check what a recovery shows under the name `frag` (its size, None
    /// if there is none; `read(offset, len)` its bytes): the state before
    /// the operation or after it; a punch may have freed any of its blocks.
    fn check(self, what: &str, size: Option<u64>, mut read: impl FnMut(u64, usize) -> Vec<u8>) {
        match (self, size) {
            (Long::Unlink, None) => {}
            (_, None) => panic!("{what}: the file is gone"),
            (Long::Truncate, Some(s)) => {
                assert!(s == FULL || s == BS, "{what}: size {s}, neither {FULL} nor {BS}");
                verify(what, s, |_| false, read);
            }
            (Long::Unlink, Some(s)) => {
                assert_eq!(s, FULL, "{what}: size");
                verify(what, s, |_| false, read);
            }
            (Long::Punch, Some(s)) => {
                assert_eq!(s, FULL, "{what}: size");
                verify(what, s, |l| (1..FULL / BS - 1).contains(&l), read);
            }
            (Long::RenameOver, Some(1)) => assert_eq!(read(0, 1), b"x", "{what}: the renamed file's byte"),
            (Long::RenameOver, Some(s)) => {
                assert_eq!(s, FULL, "{what}: size");
                verify(what, s, |_| false, read);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Cutting and recovering.

/// The cut points from event `start` on: just after every flush (the
/// durable state at each commit and write-back), just before it (with the
/// writes since the previous flush landing in a shuffled subset), and the
/// end of the stream.
fn cuts(events: &[Event], start: usize) -> Vec<(usize, Volatile)> {
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate().skip(start) {
        if matches!(e, Event::Flush) {
            out.push((i, Volatile::Shuffled { seed: i as u64 }));
            out.push((i + 1, Volatile::None));
        }
    }
    out.push((events.len(), Volatile::All));
    out
}

/// The orphan list's head once the journal is replayed (a read-only open:
/// the replay stays in memory).
fn last_orphan(img: &Path) -> u32 {
    let vol = Volume::open(Arc::new(FileDevice::open(img, false).unwrap()), VolumeOptions::default()).unwrap();
    vol.sb.f.last_orphan
}

/// Recover the cuts of `events` (recorded on `base`) with ext4lazy and with
/// the kernel, checking each recovered volume with `ours` and `kernels`:
/// all cuts, or only those just after a flush (the transaction boundaries).
/// Returns how many cuts left orphans for the recovery to finish.
#[allow(clippy::too_many_arguments)]
fn recover_cuts(
    work: &Path,
    tag: &str,
    base: &[u8],
    events: &[Event],
    start: usize,
    lazy: bool,
    boundaries_only: bool,
    ours: impl Fn(&str, &Volume),
    kernels: impl Fn(&str, &Path),
) -> usize {
    let mnt = work.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (ours_img, kernels_img) = (work.join("ext4lazy.img"), work.join("kernel.img"));
    let mut orphaned = 0;
    let mut points = cuts(events, start);
    if boundaries_only {
        points.retain(|(_, v)| !matches!(v, Volatile::Shuffled { .. }));
    }
    let mut bytes = base.to_vec();
    for &(cut, volatile) in &points {
        let what = format!("{tag}: cut {cut}/{} ({volatile:?})", events.len());
        crash_image(&mut bytes, events, cut, volatile);
        sync_image(&ours_img, &bytes);
        if last_orphan(&ours_img) != 0 {
            orphaned += 1;
        }
        // ext4lazy's mount finishes the orphans; e2fsck checks what it left.
        let vol = open(&ours_img, lazy);
        ours(&format!("{what}, ext4lazy"), &vol);
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean_in(&ours_img, lazy);
        // The kernel's mount replays the journal and finishes the orphans.
        sync_image(&kernels_img, &bytes);
        common::kernel_mounted(&kernels_img, &mnt, |m| kernels(&format!("{what}, kernel"), m));
        common::e2fsck_clean(&kernels_img);
        // Back to `base` for the next cut.
        for e in &events[..cut] {
            if let Event::Write { offset, data, .. } = e {
                let r = *offset as usize..*offset as usize + data.len();
                bytes[r.clone()].copy_from_slice(&base[r]);
            }
        }
    }
    eprintln!("{tag}: {} cuts recovered by ext4lazy and the kernel, {orphaned} with orphans to finish", points.len());
    orphaned
}

/// The fragmented file, then `op` on a recording device, a crash, and every
/// cut recovered.
fn long_operation(lazy: bool, op: Long) {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    assert!(common::is_root(), "crash cuts need the kernel's mount (root)");
    let img = common::make_image(work.path(), "long.img", 128, MKFS, &empty);
    let tag = format!("{op:?} {}", mode(lazy));
    let vol = open(&img, lazy);
    fragmented(&vol);
    let small = vol.create(ROOT_INO, b"small", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(small, 0, b"x").unwrap();
    vol.shutdown().unwrap();
    drop(vol);
    let base = std::fs::read(&img).unwrap();

    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = open_on(dev.clone(), lazy);
    let start = dev.event_count();
    let before = commits(&vol);
    let ino = ino_of(&vol, b"frag").unwrap();
    op.run(&vol, ino).unwrap_or_else(|e| panic!("{tag}: {e}"));
    vol.sync().unwrap_or_else(|e| panic!("{tag}: the commit after it: {e}"));
    let split = commits(&vol) - before;
    assert!(split >= 2, "{tag}: the operation must need more than one transaction ({split} commits)");
    eprintln!("{tag}: {split} commits");
    drop(vol); // a crash
    let events = dev.events();

    let ours = |what: &str, vol: &Volume| {
        let inode = ino_of(vol, b"frag").map(|i| vol.inode(i).unwrap());
        op.check(what, inode.as_ref().map(|i| i.size()), |off, n| vol.read(inode.as_ref().unwrap(), off, n).unwrap());
    };
    let kernels = |what: &str, mnt: &Path| {
        let f = std::fs::File::open(mnt.join("frag")).ok();
        op.check(what, f.as_ref().map(|f| f.metadata().unwrap().len()), |off, n| {
            let mut buf = vec![0; n];
            f.as_ref().unwrap().read_exact_at(&mut buf, off).unwrap();
            buf
        });
    };
    // Every cut for truncate; the transaction boundaries for the others.
    let orphaned = recover_cuts(work.path(), &tag, &base, &events, start, lazy, op != Long::Truncate, ours, kernels);
    if op != Long::Punch {
        assert!(orphaned > 0, "{tag}: no cut fell between the operation's transactions");
    }
}

#[test]
fn split_truncate_ordered() {
    long_operation(false, Long::Truncate);
}

#[test]
fn split_truncate_lazy() {
    long_operation(true, Long::Truncate);
}

#[test]
fn split_unlink_ordered() {
    long_operation(false, Long::Unlink);
}

#[test]
fn split_unlink_lazy() {
    long_operation(true, Long::Unlink);
}

#[test]
fn split_punch_ordered() {
    long_operation(false, Long::Punch);
}

#[test]
fn split_punch_lazy() {
    long_operation(true, Long::Punch);
}

/// The replaced file is freed once the rename is whole.
#[test]
fn split_rename_over_ordered() {
    long_operation(false, Long::RenameOver);
}

// ---------------------------------------------------------------------------
// Orphans at mount.

/// Files unlinked while open when the volume crashed.
const ORPHANS: u64 = 3000;

/// ORPHANS files unlinked while open, then a crash; the next mount, on a
/// recording device, frees them all in several transactions; every cut of
/// it is recovered.
fn orphans_at_mount(lazy: bool) {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    assert!(common::is_root(), "crash cuts need the kernel's mount (root)");
    let img = common::make_image(work.path(), "orphans.img", 32, MKFS, &empty);
    let tag = format!("{ORPHANS} orphans {}", mode(lazy));
    let vol = open(&img, lazy);
    for i in 0..ORPHANS {
        let name = format!("o{i}");
        let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(ino, 0, &[i as u8 | 1; 3000]).unwrap();
        vol.opened(ino);
        vol.unlink(ROOT_INO, name.as_bytes()).unwrap();
    }
    vol.sync().unwrap();
    drop(vol); // a crash: the orphans stay on the list
    let base = std::fs::read(&img).unwrap();

    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = Volume::open(dev.clone(), opts(lazy)).unwrap_or_else(|e| panic!("{tag}: mount: {e}"));
    let split = commits(&vol);
    assert!(split >= 2, "{tag}: freeing them must need more than one transaction ({split} commits)");
    eprintln!("{tag}: freed in {split} commits");
    drop(vol); // a crash
    let events = dev.events();

    let ours = |what: &str, vol: &Volume| {
        assert_eq!(ino_of(vol, b"o0"), None, "{what}: an orphan has a name");
    };
    let kernels = |what: &str, mnt: &Path| {
        let names: Vec<_> = std::fs::read_dir(mnt).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["lost+found"], "{what}: the root holds more than lost+found");
    };
    let orphaned = recover_cuts(work.path(), &tag, &base, &events, 0, lazy, true, ours, kernels);
    assert!(orphaned > 0, "{tag}: no cut left orphans");
}

#[test]
fn orphans_at_mount_ordered() {
    orphans_at_mount(false);
}

#[test]
fn orphans_at_mount_lazy() {
    orphans_at_mount(true);
}

/// A block-mapped (ext3-style) file written by the kernel into the holes of
/// deleted files over hundreds of groups, deleted on a recording device in
/// several transactions; every transaction boundary recovered: the file is
/// whole or gone, never a map of freed blocks.
fn block_mapped_delete(lazy: bool) {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    assert!(common::is_root(), "the kernel writes the file and mounts the cuts (root)");
    let mkfs: Vec<&str> = MKFS.iter().copied().chain(["-O", "^extents,^flex_bg,^64bit"]).collect();
    let img = common::make_image(work.path(), "ext3.img", 128, &mkfs, &empty);
    let tag = format!("block-mapped delete {}", mode(lazy));
    let mnt = work.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let big: Vec<u8> = (0..24u32 << 20).step_by(4).flat_map(|i| i.to_le_bytes()).collect();
    common::kernel_mounted(&img, &mnt, |m| {
        for i in 0..900 {
            std::fs::write(m.join(format!("f{i}")), vec![0x11u8; 100 * 1024]).unwrap();
        }
        std::process::Command::new("sync").status().unwrap();
        for i in (0..900).step_by(2) {
            std::fs::remove_file(m.join(format!("f{i}"))).unwrap();
        }
        std::process::Command::new("sync").status().unwrap();
        std::fs::write(m.join("big"), &big).unwrap();
    });
    let base = std::fs::read(&img).unwrap();

    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = open_on(dev.clone(), lazy);
    let start = dev.event_count();
    let before = commits(&vol);
    vol.unlink(ROOT_INO, b"big").unwrap_or_else(|e| panic!("{tag}: {e}"));
    vol.sync().unwrap_or_else(|e| panic!("{tag}: the commit after it: {e}"));
    let split = commits(&vol) - before;
    assert!(split >= 2, "{tag}: the delete must need more than one transaction ({split} commits)");
    eprintln!("{tag}: {split} commits");
    drop(vol); // a crash
    let events = dev.events();

    // Whole or gone: a sample of blocks across the file (its indirect blocks too).
    let check = |what: &str, size: Option<u64>, mut read: Box<dyn FnMut(u64, usize) -> Vec<u8> + '_>| {
        let Some(size) = size else { return };
        assert_eq!(size, big.len() as u64, "{what}: the file's size");
        for off in (0..big.len()).step_by(997 * 1024).chain([big.len() - 4096]) {
            assert!(read(off as u64, 4096) == big[off..off + 4096], "{what}: bytes at {off}");
        }
    };
    let ours = |what: &str, vol: &Volume| {
        let inode = ino_of(vol, b"big").map(|i| vol.inode(i).unwrap());
        check(
            what,
            inode.as_ref().map(|i| i.size()),
            Box::new(|off, n| vol.read(inode.as_ref().unwrap(), off, n).unwrap()),
        );
    };
    let kernels = |what: &str, mnt: &Path| {
        let f = std::fs::File::open(mnt.join("big")).ok();
        check(
            what,
            f.as_ref().map(|f| f.metadata().unwrap().len()),
            Box::new(|off, n| {
                let mut buf = vec![0; n];
                f.as_ref().unwrap().read_exact_at(&mut buf, off).unwrap();
                buf
            }),
        );
    };
    let orphaned = recover_cuts(work.path(), &tag, &base, &events, start, lazy, true, ours, kernels);
    assert!(orphaned > 0, "{tag}: no cut fell between the delete's transactions");
}

#[test]
fn split_block_mapped_delete_ordered() {
    block_mapped_delete(false);
}

#[test]
fn split_block_mapped_delete_lazy() {
    block_mapped_delete(true);
}
