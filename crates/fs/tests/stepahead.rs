//! StepAhead's first slice: the prefetcher never changes what a path resolves
//! to, even from a stale knowledge base, and for a deep path in a cold cache it
//! fetches exactly what resolution then needs.

mod common;

use blockdev::{BlockDevice, FileDevice, IoClass, ReadRequest};
use fs::stepahead::{self, DirKind, KnowledgeBase};
use fs::{CreateKind, FsError, Volume, VolumeOptions, ROOT_INO};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// A deep chain with siblings at every level, a big directory and one of long names.
fn populate(dir: &Path) {
    let mut p = dir.to_path_buf();
    for level in 0..10 {
        p = p.join(format!("level-{level}"));
        std::fs::create_dir_all(&p).unwrap();
        for s in 0..20 {
            std::fs::write(p.join(format!("file-{s}")), format!("{level}/{s}")).unwrap();
        }
        for s in 0..3 {
            std::fs::create_dir_all(p.join(format!("side-{s}"))).unwrap();
        }
    }
    std::fs::write(p.join("target"), b"deep").unwrap();
    std::fs::create_dir_all(dir.join("big/inner")).unwrap();
    std::fs::write(dir.join("big/inner/leaf"), b"x").unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("big/f-{i}")), b"").unwrap();
    }
    std::fs::create_dir_all(dir.join("wide")).unwrap();
    for i in 0..200 {
        std::fs::write(dir.join("wide").join(format!("n{i:0100}")), b"").unwrap();
    }
    std::fs::create_dir_all(dir.join("wide/zz-last")).unwrap();
    std::fs::write(dir.join("wide/zz-last/f"), b"y").unwrap();
}

/// (linear image, htree image) or None where mkfs.ext4 is missing.
fn images() -> Option<(tempfile::TempDir, PathBuf, PathBuf)> {
    if !common::have_mkfs() {
        common::skip("mkfs.ext4 not installed");
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    populate(&src);
    let linear = common::make_image(work.path(), "linear.img", 64, &[], &src);
    let hashed = common::make_image(work.path(), "htree.img", 64, &[], &src);
    let out = Command::new("e2fsck").args(["-fyD"]).arg(&hashed).output().expect("run e2fsck");
    assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck -D: {}", String::from_utf8_lossy(&out.stdout));
    assert_ne!(common::debugfs_flags(&hashed, "big") & 0x1000, 0, "big is indexed");
    assert_eq!(common::debugfs_flags(&linear, "big") & 0x1000, 0, "big is linear");
    Some((work, linear, hashed))
}

fn open(img: &Path) -> Volume {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, false).unwrap());
    Volume::open(dev, VolumeOptions::default()).unwrap()
}

/// The classes of each `read_batch` a device received, and its single reads.
#[derive(Default)]
struct BatchLog {
    batches: std::sync::Mutex<Vec<Vec<IoClass>>>,
    reads: std::sync::atomic::AtomicUsize,
}

struct Recording {
    inner: FileDevice,
    log: Arc<BatchLog>,
}

impl BlockDevice for Recording {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8], class: IoClass) -> std::io::Result<()> {
        self.log.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.read_at(offset, buf, class)
    }
    fn write_at(&self, offset: u64, buf: &[u8], class: IoClass) -> std::io::Result<()> {
        self.inner.write_at(offset, buf, class)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn read_batch(&self, requests: &mut [ReadRequest<'_>]) -> std::io::Result<()> {
        self.log.batches.lock().unwrap().push(requests.iter().map(|r| r.class).collect());
        self.inner.read_batch(requests)
    }
}

/// What a resolution found, comparable across runs: (inode, mode, size) or the errno.
type Outcome = std::result::Result<(u32, u16, u64), i32>;

/// Plain step-by-step resolution, as the library API does it.
fn resolve(vol: &Volume, start: u32, path: &[&[u8]]) -> Outcome {
    let step = || -> fs::Result<(u32, u16, u64)> {
        let mut inode = vol.inode(start)?;
        for name in path {
            let (child, _) = vol.lookup(&inode, name)?.ok_or(FsError::NotFound)?;
            inode = vol.inode(child)?;
        }
        Ok((inode.ino, inode.base.mode, inode.size()))
    };
    step().map_err(|e| e.errno())
}

fn split(path: &str) -> Vec<&[u8]> {
    path.split('/').filter(|c| !c.is_empty()).map(str::as_bytes).collect()
}

/// Every path in the tree (by a plain walk), plus names that do not exist and
/// paths through files.
fn all_paths(vol: &Volume) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![(ROOT_INO, String::new())];
    while let Some((dir, prefix)) = todo.pop() {
        vol.read_dir(&vol.inode(dir).unwrap(), 0, &mut |e| {
            if e.name != b"." && e.name != b".." {
                let p = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
                if e.file_type == ondisk::dir::ftype::DIR {
                    todo.push((e.ino, p.clone()));
                    out.push(format!("{p}/no-such-name"));
                    out.push(format!("{p}/.."));
                } else {
                    out.push(format!("{p}/through-a-file"));
                }
                out.push(p);
            }
            true
        })
        .unwrap();
    }
    out.sort();
    out
}

