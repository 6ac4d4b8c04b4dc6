//! Crash consistency against the real oracles.
//!
//! A random workload runs on a volume whose device records every write and
//! flush. Its stream is then cut at hundreds of points; at each, the writes
//! no flush has made durable all land, none land, or a random subset lands in
//! a random order. Every such image is recovered twice, by the kernel's ext4
//! (mount) and by ext4lazy (read-write open), and each time:
//! - the tree must be exactly the state after some operation between the last
//!   completed fsync and the cut (operations are atomic, fsync is durable);
//! - `e2fsck -fn` must find nothing once the journal is replayed.
//!
//! The second test makes the device fail after a budget of requests: the
//! volume must turn read-only, refuse further changes, and leave an image
//! that recovers as above.
//!
//! Scale with EXT4LAZY_CRASH_CUTS (cut points per volume variant, default 150).

mod common;

use blockdev::fault::{crash_image, Event, Volatile};
use blockdev::{BlockDevice, FaultDevice, FileDevice, IoClass};
use fs::{CreateKind, FsError, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug, PartialEq)]
enum Node {
    File(Arc<[u8]>),
    Dir,
    Link(Vec<u8>),
}

/// The whole namespace: path -> node (lost+found left out).
type Tree = BTreeMap<String, Node>;

struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n.max(1) as u64) as usize
    }
}

/// One operation of the workload, as the stream saw it.
struct Step {
    /// Device events when the operation returned.
    end: usize,
    /// An fsync: everything up to this state is durable once it returns.
    sync: bool,
    state: Tree,
}

fn parent_of(path: &str) -> (&str, &str) {
    path.rsplit_once('/').unwrap_or(("", path))
}

fn resolve(vol: &Volume, path: &str) -> u32 {
    let mut ino = ROOT_INO;
    for part in path.split('/').filter(|p| !p.is_empty()) {
        ino = vol.lookup(&vol.inode(ino).unwrap(), part.as_bytes()).unwrap().unwrap_or_else(|| panic!("{path}")).0;
    }
    ino
}

