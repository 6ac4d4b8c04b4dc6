//! Delayed allocation (issue #26): data written into holes waits in memory
//! without blocks, reads back from there, goes out as one extent per run at
//! write-back, costs nothing when its file goes first, and is refused with
//! ENOSPC at write time when it would not fit. A crash before write-back
//! leaves the file as long as what reached the disk, never longer.

mod common;

use blockdev::{BlockDevice, CountingDevice, FileDevice, IoClass};
use fs::{CreateKind, FsError, Volume, VolumeOptions, ROOT_INO};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const BS: u64 = 4096;

fn open(img: &Path, lazy: bool) -> (Arc<CountingDevice>, Volume) {
    // Commits at every background tick; delayed data waits an hour.
    let opts = VolumeOptions {
        read_only: false,
        lazy,
        commit_interval: Duration::ZERO,
        data_expire: Duration::from_secs(3600),
        ..Default::default()
    };
    let dev = Arc::new(CountingDevice::new(Arc::new(FileDevice::open(img, true).unwrap())));
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    (dev, vol)
}

/// A clean unmount, then `e2fsck -fn` finds nothing (after the kernel's
/// replay for a lazy volume).
fn unmount_clean(vol: Volume, img: &Path, lazy: bool) {
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_in(img, lazy);
}

fn data_written(dev: &CountingDevice) -> u64 {
    dev.counts().get(IoClass::Data, true).bytes
}

/// A background tick commits what the running transaction holds (commit
/// interval zero) and writes back no delayed data (it waits an hour); the
/// second tick finishes that commit.
fn commit_metadata_only(vol: &Volume) {
    vol.background_tick().unwrap();
    std::thread::sleep(Duration::from_millis(200));
    vol.background_tick().unwrap();
}

fn lookup(vol: &Volume, name: &str) -> u32 {
    let root = vol.inode(ROOT_INO).unwrap();
    vol.lookup(&root, name.as_bytes()).unwrap().expect("in the root").0
}

/// Bytes `i` of a test pattern.
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

#[test]
fn small_writes_in_any_order_become_one_extent_at_write_back() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "one-extent.img", 64, &["-b", "4096"], &empty);
        let (dev, vol) = open(&img, lazy);
        let ino = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        let blocks = 256u64;
        let want = pattern(7, (blocks * BS) as usize);
        // Every other block first, then the ones between, backwards: the
        // old write path gave each its own place.
        let mut order: Vec<u64> = (0..blocks).step_by(2).collect();
        order.extend((0..blocks).filter(|b| b % 2 == 1).rev());
        let before = data_written(&dev);
        for &b in &order {
            let at = (b * BS) as usize;
            assert_eq!(vol.write(ino, b * BS, &want[at..at + BS as usize]).unwrap(), BS as usize);
        }
        assert_eq!(data_written(&dev), before, "lazy={lazy}: nothing goes out at write time");
        let inode = vol.inode(ino).unwrap();
        assert_eq!(inode.size(), blocks * BS, "readers see the size written");
        assert_eq!(vol.stat(&inode).blocks, blocks * BS / 512, "reserved blocks count in st_blocks");
        assert_eq!(vol.read(&inode, 0, want.len()).unwrap(), want, "read back from memory");
        vol.sync().unwrap();
        let inode = vol.inode(ino).unwrap();
        match vol.map_block(&inode, 0, blocks).unwrap() {
            fs::Mapping::Mapped { len, unwritten: false, .. } => {
                assert_eq!(len, blocks, "lazy={lazy}: one extent for the whole file")
            }
            m => panic!("lazy={lazy}: block 0 is {m:?}"),
        }
        assert_eq!(vol.read(&inode, 0, want.len()).unwrap(), want, "read back from the disk");
        assert_eq!(vol.stat(&inode).blocks, blocks * BS / 512, "allocated blocks, no longer reserved ones");
        unmount_clean(vol, &img, lazy);
        // The kernel reads what was written.
        let ok = common::with_kernel_mount(&img, |mnt| {
            assert_eq!(std::fs::read(mnt.join("f")).unwrap(), want, "lazy={lazy}: the kernel's read");
        });
        if !ok {
            return;
        }
    }
}

