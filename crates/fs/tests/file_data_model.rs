//! File data against an in-memory model of each file: random writes near
//! the end and block edges, truncates up and down, every fallocate mode,
//! unlink and re-create (inode numbers come back), rename over a file,
//! write-back, ticks, sync and remounts, in every configuration that changes
//! how a block reaches the disk (1 and 4 KiB blocks, delayed allocation and
//! data gathering on and off, lazy and ordered, inline data, a cache so small
//! that few files' last blocks are kept: `tails.rs`). Also: readers beside
//! appending and truncating writers, and ENOSPC failures, after which what
//! the live volume reads must be what a fresh mount reads. Larger runs:
//! `SEEDS=15 STEPS=1500 SECS=3`.

mod common;

use blockdev::{BlockDevice, FileDevice};
use fs::{CreateKind, Falloc, SetAttr, Volume, VolumeOptions, ROOT_INO};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::Rng;

#[derive(Clone, Copy, Debug)]
struct Cfg {
    bs: u64,
    delalloc: bool,
    wb: bool,
    lazy: bool,
    inline: bool,
    cache_bytes: usize,
}

fn open(img: &Path, c: Cfg) -> Volume {
    let opts = VolumeOptions {
        read_only: false,
        lazy: c.lazy,
        cache_bytes: c.cache_bytes,
        commit_interval: Duration::ZERO,
        data_expire: Duration::ZERO,
        delalloc_bytes: if c.delalloc { 1 << 20 } else { 0 },
        data_writeback_bytes: if c.wb { 1 << 20 } else { 0 },
        ..Default::default()
    };
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, true).unwrap());
    Volume::open(dev, opts).unwrap()
}

/// A run's size from the environment (`SEEDS`, `STEPS`, `SECS`), else `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

/// What a successful fallocate does to a file's bytes: punch and zero range
/// zero the range inside the file, preallocation and zero range without
/// KEEP_SIZE extend it.
fn fallocated(m: &mut Vec<u8>, off: u64, len: u64, mode: Falloc, keep: bool) {
    let end = off + len;
    if mode != Falloc::Allocate {
        let lo = (off as usize).min(m.len());
        let hi = (end as usize).min(m.len());
        m[lo..hi].fill(0);
    }
    if mode != Falloc::PunchHole && !keep && end as usize > m.len() {
        m.resize(end as usize, 0);
    }
}

const FILES: usize = 4;

fn name(i: usize) -> Vec<u8> {
    format!("f{i}").into_bytes()
}

fn lookup(vol: &Volume, i: usize) -> u32 {
    let root = vol.inode(ROOT_INO).unwrap();
    vol.lookup(&root, &name(i)).unwrap().expect("present").0
}

fn check(vol: &Volume, ino: u32, model: &[u8], what: &str) {
    let inode = vol.inode(ino).unwrap();
    assert_eq!(inode.size(), model.len() as u64, "{what}: size");
    let got = vol.read(&inode, 0, model.len() + 100).unwrap();
    if got != model {
        let first = got.iter().zip(model).position(|(a, b)| a != b);
        panic!("{what}: data differs (len {} vs {}), first at {first:?}", got.len(), model.len());
    }
}