fn child(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

/// Run `ops` random operations; stop at the first error other than ENOSPC
/// and return it with the steps done so far. Step 0 is the state at mount.
fn workload(vol: &Volume, dev: &FaultDevice<FileDevice>, seed: u64, ops: usize) -> (Vec<Step>, Option<FsError>) {
    let mut rng = Lcg(seed);
    let mut tree = Tree::new();
    let mut steps = vec![Step { end: dev.event_count(), sync: true, state: tree.clone() }];
    for n in 0..ops {
        let dirs: Vec<String> = std::iter::once(String::new())
            .chain(tree.iter().filter(|(_, v)| **v == Node::Dir).map(|(k, _)| k.clone()))
            .collect();
        let files: Vec<String> =
            tree.iter().filter(|(_, v)| matches!(v, Node::File(_))).map(|(k, _)| k.clone()).collect();
        let dir = dirs[rng.below(dirs.len())].clone();
        let name = format!("e{n}{}", "-".repeat(rng.below(30)));
        let path = child(&dir, &name);
        let pino = resolve(vol, &dir);
        let mut sync = false;
        let r: fs::Result<()> = match rng.below(20) {
            0..=2 => vol.create(pino, name.as_bytes(), CreateKind::Dir, 0o755, 0, 0).map(|_| {
                tree.insert(path, Node::Dir);
            }),
            3..=5 => vol.create(pino, name.as_bytes(), CreateKind::File, 0o644, 0, 0).map(|_| {
                tree.insert(path, Node::File(Arc::from(&b""[..])));
            }),
            6..=10 if !files.is_empty() => {
                // Appends only: overwriting in place is not atomic in ordered mode.
                let f = files[rng.below(files.len())].clone();
                let Some(Node::File(old)) = tree.get(&f).cloned() else { unreachable!() };
                let max = if rng.below(5) == 0 { 200_000 } else { 12_000 };
                let len = 1 + rng.below(max);
                let add: Vec<u8> = (0..len).map(|i| (i * 13 + n) as u8).collect();
                vol.write(resolve(vol, &f), old.len() as u64, &add).map(|_| {
                    tree.insert(f, Node::File([&old[..], &add[..]].concat().into()));
                })
            }
            11 if !files.is_empty() => {
                let f = files[rng.below(files.len())].clone();
                let Some(Node::File(old)) = tree.get(&f).cloned() else { unreachable!() };
                // Whole blocks only: cutting into a block zeroes its tail in
                // place, an overwrite that (as in the kernel's ordered mode)
                // can reach the disk before the truncate commits.
                let size = rng.below(old.len() + 1) / 4096 * 4096;
                vol.setattr(resolve(vol, &f), &SetAttr { size: Some(size as u64), ..Default::default() }).map(|_| {
                    tree.insert(f, Node::File(Arc::from(&old[..size])));
                })
            }
            12 if !files.is_empty() => {
                let f = files[rng.below(files.len())].clone();
                let (p, n0) = parent_of(&f);
                vol.rename(resolve(vol, p), n0.as_bytes(), pino, name.as_bytes(), false, false).map(|_| {
                    let node = tree.remove(&f).expect("in tree");
                    tree.insert(path, node);
                })
            }
            13 | 14 if !files.is_empty() => {
                let f = files[rng.below(files.len())].clone();
                let (p, n0) = parent_of(&f);
                vol.unlink(resolve(vol, p), n0.as_bytes()).map(|_| {
                    tree.remove(&f);
                })
            }
            15 => {
                let empty = dirs
                    .iter()
                    .rfind(|d| !d.is_empty() && !tree.keys().any(|k| k.starts_with(&format!("{d}/"))))
                    .cloned();
                match empty {
                    Some(d) => {
                        let (p, n0) = parent_of(&d);
                        vol.rmdir(resolve(vol, p), n0.as_bytes()).map(|_| {
                            tree.remove(&d);
                        })
                    }
                    None => Ok(()),
                }
            }
            16 => {
                let target = format!("to-{}", "x".repeat(rng.below(200))).into_bytes();
                vol.create(pino, name.as_bytes(), CreateKind::Symlink(target.clone()), 0o777, 0, 0).map(|_| {
                    tree.insert(path, Node::Link(target));
                })
            }
            17 | 18 => {
                sync = true;
                vol.sync()
            }
            // Background work: with zero intervals it commits and writes everything home.
            _ if rng.below(6) == 0 => vol.background_tick(),
            _ => Ok(()),
        };
        match r {
            Ok(()) | Err(FsError::NoSpace) => {}
            Err(e) => return (steps, Some(e)),
        }
        steps.push(Step { end: dev.event_count(), sync, state: tree.clone() });
    }
    (steps, None)
}

/// The tree as ext4lazy reads it.
fn tree_of_volume(vol: &Volume) -> Tree {
    fn walk(vol: &Volume, ino: u32, prefix: &str, out: &mut Tree) {
        let dir = vol.inode(ino).unwrap();
        let mut names = Vec::new();
        vol.read_dir(&dir, 0, &mut |e| {
            names.push((String::from_utf8(e.name).unwrap(), e.ino));
            true
        })
        .unwrap();
        for (name, ino) in names {
            if name == "." || name == ".." || (prefix.is_empty() && name == "lost+found") {
                continue;
            }
            let path = child(prefix, &name);
            let inode = vol.inode(ino).unwrap();
            if inode.is_dir() {
                out.insert(path.clone(), Node::Dir);
                walk(vol, ino, &path, out);
            } else if inode.is_symlink() {
                out.insert(path, Node::Link(vol.read_link(&inode).unwrap()));
            } else {
                out.insert(path, Node::File(Arc::from(vol.read(&inode, 0, inode.size() as usize).unwrap())));
            }
        }
    }
    let mut t = Tree::new();
    walk(vol, ROOT_INO, "", &mut t);
    t
}

/// The tree as the kernel reads it under `root`.
fn tree_of_dir(root: &Path) -> Tree {
    fn walk(dir: &Path, prefix: &str, out: &mut Tree) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().into_string().unwrap();
            if prefix.is_empty() && name == "lost+found" {
                continue;
            }
            let path = child(prefix, &name);
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                out.insert(path.clone(), Node::Dir);
                walk(&e.path(), &path, out);
            } else if ft.is_symlink() {
                out.insert(
                    path,
                    Node::Link(std::fs::read_link(e.path()).unwrap().into_os_string().into_encoded_bytes()),
                );
            } else {
                out.insert(path, Node::File(Arc::from(std::fs::read(e.path()).unwrap())));
            }
        }
    }
    let mut t = Tree::new();
    walk(root, "", &mut t);
    t
}