/// Write-back sends small files out several to an operation (and long or
/// scattered ones on their own) while other threads write, sync and tick:
/// every file reads back whole from memory and from the disk, in one extent
/// each, e2fsck passes and the kernel reads the same.
#[test]
fn small_files_go_out_together_while_others_write() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "batch.img", 128, &["-b", "4096"], &empty);
        let (_dev, vol) = open(&img, lazy);
        // Sizes from a byte to 70 blocks (over a batch's 64), and some
        // files written with a hole (in pieces: not one run).
        let size = |i: usize| [1, 4095, 4096, 5000, 64 * 4096, 70 * 4096, 12_345][i % 7];
        let holed = |i: usize| i.is_multiple_of(11);
        let files = 300;
        std::thread::scope(|s| {
            for t in 0..3usize {
                let vol = &vol;
                s.spawn(move || {
                    for i in (t..files).step_by(3) {
                        let name = format!("f{i}");
                        let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
                        let data = pattern(i as u8, size(i));
                        let at = if holed(i) { 3 * BS } else { 0 };
                        vol.write(ino, at, &data).unwrap();
                        if holed(i) {
                            vol.write(ino, 0, b"head").unwrap();
                        }
                    }
                });
            }
            s.spawn(|| {
                for _ in 0..20 {
                    vol.sync().unwrap();
                    vol.background_tick().unwrap();
                }
            });
        });
        let want = |i: usize| {
            let data = pattern(i as u8, size(i));
            if !holed(i) {
                return data;
            }
            let mut v = vec![0u8; 3 * BS as usize];
            v[..4].copy_from_slice(b"head");
            v.extend_from_slice(&data);
            v
        };
        let check = |vol: &Volume, from: &str| {
            for i in 0..files {
                let inode = vol.inode(lookup(vol, &format!("f{i}"))).unwrap();
                let w = want(i);
                assert_eq!(inode.size(), w.len() as u64, "lazy={lazy} f{i} from {from}: size");
                assert!(vol.read(&inode, 0, w.len() + 10).unwrap() == w, "lazy={lazy} f{i} from {from}: data");
            }
        };
        check(&vol, "memory and disk");
        vol.sync().unwrap();
        check(&vol, "the disk");
        for i in (0..files).filter(|&i| !holed(i)) {
            let inode = vol.inode(lookup(&vol, &format!("f{i}"))).unwrap();
            let blocks = (size(i) as u64).div_ceil(BS);
            let m = vol.map_block(&inode, 0, blocks).unwrap();
            assert!(
                matches!(m, fs::Mapping::Mapped { len, unwritten: false, .. } if len == blocks),
                "lazy={lazy} f{i}: one extent of {blocks} blocks, found {m:?}"
            );
        }
        unmount_clean(vol, &img, lazy);
        let ok = common::with_kernel_mount(&img, |mnt| {
            for i in 0..files {
                assert!(
                    std::fs::read(mnt.join(format!("f{i}"))).unwrap() == want(i),
                    "lazy={lazy} f{i}: the kernel's read"
                );
            }
        });
        if !ok {
            return;
        }
    }
}