/// The true KB with a third of everything made wrong: entries re-pointed at
/// other directories, invalid or unrelated inodes with made-up entry blocks,
/// block lists moved anywhere (some past the volume's end), some directories
/// replaced by garbage. Plans then go deep through wrong places.
fn stale_kb(vol: &Volume, dirs: &[u32], paths: &[String]) -> KnowledgeBase {
    let mut kb = KnowledgeBase::new();
    stepahead::learn_tree(vol, &mut kb, ROOT_INO).unwrap();
    let total = vol.sb.blocks_count();
    let inodes = vol.sb.f.inodes_count;
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for p in paths {
        let (parent, name) = p.rsplit_once('/').unwrap();
        let Ok((d, _, _)) = resolve(vol, ROOT_INO, &split(parent)) else { continue };
        if rnd() % 3 != 0 {
            continue;
        }
        let child = match rnd() % 4 {
            0 => u32::MAX,
            1 => inodes + 1,
            2 => (rnd() % u64::from(inodes)) as u32 + 1,
            _ => dirs[(rnd() % dirs.len() as u64) as usize],
        };
        kb.note_entry(d, name.as_bytes(), child, Some(rnd() % 70));
    }
    let garbage: Vec<&[u8]> = paths.iter().filter_map(|p| p.rsplit('/').next()).map(str::as_bytes).collect();
    for &d in dirs {
        let n = kb.dir_blocks(d).map_or(1, <[u64]>::len) + (rnd() % 3) as usize;
        let blocks: Vec<u64> = (0..n).map(|_| rnd() % (total + total / 4)).collect();
        match rnd() % 6 {
            0 | 1 => kb.set_dir_blocks(d, &blocks),
            // Not the root: every plan would end there.
            2 if d != ROOT_INO => {
                let kind = if rnd() % 2 == 0 { DirKind::Linear } else { DirKind::Htree };
                let mut entries: Vec<(&[u8], u32, u64)> = Vec::new();
                for g in &garbage {
                    if rnd() % 8 == 0 {
                        entries.push((*g, dirs[(rnd() % dirs.len() as u64) as usize], rnd() % 70_000));
                    }
                }
                kb.learn_dir(d, kind, &blocks, entries);
            }
            _ => {}
        }
    }
    kb
}

/// The inode of every directory among `paths`, and the root's.
fn dir_inodes(vol: &Volume, paths: &[String]) -> Vec<u32> {
    paths
        .iter()
        .filter_map(|p| resolve(vol, ROOT_INO, &split(p)).ok())
        .filter(|&(_, mode, _)| mode & 0o170000 == 0o040000)
        .map(|(ino, _, _)| ino)
        .chain([ROOT_INO])
        .collect()
}

fn check_prefetch_never_changes_results(img: &Path) {
    let base = open(img);
    let paths = all_paths(&base);
    assert!(paths.len() > 3400, "{}", paths.len());
    let mut truth = KnowledgeBase::new();
    let dirs_learnt = stepahead::learn_tree(&base, &mut truth, ROOT_INO).unwrap();
    let dirs = dir_inodes(&base, &paths);
    assert!(dirs.len() >= dirs_learnt);
    let stale = stale_kb(&base, &dirs, &paths);
    let expected: Vec<Outcome> = paths.iter().map(|p| resolve(&base, ROOT_INO, &split(p))).collect();
    assert!(expected.iter().any(|o| o.is_err()) && expected.iter().any(|o| o.is_ok()));
    for (label, kb) in [("true KB", &truth), ("stale KB", &stale)] {
        // A fresh volume with a small cache, so prefetched blocks also get evicted.
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, false).unwrap());
        let vol = Volume::open(dev, VolumeOptions { cache_bytes: 256 << 10, ..Default::default() }).unwrap();
        let (mut invalid, mut steps) = (0, 0);
        for (p, want) in paths.iter().zip(&expected) {
            let comps = split(p);
            let plan = stepahead::plan(&vol, kb, ROOT_INO, &comps);
            let st = vol.prefetch(&plan.blocks).unwrap();
            invalid += st.invalid;
            steps += plan.known;
            assert_eq!(&resolve(&vol, ROOT_INO, &comps), want, "{label}: {p}");
        }
        eprintln!(
            "{}: {label}: {} paths identical ({steps} planned steps, {invalid} invalid hinted blocks skipped)",
            img.display(),
            paths.len()
        );
        if label == "stale KB" {
            assert!(invalid > 0, "the stale KB sent the prefetcher outside the volume");
        }
    }
}

#[test]
fn prefetch_never_changes_results() {
    let Some((_work, linear, hashed)) = images() else { return };
    check_prefetch_never_changes_results(&linear);
    check_prefetch_never_changes_results(&hashed);
}

fn check_plan_is_what_resolution_reads(img: &Path, path: &str) {
    let comps = split(path);
    let mut kb = KnowledgeBase::new();
    stepahead::learn_tree(&open(img), &mut kb, ROOT_INO).unwrap(); // warms only that volume
                                                                   // Cold: prefetch, then resolve without a single miss.
    let vol = open(img);
    let plan = stepahead::plan(&vol, &kb, ROOT_INO, &comps);
    assert_eq!(plan.known, comps.len(), "{path}: the KB knows every step");
    let st = vol.prefetch(&plan.blocks).unwrap();
    // Opening the volume may already have cached one (e.g. the root's inode block).
    assert_eq!((st.read + st.cached, st.invalid), (plan.blocks.len(), 0), "{st:?}");
    let before = vol.cache_stats();
    let got = resolve(&vol, ROOT_INO, &comps);
    let after = vol.cache_stats();
    assert!(got.is_ok(), "{path}: {got:?}");
    assert_eq!(after.misses - before.misses, 0, "{path}: misses after a prefetch");
    // Cold again, plain resolution: it reads every planned block (nothing wasted).
    let plain = open(img);
    let before = plain.cache_stats();
    assert_eq!(resolve(&plain, ROOT_INO, &comps), got);
    let misses = plain.cache_stats().misses - before.misses;
    let unused: Vec<u64> = plan.blocks.iter().copied().filter(|&b| !plain.is_cached(b)).collect();
    assert!(unused.is_empty(), "{path}: planned but never read: {unused:?}");
    eprintln!(
        "{}: {path}: {} steps, {} blocks planned in {} runs; plain resolution: {misses} serial misses",
        img.display(),
        comps.len(),
        plan.blocks.len(),
        st.runs
    );
}