fn run(work: &Path, empty: &Path, c: Cfg, seed: u64, steps: usize) -> u64 {
    let mut extra = vec!["-b".to_string(), c.bs.to_string()];
    if c.inline {
        extra.extend(["-O".into(), "inline_data".into()]);
    }
    let extra: Vec<&str> = extra.iter().map(|s| s.as_str()).collect();
    let img = common::make_image(work, "t.img", 32, &extra, empty);
    let mut vol = open(&img, c);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
    let mut inos: Vec<u32> =
        (0..FILES).map(|i| vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0).unwrap().ino).collect();
    let bs = c.bs;
    let max = 12 * bs;
    let mut hits = 0;
    for step in 0..steps {
        let i = rng.below(FILES as u64) as usize;
        let ino = inos[i];
        let size = model[i].len() as u64;
        // An interesting offset: near EOF, near a block edge, or anywhere.
        let pick = |rng: &mut Rng| -> u64 {
            let v = match rng.below(4) {
                0 => size as i64 + rng.below(2 * bs) as i64 - bs as i64,
                1 => (size / bs * bs) as i64 + rng.below(8) as i64 - 4,
                2 => (rng.below(max / bs) * bs) as i64 + rng.below(3) as i64 - 1,
                _ => rng.below(max) as i64,
            };
            v.clamp(0, max as i64) as u64
        };
        let op = rng.below(100);
        let what;
        if op < 45 {
            let off = if rng.below(3) == 0 { size } else { pick(&mut rng) };
            let len = match rng.below(4) {
                0 => 1 + rng.below(16),
                1 => 1 + rng.below(bs),
                2 => 1 + rng.below(3 * bs),
                _ => bs - off % bs,
            } as usize;
            let fill = (step as u8).wrapping_mul(7).wrapping_add(1);
            let data: Vec<u8> = (0..len).map(|k| fill.wrapping_add(k as u8) | 1).collect();
            let n = vol.write(ino, off, &data).unwrap();
            assert_eq!(n, len);
            let m = &mut model[i];
            if m.len() < off as usize + len {
                m.resize(off as usize + len, 0);
            }
            m[off as usize..off as usize + len].copy_from_slice(&data);
            what = format!("write {off}+{len}");
        } else if op < 57 {
            let ns = pick(&mut rng);
            vol.setattr(ino, &SetAttr { size: Some(ns), ..Default::default() }).unwrap();
            model[i].resize(ns as usize, 0);
            what = format!("truncate {ns}");
        } else if op < 72 {
            let off = pick(&mut rng);
            let len = 1 + rng.below(3 * bs);
            let keep = rng.below(2) == 0;
            let mode = [Falloc::Allocate, Falloc::PunchHole, Falloc::ZeroRange][rng.below(3) as usize];
            let r = vol.fallocate(ino, off, len, mode, keep);
            what = format!("fallocate {mode:?} {off}+{len} keep={keep}: {r:?}");
            if r.is_ok() {
                fallocated(&mut model[i], off, len, mode, keep);
            } else {
                assert!(c.inline, "{what}");
            }
        } else if op < 78 {
            vol.unlink(ROOT_INO, &name(i)).unwrap();
            inos[i] = vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0).unwrap().ino;
            model[i].clear();
            what = format!("recreate (ino {} -> {})", ino, inos[i]);
        } else if op < 82 {
            // Swap two files' names: rename over.
            let j = (i + 1) % FILES;
            vol.rename(ROOT_INO, &name(i), ROOT_INO, &name(j), false, false).unwrap();
            inos[j] = inos[i];
            model[j] = std::mem::take(&mut model[i]);
            inos[i] = vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0).unwrap().ino;
            what = format!("rename {i} over {j}");
        } else if op < 88 {
            vol.writeback_file(ino).unwrap();
            what = "writeback".into();
        } else if op < 92 {
            vol.background_tick().unwrap();
            what = "tick".into();
        } else if op < 95 {
            vol.sync().unwrap();
            what = "sync".into();
        } else if op < 97 {
            hits += vol.tail_hits();
            vol.shutdown().unwrap();
            drop(vol);
            vol = open(&img, c);
            for (k, ino) in inos.iter_mut().enumerate() {
                *ino = lookup(&vol, k);
            }
            what = "remount".into();
        } else {
            let off = pick(&mut rng);
            let len = 1 + rng.below(3 * bs) as usize;
            let inode = vol.inode(ino).unwrap();
            let got = vol.read(&inode, off, len).unwrap();
            let m = &model[i];
            let lo = (off as usize).min(m.len());
            let hi = (off as usize + len).min(m.len());
            assert_eq!(got, &m[lo..hi], "{c:?} seed {seed} step {step}: partial read {off}+{len}");
            what = "read".into();
        }
        for k in 0..FILES {
            check(&vol, inos[k], &model[k], &format!("{c:?} seed {seed} step {step} file {k} after [{i}] {what}"));
        }
    }
    hits += vol.tail_hits();
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean_after_replay(&img);
    hits
}

#[test]
fn random_ops_read_back_the_model() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let seeds: u64 = env_or("SEEDS", 4);
    let steps: usize = env_or("STEPS", 300);
    let mut total = 0;
    for bs in [1024u64, 4096] {
        for delalloc in [false, true] {
            for wb in [false, true] {
                for lazy in [false, true] {
                    for (inline, cache_bytes) in [(false, 256 << 20), (false, 64 << 10), (true, 256 << 20)] {
                        let c = Cfg { bs, delalloc, wb, lazy, inline, cache_bytes };
                        for seed in 1..=seeds {
                            let h = run(work.path(), &empty, c, seed, steps);
                            eprintln!("{c:?} seed {seed}: {h} hits");
                            total += h;
                        }
                    }
                }
            }
        }
    }
    eprintln!("tail hits: {total}");
    assert!(total > 0);
}

fn pat(p: u64) -> u8 {
    ((p * 7 + p / 251) as u8) | 1
}

