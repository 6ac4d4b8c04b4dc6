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

use blockdev::{BlockDevice, FaultDevice, FileDevice};
use fs::{CreateKind, Falloc, FsError, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const MKFS: &[&str] = &["-b", "1024", "-g", "256", "-J", "size=1", "-N", "4096"];
const BS: u64 = 1024;
/// Blocks of the filler between two blocks of the spread file.
const GAP: u64 = 255;
/// Blocks of the spread file: with GAP, it reaches over the whole volume.
const SPREAD_BLOCKS: u64 = 480;

fn opts(lazy: bool) -> VolumeOptions {
    VolumeOptions { read_only: false, lazy, ..Default::default() }
}

fn open_on(dev: Arc<dyn BlockDevice>, lazy: bool) -> Volume {
    Volume::open(dev, opts(lazy)).unwrap()
}

fn open(img: &Path, lazy: bool) -> Volume {
    open_on(Arc::new(FileDevice::open(img, true).unwrap()), lazy)
}

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

/// A file `name` whose SPREAD_BLOCKS one-block extents lie GAP blocks apart
/// on disk (the filler `name.fill` takes the blocks between), written.
fn spread(vol: &Volume, name: &str) -> u32 {
    let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let fill = vol.create(ROOT_INO, format!("{name}.fill").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    for i in 0..SPREAD_BLOCKS {
        // Every other logical block: the extents never merge.
        vol.write(ino, 2 * i * BS, &pattern(i)).unwrap();
        match vol.fallocate(fill, i * GAP * BS, GAP * BS, Falloc::Allocate, false) {
            Ok(()) | Err(FsError::NoSpace) => {}
            Err(e) => panic!("filler: {e}"),
        }
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
    let truncate = |vol: &Volume| vol.setattr(ino_of(vol, b"frag").unwrap(), &SetAttr { size: Some(BS), ..Default::default() });
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