/// A batch of small files costs no more journal than one piece of a long
/// write-back: on a 1,024-block journal, with free space left one block per
/// group and a running transaction of 124 changed inodes, two files of 63
/// and 64 KiB (1 KiB blocks) written back together must fit. A batch of up
/// to 64 blocks per file asked for 273 journal blocks of 256, and the
/// commit's failure turned the volume read-only (found by review).
#[test]
fn a_batch_of_small_files_fits_a_small_journal() {
    use fs::{Falloc, SetAttr};
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    const KB: u64 = 1024;
    let mkfs = ["-b", "1024", "-g", "256", "-J", "size=1", "-N", "4096"];
    let img = common::make_image(work.path(), "small-journal.img", 128, &mkfs, &empty);
    let (_dev, vol) = open(&img, false);
    let mk = |n: &str| vol.create(ROOT_INO, n.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let (a, b) = (mk("a"), mk("b"));
    let others: Vec<u32> = (0..500).map(|i| mk(&format!("o{i}"))).collect();
    // Fill the volume, then free one block in each group (and whole groups
    // from 420 on, the kernel's reserve): new data lands in many groups.
    let fill = mk("fill");
    vol.sync().unwrap();
    let mut end = 0u64;
    for chunk in [8192u64, 1024, 64, 1] {
        while vol.fallocate(fill, end * KB, chunk * KB, Falloc::Allocate, false).is_ok() {
            end += chunk;
            vol.sync().unwrap();
        }
    }
    let inode = vol.inode(fill).unwrap();
    let mut punch = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    let mut l = 0;
    while l < end {
        match vol.map_block(&inode, l, end - l).unwrap() {
            fs::Mapping::Mapped { pblk, len, .. } => {
                for i in 0..len {
                    let g = (pblk + i) / 256;
                    if g >= 420 || (g > 0 && seen.insert(g)) {
                        punch.push(l + i);
                    }
                }
                l += len;
            }
            fs::Mapping::Hole { len } => l += len.max(1),
        }
    }
    for (n, run) in punch.chunk_by(|x, y| y == &(x + 1)).enumerate() {
        vol.fallocate(fill, run[0] * KB, run.len() as u64 * KB, Falloc::PunchHole, false).unwrap();
        if n % 64 == 63 {
            vol.sync().unwrap();
        }
    }
    vol.sync().unwrap();
    vol.write(a, 0, &pattern(1, 63 * KB as usize)).unwrap();
    vol.write(b, 0, &pattern(2, 64 * KB as usize)).unwrap();
    // A running transaction near its commit limit: inodes in 124 different
    // inode-table blocks (4 inodes to a block here).
    let table_block = |ino: u32| (ino - 1) / 4;
    let mut blocks = vec![table_block(a), table_block(b)];
    for &o in &others {
        if blocks.len() < 126 && !blocks.contains(&table_block(o)) {
            blocks.push(table_block(o));
            vol.setattr(o, &SetAttr { mode: Some(0o600), ..Default::default() }).unwrap();
        }
    }
    vol.sync().unwrap();
    assert!(vol.failure().is_none(), "the volume failed: {:?}", vol.failure());
    assert_eq!(vol.read(&vol.inode(a).unwrap(), 0, 70_000).unwrap(), pattern(1, 63 * KB as usize));
    assert_eq!(vol.read(&vol.inode(b).unwrap(), 0, 70_000).unwrap(), pattern(2, 64 * KB as usize));
    unmount_clean(vol, &img, false);
}

#[test]
fn a_file_deleted_before_write_back_costs_no_data_io() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "gone.img", 64, &["-b", "4096"], &empty);
    let (dev, vol) = open(&img, false);
    let free_before = vol.statfs().bfree;
    let before = data_written(&dev);
    for i in 0..50 {
        let name = format!("tmp{i}");
        let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(ino, 0, &pattern(i as u8, 100_000)).unwrap();
        assert!(vol.statfs().bfree < free_before, "reserved blocks are not free");
        vol.unlink(ROOT_INO, name.as_bytes()).unwrap();
    }
    // Truncated before write-back: dropped as well.
    let ino = vol.create(ROOT_INO, b"trunc", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(ino, 0, &pattern(1, 1 << 20)).unwrap();
    vol.setattr(ino, &fs::SetAttr { size: Some(10), ..Default::default() }).unwrap();
    vol.sync().unwrap();
    // The truncated file's first block (its 10 bytes) is all that went out.
    assert_eq!(data_written(&dev) - before, BS, "only the block the truncated file keeps");
    let inode = vol.inode(ino).unwrap();
    assert_eq!(vol.read(&inode, 0, 100).unwrap(), pattern(1, 10));
    assert_eq!(vol.statfs().bfree, free_before - 1, "every reservation given back");
    unmount_clean(vol, &img, false);
}