/// Writers append and truncate (never producing zeros); readers and a
/// write-back thread run at once: every byte read must be the pattern's.
#[test]
fn concurrent_appends_truncates_and_reads_see_only_the_pattern() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let secs: u64 = env_or("SECS", 2);
    for bs in [1024u64, 4096] {
        for delalloc in [false, true] {
            for wb in [false, true] {
                let c = Cfg { bs, delalloc, wb, lazy: false, inline: false, cache_bytes: 256 << 20 };
                let img = common::make_image(work.path(), "c.img", 32, &["-b", &bs.to_string()], &empty);
                let vol = Arc::new(open(&img, c));
                let inos: Vec<u32> = (0..3)
                    .map(|i| vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0).unwrap().ino)
                    .collect();
                let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let mut handles = Vec::new();
                for (t, &ino) in inos.iter().enumerate() {
                    let (vol, stop) = (vol.clone(), stop.clone());
                    handles.push(std::thread::spawn(move || {
                        let mut rng = Rng(0x1234_5678 + t as u64);
                        let mut size = 0u64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            if rng.below(10) == 0 {
                                let ns = rng.below(size + 1);
                                vol.setattr(ino, &SetAttr { size: Some(ns), ..Default::default() }).unwrap();
                                size = ns;
                            } else {
                                let cap = if rng.below(2) == 0 { 50 } else { 3 * bs };
                                let len = 1 + rng.below(cap);
                                let data: Vec<u8> = (size..size + len).map(pat).collect();
                                vol.write(ino, size, &data).unwrap();
                                size += len;
                                if size > 64 * bs {
                                    vol.setattr(ino, &SetAttr { size: Some(0), ..Default::default() }).unwrap();
                                    size = 0;
                                }
                            }
                        }
                    }));
                }
                for r in 0..3 {
                    let (vol, stop, inos) = (vol.clone(), stop.clone(), inos.clone());
                    handles.push(std::thread::spawn(move || {
                        let mut rng = Rng(0x9999 + r);
                        let mut reads = 0u64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            let ino = inos[rng.below(inos.len() as u64) as usize];
                            let inode = vol.inode(ino).unwrap();
                            let off = rng.below(inode.size() + 1);
                            let got = vol.read(&inode, off, 4 * bs as usize).unwrap();
                            for (k, &b) in got.iter().enumerate() {
                                let p = off + k as u64;
                                assert_eq!(b, pat(p), "{c:?}: ino {ino} byte {p} (read {off}+{})", got.len());
                            }
                            reads += 1;
                        }
                        assert!(reads > 0);
                    }));
                }
                {
                    let (vol, stop) = (vol.clone(), stop.clone());
                    handles.push(std::thread::spawn(move || {
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            vol.background_tick().unwrap();
                            std::thread::sleep(Duration::from_millis(1));
                        }
                    }));
                }
                std::thread::sleep(Duration::from_secs(secs));
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                for h in handles {
                    h.join().unwrap();
                }
                eprintln!("{c:?}: {} hits", vol.tail_hits());
                vol.shutdown().unwrap();
            }
        }
    }
}

fn read_all(vol: &Volume, ino: u32) -> Vec<u8> {
    let inode = vol.inode(ino).unwrap();
    vol.read(&inode, 0, inode.size() as usize + 10).unwrap()
}

