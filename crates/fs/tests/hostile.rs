//! Hostile images: flip bytes in real volumes and walk everything. Every
//! operation must return (an error is fine); nothing may panic or hang.

mod common;

use blockdev::{BlockDevice, FileDevice, IoClass};
use fs::{Volume, VolumeOptions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Walk the whole tree, reading every file, link and xattr; count what failed.
fn walk(vol: &Volume, deadline: Instant) -> (usize, usize) {
    let (mut ok, mut failed) = (0, 0);
    let mut stack = vec![fs::ROOT_INO];
    let mut seen = std::collections::HashSet::new();
    while let Some(ino) = stack.pop() {
        assert!(Instant::now() < deadline, "walk took too long: a loop was not detected");
        if !seen.insert(ino) || seen.len() > 100_000 {
            continue;
        }
        let Ok(inode) = vol.inode(ino) else {
            failed += 1;
            continue;
        };
        let _ = vol.xattrs(&inode, true);
        let r = if inode.is_dir() {
            let mut children = Vec::new();
            let r = vol.read_dir(&inode, 0, &mut |e| {
                if e.name != b"." && e.name != b".." {
                    children.push((e.name.clone(), e.ino));
                }
                children.len() < 10_000
            });
            for (name, _) in children.iter().take(50) {
                let _ = vol.lookup(&inode, name);
            }
            stack.extend(children.into_iter().map(|(_, i)| i));
            r.map(|_| ())
        } else if inode.is_symlink() {
            vol.read_link(&inode).map(|_| ())
        } else if inode.is_reg() {
            vol.read(&inode, 0, 1 << 20).map(|_| ())
        } else {
            Ok(())
        };
        if r.is_ok() {
            ok += 1
        } else {
            failed += 1
        }
    }
    (ok, failed)
}

/// Records the byte ranges of metadata reads, to aim corruption at them.
struct Recorder {
    inner: FileDevice,
    meta: std::sync::Mutex<Vec<(u64, usize)>>,
}

impl BlockDevice for Recorder {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> std::io::Result<()> {
        if class != IoClass::Data {
            self.meta.lock().unwrap().push((offset, buf.len()));
        }
        self.inner.read_at(offset, buf, class)
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> std::io::Result<()> {
        self.inner.write_at(offset, buf, class)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// A tiny deterministic generator (no external randomness in tests).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

#[test]
fn corrupted_images_give_errors_not_panics() {
    let Some((work, src)) = common::setup() else { return };
    for (variant, opts) in
        [("default", vec![]), ("1k-inline", vec!["-b", "1024", "-O", "inline_data"]), ("ext3", vec!["-t", "ext3"])]
    {
        let img = common::make_image(work.path(), &format!("{variant}.img"), 16, &opts, &src);
        let pristine = std::fs::read(&img).unwrap();
        // Sanity: the clean image walks without errors; remember which bytes are metadata.
        let rec = Arc::new(Recorder { inner: FileDevice::open(&img, false).unwrap(), meta: Default::default() });
        {
            let vol = Volume::open(rec.clone(), VolumeOptions::default()).unwrap();
            let (ok, failed) = walk(&vol, Instant::now() + Duration::from_secs(30));
            assert_eq!(failed, 0, "{variant}: clean image has failures");
            assert!(ok > 400, "{variant}: walked only {ok}");
        }
        // Only the blocks actually used: readahead windows cover unused inode-table blocks too.
        let meta: Vec<(u64, usize)> = rec.meta.lock().unwrap().clone();
        let mut rng = Lcg(variant.len() as u64 * 7919);
        let mut opened = 0;
        for round in 0..60 {
            let mut bytes = pristine.clone();
            for _ in 0..1 + round % 6 {
                let (off, len) = meta[(rng.next() as usize) % meta.len()];
                let pos = off as usize + (rng.next() as usize) % len.min(8192);
                bytes[pos] ^= 1 << (rng.next() % 8);
            }
            std::fs::write(&img, &bytes).unwrap();
            let dev = Arc::new(FileDevice::open(&img, false).unwrap());
            if let Ok(vol) = Volume::open(dev, VolumeOptions::default()) {
                opened += 1;
                walk(&vol, Instant::now() + Duration::from_secs(30));
            }
        }
        eprintln!("{variant}: {opened}/60 corrupted images opened and walked");
    }
}

#[test]
fn truncated_image_is_refused_clearly() {
    let Some((work, src)) = common::setup() else { return };
    let img = common::make_image(work.path(), "t.img", 16, &[], &src);
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.set_len(8 << 20).unwrap();
    let err = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap_err();
    assert!(err.to_string().contains("device is smaller"), "{err}");
}

/// Bitmaps of real images verify against their descriptors, and their free
/// counts agree with the descriptors' (computed bitmaps of uninitialised groups included).
#[test]
fn bitmaps_match_descriptors_on_real_images() {
    let Some((work, src)) = common::setup() else { return };
    for (variant, opts) in
        [("default", vec![]), ("1k", vec!["-b", "1024"]), ("nocsum", vec!["-O", "^metadata_csum,^64bit"])]
    {
        let img = common::make_image(work.path(), &format!("{variant}.img"), 64, &opts, &src);
        let vol = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
        let bpg = vol.sb.f.blocks_per_group as usize;
        let uninit =
            (0..vol.group_count()).filter(|&g| vol.group(g).has_flag(ondisk::group_desc::BG_BLOCK_UNINIT)).count();
        if variant == "1k" {
            assert!(uninit > 0, "the 1k variant should exercise computed bitmaps");
        }
        for g in 0..vol.group_count() {
            let gd = vol.group(g).clone();
            let bits = vol.block_bitmap(g).unwrap_or_else(|e| panic!("{variant} group {g}: {e}"));
            let free = ondisk::bitmap::count_zeros(&bits, bpg) as u32;
            assert_eq!(free, gd.free_blocks_count(), "{variant}: free blocks of group {g}");
            let ibits = vol.inode_bitmap(g).unwrap();
            let ifree = ondisk::bitmap::count_zeros(&ibits, vol.sb.f.inodes_per_group as usize) as u32;
            assert_eq!(ifree, gd.free_inodes_count(), "{variant}: free inodes of group {g}");
        }
    }
}

/// A directory whose size claims 2^40 bytes but maps one block: lookups and
/// listings must walk the blocks it maps, not the 2^28 its size implies
/// (each lookup took minutes; the kernel answers at once).
#[test]
fn a_directory_with_a_huge_size_answers_at_once() {
    let Some((work, src)) = common::setup() else { return };
    let img = common::make_image(work.path(), "hugedir.img", 16, &[], &src);
    let out = std::process::Command::new("debugfs")
        .args(["-w", "-R", "sif /a/b size 0x10000000000"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    let vol = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
    let a = vol.lookup(&vol.inode(fs::ROOT_INO).unwrap(), b"a").unwrap().unwrap().0;
    let b = vol.inode(vol.lookup(&vol.inode(a).unwrap(), b"b").unwrap().unwrap().0).unwrap();
    assert_eq!(b.size(), 1 << 40);
    let start = Instant::now();
    assert!(vol.lookup(&b, b"big.bin").unwrap().is_some());
    assert!(vol.lookup(&b, b"no-such-name").unwrap().is_none());
    let mut names = 0;
    vol.read_dir(&b, 0, &mut |_| {
        names += 1;
        true
    })
    .unwrap();
    assert_eq!(names, 4, ". .. c big.bin");
    assert!(start.elapsed() < Duration::from_secs(1), "took {:?}", start.elapsed());
}

/// A root inode that fails its checksum, or is no directory, makes the
/// kernel refuse the mount ("get root inode failed", "corrupt root inode"):
/// so does ext4lazy, with the same reason, instead of mounting a volume
/// where even `stat` of the mount point fails.
#[test]
fn a_corrupt_root_inode_is_refused_at_mount() {
    let Some((work, src)) = common::setup() else { return };
    let img = common::make_image(work.path(), "root.img", 16, &[], &src);
    let pristine = std::fs::read(&img).unwrap();
    let (blk, off, bs) = {
        let vol = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
        let (blk, off) = vol.inode_location(fs::ROOT_INO);
        (blk, off, vol.block_size() as usize)
    };
    let open =
        |img: &std::path::Path| Volume::open(Arc::new(FileDevice::open(img, false).unwrap()), VolumeOptions::default());
    let kernel_refuses = |img: &std::path::Path| {
        let mnt = tempfile::tempdir().unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "ext4", "-o", "ro,loop"])
            .arg(img)
            .arg(mnt.path())
            .output()
            .unwrap();
        if out.status.success() {
            std::process::Command::new("umount").arg(mnt.path()).status().unwrap();
        }
        !out.status.success()
    };

    // A flipped bit in i_mtime: the record's checksum no longer matches.
    let mut bytes = pristine.clone();
    bytes[blk as usize * bs + off + 0x10] ^= 0x40;
    std::fs::write(&img, &bytes).unwrap();
    let Err(e) = open(&img) else { panic!("a root inode with a bad checksum was mounted") };
    assert!(e.to_string().contains("get root inode failed"), "{e}");
    assert!(kernel_refuses(&img), "the kernel mounted it: the oracle disagrees");

    // A root that is a regular file.
    std::fs::write(&img, &pristine).unwrap();
    let out =
        std::process::Command::new("debugfs").args(["-w", "-R", "sif <2> mode 0100644"]).arg(&img).output().unwrap();
    assert!(out.status.success());
    let Err(e) = open(&img) else { panic!("a root inode that is not a directory was mounted") };
    assert!(e.to_string().contains("corrupt root inode"), "{e}");
    assert!(kernel_refuses(&img), "the kernel mounted it: the oracle disagrees");
}

/// An htree directory whose size is less than a block: its index root lies
/// past its size. Lookups and listings must fail or find nothing, not
/// panic (a zero-length map request once reached `clamp(1, 0)`).
#[test]
fn an_htree_directory_smaller_than_a_block_is_an_error_not_a_panic() {
    let Some((work, src)) = common::setup() else { return };
    let img = common::make_image(work.path(), "tiny-htree.img", 16, &[], &src);
    // mkfs -d writes linear directories: mark this one hashed, then shrink it.
    let flags = common::debugfs_flags(&img, "/a/b/c") | ondisk::inode::flags::INDEX;
    for cmd in [format!("sif /a/b/c flags {flags:#x}"), "sif /a/b/c size 100".to_string()] {
        let out = std::process::Command::new("debugfs").args(["-w", "-R", &cmd]).arg(&img).output().unwrap();
        assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    }
    let vol = Volume::open(Arc::new(FileDevice::open(&img, false).unwrap()), VolumeOptions::default()).unwrap();
    let resolve = |path: &[&str]| {
        let mut ino = fs::ROOT_INO;
        for p in path {
            ino = vol.lookup(&vol.inode(ino).unwrap(), p.as_bytes()).unwrap().unwrap().0;
        }
        vol.inode(ino).unwrap()
    };
    let c = resolve(&["a", "b", "c"]);
    assert!(c.has_flag(ondisk::inode::flags::INDEX), "the fixture's directory must be hashed");
    let found = vol.lookup(&c, b"file-0001");
    assert!(!matches!(found, Ok(Some(_))), "found an entry past the directory's size: {found:?}");
    let _ = vol.read_dir(&c, 0, &mut |_| true);
    // The request that used to panic: a zero-length map of a hole.
    assert!(matches!(vol.map_block(&c, 1 << 20, 0), Ok(fs::Mapping::Hole { .. })));
}

/// A block-mapped journal whose indirect blocks share one block, or whose
/// size claims far more than the volume holds: the mount must refuse it at
/// once, not walk (and allocate for) millions of runs first.
#[test]
fn a_journal_with_shared_indirect_blocks_is_refused_at_once() {
    let Some((work, src)) = common::setup() else { return };
    let img =
        common::make_image(work.path(), "ext3-journal.img", 16, &["-t", "ext3", "-b", "1024", "-J", "size=1"], &src);
    let pristine = std::fs::read(&img).unwrap();
    let open =
        |img: &std::path::Path| Volume::open(Arc::new(FileDevice::open(img, false).unwrap()), VolumeOptions::default());
    let (dind, bs) = {
        let vol = open(&img).unwrap();
        let j = vol.inode(8).unwrap();
        (u64::from(ondisk::bytes::le32(&j.base.block, 13 * 4)), vol.block_size() as usize)
    };
    assert_ne!(dind, 0, "a 1024-block journal on 1 KiB blocks needs its double indirect block");

    // Every entry of the double indirect block names its first indirect block.
    let mut bytes = pristine.clone();
    let at = dind as usize * bs;
    let first = bytes[at..at + 4].to_vec();
    for i in 1..bs / 4 {
        bytes[at + 4 * i..at + 4 * i + 4].copy_from_slice(&first);
    }
    std::fs::write(&img, &bytes).unwrap();
    let start = Instant::now();
    let Err(e) = open(&img) else { panic!("a journal mapping one block twice was mounted") };
    assert!(e.to_string().contains("journal block mapped twice"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1));

    // A journal inode claiming 2^40 bytes.
    std::fs::write(&img, &pristine).unwrap();
    let out = std::process::Command::new("debugfs")
        .args(["-w", "-R", "sif <8> size 0x10000000000"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success());
    let start = Instant::now();
    let Err(e) = open(&img) else { panic!("a journal larger than the volume was mounted") };
    assert!(e.to_string().contains("journal larger than the volume"), "{e}");
    assert!(start.elapsed() < Duration::from_secs(1));
}

/// A group descriptor whose count of unused inode-table entries exceeds the
/// group's inodes: creating a file there is an answer (a new inode or an
/// error), never an arithmetic overflow (found by the `volume` fuzz target).
#[test]
fn an_unused_inode_count_past_the_group_is_survived() {
    let Some((work, src)) = common::setup() else { return };
    let img = common::make_image(work.path(), "itable-unused.img", 16, &[], &src);
    for cmd in ["set_bg 0 itable_unused 60000", "set_bg 0 checksum calc"] {
        let out = std::process::Command::new("debugfs").args(["-w", "-R", cmd]).arg(&img).output().unwrap();
        assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dev = Arc::new(FileDevice::open(&img, true).unwrap());
    let vol = Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap();
    let made = vol.create(fs::ROOT_INO, b"new", fs::CreateKind::File, 0o644, 0, 0);
    if let Ok(f) = made {
        assert!(vol.inode(f.ino).is_ok());
    }
    vol.shutdown().unwrap();
}

/// Group descriptors that claim fewer free blocks than their bitmaps show
/// (or nearly 2^32 free): an allocation or a free is refused as corruption,
/// the counts never wrap around (a debug build panicked on the subtraction,
/// a release build reported 4 billion free blocks), and the volume's free
/// count stays what the descriptors say.
#[test]
fn free_counts_that_contradict_the_bitmaps_are_refused_not_wrapped() {
    let Some((work, empty)) = common::setup_empty() else { return };
    // Eight groups of 1 KiB blocks; each claims one free block.
    let img = common::make_image(work.path(), "gd-free.img", 64, &["-b", "1024"], &empty);
    let script = work.path().join("gd-free.cmds");
    let cmds: String = (0..8).map(|g| format!("set_bg {g} free_blocks_count 1\nset_bg {g} checksum calc\n")).collect();
    std::fs::write(&script, cmds).unwrap();
    let out = std::process::Command::new("debugfs").arg("-w").arg("-f").arg(&script).arg(&img).output().unwrap();
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    let dev = Arc::new(FileDevice::open(&img, true).unwrap());
    // No reserve: the eight blocks the descriptors claim may all be asked for.
    let opts = VolumeOptions { read_only: false, delalloc_bytes: 0, reserved_blocks: Some(0), ..Default::default() };
    let vol = Volume::open(dev, opts).unwrap();
    let bfree = vol.statfs().bfree;
    let f = vol.create(fs::ROOT_INO, b"f", fs::CreateKind::File, 0o644, 0, 0).unwrap();
    // Eight blocks: what the descriptors claim in all, more than any group's one.
    let r = vol.write(f.ino, 0, &vec![7u8; 8 << 10]);
    assert!(matches!(r, Err(fs::FsError::Format(_))), "{r:?}");
    assert!(vol.statfs().bfree <= bfree, "free blocks went from {bfree} to {}", vol.statfs().bfree);
}

/// Two files whose extents claim the same blocks (a cross-link): freeing
/// them twice must be refused as corruption, whether the second free comes
/// in the same transaction as the first (the bitmap bit is still set then)
/// or after it committed, and the free-block count must not move twice.
#[test]
fn blocks_claimed_by_two_files_are_not_freed_twice() {
    let Some((work, src)) = common::setup_empty() else { return };
    for name in ["a", "c"] {
        std::fs::write(src.join(format!("{name}1")), vec![1u8; 32 << 10]).unwrap();
        std::fs::write(src.join(format!("{name}2")), vec![2u8; 32 << 10]).unwrap();
    }
    let img = common::make_image(work.path(), "crosslink.img", 16, &[], &src);
    // The start of each file's one extent: i_block word 5 (ee_start_lo).
    let start_of = |path: &str| {
        let out =
            std::process::Command::new("debugfs").args(["-R", &format!("bmap {path} 0")]).arg(&img).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse::<u64>().unwrap()
    };
    for name in ["a", "c"] {
        let target = start_of(&format!("/{name}1"));
        let cmd = format!("sif /{name}2 block[5] {target}");
        let out = std::process::Command::new("debugfs").args(["-w", "-R", &cmd]).arg(&img).output().unwrap();
        assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(start_of(&format!("/{name}2")), target, "{name}2 now shares {name}1's blocks");
    }
    let dev = Arc::new(FileDevice::open(&img, true).unwrap());
    let vol = Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap();
    for (name, sync_between) in [("a", false), ("c", true)] {
        let free_before = vol.statfs().bfree;
        vol.unlink(fs::ROOT_INO, format!("{name}1").as_bytes()).unwrap();
        if sync_between {
            vol.sync().unwrap();
        }
        let second = vol.unlink(fs::ROOT_INO, format!("{name}2").as_bytes());
        let err = second.expect_err("the second file's blocks were freed already: refuse, never free twice");
        assert!(err.to_string().contains("not in use") || err.to_string().contains("freed twice"), "{name}: {err}");
        vol.sync().unwrap();
        assert_eq!(
            vol.statfs().bfree,
            free_before + (32 << 10) / u64::from(vol.block_size()),
            "{name}: the shared blocks were counted free once"
        );
        assert!(
            vol.lookup(&vol.inode(fs::ROOT_INO).unwrap(), format!("{name}2").as_bytes()).unwrap().is_some(),
            "{name}2 stays"
        );
    }
    vol.shutdown().unwrap();
}
