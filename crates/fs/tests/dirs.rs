//! Directories at the sizes real volumes reach.
//!
//! With 1 KiB blocks and 240-byte names a leaf holds four entries, the index
//! root 124 and an index node 127, so 60,000 names need a three-level htree
//! (`large_dir`). Every name is then looked up, the directory emptied again
//! in random order (each unlink must find its entry through the index, not by
//! reading the whole directory), and the oracles check the volume after each
//! phase: `e2fsck -fn` clean and the kernel listing the same names.

mod common;

use blockdev::FileDevice;
use fs::{CreateKind, Volume, VolumeOptions, ROOT_INO};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn open(img: &Path, lazy: bool) -> Volume {
    let dev = Arc::new(FileDevice::open(img, true).unwrap());
    Volume::open(dev, VolumeOptions { read_only: false, lazy, ..Default::default() }).unwrap()
}

fn name(i: usize) -> String {
    format!("{i:07}-{}", "n".repeat(232))
}

/// The index depth of directory `ino`: 1 + the root's indirect levels.
fn htree_levels(vol: &Volume, ino: u32) -> u8 {
    let dir = vol.inode(ino).unwrap();
    assert!(dir.has_flag(ondisk::inode::flags::INDEX), "the directory is hashed");
    let fs::Mapping::Mapped { pblk, .. } = vol.map_block(&dir, 0, 1).unwrap() else { panic!("hole at the index root") };
    let root = ondisk::htree::DxNode::parse_root(&vol.meta(pblk).unwrap(), ondisk::Location::Unknown).unwrap();
    root.indirect_levels + 1
}

/// Unmount, run the oracles, and check the kernel lists exactly `names`.
fn check(vol: Volume, img: &Path, lazy: bool, names: &BTreeSet<String>, phase: &str) {
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_in(img, lazy);
    let mounted = common::with_kernel_mount(img, |mnt| {
        let got: BTreeSet<String> =
            std::fs::read_dir(mnt.join("d")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        assert!(&got == names, "{phase}: the kernel lists {} names, expected {}", got.len(), names.len());
    });
    assert!(mounted, "the kernel must be able to mount the image");
}

fn three_level_htree(lazy: bool, seed: u64) {
    let Some((work, empty)) = common::setup_empty() else { return };
    let n = 60_000;
    let img =
        common::make_image(work.path(), "dir.img", 256, &["-b", "1024", "-O", "large_dir", "-N", "70000"], &empty);
    let vol = open(&img, lazy);
    let d = vol.create(ROOT_INO, b"d", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
    let mut names = BTreeSet::new();
    for i in 0..n {
        vol.create(d, name(i).as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
        names.insert(name(i));
    }
    assert_eq!(htree_levels(&vol, d), 3, "60,000 240-byte names on 1 KiB blocks need three levels");
    let dir = vol.inode(d).unwrap();
    for i in 0..n {
        assert!(vol.lookup(&dir, name(i).as_bytes()).unwrap().is_some(), "{} not found", name(i));
    }
    check(vol, &img, lazy, &names, "filled");

    // Empty it in random order: each unlink finds its entry through the index.
    let vol = open(&img, lazy);
    let mut order: Vec<usize> = (0..n).collect();
    let mut x = seed | 1;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let start = Instant::now();
    for (k, &i) in order.iter().enumerate() {
        vol.unlink(d, name(i).as_bytes()).unwrap();
        names.remove(&name(i));
        if k % 10_000 == 9_999 {
            // Half-emptied directories are where merges and index updates go wrong.
            let dir = vol.inode(d).unwrap();
            for &j in order[k + 1..].iter().take(2_000) {
                assert!(
                    vol.lookup(&dir, name(j).as_bytes()).unwrap().is_some(),
                    "{} lost after {} unlinks",
                    name(j),
                    k + 1
                );
            }
        }
    }
    let took = start.elapsed();
    eprintln!("lazy={lazy}: {n} unlinks in {took:?}");
    // A whole-directory scan per unlink took minutes here; through the index it is seconds.
    assert!(took < Duration::from_secs(120), "{n} unlinks took {took:?}");
    let dir = vol.inode(d).unwrap();
    let mut left = 0;
    vol.read_dir(&dir, 0, &mut |e| {
        left += usize::from(e.name != b"." && e.name != b"..");
        true
    })
    .unwrap();
    assert_eq!(left, 0, "entries left after every unlink");
    check(vol, &img, lazy, &names, "emptied");
}

#[test]
fn three_level_htree_fills_and_empties_ordered() {
    three_level_htree(false, 7);
}

#[test]
fn three_level_htree_fills_and_empties_lazy() {
    three_level_htree(true, 8);
}