#[test]
fn plan_is_exactly_what_a_cold_resolution_reads() {
    let Some((_work, linear, hashed)) = images() else { return };
    let deep = (0..10).map(|l| format!("level-{l}")).collect::<Vec<_>>().join("/") + "/target";
    for img in [&linear, &hashed] {
        for p in [deep.as_str(), "big/f-2999", "big/inner/leaf", "big/f-7", "wide/zz-last/f", "level-0/level-1/side-2"]
        {
            check_plan_is_what_resolution_reads(img, p);
        }
    }
}

#[test]
fn planning_stops_at_the_first_unknown_name() {
    let Some((_work, linear, _)) = images() else { return };
    let vol = open(&linear);
    let mut kb = KnowledgeBase::new();
    stepahead::learn_tree(&vol, &mut kb, ROOT_INO).unwrap();
    let full = stepahead::plan(&vol, &kb, ROOT_INO, &split("level-0/level-1/level-2/file-3"));
    assert_eq!(full.known, 4);
    let level1 = resolve(&vol, ROOT_INO, &split("level-0/level-1")).unwrap().0;
    kb.forget_dir(level1);
    let cut = stepahead::plan(&vol, &kb, ROOT_INO, &split("level-0/level-1/level-2/file-3"));
    assert_eq!(cut.known, 2, "stops at level-1, whose contents are unknown");
    assert!(full.blocks.starts_with(&cut.blocks));
    let none = stepahead::plan(&vol, &kb, ROOT_INO, &split("missing/level-1"));
    assert_eq!(none.known, 0);
}

/// Lazy mode: the newest copies of modified directory and inode blocks live in
/// the journal; a prefetch must read them from there, as a miss does.
#[test]
fn lazy_prefetch_reads_newest_copies_from_the_journal() {
    let Some((_work, linear, _)) = images() else { return };
    let batches = Arc::new(BatchLog::default());
    let dev: Arc<dyn BlockDevice> =
        Arc::new(Recording { inner: FileDevice::open(&linear, true).unwrap(), log: batches.clone() });
    let opts = VolumeOptions { read_only: false, lazy: true, cache_bytes: 256 << 10, ..Default::default() };
    let vol = Volume::open(dev, opts).unwrap();
    // Change existing directories (their home copies go stale) and add new ones.
    let mut paths = Vec::new();
    for (i, dir) in ["level-0", "level-0/level-1", "big", "wide"].iter().enumerate() {
        let d = resolve(&vol, ROOT_INO, &split(dir)).unwrap().0;
        for j in 0..40 {
            let name = format!("new-{i}-{j}");
            let sub = vol.create(d, name.as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
            vol.create(sub.ino, b"inside", CreateKind::File, 0o644, 0, 0).unwrap();
            paths.push(format!("{dir}/{name}/inside"));
        }
        vol.unlink(d, if *dir == "big" { b"f-7" } else { b"file-3" }).ok();
        paths.push(format!("{dir}/file-3"));
        paths.push(format!("{dir}/f-7"));
    }
    vol.sync().unwrap();
    let mut kb = KnowledgeBase::new();
    stepahead::learn_tree(&vol, &mut kb, ROOT_INO).unwrap();
    let expected: Vec<Outcome> = paths.iter().map(|p| resolve(&vol, ROOT_INO, &split(p))).collect();
    assert!(expected.iter().filter(|o| o.is_ok()).count() >= 160);
    // Churn the small cache so the prefetches below find little in it.
    for p in all_paths(&vol).iter().take(3000) {
        let _ = resolve(&vol, ROOT_INO, &split(p));
    }
    let mut read = 0;
    let (mut mixed, mut single_reads) = (0, 0);
    for (p, want) in paths.iter().zip(&expected) {
        let comps = split(p);
        let reads_before = batches.reads.load(std::sync::atomic::Ordering::SeqCst);
        batches.batches.lock().unwrap().clear();
        let st = vol.prefetch(&stepahead::plan(&vol, &kb, ROOT_INO, &comps).blocks).unwrap();
        read += st.read;
        // Home blocks and journal copies go to the device together: one batch.
        let log = std::mem::take(&mut *batches.batches.lock().unwrap());
        let singles = batches.reads.load(std::sync::atomic::Ordering::SeqCst) - reads_before;
        assert!(log.len() + singles <= 1, "{p}: {} batches and {singles} single reads for one prefetch", log.len());
        if log.iter().any(|b| b.contains(&IoClass::Journal) && b.contains(&IoClass::Metadata)) {
            mixed += 1;
        }
        single_reads += singles;
        assert_eq!(&resolve(&vol, ROOT_INO, &comps), want, "{p}");
    }
    assert!(read > 0, "the prefetches read something");
    assert!(mixed > 0, "some batches held journal copies and home blocks together");
    eprintln!("lazy: {read} blocks prefetched, {mixed} batches mixing journal copies and home blocks, {single_reads} single reads");
    assert!(vol.journal_stats().is_some());
    vol.shutdown().unwrap();
}

fn open_with_stepahead(img: &Path, writable: bool, lazy: bool, cache_bytes: usize) -> Volume {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, writable).unwrap());
    let opts = VolumeOptions {
        read_only: !writable,
        lazy,
        cache_bytes,
        stepahead: Some(Default::default()),
        ..Default::default()
    };
    Volume::open(dev, opts).unwrap()
}

/// Every directory's listing, by path, as a `find`-like walk sees it: each
/// listing starts with the listing hint (as FUSE readdir does), then every
/// child's inode is read (as readdirplus does).
fn walk(vol: &Volume) -> Vec<(String, u32, u16, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![(ROOT_INO, String::new())];
    while let Some((dir, prefix)) = todo.pop() {
        let inode = vol.inode(dir).unwrap();
        vol.hint_listing(&inode, fs::Cred { uid: 0, gid: 0 });
        let mut entries = Vec::new();
        vol.read_dir(&inode, 0, &mut |e| {
            entries.push(e);
            true
        })
        .unwrap();
        for e in entries {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let child = vol.inode(e.ino).unwrap();
            let p = format!("{prefix}/{}", String::from_utf8_lossy(&e.name));
            out.push((p.clone(), child.ino, child.base.mode, child.size()));
            if child.is_dir() {
                todo.push((child.ino, p));
            }
        }
    }
    out.sort();
    out
}

