//! Adversarial review of the operations that commit partway (`write/split.rs`),
//! of the refusal of a block freed twice in one transaction, and of their
//! interplay with failures, the orphan list and other operations.
//!
//! The volumes are those of `long_ops.rs` (1 KiB blocks, 256-block groups,
//! the smallest journal: a transaction holds at most 256 blocks), but the
//! file that needs several transactions to free is built faster: `spread`
//! puts one block of it in every few groups (between runs of a filler file),
//! so that some 500 extents touch every group of the volume.

mod common;

use blockdev::{FaultDevice, FileDevice};
use fs::{CreateKind, Falloc, FsError, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MKFS: &[&str] = &["-b", "1024", "-g", "256", "-J", "size=1", "-N", "4096"];
const BS: u64 = 1024;
/// Blocks of the filler between two blocks of the spread file.
const GAP: u64 = 255;
/// Blocks of the spread file: with GAP, it reaches over the whole volume.
const SPREAD_BLOCKS: u64 = 480;
/// Free blocks the spread volume is left with besides the spread file's
/// holes: fewer than `one_write_into_fragmented_free_space` writes, so that
/// its write must go into the holes.
const ROOM: u64 = 300;

use common::{open_rw as open, open_rw_on as open_on};

fn commits(vol: &Volume) -> u64 {
    vol.write_stats().unwrap().commits
}

fn ino_of(vol: &Volume, name: &[u8]) -> Option<u32> {
    vol.lookup(&vol.inode(ROOT_INO).unwrap(), name).unwrap().map(|(ino, _)| ino)
}

/// What block `i` of the spread file holds.
fn pattern(i: u64) -> Vec<u8> {
    let word = (i << 8 | 0xa5).to_le_bytes();
    word.iter().copied().cycle().take(BS as usize).collect()
}

/// A file `name` whose SPREAD_BLOCKS one-block extents lie about GAP
/// blocks apart on disk, written. The filler `name.fill` first takes every
/// free block; then one block of it every GAP + 1, in turn, is punched out,
/// committed, and taken by the next block of the file (the only free one),
/// whatever the allocator's placement policy. The filler's tail is given
/// back first, so that its extents may split and the tests' other files
/// find room; it lies at the volume's end, after every hole punched.
fn spread(vol: &Volume, name: &str) -> u32 {
    let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let fill = vol.create(ROOT_INO, format!("{name}.fill").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let mut filled = 0;
    for chunk in [4096, 256, 16, 1] {
        loop {
            match vol.fallocate(fill, filled * BS, chunk * BS, Falloc::Allocate, false) {
                Ok(()) => filled += chunk,
                Err(FsError::NoSpace) => break,
                Err(e) => panic!("filler: {e}"),
            }
        }
    }
    assert!(filled > SPREAD_BLOCKS * (GAP + 1) + ROOM, "the filler took {filled} blocks");
    vol.fallocate(fill, (filled - ROOM) * BS, ROOM * BS, Falloc::PunchHole, false).unwrap();
    vol.sync().unwrap();
    for i in 0..SPREAD_BLOCKS {
        vol.fallocate(fill, i * (GAP + 1) * BS, BS, Falloc::PunchHole, false).unwrap();
        // A freed block is free once its transaction commits.
        vol.sync().unwrap();
        // Every other logical block: the extents never merge.
        vol.write(ino, 2 * i * BS, &pattern(i)).unwrap();
        vol.writeback_file(ino).unwrap();
    }
    ino
}

/// A 128 MiB volume with the spread file `frag` on it, unmounted cleanly.
fn spread_image(work: &Path, empty: &Path, lazy: bool) -> PathBuf {
    let img = common::make_image(work, "review.img", 128, MKFS, empty);
    let vol = open(&img, lazy);
    spread(&vol, "frag");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_in(&img, lazy);
    img
}

fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let (work, empty) = common::setup_empty()?;
    Some((work, empty))
}

/// The split truncate needs several transactions on this volume.
#[test]
fn spread_file_needs_a_split() {
    let Some((work, empty)) = setup() else { return };
    let img = spread_image(work.path(), &empty, false);
    let vol = open(&img, false);
    let ino = ino_of(&vol, b"frag").unwrap();
    let before = commits(&vol);
    vol.setattr(ino, &SetAttr { size: Some(BS), ..Default::default() }).unwrap();
    vol.sync().unwrap();
    let n = commits(&vol) - before;
    assert!(n >= 2, "the truncate took {n} commits");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

/// A device error at a cut of a split truncate (the partway commit fails)
/// must fail the operation cleanly: an error, the volume read-only, no
/// panic, and a volume the next mount recovers to a clean state. Budgets:
/// every few writes or flushes of the truncate and its final commit.
fn device_error_in_split_truncate(lazy: bool) {
    let Some((work, empty)) = setup() else { return };
    let img = spread_image(work.path(), &empty, lazy);
    let base = std::fs::read(&img).unwrap();
    let truncate =
        |vol: &Volume| vol.setattr(ino_of(vol, b"frag").unwrap(), &SetAttr { size: Some(BS), ..Default::default() });
    // How many writes and flushes the whole truncate makes.
    let total = {
        let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
        let vol = open_on(dev.clone(), lazy);
        vol.sync().unwrap();
        let start = dev.event_count();
        truncate(&vol).unwrap();
        vol.sync().unwrap();
        (dev.event_count() - start) as u64
    };
    let step = (total / 12).max(1);
    for budget in (0..total).step_by(step as usize) {
        std::fs::write(&img, &base).unwrap();
        let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
        let vol = open_on(dev.clone(), lazy);
        vol.sync().unwrap();
        dev.fail_after(budget);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| truncate(&vol)));
        let r = r.unwrap_or_else(|_| panic!("budget {budget}/{total}: the truncate panicked"));
        if r.is_ok() {
            // The failure came after the operation: its commit reports it.
            assert!(vol.sync().is_err(), "budget {budget}/{total}: nothing failed");
        }
        assert!(vol.failure().is_some(), "budget {budget}/{total}: a failed write turns the volume read-only");
        assert!(vol.shutdown().is_err());
        drop(vol);
        // The next mount replays what was committed and finishes the orphan.
        let vol = open(&img, lazy);
        let inode = vol.inode(ino_of(&vol, b"frag").unwrap()).unwrap();
        let size = inode.size();
        assert!(size == BS || size == (2 * SPREAD_BLOCKS - 1) * BS, "budget {budget}/{total}: size {size}");
        assert_eq!(vol.read(&inode, 0, BS as usize).unwrap(), pattern(0));
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean_in(&img, lazy);
    }
}

