//! Lazy writeback journaling (`journal=lazy`) against the paper's claim and
//! the real oracles: metadata is written once, to the journal; the volume it
//! leaves is one the kernel replays into exactly our tree.

mod common;

use blockdev::fault::Event;
use blockdev::{BlockDevice, FaultDevice, FileDevice, IoClass};
use fs::{CreateKind, Volume, VolumeOptions, ROOT_INO};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

fn open(img: &Path, lazy: bool, cache_bytes: usize) -> (Volume, Arc<FaultDevice<FileDevice>>) {
    let dev = Arc::new(FaultDevice::new(FileDevice::open(img, true).unwrap()));
    let opts = VolumeOptions { read_only: false, lazy, cache_bytes, ..Default::default() };
    (Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap(), dev)
}

/// MakeDirs, CreateFiles and RemoveDirs in small: a tree of `n` directories
/// (10 per parent) with a small file in each, then every other leaf removed.
/// Returns the paths that remain (directories end in '/') with file contents.
fn workload(vol: &Volume, n: usize) -> BTreeMap<String, Vec<u8>> {
    let mut dirs = vec![(ROOT_INO, String::new())];
    let mut tree = BTreeMap::new();
    for i in 1..=n {
        let (pino, ppath) = dirs[(i - 1) / 10].clone();
        let name = format!("d{i}");
        let d = vol.create(pino, name.as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
        let path = format!("{ppath}{name}/");
        let f = vol.create(d.ino, b"f", CreateKind::File, 0o644, 0, 0).unwrap();
        let data = format!("file in {path}").into_bytes();
        vol.write(f.ino, 0, &data).unwrap();
        tree.insert(path.clone(), Vec::new());
        tree.insert(format!("{path}f"), data);
        dirs.push((d.ino, path));
    }
    // RemoveDirs-like: drop leaves (no subdirectories) with an odd number.
    for i in (n / 10 + 1..=n).filter(|i| i % 2 == 1) {
        let (pino, _) = dirs[(i - 1) / 10].clone();
        let (ino, path) = dirs[i].clone();
        vol.unlink(ino, b"f").unwrap();
        vol.rmdir(pino, format!("d{i}").as_bytes()).unwrap();
        tree.remove(&format!("{path}f"));
        tree.remove(&path);
    }
    tree
}

/// The tree as read through the engine, in the workload's notation.
fn read_tree(vol: &Volume) -> BTreeMap<String, Vec<u8>> {
    fn walk(vol: &Volume, ino: u32, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut names = Vec::new();
        vol.read_dir(&vol.inode(ino).unwrap(), 0, &mut |e| {
            names.push((String::from_utf8(e.name).unwrap(), e.ino));
            true
        })
        .unwrap();
        for (name, child) in names {
            if name == "." || name == ".." || name == "lost+found" {
                continue;
            }
            let inode = vol.inode(child).unwrap();
            if inode.is_dir() {
                let p = format!("{prefix}{name}/");
                out.insert(p.clone(), Vec::new());
                walk(vol, child, &p, out);
            } else {
                out.insert(format!("{prefix}{name}"), vol.read(&inode, 0, inode.size() as usize).unwrap());
            }
        }
    }
    let mut t = BTreeMap::new();
    walk(vol, ROOT_INO, "", &mut t);
    t
}

fn read_kernel_tree(root: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if name == "lost+found" {
                continue;
            }
            if e.file_type().unwrap().is_dir() {
                let p = format!("{prefix}{name}/");
                out.insert(p.clone(), Vec::new());
                walk(&e.path(), &p, out);
            } else {
                out.insert(format!("{prefix}{name}"), std::fs::read(e.path()).unwrap());
            }
        }
    }
    let mut t = BTreeMap::new();
    walk(root, "", &mut t);
    t
}

