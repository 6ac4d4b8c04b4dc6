//! Crashes with delayed allocation (issue #26). Metadata may commit before
//! the data it describes goes out (a file's times, its size on disk), as with
//! the kernel's delalloc, so the oracle is about data, block by block: after
//! a crash at any point, replayed by the kernel and by ext4lazy,
//! - e2fsck finds nothing wrong;
//! - each block of each file holds what one of the file's versions since its
//!   last durable sync held there (never another file's data, never stale
//!   bytes of freed blocks), and the file is no longer than its longest
//!   such version;
//! - a file synced and not changed since is exactly as synced.
//!
//! The workload writes, overwrites and truncates a few files, writes some
//! back, and commits metadata between (with `data_expire` an hour, ticks
//! commit without writing data back).

mod common;

use blockdev::fault::{crash_image, durable_prefix, Event, Volatile};
use blockdev::{BlockDevice, FaultDevice, FileDevice};
use fs::{CreateKind, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const BS: usize = 4096;
const FILES: usize = 6;

struct Lcg(u64);
impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn opts(lazy: bool) -> VolumeOptions {
    VolumeOptions {
        read_only: false,
        lazy,
        commit_interval: Duration::ZERO,
        data_expire: Duration::from_secs(3600),
        ..Default::default()
    }
}

/// One file's history: its contents after each operation on it, from its
/// last sync on; `since[k]` is the device event count when version k began.
#[derive(Clone)]
struct History {
    versions: Vec<Vec<u8>>,
    /// (events at the end of the sync, the version index it made durable)
    syncs: Vec<(usize, usize)>,
    /// Device event count at the end of the operation that made each version.
    ends: Vec<usize>,
}

impl History {
    /// The versions a crash after `events[..cut]` may show: from the last
    /// sync made durable before the cut to the last version begun before it.
    fn allowed(&self, durable: usize, cut: usize) -> &[Vec<u8>] {
        let from = self.syncs.iter().rev().find(|&&(end, _)| end <= durable).map_or(0, |&(_, v)| v);
        // Versions whose operation started before the cut: the one in progress included.
        let to = self.ends.iter().position(|&e| e >= cut).unwrap_or(self.versions.len() - 1);
        &self.versions[from..=to.max(from)]
    }
}

fn check_file(name: &str, got: &[u8], allowed: &[Vec<u8>]) -> Result<(), String> {
    let longest = allowed.iter().map(Vec::len).max().unwrap_or(0);
    if got.len() > longest {
        return Err(format!("{name}: {} bytes, longer than any allowed version ({longest})", got.len()));
    }
    if allowed.len() == 1 && got != allowed[0].as_slice() {
        return Err(format!("{name}: synced and unchanged, yet differs ({} vs {} bytes)", got.len(), allowed[0].len()));
    }
    for (b, chunk) in got.chunks(BS).enumerate() {
        let at = b * BS;
        let matches = |v: &Vec<u8>| chunk.iter().enumerate().all(|(i, &x)| x == v.get(at + i).copied().unwrap_or(0));
        if !allowed.iter().any(matches) {
            return Err(format!("{name}: block {b} matches none of the {} allowed versions", allowed.len()));
        }
    }
    Ok(())
}

fn run(lazy: bool, seed: u64, ops: usize, cuts: usize) {
    let Some((work, empty)) = common::setup_empty() else { return };
    assert!(common::is_root(), "crash cuts need the kernel's mount (root)");
    let img = common::make_image(work.path(), "dcrash.img", 64, &["-b", "4096", "-J", "size=4"], &empty);
    let base = std::fs::read(&img).unwrap();
    let dev = Arc::new(FaultDevice::new(FileDevice::open(&img, true).unwrap()));
    let vol = Volume::open(dev.clone() as Arc<dyn BlockDevice>, opts(lazy)).unwrap();
    let mut inos = Vec::new();
    for f in 0..FILES {
        inos.push(vol.create(ROOT_INO, format!("f{f}").as_bytes(), CreateKind::File, 0o644, 0, 0).unwrap().ino);
    }
    vol.sync().unwrap();
    let start = dev.event_count();
    let mut hist: Vec<History> = (0..FILES)
        .map(|_| History { versions: vec![Vec::new()], syncs: vec![(start, 0)], ends: vec![start] })
        .collect();
    let mut rng = Lcg(seed);
    let mut stamp = 1u8;
    for _ in 0..ops {
        let f = rng.below(FILES as u64) as usize;
        let mut cur = hist[f].versions.last().unwrap().clone();
        match rng.below(20) {
            0..=10 => {
                let off = rng.below(64 * BS as u64) as usize;
                let most = if rng.below(4) == 0 { 40 * BS as u64 } else { 3 * BS as u64 };
                let len = 1 + rng.below(most) as usize;
                stamp = stamp.wrapping_add(1).max(1);
                let data: Vec<u8> = (0..len).map(|i| stamp ^ (i as u8).wrapping_mul(7)).collect();
                assert_eq!(vol.write(inos[f], off as u64, &data).unwrap(), len);
                if cur.len() < off + len {
                    cur.resize(off + len, 0);
                }
                cur[off..off + len].copy_from_slice(&data);
            }
            11..=12 => {
                let size = rng.below(cur.len() as u64 + 1) as usize;
                vol.setattr(inos[f], &SetAttr { size: Some(size as u64), ..Default::default() }).unwrap();
                cur.truncate(size);
            }
            13..=14 => vol.writeback_file(inos[f]).unwrap(),
            15..=17 => vol.background_tick().unwrap(),
            _ => {
                vol.sync().unwrap();
                let end = dev.event_count();
                for h in hist.iter_mut() {
                    let v = h.versions.len() - 1;
                    h.syncs.push((end, v));
                }
                continue;
            }
        }
        let end = dev.event_count();
        let h = &mut hist[f];
        h.versions.push(cur);
        h.ends.push(end);
    }
    drop(vol); // a crash: no write-back, no unmount
    let events = dev.events();
    let written = events.iter().filter(|e| matches!(e, Event::Write { .. })).count();
    eprintln!("delalloc crash (lazy={lazy}): {ops} ops, {} events, {written} writes", events.len());
    let mnt = tempfile::tempdir().unwrap();
    for i in 0..cuts {
        let cut = start + 1 + (rng.below((events.len() - start) as u64) as usize);
        let volatile = Volatile::in_turn(i);
        let durable = durable_prefix(&events, cut);
        let mut bytes = base.clone();
        crash_image(&mut bytes, &events, cut, volatile);
        let what = format!("lazy={lazy} seed {seed}: cut {cut}/{} ({volatile:?})", events.len());
        let check = |name: &str, got: Vec<u8>, f: usize| {
            if let Err(e) = check_file(name, &got, hist[f].allowed(durable, cut)) {
                panic!("{what}: {e}");
            }
        };
        let k_img = work.path().join("cut-kernel.img");
        common::write_image(&k_img, &bytes);
        common::kernel_mounted(&k_img, mnt.path(), |m: &Path| {
            for f in 0..FILES {
                check(&format!("kernel f{f}"), std::fs::read(m.join(format!("f{f}"))).unwrap(), f);
            }
        });
        common::e2fsck_clean(&k_img);
        let l_img = work.path().join("cut-ext4lazy.img");
        common::write_image(&l_img, &bytes);
        {
            let vol = Volume::open(Arc::new(FileDevice::open(&l_img, true).unwrap()), opts(lazy)).unwrap();
            for (f, &ino) in inos.iter().enumerate() {
                let inode = vol.inode(ino).unwrap();
                let got = vol.read(&inode, 0, inode.size() as usize).unwrap();
                check(&format!("ext4lazy f{f}"), got, f);
            }
            vol.shutdown().unwrap();
        }
        common::e2fsck_clean_in(&l_img, lazy);
    }
}

#[test]
fn delayed_data_survives_crashes_block_by_block_ordered() {
    run(false, 11, 400, 25);
}

#[test]
fn delayed_data_survives_crashes_block_by_block_lazy() {
    run(true, 12, 400, 25);
}