#[test]
fn a_full_disk_is_reported_at_write_time_and_write_back_never_fails() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "full.img", 32, &["-b", "4096", "-m", "0"], &empty);
        let (_dev, vol) = open(&img, lazy);
        // Files of eight chunks each, until a write is refused; a short
        // write ends its file (the next write there would be refused).
        let chunk = pattern(3, 256 << 10);
        let mut accepted: Vec<u64> = Vec::new();
        let err = 'fill: loop {
            let name = format!("f{}", accepted.len());
            let ino = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
            accepted.push(0);
            for k in 0..8u64 {
                match vol.write(ino, k * chunk.len() as u64, &chunk) {
                    Ok(n) => *accepted.last_mut().unwrap() += n as u64,
                    Err(e) => break 'fill e,
                }
                if *accepted.last().unwrap() < (k + 1) * chunk.len() as u64 {
                    break;
                }
            }
            assert!(accepted.len() < 1000, "the 32 MiB volume never filled");
        };
        assert!(matches!(err, FsError::NoSpace), "lazy={lazy}: {err:?}");
        // Everything accepted reaches the disk.
        vol.sync().unwrap();
        for (f, &len) in accepted.iter().enumerate() {
            let inode = vol.inode(lookup(&vol, &format!("f{f}"))).unwrap();
            assert_eq!(inode.size(), len, "lazy={lazy}: f{f}");
            let data = vol.read(&inode, 0, len as usize).unwrap();
            assert!(data.chunks(chunk.len()).all(|c| c == &chunk[..c.len()]), "lazy={lazy}: f{f}");
        }
        // The tree blocks held back for the waiting data did not cost room:
        // the volume filled to within one refused write (64 blocks) of the
        // kernel's reserve (163 blocks of 8,192), which data leaves alone.
        let free = vol.statfs().bfree;
        assert!((163..163 + 64).contains(&free), "lazy={lazy}: {free} blocks left free");
        unmount_clean(vol, &img, lazy);
    }
}

/// Allocations other than write-back's leave the kernel's reserve alone while
/// data waits: write-back may need extent-tree blocks beyond the data's own
/// (a file in many pieces needs a leaf). With the reserve taken, the last
/// such file found the volume full at unmount and lost its data (opfuzz
/// enospc, lazy, seed 1).
#[test]
fn other_allocations_leave_write_back_the_reserve() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "reserve.img", 32, &["-b", "4096", "-m", "0"], &empty);
        let (_dev, vol) = open(&img, lazy);
        // 40 one-block pieces with holes between: 40 extents at write-back,
        // more than the inode's four, so a leaf block too.
        let pieces = vol.create(ROOT_INO, b"pieces", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        for k in 0..40u64 {
            vol.write(pieces, 2 * k * BS, &pattern(k as u8, BS as usize)).unwrap();
        }
        // Everything else goes to a file that allocates as it goes (preallocation).
        let filler = vol.create(ROOT_INO, b"filler", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        let mut at = 0;
        for step in [64 * BS, BS] {
            loop {
                match vol.fallocate(filler, at, step, fs::Falloc::Allocate, false) {
                    Ok(()) => at += step,
                    Err(FsError::NoSpace) => break,
                    Err(e) => panic!("lazy={lazy}: fallocate: {e:?}"),
                }
            }
        }
        // The kernel's reserve on 8,192 blocks: 2%, 163 blocks.
        let st = vol.statfs();
        assert!(st.bfree >= 163, "lazy={lazy}: {} blocks left beside the waiting ones", st.bfree);
        vol.sync().unwrap();
        let inode = vol.inode(pieces).unwrap();
        for k in 0..40u64 {
            assert_eq!(
                vol.read(&inode, 2 * k * BS, BS as usize).unwrap(),
                pattern(k as u8, BS as usize),
                "lazy={lazy}"
            );
        }
        unmount_clean(vol, &img, lazy);
    }
}