#[test]
fn device_error_in_split_truncate_ordered() {
    device_error_in_split_truncate(false);
}

#[test]
fn device_error_in_split_truncate_lazy() {
    device_error_in_split_truncate(true);
}

// ---------------------------------------------------------------------------
// Crash cuts of split operations on the orphan list.

use blockdev::fault::{crash_image, Event, Volatile};

/// Every transaction boundary of `events` from `start` on (just after each
/// flush) and the whole stream, recovered by ext4lazy's mount (then `after`
/// runs more operations on it before its unmount) and by the kernel's; each
/// recovery must leave a volume `e2fsck -fn` finds clean.
fn recover_boundaries(
    work: &Path,
    base: &[u8],
    events: &[Event],
    start: usize,
    lazy: bool,
    after: impl Fn(&Volume),
) -> usize {
    let img = work.join("cut.img");
    let mnt = work.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut points: Vec<usize> =
        events.iter().enumerate().skip(start).filter(|(_, e)| matches!(e, Event::Flush)).map(|(i, _)| i + 1).collect();
    points.push(events.len());
    let mut orphaned = 0;
    for &cut in &points {
        let mut bytes = base.to_vec();
        crash_image(&mut bytes, events, cut, Volatile::None);
        std::fs::write(&img, &bytes).unwrap();
        {
            let ro = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
            if ro.sb.f.last_orphan != 0 {
                orphaned += 1;
            }
        }
        let vol = open(&img, lazy);
        after(&vol);
        vol.shutdown().unwrap_or_else(|e| panic!("cut {cut}: unmount: {e}"));
        drop(vol);
        common::e2fsck_clean_in(&img, lazy);
        if common::is_root() {
            std::fs::write(&img, &bytes).unwrap();
            common::kernel_mounted(&img, &mnt, |m| {
                // The kernel's orphan processing ran; write a little too.
                std::fs::write(m.join("after-kernel"), b"k").unwrap();
            });
            common::e2fsck_clean(&img);
        }
    }
    orphaned
}