/// A nearly full volume: operations fail with ENOSPC partway (undo paths).
/// After any failure, what the live volume reads must be what a fresh mount
/// reads (nothing served from memory that is not on disk).
#[test]
fn enospc_failures_never_leave_memory_and_disk_apart() {
    let Some((work, empty)) = common::setup_empty() else { return };
    let seeds: u64 = env_or("SEEDS", 4);
    let steps: usize = env_or("STEPS", 400);
    let mut failures = 0;
    for bs in [1024u64, 4096] {
        for delalloc in [false, true] {
            for lazy in [false, true] {
                for seed in 1..=seeds {
                    let c = Cfg { bs, delalloc, wb: true, lazy, inline: false, cache_bytes: 256 << 20 };
                    let img = common::make_image(work.path(), "full.img", 8, &["-b", &bs.to_string()], &empty);
                    let mut vol = open(&img, c);
                    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
                    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES];
                    let mut inos: Vec<u32> = (0..FILES)
                        .map(|i| vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0).unwrap().ino)
                        .collect();
                    // Filler: file FILES, grows until ENOSPC, shrinks sometimes.
                    let filler = vol.create(ROOT_INO, b"filler", CreateKind::File, 0o644, 0, 0).unwrap().ino;
                    let mut fsize = 0u64;
                    let max = 40 * bs;
                    for step in 0..steps {
                        let r = rng.below(100);
                        let mut failed = false;
                        let what;
                        if r < 5 {
                            let data = vec![0x5Au8; (256 * bs) as usize];
                            loop {
                                match vol.write(filler, fsize, &data) {
                                    Ok(n) if n == data.len() => fsize += n as u64,
                                    Ok(n) => {
                                        fsize += n as u64;
                                        break;
                                    }
                                    Err(_) => break,
                                }
                            }
                            let small = vec![0x5Au8; 1 + rng.below(2 * bs) as usize];
                            if let Ok(n) = vol.write(filler, fsize, &small) {
                                fsize += n as u64;
                            }
                            what = "fill".to_string();
                        } else if r < 12 {
                            fsize = fsize.saturating_sub(rng.below(8 * bs));
                            vol.setattr(filler, &SetAttr { size: Some(fsize), ..Default::default() }).unwrap();
                            what = "shrink filler".to_string();
                        } else {
                            let i = rng.below(FILES as u64) as usize;
                            let ino = inos[i];
                            let size = model[i].len() as u64;
                            let off = match rng.below(3) {
                                0 => size,
                                1 => (size as i64 + rng.below(2 * bs) as i64 - bs as i64).max(0) as u64,
                                _ => rng.below(max),
                            };
                            let op = rng.below(100);
                            if op < 55 {
                                let cap = if rng.below(2) == 0 { 100 } else { 4 * bs };
                                let len = (1 + rng.below(cap)) as usize;
                                let fill = (step as u8).wrapping_mul(13) | 1;
                                let data: Vec<u8> = (0..len).map(|k| fill.wrapping_add(k as u8) | 1).collect();
                                match vol.write(ino, off, &data) {
                                    Ok(n) => {
                                        let m = &mut model[i];
                                        if m.len() < off as usize + n {
                                            m.resize(off as usize + n, 0);
                                        }
                                        m[off as usize..off as usize + n].copy_from_slice(&data[..n]);
                                        failed = n < len;
                                    }
                                    Err(_) => failed = true,
                                }
                                what = format!("write [{i}] {off}+{len}");
                            } else if op < 70 {
                                let ns = rng.below(max);
                                match vol.setattr(ino, &SetAttr { size: Some(ns), ..Default::default() }) {
                                    Ok(_) => model[i].resize(ns as usize, 0),
                                    Err(_) => failed = true,
                                }
                                what = format!("truncate [{i}] {ns}");
                            } else if op < 90 {
                                let len = 1 + rng.below(4 * bs);
                                let keep = rng.below(2) == 0;
                                let mode =
                                    [Falloc::Allocate, Falloc::PunchHole, Falloc::ZeroRange][rng.below(3) as usize];
                                match vol.fallocate(ino, off, len, mode, keep) {
                                    Ok(()) => fallocated(&mut model[i], off, len, mode, keep),
                                    Err(_) => failed = true,
                                }
                                what = format!("fallocate [{i}] {mode:?} {off}+{len}");
                            } else if op < 95 {
                                let _ = vol.unlink(ROOT_INO, &name(i));
                                match vol.create(ROOT_INO, &name(i), CreateKind::File, 0o644, 0, 0) {
                                    Ok(n) => {
                                        inos[i] = n.ino;
                                        model[i].clear();
                                    }
                                    Err(e) => panic!("create: {e:?}"),
                                }
                                what = format!("recreate [{i}]");
                            } else {
                                let _ = vol.background_tick();
                                what = "tick".into();
                            }
                        }
                        let ctx = format!("{c:?} seed {seed} step {step} {what}");
                        if failed {
                            failures += 1;
                            // Live reads (tails in play) against a fresh mount's.
                            let live: Vec<Vec<u8>> = inos.iter().map(|&ino| read_all(&vol, ino)).collect();
                            vol.shutdown().unwrap();
                            drop(vol);
                            vol = open(&img, c);
                            for (k, ino) in inos.iter_mut().enumerate() {
                                *ino = lookup(&vol, k);
                                let disk = read_all(&vol, *ino);
                                assert!(disk == live[k], "{ctx}: file {k} live and remounted reads differ");
                                model[k] = disk;
                            }
                        } else {
                            for k in 0..FILES {
                                check(&vol, inos[k], &model[k], &format!("{ctx} file {k}"));
                            }
                        }
                    }
                    vol.shutdown().unwrap();
                }
            }
        }
    }
    eprintln!("failed operations: {failures}");
}