/// A file whose write-back finds no room at unmount does not stop the
/// others, and what went out is committed: returning at the first error
/// lost every block written back since the last commit (13,131 blocks where
/// 8 had no room, before the tree blocks were held back).
#[test]
fn an_unmount_whose_write_back_runs_out_still_sends_the_others_out() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "no-room.img", 64, &["-b", "4096"], &empty);
        let (_dev, vol) = open(&img, lazy);
        let mut inos = Vec::new();
        for (k, name) in [b"a", b"b", b"c"].iter().enumerate() {
            let ino = vol.create(ROOT_INO, *name, CreateKind::File, 0o644, 0, 0).unwrap().ino;
            vol.write(ino, 0, &pattern(k as u8, 3 * BS as usize)).unwrap();
            inos.push(ino);
        }
        let no_room = fs::inject::NoRoom::for_inode(inos[1]);
        let err = vol.shutdown().unwrap_err();
        assert!(matches!(err, FsError::NoSpace), "lazy={lazy}: {err:?}");
        drop(no_room);
        drop(vol);
        let (_dev, vol) = open(&img, lazy);
        for (k, name) in ["a", "b", "c"].iter().enumerate() {
            let inode = vol.inode(lookup(&vol, name)).unwrap();
            let want = if k == 1 { Vec::new() } else { pattern(k as u8, 3 * BS as usize) };
            assert_eq!(vol.read(&inode, 0, 4 * BS as usize).unwrap(), want, "lazy={lazy}: {name}");
        }
        unmount_clean(vol, &img, lazy);
    }
}