/// The states a recovery may show for a crash at event `cut`: from the last
/// fsync that completed before it to the operation under way.
fn allowed(steps: &[Step], cut: usize) -> std::ops::RangeInclusive<usize> {
    let first = steps.iter().rposition(|s| s.sync && s.end <= cut).unwrap_or(0);
    let last = steps.iter().position(|s| s.end >= cut).unwrap_or(steps.len() - 1);
    first..=last.max(first)
}

fn check_state(what: &str, got: &Tree, steps: &[Step], range: std::ops::RangeInclusive<usize>) {
    if steps[range.clone()].iter().any(|s| &s.state == got) {
        return;
    }
    let describe = |n: Option<&Node>| match n {
        None => "absent".to_string(),
        Some(Node::File(d)) => format!("file of {} bytes", d.len()),
        Some(n) => format!("{n:?}"),
    };
    let diff = |want: &Tree| -> Vec<String> {
        let keys: std::collections::BTreeSet<&String> = got.keys().chain(want.keys()).collect();
        keys.into_iter()
            .filter(|k| got.get(*k) != want.get(*k))
            .map(|k| format!("{k}: {} instead of {}", describe(got.get(k)), describe(want.get(k))))
            .collect()
    };
    let (best, d) =
        range.clone().map(|i| (i, diff(&steps[i].state))).min_by_key(|(_, d)| d.len()).expect("non-empty range");
    panic!("{what}: the recovered tree is none of the states {range:?}; closest is {best}: {:?}", &d[..d.len().min(8)]);
}

/// How a variant mounts: ordered, lazy, or lazy migrating cold blocks home whenever idle.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Ordered,
    Lazy,
    LazyMigrating,
}

fn opts(mode: Mode) -> VolumeOptions {
    let mut cleaner = fs::CleanerPolicy::default();
    if mode == Mode::LazyMigrating {
        cleaner.cold_age = Some(Duration::ZERO);
    }
    VolumeOptions {
        read_only: false,
        commit_interval: Duration::ZERO,
        dirty_expire: Duration::ZERO,
        lazy: mode != Mode::Ordered,
        cleaner,
        // The oracle wants a state some operation left; delayed allocation
        // may commit metadata before data (tests/delalloc_crash.rs).
        delalloc_bytes: 0,
        ..Default::default()
    }
}

/// Recover `img` with the kernel: mount (journal replay), read the tree, unmount.
fn kernel_tree(img: &Path, mnt: &Path) -> Tree {
    common::kernel_mounted(img, mnt, tree_of_dir)
}

/// Recover `img` with ext4lazy: a read-write open replays, the clean unmount empties the journal.
fn ext4lazy_tree(img: &Path, mode: Mode) -> Tree {
    let vol = Volume::open(Arc::new(FileDevice::open(img, true).unwrap()), opts(mode)).unwrap();
    let t = tree_of_volume(&vol);
    vol.shutdown().unwrap();
    t
}

/// (name, mkfs options, journal mode)
const VARIANTS: [(&str, &[&str], Mode); 4] = [
    // 1 KiB blocks and the smallest journal: forced checkpoints and wrap-around.
    ("1k-small-journal", &["-b", "1024", "-J", "size=1"], Mode::Ordered),
    ("4k", &[], Mode::Ordered),
    // Lazy: metadata lives in the journal, the cleaner moves it along.
    ("1k-small-journal-lazy", &["-b", "1024", "-J", "size=1"], Mode::Lazy),
    // Lazy with cold blocks migrating home whenever the volume is idle.
    ("1k-small-journal-lazy-migrating", &["-b", "1024", "-J", "size=1"], Mode::LazyMigrating),
];

// One test per variant, so that the test harness runs them side by side.
#[test]
fn crash_at_any_point_recovers_a_state_the_workload_had_1k_small_journal() {
    crash_at_any_point_recovers_a_state_the_workload_had(0);
}

#[test]
fn crash_at_any_point_recovers_a_state_the_workload_had_4k() {
    crash_at_any_point_recovers_a_state_the_workload_had(1);
}

#[test]
fn crash_at_any_point_recovers_a_state_the_workload_had_lazy() {
    crash_at_any_point_recovers_a_state_the_workload_had(2);
}