/// Bytes written per class, and the static blocks written as metadata.
fn tally(events: &[Event], bs: u64) -> (BTreeMap<&'static str, u64>, BTreeSet<u64>) {
    let mut bytes = BTreeMap::new();
    let mut meta_blocks = BTreeSet::new();
    for e in events {
        if let Event::Write { offset, data, class } = e {
            *bytes.entry(class.name()).or_insert(0) += data.len() as u64;
            if *class == IoClass::Metadata {
                meta_blocks.extend(offset / bs..(offset + data.len() as u64).div_ceil(bs));
            }
        }
    }
    (bytes, meta_blocks)
}

#[test]
fn lazy_mode_writes_metadata_once_and_the_kernel_replays_it() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let mut table = Vec::new();
    // A small cache (most metadata is evicted and read again, in lazy mode
    // from the journal through the jmap) and the default one.
    for (lazy, cache) in [(false, 512 << 10), (true, 512 << 10), (false, 256 << 20), (true, 256 << 20)] {
        let mode = format!("{}, {} KiB cache", if lazy { "lazy" } else { "ordered" }, cache >> 10);
        // A journal the workload fits in; a full one migrates its oldest blocks home.
        let img = common::make_image(
            work.path(),
            &format!("{lazy}-{cache}.img"),
            256,
            &["-b", "4096", "-J", "size=64"],
            &empty,
        );
        let (vol, dev) = open(&img, lazy, cache);
        let want = workload(&vol, 3000);
        vol.sync().unwrap();
        assert_eq!(read_tree(&vol), want, "{mode}: the tree read back before unmount");
        vol.shutdown().unwrap();
        let bs = u64::from(vol.block_size());
        drop(vol);
        let (bytes, meta_blocks) = tally(&dev.events(), bs);
        let mib = |c: &str| *bytes.get(c).unwrap_or(&0) as f64 / f64::from(1 << 20);
        let read_mib = |c: IoClass| dev.read_bytes(c) as f64 / f64::from(1 << 20);
        table.push(format!(
            "| {mode} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.2} |",
            read_mib(IoClass::Metadata),
            read_mib(IoClass::Journal),
            mib("metadata"),
            mib("journal"),
            meta_blocks.len(),
            mib("data")
        ));
        if lazy {
            // The paper's claim: nothing but the superblock is written outside the journal.
            let home: Vec<u64> = meta_blocks.iter().copied().filter(|&b| b != 0).collect();
            assert!(
                home.is_empty(),
                "lazy mode wrote {} metadata blocks home, first {:?}",
                home.len(),
                &home[..home.len().min(10)]
            );
        } else {
            assert!(meta_blocks.len() > 100, "ordered mode writes its metadata home ({} blocks)", meta_blocks.len());
        }
        // ext4lazy mounts it again (lazy: the journal is still the truth).
        let (vol, _) = open(&img, lazy, 256 << 20);
        assert_eq!(read_tree(&vol), want, "{mode}: after remount");
        vol.shutdown().unwrap();
        drop(vol);
        // The kernel replays the journal and sees exactly the same tree.
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let mnt = work.path().join("mnt");
            std::fs::create_dir_all(&mnt).unwrap();
            // (kernel_mounted retries a loop device lost to a busy machine.)
            let seen = common::kernel_mounted(&img, &mnt, read_kernel_tree);
            assert_eq!(seen, want, "{mode}: the kernel's view");
        } else {
            common::skip("kernel replay: not root");
        }
        common::e2fsck_clean_after_replay(&img);
    }
    eprintln!(
        "| mode | metadata reads, home (MiB) | metadata reads, journal (MiB) | metadata writes, home (MiB) | journal writes (MiB) | metadata blocks written home | data writes (MiB) |\n|---|---|---|---|---|---|---|\n{}",
        table.join("\n")
    );
}