/// Files of one block waiting hold back no extent-tree blocks (their
/// extent fits in the inode), and what `statfs` shows free others may take:
/// holding back four tree blocks a file refused fallocate and mkdir on a
/// volume `df` showed 26 MiB free, with 2,470 such files waiting.
#[test]
fn small_files_waiting_leave_what_statfs_shows_to_others() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "small.img", 64, &["-b", "4096", "-m", "0"], &empty);
        let (_dev, vol) = open(&img, lazy);
        let dir = vol.create(ROOT_INO, b"s", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
        let before = vol.statfs().bavail;
        for i in 0..1000 {
            let ino = vol.create(dir, format!("f{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
            vol.write(ino, 0, &pattern(i as u8, BS as usize)).unwrap();
        }
        let avail = vol.statfs().bavail;
        // A block each, and the directory's few.
        assert!(before - avail < 1000 + 16, "lazy={lazy}: {} blocks taken by 1,000 one-block files", before - avail);
        let filler = vol.create(ROOT_INO, b"filler", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.fallocate(filler, 0, (avail - 16) * BS, fs::Falloc::Allocate, false).unwrap();
        for i in 0..8 {
            vol.create(ROOT_INO, format!("d{i}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
        }
        unmount_clean(vol, &img, lazy);
    }
}

#[test]
fn a_crash_before_write_back_leaves_the_size_that_reached_the_disk() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "crash.img", 64, &["-b", "4096"], &empty);
    let (_dev, vol) = open(&img, false);
    let a = vol.create(ROOT_INO, b"a", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(a, 0, &pattern(1, 12_288)).unwrap();
    vol.sync().unwrap(); // a: 3 blocks on disk
    vol.write(a, 12_288, &pattern(2, 50_000)).unwrap(); // waits: all of it over holes
    let b = vol.create(ROOT_INO, b"b", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(b, 0, &pattern(3, 5_000)).unwrap(); // waits
                                                  // The metadata (b's name, both inodes' times) commits without the
                                                  // delayed data: what the journal holds then is what a crash keeps.
    commit_metadata_only(&vol);
    assert_eq!(vol.inode(a).unwrap().size(), 62_288, "readers see everything");
    drop(vol); // a crash: no write-back, no unmount
    let (_dev, vol) = open(&img, false);
    let a = vol.inode(a).unwrap();
    assert_eq!(a.size(), 12_288, "the size that reached the disk");
    assert_eq!(vol.read(&a, 0, 20_000).unwrap(), pattern(1, 12_288));
    let b = vol.inode(lookup(&vol, "b")).unwrap();
    assert_eq!(b.size(), 0, "a new file whose data never went out is empty, not 5,000 zeros");
    unmount_clean(vol, &img, false);
}

/// Write a new copy, rename it over the old file, crash: the name holds the
/// whole new copy, never an empty file (the kernel's auto_da_alloc).
#[test]
fn a_rename_over_a_file_writes_the_new_copy_back_first() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "replace.img", 64, &["-b", "4096"], &empty);
    let (_dev, vol) = open(&img, false);
    let old = vol.create(ROOT_INO, b"config", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(old, 0, &pattern(1, 30_000)).unwrap();
    vol.sync().unwrap();
    let new = vol.create(ROOT_INO, b"config.tmp", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    vol.write(new, 0, &pattern(2, 70_000)).unwrap();
    vol.rename(ROOT_INO, b"config.tmp", ROOT_INO, b"config", false, false).unwrap();
    let mapped = vol.map_block(&vol.inode(new).unwrap(), 0, 18).unwrap();
    assert!(
        matches!(mapped, fs::Mapping::Mapped { len: 18, unwritten: false, .. }),
        "the new copy was written back with the rename: {mapped:?}"
    );
    commit_metadata_only(&vol);
    drop(vol); // a crash after the rename's commit
    let (_dev, vol) = open(&img, false);
    let inode = vol.inode(lookup(&vol, "config")).unwrap();
    assert_eq!(inode.ino, new);
    assert_eq!(vol.read(&inode, 0, 100_000).unwrap(), pattern(2, 70_000));
    unmount_clean(vol, &img, false);
}

#[test]
fn a_write_that_finds_write_back_failing_takes_nothing() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "eio.img", 64, &["-b", "4096"], &empty);
    let opts = VolumeOptions {
        read_only: false,
        delalloc_bytes: 1 << 20,
        // No data write-back buffer: write-back's data goes to the device at
        // once (else its errors come at the next flush).
        data_writeback_bytes: 0,
        data_expire: Duration::from_secs(3600),
        ..Default::default()
    };
    let dev = Arc::new(blockdev::FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    let a = vol.create(ROOT_INO, b"a", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let b = vol.create(ROOT_INO, b"b", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    // More than the limit waits (a write may pass it; the next one pays).
    vol.write(a, 0, &pattern(1, 2 << 20)).unwrap();
    dev.fail_after(0);
    let err = vol.write(b, 0, &pattern(2, 64 << 10)).unwrap_err();
    assert!(matches!(err, FsError::Io { .. }), "{err:?}");
    // Nothing of the refused write was taken; the waiting data is intact.
    assert_eq!(vol.inode(b).unwrap().size(), 0, "the refused write changed the file");
    let a_inode = vol.inode(a).unwrap();
    assert_eq!(vol.read(&a_inode, 0, 2 << 20).unwrap(), pattern(1, 2 << 20));
}

/// `read_into` (a READ served into the transport's buffer) returns what
/// `read` returns, over blocks on disk, a hole, delayed data and the end
/// of the file inside a block, and declines what it cannot serve whole.
#[test]
fn read_into_a_callers_buffer_matches_read() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "read-into.img", 64, &["-b", "4096"], &empty);
    let (_dev, vol) = open(&img, false);
    let ino = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    // Blocks 0-3 on disk, 4-5 a hole, 6-8 delayed, the end 100 bytes into block 9.
    let on_disk = pattern(1, 4 * BS as usize);
    vol.write(ino, 0, &on_disk).unwrap();
    vol.sync().unwrap();
    let delayed = pattern(2, 3 * BS as usize + 100);
    vol.write(ino, 6 * BS, &delayed).unwrap();
    let inode = vol.inode(ino).unwrap();
    assert_eq!(inode.size(), 9 * BS + 100);
    for (offset, len) in [(0, 4 * BS), (0, 16 * BS), (2 * BS, 5 * BS), (4 * BS, 2 * BS), (8 * BS, 2 * BS), (9 * BS, BS)]
    {
        let want = vol.read(&inode, offset, len as usize).unwrap();
        // Dirty on purpose: holes must come back as zeros, not as what was there.
        let mut buf = vec![0xeeu8; len as usize];
        let n = vol.read_into(&inode, offset, &mut buf).unwrap().expect("a block-aligned request");
        assert_eq!(&buf[..n], &want[..], "at {offset} for {len}");
    }
    let mut buf = vec![0u8; 2 * BS as usize];
    assert_eq!(vol.read_into(&inode, 10 * BS, &mut buf).unwrap(), Some(0), "past the end");
    assert_eq!(vol.read_into(&inode, 100, &mut buf).unwrap(), None, "not on a block: read() serves it");
    let mut short = vec![0u8; BS as usize + 10];
    assert_eq!(vol.read_into(&inode, 0, &mut short).unwrap(), None, "the second block would not fit");
    unmount_clean(vol, &img, false);
    let mut whole = on_disk;
    whole.resize(6 * BS as usize, 0);
    whole.extend_from_slice(&delayed);
    common::with_kernel_mount(&img, |mnt| {
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), whole, "the kernel's read");
    });
}

/// Root's reserve (mkfs `-m`) is refused to a requester who may not take
/// it, whether its data waits or is allocated at once, and left whole for
/// the reserve's user, as the kernel's `ext4_has_free_clusters` does.
#[test]
fn roots_reserve_is_left_to_root() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "roots.img", 32, &["-b", "4096", "-m", "10"], &empty);
        let (_dev, vol) = open(&img, lazy);
        let user =
            fs::requester::Requester { uid: 1000, gid: 1000, pid: 0, details: fs::requester::Details::default_for };
        let chunk = pattern(5, 256 << 10);
        let ino = vol.create(ROOT_INO, b"user", CreateKind::File, 0o644, 1000, 1000).unwrap().ino;
        let mut written = 0u64;
        {
            let _as_user = fs::requester::Serving::as_requester(user);
            for step in [chunk.len(), BS as usize] {
                loop {
                    match vol.write(ino, written, &chunk[..step]) {
                        Ok(n) => written += n as u64,
                        Err(FsError::NoSpace) => break,
                        Err(e) => panic!("lazy={lazy}: {e:?}"),
                    }
                }
            }
            let st = vol.statfs();
            // 819 of 8,192 blocks are root's, 163 the kernel's reserve;
            // the user stopped within one 4 KiB write of them.
            assert!((819 + 163..819 + 163 + 2).contains(&st.bfree), "lazy={lazy}: {} blocks left free", st.bfree);
            assert_eq!(st.bavail, st.bfree - 819 - 163, "lazy={lazy}");
            let grow = vol.fallocate(ino, written, 64 * BS, fs::Falloc::Allocate, false);
            assert!(matches!(grow, Err(FsError::NoSpace)), "lazy={lazy}: fallocate as the user: {grow:?}");
        }
        // Root (no requester named: the file system's own callers) takes it.
        let root_file = vol.create(ROOT_INO, b"root", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        let mut taken = 0u64;
        while let Ok(n) = vol.write(root_file, taken, &chunk) {
            taken += n as u64;
        }
        assert!(taken >= 800 * BS, "lazy={lazy}: root got {taken} bytes of its reserve");
        vol.sync().unwrap();
        let inode = vol.inode(ino).unwrap();
        assert_eq!(inode.size(), written, "lazy={lazy}");
        let data = vol.read(&inode, 0, chunk.len()).unwrap();
        assert_eq!(data, chunk, "lazy={lazy}: the user's first chunk");
        unmount_clean(vol, &img, lazy);
    }
}