#[test]
fn crash_at_any_point_recovers_a_state_the_workload_had_lazy_migrating() {
    crash_at_any_point_recovers_a_state_the_workload_had(3);
}

fn crash_at_any_point_recovers_a_state_the_workload_had(vi: usize) {
    let Some((work, empty)) = common::setup_empty() else { return };
    let kernel = common::is_root();
    if !kernel {
        common::skip("kernel half: not root");
    }
    let cuts: usize = std::env::var("EXT4LAZY_CRASH_CUTS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    let mnt = work.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let (variant, mkfs, mode) = VARIANTS[vi];
    let img = common::make_image(work.path(), &format!("{variant}.img"), 32, mkfs, &empty);
    let base = std::fs::read(&img).unwrap();
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts(mode)).unwrap();
    let (steps, err) = workload(&vol, &dev, 100 + vi as u64, 1000);
    assert!(err.is_none(), "{variant}: {err:?}");
    let ws = vol.write_stats().expect("read-write");
    eprintln!("{variant}: {ws:?}");
    // Cuts land in the middle of cleaning and of migration too.
    match mode {
        Mode::Ordered => {}
        Mode::Lazy => assert!(ws.cleaner_blocks_moved > 0, "{variant}: {ws:?}"),
        Mode::LazyMigrating => assert!(ws.blocks_migrated_home > 0, "{variant}: {ws:?}"),
    }
    drop(vol); // a crash: no unmount
    let events = dev.events();
    let flushes = events.iter().filter(|e| matches!(e, Event::Flush)).count();
    let journal_bytes: usize = events
        .iter()
        .map(|e| if let Event::Write { data, class: IoClass::Journal, .. } = e { data.len() } else { 0 })
        .sum();
    eprintln!(
        "{variant}: {} operations, {} writes ({journal_bytes} bytes to the journal), {flushes} flushes",
        steps.len() - 1,
        events.len() - flushes
    );
    if mkfs.contains(&"size=1") && mode == Mode::Ordered {
        assert!(journal_bytes > 2 << 20, "the 1 MiB journal must wrap around (only {journal_bytes} bytes logged)");
    }
    let mut rng = Lcg(7 + vi as u64);
    let mut by_policy = [0usize; 3];
    for i in 0..cuts {
        // Half the cuts just after a flush (the durable edge), half anywhere.
        let cut = if i % 2 == 0 {
            let f = events
                .iter()
                .enumerate()
                .filter(|(_, e)| matches!(e, Event::Flush))
                .map(|(i, _)| i + 1)
                .nth(rng.below(flushes))
                .unwrap();
            (f + rng.below(3)).min(events.len())
        } else {
            1 + rng.below(events.len())
        };
        let volatile = Volatile::in_turn(i);
        by_policy[i % 3] += 1;
        let range = allowed(&steps, cut);
        let mut bytes = base.clone();
        crash_image(&mut bytes, &events, cut, volatile);
        let what = format!("{variant} cut {cut}/{} ({volatile:?})", events.len());
        // A new file for every image (and every recovery), never one a
        // loop device may still hold.
        let cut_img = work.path().join(format!("cut-{i}.img"));
        if kernel {
            common::write_image(&cut_img, &bytes);
            check_state(&format!("{what}, kernel"), &kernel_tree(&cut_img, &mnt), &steps, range.clone());
            common::e2fsck_clean(&cut_img);
            std::fs::remove_file(&cut_img).unwrap();
        }
        let cut_img = work.path().join(format!("cut-{i}-ext4lazy.img"));
        common::write_image(&cut_img, &bytes);
        check_state(&format!("{what}, ext4lazy"), &ext4lazy_tree(&cut_img, mode), &steps, range);
        common::e2fsck_clean_after_replay(&cut_img);
        std::fs::remove_file(&cut_img).unwrap();
    }
    eprintln!(
        "{variant}: {cuts} crash images (all/none/shuffled {by_policy:?}) recovered by {}",
        if kernel { "the kernel and ext4lazy" } else { "ext4lazy" }
    );
}