/// More operations after a recovery: a new file, a write into the old one.
fn more_ops(vol: &Volume) {
    let ino = vol.create(ROOT_INO, b"after", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(ino, 0, &vec![7u8; 16 * 1024]).unwrap();
    if let Some(f) = ino_of(vol, b"frag") {
        vol.write(f, 5 * BS, &pattern(99)).unwrap();
    }
    vol.sync().unwrap();
}

/// A split operation (`op`, on a recording device, after `prepare`) whose
/// transaction boundaries are all recovered.
fn cut_split_op(lazy: bool, prepare: impl Fn(&Volume), op: impl Fn(&Volume)) {
    let Some((work, empty)) = setup() else { return };
    let img = spread_image(work.path(), &empty, lazy);
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let base = std::fs::read(&img).unwrap();
    let vol = open_on(dev.clone(), lazy);
    prepare(&vol);
    vol.sync().unwrap();
    let start = dev.event_count();
    let before = commits(&vol);
    op(&vol);
    vol.sync().unwrap();
    assert!(commits(&vol) - before >= 2, "the operation did not split");
    drop(vol); // a crash
    let events = dev.events();
    let orphaned = recover_boundaries(work.path(), &base, &events, start, lazy, more_ops);
    assert!(orphaned > 0, "no cut left an orphan");
}

/// Two small files unlinked while open stay on the orphan list while the
/// spread file, open and unlinked too, is truncated in several
/// transactions: the truncate must not take it off the list (nor them).
fn truncate_unlinked_open(lazy: bool) {
    let prepare = |vol: &Volume| {
        for name in ["o1", "o2"] {
            let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
            vol.write(ino, 0, b"orphan").unwrap();
            vol.opened(ino);
            vol.unlink(ROOT_INO, name.as_bytes()).unwrap();
        }
        let f = ino_of(vol, b"frag").unwrap();
        vol.opened(f);
        vol.unlink(ROOT_INO, b"frag").unwrap();
    };
    cut_split_op(lazy, prepare, |vol| {
        // The truncate, with the list as it is.
        let f = orphan_inos(vol)[0];
        vol.setattr(f, &SetAttr { size: Some(3 * BS), ..Default::default() }).unwrap();
        assert_eq!(orphan_inos(vol).len(), 3, "the orphan list after the truncate");
        // Then the last close of one small orphan.
        let o1 = orphan_inos(vol)[2];
        vol.released(o1).unwrap();
        assert_eq!(orphan_inos(vol).len(), 2);
    });
}

/// The orphan list as the volume has it in memory, head first.
fn orphan_inos(vol: &Volume) -> Vec<u32> {
    let mut out = Vec::new();
    let mut cur = vol.last_orphan_for_tests();
    while cur != 0 && out.len() < 100 {
        out.push(cur);
        cur = vol.inode(cur).unwrap().base.dtime;
    }
    out
}

#[test]
fn split_truncate_of_unlinked_open_file_ordered() {
    truncate_unlinked_open(false);
}

#[test]
fn split_truncate_of_unlinked_open_file_lazy() {
    truncate_unlinked_open(true);
}

/// The last close of a big unlinked file frees it in several transactions
/// (`free_if_orphan`: off the list first, back on it at the first cut),
/// with another orphan on the list.
#[test]
fn split_free_at_last_close_ordered() {
    let prepare = |vol: &Volume| {
        let ino = vol.create(ROOT_INO, b"o1", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.opened(ino);
        vol.unlink(ROOT_INO, b"o1").unwrap();
        let f = ino_of(vol, b"frag").unwrap();
        vol.opened(f);
        vol.unlink(ROOT_INO, b"frag").unwrap();
    };
    cut_split_op(false, prepare, |vol| {
        let f = orphan_inos(vol)[0];
        vol.released(f).unwrap();
        assert_eq!(orphan_inos(vol).len(), 1);
    });
}

/// rename over the spread file while another orphan heads the list.
#[test]
fn split_rename_over_with_orphans_lazy() {
    let prepare = |vol: &Volume| {
        let ino = vol.create(ROOT_INO, b"o1", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.opened(ino);
        vol.unlink(ROOT_INO, b"o1").unwrap();
        let s = vol.create(ROOT_INO, b"small", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(s, 0, b"x").unwrap();
    };
    cut_split_op(true, prepare, |vol| {
        vol.rename(ROOT_INO, b"small", ROOT_INO, b"frag", false, false).unwrap();
        assert_eq!(orphan_inos(vol).len(), 1);
    });
}

// ---------------------------------------------------------------------------
// Ordinary operations bigger than a transaction.

/// One write whose blocks land in hundreds of groups: the free space is the
/// one-block holes the spread file left in every group, and a FUSE write
/// carries up to 1 MiB (`max_write`). Its allocation changes a bitmap per
/// group and the descriptor blocks: more than a transaction may hold (256
/// blocks here). Found in review: the write was one operation, its commit
/// failed and the volume turned read-only. Now it goes in pieces of
/// `Writer::piece_blocks`, as the kernel's writepages restarts its handle.
#[test]
fn one_write_into_fragmented_free_space() {
    let Some((work, empty)) = setup() else { return };
    let img = spread_image(work.path(), &empty, false);
    let vol = open(&img, false);
    vol.unlink(ROOT_INO, b"frag").unwrap();
    vol.sync().unwrap();
    let ino = vol.create(ROOT_INO, b"new", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let data = vec![0x3cu8; 400 * 1024];
    let r = vol.write(ino, 0, &data);
    let synced = vol.sync();
    assert!(vol.failure().is_none(), "the volume turned read-only: {:?}", vol.failure());
    assert_eq!(r.unwrap(), data.len());
    synced.unwrap();
    assert_eq!(vol.read(&vol.inode(ino).unwrap(), 0, data.len()).unwrap(), data);
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

// ---------------------------------------------------------------------------
// Block-mapped files: their delete is split too.

/// Found in review: deleting a big block-mapped file was one transaction
/// (392 journal blocks for a 256-block limit): the unlink returned success,
/// its commit failed, the volume turned read-only and the file was back at
/// the next mount. Now the free goes over several transactions, each cut
/// leaving only pointers to blocks still in use.
///
/// An ext3-style volume (no extents) where the kernel wrote a block-mapped
/// file `big` into the holes of deleted files over hundreds of groups.
#[test]
fn block_mapped_delete_too_big_for_a_transaction() {
    let Some((work, empty)) = setup() else { return };
    if !common::is_root() {
        common::skip("the block-mapped file is written by the kernel (root)");
        return;
    }
    let img = common::make_image(
        work.path(),
        "ext3.img",
        128,
        &["-b", "1024", "-g", "256", "-J", "size=1", "-N", "4096", "-O", "^extents,^flex_bg,^64bit"],
        &empty,
    );
    let mnt = work.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let chunk = vec![0x11u8; 100 * 1024];
    let big: Vec<u8> = (0..40u32 << 20).step_by(4).flat_map(|i| i.to_le_bytes()).collect();
    common::kernel_mounted(&img, &mnt, |m| {
        for i in 0..900 {
            std::fs::write(m.join(format!("f{i}")), &chunk).unwrap();
        }
        nix_sync();
        for i in (0..900).step_by(2) {
            std::fs::remove_file(m.join(format!("f{i}"))).unwrap();
        }
        nix_sync();
        std::fs::write(m.join("big"), &big).unwrap();
    });
    common::e2fsck_clean(&img);
    let vol = open(&img, false);
    let free_before = vol.statfs().bfree;
    let commits_before = vol.write_stats().unwrap().commits;
    vol.unlink(ROOT_INO, b"big").unwrap();
    vol.sync().unwrap();
    assert!(vol.failure().is_none(), "{:?}", vol.failure());
    let commits = vol.write_stats().unwrap().commits - commits_before;
    assert!(commits >= 2, "the delete took {commits} commit(s): it was not split");
    let freed = vol.statfs().bfree - free_before;
    assert!(freed > (big.len() / 1024) as u64, "{freed} blocks freed: the data and its indirect blocks");
    vol.shutdown().unwrap();
    drop(vol);
    let vol = open(&img, false);
    assert!(ino_of(&vol, b"big").is_none(), "the delete survives the remount");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}

fn nix_sync() {
    std::process::Command::new("sync").status().unwrap();
}

// ---------------------------------------------------------------------------
// Inode numbers the kernel still holds.

/// Every free inode number held by the kernel's lookups (files unlinked
/// while it still caches them): a create gets ENOSPC, and statfs (`df -i`)
/// should then not report those numbers as free inodes.
#[test]
fn statfs_with_every_free_inode_held() {
    let Some((work, empty)) = setup() else { return };
    let img = common::make_image(work.path(), "few.img", 16, &["-b", "4096", "-N", "64"], &empty);
    let vol = open(&img, false);
    let mut made = Vec::new();
    while let Ok(i) = vol.create(ROOT_INO, format!("f{}", made.len()).as_bytes(), CreateKind::File, 0o644, 0, 0) {
        vol.looked_up(i.ino);
        made.push(i.ino);
    }
    for k in 0..made.len() {
        vol.unlink(ROOT_INO, format!("f{k}").as_bytes()).unwrap();
    }
    let st = vol.statfs();
    let r = vol.create(ROOT_INO, b"one-more", CreateKind::File, 0o644, 0, 0);
    assert!(matches!(r, Err(FsError::NoSpace)), "every free number is held: {r:?}");
    assert_eq!(st.ffree, 0, "statfs reports {} free inodes, but a create gets ENOSPC", st.ffree);
    // Once the kernel forgets them they are free again, for statfs and for a create.
    for &ino in &made {
        vol.forgotten(ino, 1);
    }
    assert_eq!(vol.statfs().ffree, made.len() as u64);
    assert!(vol.create(ROOT_INO, b"one-more", CreateKind::File, 0o644, 0, 0).is_ok());
}