/// A journal smaller than the metadata written through it: the cleaner keeps
/// the live blocks in the journal by logging them again, so the tail moves
/// without writing metadata home, and the result is still what the kernel
/// replays.
#[test]
fn the_cleaner_keeps_a_small_journal_going_without_writing_home() {
    let Some((work, empty)) = common::setup_empty() else { return };
    // 4 MiB journal (1,024 blocks of 4 KiB); the workload logs ~6 times that.
    let img = common::make_image(work.path(), "small-journal.img", 256, &["-b", "4096", "-J", "size=4"], &empty);
    let (vol, dev) = open(&img, true, 1 << 20);
    let mut files = Vec::new();
    for d in 0..100 {
        let dir = vol.create(ROOT_INO, format!("d{d}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
        for f in 0..20 {
            files.push(vol.create(dir.ino, format!("f{f}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino);
        }
    }
    vol.sync().unwrap();
    for round in 0..25u32 {
        let t = fs::Timestamp { sec: 1_700_000_000 + i64::from(round), nsec: 0 };
        for &ino in &files {
            vol.setattr(ino, &fs::SetAttr { mtime: Some(t), ..Default::default() }).unwrap();
        }
        vol.sync().unwrap();
    }
    let stats = vol.write_stats().unwrap();
    let js = vol.journal_stats().unwrap();
    let want_mtime = vol.inode(files[7]).unwrap().mtime();
    vol.shutdown().unwrap();
    drop(vol);
    let (bytes, meta_blocks) = tally(&dev.events(), 4096);
    let home: Vec<u64> = meta_blocks.into_iter().filter(|&b| b != 0).collect();
    eprintln!(
        "journal {} blocks, {} logged, {} moved by the cleaner, {} migrated home, {} metadata blocks written home; live {} of {} used; {:?}",
        js.journal_blocks, stats.journal_blocks_logged, stats.cleaner_blocks_moved, stats.blocks_migrated_home, home.len(),
        js.journal_live_blocks, js.journal_used_blocks, bytes
    );
    assert!(stats.journal_blocks_logged > 4 * js.journal_blocks, "the workload must wrap the journal several times");
    assert!(stats.cleaner_blocks_moved > 0, "the cleaner moved nothing");
    assert_eq!(stats.blocks_migrated_home, 0, "a cleaned journal needs no migration home");
    assert!(home.is_empty(), "metadata written home: {:?}", &home[..home.len().min(10)]);
    // Read back after a remount (jmap rebuilt by the scan), and by the kernel.
    let (vol, _) = open(&img, true, 1 << 20);
    assert_eq!(vol.inode(files[7]).unwrap().mtime(), want_mtime);
    assert_eq!(read_tree(&vol).len(), 100 * 21);
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_after_replay(&img);
}

/// Hot/cold separation: a cold set written once and a hot set updated in
/// bursts, with quiet spells between them, in a journal that must wrap. With
/// `cold_age` the cold blocks go home once, in a quiet spell after they have
/// aged; without it, the cleaner carries them around the log on every wrap.
/// (Time is scaled down: bursts every ~40 ms, a cold age of 100 ms.)
#[test]
fn idle_migration_sends_cold_blocks_home_once() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let mut rows = Vec::new();
    let mut moved = Vec::new();
    for migrate in [false, true] {
        let img = common::make_image(
            work.path(),
            &format!("hotcold-{migrate}.img"),
            256,
            &["-b", "4096", "-J", "size=16"],
            &empty,
        );
        let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
        let mut cleaner = fs::CleanerPolicy::default();
        if migrate {
            cleaner.cold_age = Some(std::time::Duration::from_millis(100));
        }
        let opts = VolumeOptions { read_only: false, lazy: true, cleaner, ..Default::default() };
        let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
        // Cold: 4,000 files in 40 directories, written once.
        for d in 0..40 {
            let dir = vol.create(ROOT_INO, format!("cold{d}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
            for f in 0..100 {
                vol.create(dir.ino, format!("f{f}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
            }
        }
        vol.sync().unwrap();
        // Hot: 2,000 files updated in 25 bursts, each followed by a quiet spell.
        let hot_dir = vol.create(ROOT_INO, b"hot", CreateKind::Dir, 0o755, 0, 0).unwrap();
        let hot: Vec<u32> = (0..2000)
            .map(|i| vol.create(hot_dir.ino, format!("h{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino)
            .collect();
        for burst in 0..25 {
            for _ in 0..4 {
                for (i, &ino) in hot.iter().enumerate() {
                    let t = fs::Timestamp { sec: 1_700_000_000 + burst * 10 + i as i64 % 7, nsec: 0 };
                    vol.setattr(ino, &fs::SetAttr { mtime: Some(t), ..Default::default() }).unwrap();
                }
                vol.sync().unwrap();
            }
            std::thread::sleep(std::time::Duration::from_millis(20)); // the quiet spell
            vol.background_tick().unwrap();
        }
        let st = vol.write_stats().unwrap();
        let js = vol.journal_stats().unwrap();
        vol.shutdown().unwrap();
        drop(vol);
        let (bytes, _) = tally(&dev.events(), 4096);
        let mib = |c: &str| *bytes.get(c).unwrap_or(&0) as f64 / f64::from(1 << 20);
        rows.push(format!(
            "| {} | {} | {} | {:.2} | {:.2} | {} of {} |",
            if migrate { "cold blocks migrate home (cold_age)" } else { "cleaner only" },
            st.cleaner_blocks_moved,
            st.blocks_migrated_home,
            mib("journal"),
            mib("metadata"),
            js.journal_live_blocks,
            js.journal_used_blocks
        ));
        moved.push(st.cleaner_blocks_moved);
        common::e2fsck_clean_after_replay(&img);
    }
    eprintln!(
        "| policy | cleaner blocks moved | blocks migrated home | journal writes (MiB) | metadata writes home (MiB) | live / used journal blocks at the end |\n|---|---|---|---|---|---|\n{}",
        rows.join("\n")
    );
    assert!(moved[0] > 0, "the workload must make the cleaner work");
    assert!(moved[1] < moved[0], "idle migration must spare the cleaner work ({} vs {})", moved[1], moved[0]);
}

/// Per-block age: a block the cleaner moves keeps the age of its last real
/// update. Here the log wraps several times within `cold_age`, so the cold
/// set is moved by the cleaner before it is old enough to migrate; once it
/// is (counting from when it was written, not from when it was moved), idle
/// time sends it home and the cleaner stops carrying it.
#[test]
fn moved_blocks_keep_their_age() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "age.img", 256, &["-b", "4096", "-J", "size=16"], &empty);
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let mut cleaner = fs::CleanerPolicy::default();
    // The log must wrap within the cold age: a debug build writes slower.
    let cold_age = std::time::Duration::from_millis(if cfg!(debug_assertions) { 6000 } else { 1500 });
    cleaner.cold_age = Some(cold_age);
    let opts = VolumeOptions { read_only: false, lazy: true, cleaner, ..Default::default() };
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    let mut cold = Vec::new();
    for d in 0..40 {
        let dir = vol.create(ROOT_INO, format!("cold{d}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
        for f in 0..100 {
            cold.push(vol.create(dir.ino, format!("f{f}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino);
        }
    }
    vol.sync().unwrap();
    let written = std::time::Instant::now();
    let hot_dir = vol.create(ROOT_INO, b"hot", CreateKind::Dir, 0o755, 0, 0).unwrap();
    let hot: Vec<u32> = (0..2000)
        .map(|i| vol.create(hot_dir.ino, format!("h{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino)
        .collect();
    let mut moved_while_young = 0;
    let mut burst = 0;
    while written.elapsed() < cold_age * 3 {
        for (i, &ino) in hot.iter().enumerate() {
            let t = fs::Timestamp { sec: 1_700_000_000 + burst * 10 + i as i64 % 7, nsec: 0 };
            vol.setattr(ino, &fs::SetAttr { mtime: Some(t), ..Default::default() }).unwrap();
        }
        vol.sync().unwrap();
        burst += 1;
        if written.elapsed() < cold_age {
            moved_while_young = vol.write_stats().unwrap().cleaner_blocks_moved;
        }
        std::thread::sleep(std::time::Duration::from_millis(10)); // the quiet spell
        vol.background_tick().unwrap();
    }
    let st = vol.write_stats().unwrap();
    // Where the cold inodes' table blocks are now: still in the log, or home.
    // (Blocks shared with hot inodes are hot.)
    let hot_blocks: BTreeSet<u64> = hot.iter().map(|&ino| vol.inode_location(ino).0).collect();
    let cold_blocks: BTreeSet<u64> =
        cold.iter().map(|&ino| vol.inode_location(ino).0).filter(|b| !hot_blocks.contains(b)).collect();
    let in_log = cold_blocks.iter().filter(|&&b| vol.metadata_in_journal(b)).count();
    eprintln!(
        "{burst} bursts; cleaner moved {moved_while_young} blocks before the cold set aged, {} in all; {} migrated home; \
         {in_log} of {} cold inode-table blocks still in the log",
        st.cleaner_blocks_moved,
        st.blocks_migrated_home,
        cold_blocks.len()
    );
    assert!(moved_while_young >= cold_blocks.len() as u64, "the log must wrap before the cold set ages");
    assert!(st.blocks_migrated_home >= cold_blocks.len() as u64, "the cold set went home");
    assert_eq!(in_log, 0, "no cold inode-table block is carried around the log any more");
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_after_replay(&img);
}

/// The jmap snapshot replaces the scan at the next lazy mount, is removed as
/// it is used, and is refused once the log has moved past it (a crash of a
/// mount that did not write a new one).
#[test]
fn jmap_snapshot_replaces_the_scan_until_the_log_moves_on() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "snap.img", 128, &["-b", "4096", "-J", "size=16"], &empty);
    let snap = work.path().join("snap.img.jmap");
    let open_lazy = |snapshot: bool| {
        let opts = VolumeOptions {
            read_only: false,
            lazy: true,
            jmap_snapshot: snapshot.then(|| snap.clone()),
            ..Default::default()
        };
        Volume::open(Arc::new(FileDevice::open(&img, true).unwrap()), opts).unwrap()
    };
    let vol = open_lazy(true);
    let want = workload(&vol, 500);
    vol.shutdown().unwrap();
    drop(vol);
    assert!(snap.exists(), "a lazy unmount saves the jmap");
    // Used instead of the scan, and removed.
    let vol = open_lazy(true);
    assert!(vol.journal().unwrap().from_snapshot, "the snapshot was valid");
    assert!(!snap.exists(), "a used snapshot is removed before anything is committed");
    assert_eq!(read_tree(&vol), want);
    vol.shutdown().unwrap();
    drop(vol);
    // A mount that ignores the snapshot commits more and crashes.
    assert!(snap.exists());
    let vol = open_lazy(false);
    let d = vol.create(ROOT_INO, b"after-the-snapshot", CreateKind::Dir, 0o755, 0, 0).unwrap();
    let mut want = want;
    want.insert("after-the-snapshot/".into(), Vec::new());
    let _ = d;
    vol.sync().unwrap();
    drop(vol); // no shutdown: a crash
    let vol = open_lazy(true);
    assert!(!vol.journal().unwrap().from_snapshot, "a snapshot the log moved past is refused");
    assert_eq!(read_tree(&vol), want, "the scan found the newer state");
    vol.shutdown().unwrap();
    drop(vol);
    // A write of the snapshot cut short at any point (as a crash in the
    // middle could leave it, were it not written aside and renamed), or one
    // damaged byte, is refused: the mount scans instead. Each round damages
    // the snapshot the previous clean unmount saved; the last round is the
    // control, undamaged, and used.
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let damages: Vec<Damage> = {
        let mut d: Vec<Damage> = Vec::new();
        for frac in [0.0, 0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.99] {
            d.push(Box::new(move |b: &mut Vec<u8>| b.truncate((b.len() as f64 * frac) as usize)));
        }
        d.push(Box::new(|b: &mut Vec<u8>| b.truncate(b.len() - 1)));
        for frac in [0.0, 0.3, 0.6, 0.999] {
            d.push(Box::new(move |b: &mut Vec<u8>| {
                let at = ((b.len() as f64 * frac) as usize).min(b.len() - 1);
                b[at] ^= 0x20;
            }));
        }
        d
    };
    for (i, damage) in damages.iter().map(Some).chain([None]).enumerate() {
        let mut b = std::fs::read(&snap).unwrap();
        let n = b.len();
        if let Some(damage) = damage {
            damage(&mut b);
        }
        std::fs::write(&snap, &b).unwrap();
        let vol = open_lazy(true);
        let used = vol.journal().unwrap().from_snapshot;
        assert_eq!(used, damage.is_none(), "round {i}: snapshot of {} of {n} bytes used: {used}", b.len());
        assert_eq!(read_tree(&vol), want);
        vol.shutdown().unwrap();
        drop(vol);
    }
    common::e2fsck_clean_after_replay(&img);
}

/// Reading from the log: a cold traversal of a lazy volume finds most of
/// its metadata in the log, and reads it a stretch at a time (metadata
/// written together sits together there), not a block per request.
#[test]
fn a_cold_traversal_reads_the_log_in_stretches() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "stretch.img", 256, &["-b", "4096", "-J", "size=64"], &empty);
    let (vol, _) = open(&img, true, 256 << 20);
    let want = workload(&vol, 3000);
    vol.shutdown().unwrap();
    drop(vol);
    // The default cache, then one too small for the tree: reading ahead
    // must not make it thrash (it reads at most a 32nd of the cache ahead).
    let mut blocks_read = Vec::new();
    for cache in [256 << 20, 512 << 10] {
        let dev = Arc::new(blockdev::CountingDevice::new(Arc::new(FileDevice::open(&img, true).unwrap())));
        let opts = VolumeOptions { read_only: false, lazy: true, cache_bytes: cache, ..Default::default() };
        let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
        let before = dev.counts().get(IoClass::Journal, false);
        assert_eq!(read_tree(&vol), want);
        let after = dev.counts().get(IoClass::Journal, false);
        let (requests, blocks) = (after.requests - before.requests, (after.bytes - before.bytes) / 4096);
        eprintln!("cache {} KiB: {requests} journal read requests, {blocks} blocks", cache >> 10);
        if blocks_read.is_empty() {
            assert!(blocks > 1000, "the metadata is in the log");
            assert!(
                requests * 8 <= blocks,
                "{requests} requests for {blocks} blocks: the log is read a block at a time"
            );
        } else {
            assert!(
                blocks <= 2 * blocks_read[0],
                "a small cache thrashes: {blocks} blocks read against {}",
                blocks_read[0]
            );
        }
        blocks_read.push(blocks);
        vol.shutdown().unwrap();
    }
}

/// The jmap snapshot lies beside the image, in a directory others may write
/// to, and root reads and writes it. A symlink planted where it goes is not
/// followed at unmount (its target stays as it was; the snapshot replaces
/// the link, 0600). A snapshot someone else could have written (another
/// owner, writable by others, a symlink to one) is not read. One forged with
/// a valid checksum (two copies swapped, a copy moved to another
/// transaction) is refused because the log says otherwise. Each time the
/// mount scans the log and serves the right tree.
#[test]
fn a_planted_or_forged_jmap_snapshot_is_not_trusted() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let img = common::make_image(work.path(), "forge.img", 128, &["-b", "4096", "-J", "size=16"], &empty);
    let snap = work.path().join("forge.img.jmap");
    let victim = work.path().join("victim");
    std::fs::write(&victim, b"not for the daemon").unwrap();
    let open_lazy = || {
        let opts =
            VolumeOptions { read_only: false, lazy: true, jmap_snapshot: Some(snap.clone()), ..Default::default() };
        Volume::open(Arc::new(FileDevice::open(&img, true).unwrap()), opts).unwrap()
    };
    let vol = open_lazy();
    let want = workload(&vol, 500);
    std::os::unix::fs::symlink(&victim, &snap).unwrap();
    vol.shutdown().unwrap();
    drop(vol);
    assert_eq!(std::fs::read(&victim).unwrap(), b"not for the daemon", "the symlink was not followed");
    let m = std::fs::symlink_metadata(&snap).unwrap();
    assert!(m.file_type().is_file() && m.mode() & 0o777 == 0o600, "the snapshot replaced the link: {m:?}");

    // The entries end the file, before the crc32c: static u64, jblock u64,
    // sequence u32, escaped u8; their count is at byte 64.
    const ENTRY: usize = 21;
    let entry_at = |b: &[u8], i: usize| {
        let n = u64::from_le_bytes(b[64..72].try_into().unwrap()) as usize;
        assert!(n > 10, "a workload leaves copies in the log");
        b.len() - 4 - (n - i % n) * ENTRY
    };
    let reseal = |mut b: Vec<u8>| {
        let body = b.len() - 4;
        let crc = ondisk::csum::crc32c(!0, &b[..body]);
        b[body..].copy_from_slice(&crc.to_le_bytes());
        b
    };
    let swap_two = move |good: &[u8]| {
        let mut b = good.to_vec();
        let (x, y) = (entry_at(&b, 1) + 8, entry_at(&b, 7) + 8);
        let (jx, jy) = (b[x..x + 8].to_vec(), b[y..y + 8].to_vec());
        b[x..x + 8].copy_from_slice(&jy);
        b[y..y + 8].copy_from_slice(&jx);
        reseal(b)
    };
    let resequence = move |good: &[u8]| {
        let mut b = good.to_vec();
        let s = entry_at(&b, 3) + 16;
        let seq = u32::from_le_bytes(b[s..s + 4].try_into().unwrap());
        b[s..s + 4].copy_from_slice(&seq.wrapping_sub(1).to_le_bytes());
        reseal(b)
    };
    let elsewhere = work.path().join("good-copy");
    // What to put at the snapshot's path, made from the snapshot the last unmount wrote.
    type Plant<'a> = Box<dyn Fn(&Path, &[u8]) + 'a>;
    type Forge = Box<dyn Fn(&[u8]) -> Vec<u8>>;
    let file = |forge: Forge, mode: u32, uid: Option<u32>| -> Plant<'_> {
        Box::new(move |p: &Path, good: &[u8]| {
            let _ = std::fs::remove_file(p);
            std::fs::write(p, forge(good)).unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
            if let Some(uid) = uid {
                std::os::unix::fs::chown(p, Some(uid), None).unwrap();
            }
        })
    };
    let same = || -> Forge { Box::new(|g: &[u8]| g.to_vec()) };
    let rounds: Vec<(&str, Plant<'_>, Option<&str>)> = vec![
        ("two copies swapped", file(Box::new(swap_two), 0o600, None), Some("does not match the log")),
        (
            "a copy moved to another transaction",
            file(Box::new(resequence), 0o600, None),
            Some("does not match the log"),
        ),
        ("another owner", file(same(), 0o600, Some(12345)), Some("owned by uid 12345")),
        ("writable by others", file(same(), 0o666, None), Some("writable by others")),
        (
            "a symlink to a good snapshot",
            Box::new(|p: &Path, good: &[u8]| {
                let _ = std::fs::remove_file(p);
                std::fs::write(&elsewhere, good).unwrap();
                std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
                std::os::unix::fs::symlink(&elsewhere, p).unwrap();
            }),
            Some("symbolic link"),
        ),
        ("the real one (control)", file(same(), 0o600, None), None),
    ];
    for (what, plant, refused) in rounds {
        let good = std::fs::read(&snap).unwrap();
        plant(&snap, &good);
        let vol = open_lazy();
        let j = vol.journal().unwrap();
        assert_eq!(j.from_snapshot, refused.is_none(), "{what}: used {}", j.from_snapshot);
        match (refused, &j.snapshot_refused) {
            (Some(why), Some(said)) => assert!(said.contains(why), "{what}: refused for {said}"),
            (None, None) => {}
            (want_why, said) => panic!("{what}: expected {want_why:?}, got {said:?}"),
        }
        assert!(std::fs::symlink_metadata(&snap).is_err(), "{what}: removed at mount, whatever its verdict");
        assert_eq!(read_tree(&vol), want, "{what}: the tree served");
        vol.shutdown().unwrap();
        drop(vol);
    }
    assert_eq!(std::fs::read(&victim).unwrap(), b"not for the daemon");
    common::e2fsck_clean_after_replay(&img);
}