#[test]
fn device_errors_turn_the_volume_read_only() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let (variant, mkfs, mode) = VARIANTS[0];
    let img = common::make_image(work.path(), "eio.img", 32, mkfs, &empty);
    let base = std::fs::read(&img).unwrap();
    // A full run measures the stream, then runs fail at points spread over it.
    let total = {
        let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
        let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts(mode)).unwrap();
        let mount_events = dev.event_count();
        workload(&vol, &dev, 5, 200);
        (mount_events, dev.event_count())
    };
    for k in 1..=12 {
        std::fs::write(&img, &base).unwrap();
        let budget = total.0 + (total.1 - total.0) * k / 13;
        let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
        let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts(mode)).unwrap();
        dev.fail_after((budget - dev.event_count()) as u64);
        let (steps, err) = workload(&vol, &dev, 5, 200);
        let err = err.unwrap_or_else(|| panic!("{variant} budget {budget}: no error surfaced"));
        assert!(matches!(err, FsError::Io { .. }), "budget {budget}: {err}");
        // Read-only from now on; reads still work.
        assert!(matches!(vol.create(ROOT_INO, b"late", CreateKind::File, 0o644, 0, 0), Err(FsError::ReadOnly)));
        assert!(vol.sync().is_err(), "fsync must not claim success");
        assert!(vol.shutdown().is_err(), "unmount reports the failure");
        let seen = tree_of_volume(&vol);
        assert!(!seen.is_empty() || steps.len() < 3);
        drop(vol);
        // What reached the device recovers to a state between the last fsync and the failure.
        let range = allowed(&steps, dev.event_count());
        let range = *range.start()..=steps.len() - 1;
        check_state(&format!("after EIO at budget {budget}"), &ext4lazy_tree(&img, mode), &steps, range);
        common::e2fsck_clean(&img);
    }
}