/// A cold walk with the listing hints finds exactly what one without finds,
/// with fewer translation misses, and the figures add up.
#[test]
fn listing_hints_raise_the_hit_rate_and_change_nothing() {
    let Some((_work, linear, hashed)) = images() else { return };
    for img in [&linear, &hashed] {
        let plain = open(img);
        let with = open_with_stepahead(img, false, false, 64 << 20);
        let (a, b) = (walk(&plain), walk(&with));
        assert_eq!(a, b);
        let (s0, s1) = (plain.stepahead_stats(true), with.stepahead_stats(true));
        eprintln!("{}: hit rate {:.3} -> {:.3}; {s1:?}", img.display(), s0.hit_rate(), s1.hit_rate());
        assert!(!s0.enabled && s0.prefetch_blocks == 0 && s0.kb_entries == 0);
        assert!(s1.enabled && s1.prefetch_blocks > 0 && s1.prefetch_batches > 0);
        assert!(s1.translation_misses < s0.translation_misses, "{s0:?} vs {s1:?}");
        assert!(s1.hit_rate() > s0.hit_rate());
        // Every directory was listed: the KB knows every entry (".", ".." too).
        assert_eq!(s1.kb_dirs as usize, a.iter().filter(|x| x.2 & 0o170000 == 0o040000).count() + 1);
        assert!(s1.kb_entries as usize >= a.len() && s1.kb_bytes > 0);
        assert_eq!(s1.prefetch_used_blocks + s1.prefetch_wasted_blocks, s1.prefetch_blocks, "final figures add up");
        assert!(
            s1.prefetch_wasted_blocks * 4 < s1.prefetch_blocks,
            "a full walk uses most of what was prefetched: {s1:?}"
        );
    }
}

/// A translation counts once, however many blocks it reads: a cold lookup
/// that reads is a miss, the same lookup again a hit, and so is a failed
/// lookup in a directory already read.
#[test]
fn lookups_count_once_per_translation() {
    let Some((_work, linear, _)) = images() else { return };
    let vol = open(&linear);
    let root = vol.inode(ROOT_INO).unwrap();
    let find = |name: &[u8]| vol.translate(|| vol.lookup(&root, name).unwrap().map(|(ino, _)| vol.inode(ino).unwrap()));
    let before = vol.stepahead_stats(false);
    assert_eq!((before.lookup_hits, before.lookup_misses), (0, 0));
    assert!(find(b"level-0").is_some());
    let cold = vol.stepahead_stats(false);
    assert_eq!((cold.lookup_hits, cold.lookup_misses), (0, 1), "{cold:?}");
    assert!(cold.translation_misses >= 1);
    assert!(find(b"level-0").is_some());
    assert!(find(b"no-such-name").is_none());
    let warm = vol.stepahead_stats(false);
    assert_eq!((warm.lookup_hits, warm.lookup_misses), (2, 1), "{warm:?}");
    assert!((warm.lookup_hit_rate() - 2.0 / 3.0).abs() < 1e-9);
}

/// Lookups and library resolutions through a volume whose KB is stale on
/// purpose (the stale KB of `stale_kb`) give exactly the plain results.
#[test]
fn hints_from_a_stale_kb_never_change_results() {
    let Some((_work, linear, hashed)) = images() else { return };
    for img in [&linear, &hashed] {
        let base = open(img);
        let paths = all_paths(&base);
        let dirs = dir_inodes(&base, &paths);
        let stale = stale_kb(&base, &dirs, &paths);
        let expected: Vec<Outcome> = paths.iter().map(|p| resolve(&base, ROOT_INO, &split(p))).collect();
        let vol = open_with_stepahead(img, false, false, 256 << 10);
        vol.with_kb_mut(|kb| *kb = stale).unwrap();
        for (p, want) in paths.iter().zip(&expected) {
            let comps = split(p);
            let got = vol.resolve(ROOT_INO, &comps).map(|i| (i.ino, i.base.mode, i.size())).map_err(|e| e.errno());
            assert_eq!(&got, want, "{p}");
            // FUSE-style: one lookup hint per component.
            let mut dir = ROOT_INO;
            for c in &comps {
                vol.hint_lookup(dir, c);
                let Ok(Some((child, _))) = vol.lookup(&vol.inode(dir).unwrap(), c) else { break };
                let Ok(child) = vol.inode(child) else { break };
                vol.hint_looked_up(&child);
                dir = child.ino;
            }
        }
        let st = vol.stepahead_stats(true);
        assert!(st.prefetch_blocks > 0, "{st:?}");
        eprintln!("{}: {} stale-KB resolutions identical; {st:?}", img.display(), paths.len());
    }
}

/// The KB as the in-band updates left it must equal one learnt afresh from
/// the volume, for every directory it knows: blocks, kind, interior blocks,
/// and per name the child and the entry's block.
fn assert_kb_matches_volume(vol: &Volume, live_dirs: &std::collections::HashSet<u32>) -> usize {
    let known = vol.with_kb(|kb| kb.known_dirs()).unwrap();
    let mut checked = 0;
    for d in known {
        assert!(live_dirs.contains(&d), "the KB still knows removed directory {d}");
        let mut fresh = KnowledgeBase::new();
        stepahead::learn(vol, &mut fresh, d).unwrap();
        let mut names = Vec::new();
        vol.read_dir(&vol.inode(d).unwrap(), 0, &mut |e| {
            names.push(e.name);
            true
        })
        .unwrap();
        vol.with_kb(|kb| {
            assert_eq!(kb.dir_blocks(d), fresh.dir_blocks(d), "blocks of {d}");
            assert_eq!(kb.dir_kind(d), fresh.dir_kind(d), "kind of {d}");
            assert_eq!(kb.index_blocks(d), fresh.index_blocks(d), "interior blocks of {d}");
            assert_eq!(kb.dir_len(d), fresh.dir_len(d), "entries of {d}");
            for n in &names {
                assert_eq!(kb.hint(d, n), fresh.hint(d, n), "{d}/{}", String::from_utf8_lossy(n));
            }
        });
        checked += 1;
    }
    checked
}