/// Data waiting when its file stops delaying (chattr +S) goes out before
/// the file's next write, which would otherwise map the same blocks: the
/// waiting copy then read over the new bytes and overwrote them at
/// write-back, so the new write was lost.
#[test]
fn a_write_after_chattr_sync_is_not_undone_by_older_waiting_data() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    for lazy in [false, true] {
        let img = common::make_image(work.path(), "sync.img", 32, &["-b", "4096"], &empty);
        let (_dev, vol) = open(&img, lazy);
        let ino = vol.create(ROOT_INO, b"f", CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(ino, 0, &pattern(1, 3 * BS as usize)).unwrap();
        let flags = vol.flags(&vol.inode(ino).unwrap());
        vol.set_flags(ino, flags | 0x8, false).unwrap(); // FS_SYNC_FL
        vol.write(ino, BS, &pattern(2, BS as usize)).unwrap();
        let mut want = pattern(1, 3 * BS as usize);
        want[BS as usize..2 * BS as usize].copy_from_slice(&pattern(2, BS as usize));
        assert_eq!(
            vol.read(&vol.inode(ino).unwrap(), 0, 3 * BS as usize).unwrap(),
            want,
            "lazy={lazy}: before write-back"
        );
        vol.sync().unwrap();
        assert_eq!(vol.read(&vol.inode(ino).unwrap(), 0, 3 * BS as usize).unwrap(), want, "lazy={lazy}: after it");
        unmount_clean(vol, &img, lazy);
    }
}