/// A directory block freed by a transaction that needs a checkpoint to fit
/// must keep its committed copy until that transaction is durable: a crash
/// before it brings the directory back, and its block must be intact. (A
/// review found the copy dropped before the checkpoint; this reproduces it.)
#[test]
fn a_freed_block_survives_until_its_free_commits() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let pristine_img = common::make_image(work.path(), "freed.img", 16, &["-b", "1024", "-J", "size=1"], &empty);
    let pristine = std::fs::read(&pristine_img).unwrap();
    for lazy in [false, true] {
        for (stop, extra) in [(40u64, 30), (100, 80)] {
            common::write_image(&pristine_img, &pristine);
            let dev = Arc::new(FaultDevice::new(FileDevice::open(&pristine_img, true).unwrap()));
            let hour = Duration::from_secs(3600);
            // No cleaner: a full lazy log migrates home, the path under test.
            let cleaner = fs::CleanerPolicy { start_fill: 2.0, ..Default::default() };
            let opts = VolumeOptions {
                read_only: false,
                dirty_expire: hour,
                commit_interval: hour,
                lazy,
                cleaner,
                ..Default::default()
            };
            let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
            vol.create(ROOT_INO, b"D", CreateKind::Dir, 0o755, 0, 0).unwrap();
            vol.sync().unwrap();
            // Fill the log until a big transaction needs a checkpoint first.
            let mut i = 0;
            while {
                let js = vol.journal_stats().unwrap();
                js.journal_blocks.saturating_sub(js.journal_used_blocks + 33) >= stop
            } {
                vol.create(ROOT_INO, format!("f{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
                vol.sync().unwrap();
                i += 1;
            }
            let start = dev.event_count();
            for k in 0..extra {
                vol.create(ROOT_INO, format!("g{k}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap();
            }
            vol.rmdir(ROOT_INO, b"D").unwrap();
            vol.sync().unwrap();
            let events = dev.events();
            drop(vol);
            let cut_img = work.path().join("freed-cut.img");
            for cut in start..=events.len() {
                for v in [Volatile::None, Volatile::All] {
                    let mut bytes = pristine.clone();
                    crash_image(&mut bytes, &events, cut, v);
                    common::write_image(&cut_img, &bytes);
                    let vol =
                        Volume::open(Arc::new(FileDevice::open(&cut_img, false).unwrap()), VolumeOptions::default())
                            .unwrap();
                    let root = vol.inode(ROOT_INO).unwrap();
                    if let Some((ino, _)) = vol.lookup(&root, b"D").unwrap() {
                        let d = vol.inode(ino).unwrap();
                        let mut n = 0;
                        vol.read_dir(&d, 0, &mut |_| {
                            n += 1;
                            true
                        })
                        .unwrap_or_else(|e| panic!("lazy={lazy} cut {cut}/{} {v:?}: D is damaged: {e}", events.len()));
                        assert!(n >= 2, "lazy={lazy} cut {cut}: D lost its entries");
                    }
                }
            }
        }
    }
}

/// Lazy mode cleans the log after a commit the commit thread made, while the
/// running transaction already holds newer operations. The cleaner must move
/// only committed contents: a block the running transaction changed must not
/// be logged with half an operation's changes. (A review found it logging
/// such blocks: a crash after the cleaning commit replayed a directory entry
/// whose inode was never allocated.) Hot setattrs and creates in cold
/// directories through a 1 MiB log make the cleaner move blocks often. The
/// creates come right after a tick hands a transaction to the thread, and the
/// next tick waits for that commit and cleans with the creates running,
/// whatever the device's speed. Every flush during an operation that moved
/// blocks is a crash point, and each image, its journal replayed, must pass
/// `e2fsck -fn`.
#[test]
fn lazy_cleaning_moves_only_committed_blocks() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let img = common::make_image(work.path(), "clean.img", 32, &["-b", "1024", "-J", "size=1"], &empty);
    let base = std::fs::read(&img).unwrap();
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let hour = Duration::from_secs(3600);
    // Every tick commits (on the commit thread), as a busy volume's ticks do.
    let opts = VolumeOptions {
        read_only: false,
        lazy: true,
        commit_interval: Duration::ZERO,
        dirty_expire: hour,
        ..Default::default()
    };
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts).unwrap();
    let hot_dir = vol.create(ROOT_INO, b"hot", CreateKind::Dir, 0o755, 0, 0).unwrap().ino;
    let hot: Vec<u32> = (0..60)
        .map(|k| vol.create(hot_dir, format!("h{k}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino)
        .collect();
    let cold: Vec<u32> = (0..100)
        .map(|k| vol.create(ROOT_INO, format!("cold{k}").as_bytes(), CreateKind::Dir, 0o755, 0, 0).unwrap().ino)
        .collect();
    let mut cleaning_ops = Vec::new();
    for i in 0..6000usize {
        let (before, moved) = (dev.event_count(), vol.write_stats().unwrap().cleaner_blocks_moved);
        // Per ten: a tick (hands the running transaction over: every tick
        // commits), two creates, a tick (waits for that commit, cleans with
        // the creates running, hands them over), seven setattrs.
        match i % 10 {
            0 | 3 => vol.background_tick().unwrap(),
            1 | 2 => {
                let k = (i.wrapping_mul(2654435761) >> 7) % cold.len();
                vol.create(cold[k], format!("f{i}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap();
            }
            _ => {
                vol.setattr(
                    hot[i % hot.len()],
                    &SetAttr { mode: Some(0o600 | (i as u16 & 0o77)), ..Default::default() },
                )
                .unwrap();
            }
        }
        if vol.write_stats().unwrap().cleaner_blocks_moved > moved {
            cleaning_ops.push(before..dev.event_count());
        }
    }
    let stats = vol.write_stats().unwrap();
    drop(vol);
    let events = dev.events();
    let cuts: Vec<usize> = cleaning_ops
        .iter()
        .flat_map(|r| r.clone())
        .filter(|&e| matches!(events[e], Event::Flush))
        .map(|e| e + 1)
        .collect();
    eprintln!("{stats:?}: {} operations cleaned, {} crash points", cleaning_ops.len(), cuts.len());
    assert!(
        stats.background_commits > 50 && cleaning_ops.len() > 5,
        "the workload must clean after commits on the commit thread"
    );
    assert!(
        stats.cleaner_steps_cut_short > 0,
        "no cleaning step met a block of the running transaction: the case under test did not arise"
    );
    let cut_img = work.path().join("clean-cut.img");
    // Spread over the run, at most 120 images (two e2fsck runs each).
    let step = cuts.len().div_ceil(120).max(1);
    for &cut in cuts.iter().step_by(step) {
        let mut bytes = base.clone();
        crash_image(&mut bytes, &events, cut, Volatile::None);
        common::write_image(&cut_img, &bytes);
        common::e2fsck_clean_after_replay(&cut_img);
    }
}