/// Renames (within and across directories, of directories, over targets),
/// unlinks, links, rmdirs and a directory growing from one block to an htree
/// with split leaves: the in-band updates keep the KB equal to the volume.
#[test]
fn kb_follows_every_namespace_change() {
    let Some((work, src)) = common::setup_empty() else { return };
    for d in ["a/sub", "b", "c/deep/er"] {
        std::fs::create_dir_all(src.join(d)).unwrap();
    }
    for i in 0..30 {
        std::fs::write(src.join(format!("a/f{i}")), b"x").unwrap();
    }
    let img = common::make_image(work.path(), "kb.img", 64, &[], &src);
    for lazy in [false, true] {
        let copy = work.path().join(format!("kb-{lazy}.img"));
        std::fs::copy(&img, &copy).unwrap();
        let vol = open_with_stepahead(&copy, true, lazy, 8 << 20);
        walk(&vol); // learns every directory
        let id = |p: &str| resolve(&vol, ROOT_INO, &split(p)).unwrap().0;
        let (a, b, c, sub, deep) = (id("a"), id("b"), id("c"), id("a/sub"), id("c/deep"));
        let mut live: std::collections::HashSet<u32> =
            [ROOT_INO, a, b, c, sub, deep, id("c/deep/er"), id("lost+found")].into();
        // Growth: b from one block to an htree whose leaves split.
        for i in 0..1500 {
            let name = format!("grow-{i:05}-{}", "n".repeat(60));
            vol.create(b, name.as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
        }
        assert_eq!(vol.with_kb(|kb| kb.dir_kind(b)).unwrap(), Some(DirKind::Htree));
        assert!(vol.with_kb(|kb| kb.dir_blocks(b).map_or(0, <[u64]>::len)).unwrap() > 10);
        // Unlinks, links, renames of files within and across directories, over targets.
        for i in (0..1500).step_by(3) {
            vol.unlink(b, format!("grow-{i:05}-{}", "n".repeat(60)).as_bytes()).unwrap();
        }
        for i in 0..10 {
            let f = vol.resolve(a, &[format!("f{i}").as_bytes()]).unwrap().ino;
            vol.link(f, c, format!("link{i}").as_bytes()).unwrap();
            vol.rename(a, format!("f{i}").as_bytes(), a, format!("g{i}").as_bytes(), false, false).unwrap();
        }
        for i in 10..20 {
            vol.rename(a, format!("f{i}").as_bytes(), b, format!("moved{i}").as_bytes(), false, false).unwrap();
        }
        vol.rename(a, b"f20", a, b"g0", false, false).unwrap(); // over an existing name
        vol.rename(a, b"f21", c, b"link1", false, false).unwrap(); // over a link across directories
        vol.rename(a, b"f22", a, b"f23", false, true).unwrap(); // exchange
                                                                // Directories: moved (".." retargeted), created, removed.
        vol.rename(c, b"deep", b, b"deep-moved", false, false).unwrap();
        let fresh = vol.create(sub, b"fresh", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
        live.insert(fresh);
        vol.create(fresh, b"x", CreateKind::File, 0o644, 0, 0).unwrap();
        let gone = vol.create(a, b"gone", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
        // New directories are known from their mkdir on, without a listing.
        assert!(vol.with_kb(|kb| kb.knows(gone) && kb.knows(fresh)).unwrap());
        vol.rmdir(a, b"gone").unwrap();
        // A failing operation is rolled back, and so is what it told the KB.
        assert!(vol.rmdir(ROOT_INO, b"a").is_err());
        assert!(vol.create(b, b"moved10", CreateKind::File, 0o644, 0, 0).is_err());
        let checked = assert_kb_matches_volume(&vol, &live);
        assert_eq!(checked, live.len(), "every live directory is known");
        eprintln!("lazy={lazy}: KB equal to the volume in {checked} directories, {:?}", vol.stepahead_stats(false));
        vol.shutdown().unwrap();
    }
}

/// Lazy mode: a listing hint reads the journaled blocks it wants as the log
/// stretches a miss would read (many copies a request), not one block a
/// request, and a walk with the hints finds exactly what one without finds.
#[test]
fn lazy_hints_read_the_log_in_stretches() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "sa-stretch.img", 256, &["-b", "4096", "-J", "size=64"], &empty);
    {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
        let vol = Volume::open(dev, VolumeOptions { read_only: false, lazy: true, ..Default::default() }).unwrap();
        for i in 0..40 {
            let top = vol.create(ROOT_INO, format!("top-{i}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
            for k in 0..10 {
                let d = vol.create(top.ino, format!("d-{k}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
                vol.create(d.ino, b"f", CreateKind::File, 0o644, 0, 0).unwrap();
            }
        }
        vol.shutdown().unwrap();
    }
    let plain = {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
        let vol = Volume::open(dev, VolumeOptions { read_only: false, lazy: true, ..Default::default() }).unwrap();
        let w = walk(&vol);
        vol.shutdown().unwrap();
        w
    };
    assert_eq!(plain.len(), 40 * 21 + 1, "lost+found, 40 tops, 400 dirs, 400 files");
    let dev = Arc::new(blockdev::CountingDevice::new(Arc::new(FileDevice::open(&img, true).unwrap())));
    let opts =
        VolumeOptions { read_only: false, lazy: true, stepahead: Some(Default::default()), ..Default::default() };
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    let before = dev.counts().get(IoClass::Journal, false);
    assert_eq!(walk(&vol), plain);
    let after = dev.counts().get(IoClass::Journal, false);
    let (requests, blocks) = (after.requests - before.requests, (after.bytes - before.bytes) / 4096);
    let st = vol.stepahead_stats(true);
    eprintln!("lazy walk with hints: {requests} journal read requests, {blocks} blocks; {st:?}");
    // The hints ran ahead of the walk: it missed (nearly) nothing itself.
    assert!(st.prefetch_batches > 0 && st.prefetch_blocks > 0 && st.translation_misses < 10, "{st:?}");
    assert!(requests * 8 <= blocks, "{requests} requests for {blocks} blocks: the log is read a block at a time");
    vol.shutdown().unwrap();
}

/// Through FUSE each lookup hint runs just before its lookup: when what it
/// would read comes down to one short request, the lookup reads it itself
/// (with its readahead) and the hint reads nothing. So lookup hints never
/// issue a lone request, and results stay the same.
#[test]
fn lookup_hints_leave_lone_requests_to_the_lookup() {
    let Some((_work, linear, hashed)) = images() else { return };
    for img in [&linear, &hashed] {
        let base = open(img);
        let paths = all_paths(&base);
        let expected: Vec<Outcome> = paths.iter().map(|p| resolve(&base, ROOT_INO, &split(p))).collect();
        let mut truth = KnowledgeBase::new();
        stepahead::learn_tree(&base, &mut truth, ROOT_INO).unwrap();
        let log = Arc::new(BatchLog::default());
        let dev: Arc<dyn BlockDevice> =
            Arc::new(Recording { inner: FileDevice::open(img, false).unwrap(), log: log.clone() });
        let opts = VolumeOptions { stepahead: Some(Default::default()), ..Default::default() };
        let vol = Volume::open(dev, opts).unwrap();
        vol.with_kb_mut(|kb| *kb = truth).unwrap();
        let single = || log.reads.load(std::sync::atomic::Ordering::SeqCst);
        for (p, want) in paths.iter().zip(&expected) {
            let mut dir = ROOT_INO;
            let mut got: Outcome = Err(0);
            for c in split(p) {
                let n = single();
                vol.hint_lookup(dir, c);
                assert_eq!(single(), n, "{p}: the lookup hint for {} made a lone read", String::from_utf8_lossy(c));
                let found = vol.lookup(&vol.inode(dir).unwrap(), c).map_err(|e| e.errno());
                let Ok(Some((child, _))) = found else {
                    got = Err(found.err().unwrap_or(libc_enoent()));
                    break;
                };
                let child = vol.inode(child).unwrap();
                let n = single();
                vol.hint_looked_up(&child);
                assert_eq!(single(), n, "{p}: the looked-up hint made a lone read");
                got = Ok((child.ino, child.base.mode, child.size()));
                dir = child.ino;
            }
            if want.is_ok() {
                assert_eq!(&got, want, "{p}");
            }
        }
        let st = vol.stepahead_stats(true);
        eprintln!("{}: {} paths by FUSE-style lookups; {st:?}", img.display(), paths.len());
        assert!(st.prefetch_lone_skips > 0, "{st:?}");
    }
}

fn libc_enoent() -> i32 {
    2
}

/// Blocks given in any order are read as contiguous runs: one request for
/// three adjacent blocks listed backwards, in both journal modes.
#[test]
fn prefetch_reads_adjacent_blocks_as_one_run() {
    let Some((work, linear, _)) = images() else { return };
    let copy = work.path().join("runs-lazy.img");
    std::fs::copy(&linear, &copy).unwrap();
    for (label, vol) in [("ordered", open(&linear)), ("lazy", open_with_stepahead(&copy, true, true, 8 << 20))] {
        let st = vol.prefetch(&[5002, 5001, 5000]).unwrap();
        assert_eq!((st.read, st.runs), (3, 1), "{label}: {st:?}");
    }
}

/// A path as the daemon's hint socket hands it over: normalised lexically.
fn hint_components(path: &str) -> Vec<&[u8]> {
    let mut out: Vec<&[u8]> = Vec::new();
    for c in split(path) {
        if c == b".." {
            out.pop();
        } else {
            out.push(c);
        }
    }
    out
}

/// A hint's sender that may look everywhere.
const ROOT: fs::Cred = fs::Cred { uid: 0, gid: 0 };

fn open_with_path_hints(img: &Path, cache_bytes: usize, path_ahead: bool) -> Volume {
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, false).unwrap());
    let sa = stepahead::StepAheadOptions { path_ahead, ..Default::default() };
    Volume::open(dev, VolumeOptions { cache_bytes, stepahead: Some(sa), ..Default::default() }).unwrap()
}

/// Full-path hints (the preload library's) before every resolution, from a
/// true, an empty and a stale KB, with and without the read-ahead of new
/// directories' parents: the results are exactly the plain ones (errors too).
#[test]
fn path_hints_never_change_results() {
    let Some((_work, linear, hashed)) = images() else { return };
    for img in [&linear, &hashed] {
        let base = open(img);
        let paths = all_paths(&base);
        let dirs = dir_inodes(&base, &paths);
        let expected: Vec<Outcome> = paths.iter().map(|p| resolve(&base, ROOT_INO, &split(p))).collect();
        assert!(
            expected.iter().any(|o| *o == Err(libc_enoent())) && expected.contains(&Err(20)),
            "ENOENT and ENOTDIR cases"
        );
        for path_ahead in [true, false] {
            for kb in ["true", "empty", "stale"] {
                let vol = open_with_path_hints(img, 256 << 10, path_ahead);
                match kb {
                    "true" => {
                        vol.with_kb_mut(|k| stepahead::learn_tree(&base, k, ROOT_INO).map(|_| ())).unwrap().unwrap()
                    }
                    "stale" => vol.with_kb_mut(|k| *k = stale_kb(&base, &dirs, &paths)).unwrap(),
                    _ => {}
                }
                let mut state = stepahead::PathHints::default();
                for (p, want) in paths.iter().zip(&expected) {
                    vol.hint_path(&hint_components(p), ROOT, &mut state);
                    assert_eq!(&resolve(&vol, ROOT_INO, &split(p)), want, "{kb} KB, ahead {path_ahead}: {p}");
                }
                let st = vol.stepahead_stats(true);
                assert_eq!(st.path_hints, paths.len() as u64);
                assert_eq!(st.path_hints_dropped, 0, "{st:?}");
                eprintln!(
                    "{}: {kb} KB, ahead {path_ahead}: {} hinted resolutions identical; {st:?}",
                    img.display(),
                    paths.len()
                );
            }
        }
    }
}

/// One hint for a deep path on a cold cache reads everything its resolution
/// needs, so the resolution after it reads nothing from the device: with a
/// KB that knows the path in one batch; without, by reading ahead each
/// directory it did not know (which teaches the KB the next step).
#[test]
fn a_path_hint_prefetches_a_cold_deep_path() {
    let Some((_work, linear, hashed)) = images() else { return };
    let deep = "level-0/level-1/level-2/level-3/level-4/level-5/level-6/level-7/level-8/level-9/target";
    for img in [&linear, &hashed] {
        let base = open(img);
        let want = resolve(&base, ROOT_INO, &split(deep));
        assert!(want.is_ok());
        for known in [true, false] {
            // Without a KB, only the read-ahead of new directories finds the path.
            let vol = open_with_path_hints(img, 64 << 20, !known);
            if known {
                vol.with_kb_mut(|k| stepahead::learn_tree(&base, k, ROOT_INO).map(|_| ())).unwrap().unwrap();
            }
            let before = vol.stepahead_stats(false);
            let read = vol.hint_path(&split(deep), ROOT, &mut stepahead::PathHints::default());
            let hinted = vol.stepahead_stats(false);
            assert_eq!(resolve(&vol, ROOT_INO, &split(deep)), want);
            let after = vol.stepahead_stats(false);
            eprintln!(
                "{}: KB knows the path: {known}; {read} blocks, {} batches; misses during the resolution: {}",
                img.display(),
                hinted.prefetch_batches - before.prefetch_batches,
                after.translation_misses - hinted.translation_misses
            );
            assert_eq!(hinted.path_hint_blocks, read as u64);
            assert_eq!(after.translation_misses, hinted.translation_misses, "the resolution found everything cached");
            if known {
                assert!(read >= 11, "an inode block per level at least: {read}");
                assert_eq!(hinted.prefetch_batches - before.prefetch_batches, 1, "a known path is one batch");
            } else {
                assert!(read >= 11, "{read}");
            }
        }
    }
}

/// Path hints come from any local user: a hint reads and learns only what
/// its sender could look up itself. `private/` (0700, uid 1000) holds a
/// subdirectory and 40 files; `shared/` (0750, uid 1000) has an ACL that lets
/// uid 2000 in; `pub/` is open. On a cold volume, a hint for a path inside
/// each from several senders: the owner, root and the named user go in;
/// others (even of the owning group: it has no bits) stop at the door, with
/// the directory neither read nor learnt, and are counted as denied.
#[test]
fn path_hints_read_only_what_the_sender_may_search() {
    use fs::stepahead::PathHints;
    use fs::{CreateKind, Cred, Mapping, SetAttr, XattrMode};
    let Some((work, src)) = common::setup_empty() else { return };
    std::fs::create_dir_all(src.join("pub/open")).unwrap();
    std::fs::write(src.join("pub/open/f"), b"x").unwrap();
    let img = common::make_image(work.path(), "perm.img", 32, &[], &src);
    // (directory inode, its first block) of private/, private/inner, shared/.
    let (private, inner, shared) = {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&img, true).unwrap());
        let vol = Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap();
        vol.setattr(ROOT_INO, &SetAttr { mode: Some(0o755), ..Default::default() }).unwrap();
        let dir = |parent: u32, name: &str, mode: u16| {
            vol.create(parent, name.as_bytes(), CreateKind::Dir, mode, 1000, 1000).unwrap()
        };
        let p = dir(ROOT_INO, "private", 0o700);
        let i = dir(p.ino, "inner", 0o755);
        vol.create(i.ino, b"deep", CreateKind::File, 0o644, 1000, 1000).unwrap();
        for n in 0..40 {
            vol.create(p.ino, format!("f{n}").as_bytes(), CreateKind::File, 0o644, 1000, 1000).unwrap();
        }
        let s = dir(ROOT_INO, "shared", 0o750);
        vol.create(s.ino, b"doc", CreateKind::File, 0o644, 1000, 1000).unwrap();
        let acl = fs::acl::Acl(
            [
                (fs::acl::USER_OBJ, 7, u32::MAX),
                (fs::acl::USER, 5, 2000),
                (fs::acl::GROUP_OBJ, 5, u32::MAX),
                (fs::acl::MASK, 5, u32::MAX),
                (fs::acl::OTHER, 0, u32::MAX),
            ]
            .into_iter()
            .map(|(tag, perm, id)| fs::acl::Entry { tag, perm, id })
            .collect(),
        );
        vol.set_xattr(s.ino, b"system.posix_acl_access", &acl.to_xattr(), XattrMode::Any).unwrap();
        let first = |ino: u32| match vol.map_block(&vol.inode(ino).unwrap(), 0, 1).unwrap() {
            Mapping::Mapped { pblk, .. } => (ino, pblk),
            m => panic!("{ino}: {m:?}"),
        };
        let out = (first(p.ino), first(i.ino), first(s.ino));
        vol.shutdown().unwrap();
        out
    };
    let cred = |uid, gid| Cred { uid, gid };
    let cases = [
        ("private/inner/deep", cred(2000, 2000), false),
        ("private/inner/deep", cred(2000, 1000), false),
        ("private/inner/deep", cred(1000, 1000), true),
        ("private/inner/deep", cred(0, 0), true),
        ("shared/doc", cred(2000, 2000), true),
        ("shared/doc", cred(3000, 3000), false),
    ];
    for path_ahead in [true, false] {
        for (path, who, allowed) in cases {
            let (dir, block) = if path.starts_with("shared") { shared } else { private };
            let what = format!("{path} from {who:?}, ahead {path_ahead}");
            let vol = open_with_path_hints(&img, 64 << 20, path_ahead);
            if !path_ahead {
                // Exact hints read only what the KB plans: give it the tree.
                vol.with_kb_mut(|k| stepahead::learn_tree(&open(&img), k, ROOT_INO).map(|_| ())).unwrap().unwrap();
            }
            let mut state = PathHints::default();
            let read = vol.hint_path(&split(path), who, &mut state);
            let st = vol.stepahead_stats(false);
            assert_eq!((st.path_hints, st.path_hints_denied), (1, u64::from(!allowed)), "{what}: {st:?}");
            assert_eq!(vol.is_cached(block), allowed, "{what}: the directory's block read ({read} blocks read)");
            if path_ahead {
                let knows = vol.with_kb(|k| (k.knows(dir), k.knows(inner.0), k.knows(ROOT_INO))).unwrap();
                assert_eq!(knows.0, allowed, "{what}: the directory learnt");
                assert!(allowed || !knows.1, "{what}: nothing below it learnt either");
                assert!(knows.2, "{what}: the root, which everyone may list, is learnt");
                assert!(!allowed || read > 0, "{what}");
            }
            if path.starts_with("private") && allowed {
                assert!(vol.is_cached(inner.1), "{what}: the whole path read");
            }
        }
    }
    // A listing read ahead of a directory the KB knows also reads its known
    // subdirectories' first blocks: only those the sender may list.
    for (who, allowed) in [(cred(2000, 2000), false), (cred(1000, 1000), true)] {
        let vol = open_with_path_hints(&img, 64 << 20, true);
        vol.with_kb_mut(|k| stepahead::learn_tree(&open(&img), k, ROOT_INO).map(|_| ())).unwrap().unwrap();
        vol.hint_path(&split("no-such-name"), who, &mut PathHints::default());
        assert_eq!(vol.is_cached(private.1), allowed, "{who:?}: private/ read with its parent's listing");
        assert_eq!(vol.stepahead_stats(false).path_hints_denied, 0, "{who:?}: the hint itself was for /");
    }
    // A FUSE listing of / (which the kernel let its reader list) reads ahead
    // and learns only the subdirectories that reader may list.
    for (who, allowed) in [(cred(2000, 2000), false), (cred(1000, 1000), true), (cred(0, 0), true)] {
        let vol = open_with_path_hints(&img, 64 << 20, true);
        vol.hint_listing(&vol.inode(ROOT_INO).unwrap(), who);
        assert_eq!(vol.is_cached(private.1), allowed, "{who:?}: private/ read with the listing of /");
        let knows = vol.with_kb(|k| (k.knows(ROOT_INO), k.knows(private.0), k.knows(inner.0))).unwrap();
        assert!(knows.0, "{who:?}: / is learnt");
        assert_eq!(knows.1, allowed, "{who:?}: private/ learnt");
        assert!(allowed || !knows.2, "{who:?}: nothing below private/ learnt");
    }
}

/// An inode-table block is prefetched with its readahead window, in one
/// request, as a miss on it would read it; the window's other blocks are
/// cached but not counted as prefetched. Any other block is read alone, and
/// blocks a few apart in one request whose gap is read but not cached.
#[test]
fn an_inode_block_is_prefetched_with_its_window() {
    let Some((_work, linear, _)) = images() else { return };
    let vol = open(&linear);
    let at = |path: &str| match resolve(&vol, ROOT_INO, &split(path)) {
        Ok((ino, _, _)) => ino,
        Err(e) => panic!("{path}: errno {e}"),
    };
    // big's 3000 files fill ~190 blocks of group 0's table: a window lies in the used part.
    let blk = vol.inode_location(at("big/f-1500")).0;
    let cold = open(&linear);
    let window = blk & !31..(blk & !31) + 32;
    assert!(window.clone().all(|b| !cold.is_cached(b)), "cold");
    let before = cold.cache_stats();
    let st = cold.prefetch(&[blk]).unwrap();
    assert_eq!((st.read, st.runs), (1, 1), "{st:?}");
    for b in window.clone() {
        assert!(cold.is_cached(b), "block {b} of {blk}'s window {window:?}");
    }
    assert!(!cold.is_cached(window.end) && !cold.is_cached(window.start - 1));
    let after = cold.cache_stats();
    assert_eq!((after.prefetched - before.prefetched, after.blocks - before.blocks), (1, 32), "{after:?}");
    // A directory block: no window.
    let big = vol.inode(at("big")).unwrap();
    let fs::Mapping::Mapped { pblk, .. } = vol.map_block(&big, 1, 1).unwrap() else {
        panic!("big's block 1 is a hole")
    };
    assert!(!cold.is_cached(pblk));
    let st = cold.prefetch(&[pblk]).unwrap();
    assert_eq!((st.read, st.runs), (1, 1), "{st:?}");
    assert_eq!(cold.cache_stats().blocks - after.blocks, 1);
    // Two blocks a few apart: one request through the gap, which is not cached.
    let st = cold.prefetch(&[pblk + 2, pblk + 6]).unwrap();
    assert_eq!((st.read, st.runs), (2, 1), "{st:?}");
    assert!(cold.is_cached(pblk + 6) && !cold.is_cached(pblk + 4));
    assert_eq!(cold.cache_stats().blocks - after.blocks, 3);
}