/// An append rewrites the partly filled last block of a file already on
/// disk: that block waits with the appended ones and goes out with them, in
/// one request (they land right after it); until then a crash keeps the old
/// size and bytes, and readers see the new ones.
#[test]
fn an_appends_rewritten_last_block_goes_out_with_the_appended_blocks() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "held.img", 64, &["-b", "4096"], &empty);
    for crash in [false, true] {
        let (dev, vol) = open(&img, false);
        let name = if crash { "crashed" } else { "clean" };
        let a = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino;
        vol.write(a, 0, &pattern(1, 5_000)).unwrap();
        vol.sync().unwrap(); // 5,000 bytes on disk: block 1 partly filled
        let before = dev.counts().get(IoClass::Data, true);
        vol.write(a, 5_000, &pattern(2, 10_000)).unwrap();
        // The metadata commits (the gatherer is flushed), the data waits.
        commit_metadata_only(&vol);
        assert_eq!(dev.counts().get(IoClass::Data, true), before, "nothing of the append went out");
        let mut want = pattern(1, 5_000);
        want.extend(pattern(2, 10_000));
        assert_eq!(vol.read(&vol.inode(a).unwrap(), 0, 20_000).unwrap(), want, "readers see the held block");
        if crash {
            drop(vol);
            let (_dev, vol) = open(&img, false);
            let a = vol.inode(lookup(&vol, name)).unwrap();
            assert_eq!(a.size(), 5_000, "the disk's size never covered the held block");
            assert_eq!(vol.read(&a, 0, 20_000).unwrap(), pattern(1, 5_000));
            unmount_clean(vol, &img, false);
            continue;
        }
        vol.sync().unwrap();
        let after = dev.counts().get(IoClass::Data, true);
        assert_eq!(
            (after.requests - before.requests, after.bytes - before.bytes),
            (1, 3 * BS),
            "block 1 and the appended blocks 2-3 in one request"
        );
        assert_eq!(vol.read(&vol.inode(a).unwrap(), 0, 20_000).unwrap(), want);
        unmount_clean(vol, &img, false);
    }
}

/// The held last block of a file whose extent tree is two levels deep (400
/// one-block extents on 1 KiB blocks: the root holds 4, a leaf 84): appends
/// that hold it, write it back, and hold it again read back right, here and
/// in the kernel, and e2fsck finds nothing.
#[test]
fn a_held_last_block_of_a_deep_tree_reads_back_in_the_kernel() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "deep-held.img", 64, &["-b", "1024"], &empty);
    let (_dev, vol) = open(&img, false);
    let a = vol.create(ROOT_INO, b"deep", CreateKind::File, 0o644, 0, 0).unwrap().ino;
    let mut want = vec![0u8; 800 * 1024];
    for l in (0..800u64).step_by(2) {
        let b = pattern(l as u8, 1024);
        want[(l * 1024) as usize..((l + 1) * 1024) as usize].copy_from_slice(&b);
        vol.write(a, l * 1024, &b).unwrap();
    }
    let tail = pattern(7, 300);
    vol.write(a, 800 * 1024, &tail).unwrap();
    want.extend_from_slice(&tail);
    vol.sync().unwrap();
    let depth = |vol: &Volume| ondisk::extent::peek_header(&vol.inode(a).unwrap().base.block).unwrap().depth;
    assert!(depth(&vol) >= 2, "the tree is {} deep", depth(&vol));
    for round in 0..3u8 {
        let more = pattern(20 + round, 1500); // into the held block, then a new one
        vol.write(a, want.len() as u64, &more).unwrap();
        want.extend_from_slice(&more);
        assert_eq!(vol.read(&vol.inode(a).unwrap(), 0, want.len() + 10).unwrap(), want);
        vol.sync().unwrap();
    }
    unmount_clean(vol, &img, false);
    common::with_kernel_mount(&img, |m| assert_eq!(std::fs::read(m.join("deep")).unwrap(), want));
}
