//! Inode numbers stay bound to what the kernel looked up (issue #24): a
//! number the kernel holds lookups of is not given to a new inode, even once
//! the old inode is freed on disk and even when it is the last free one; the
//! kernel's FORGET frees it for reuse. Files and directories alike.

mod common;

use fs::{CreateKind, FsError, Volume, VolumeOptions, ROOT_INO};
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[test]
fn a_looked_up_number_is_not_reused_until_forgotten() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    // One group of 64 inodes, so that the allocator must come back to a freed number.
    let img = common::make_image(work.path(), "few.img", 16, &["-b", "4096", "-N", "64"], &empty);
    for kind in [CreateKind::File, CreateKind::Dir] {
        let dev = Arc::new(blockdev::FileDevice::open(&img, true).unwrap());
        let vol = Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap();
        let old = vol.create(ROOT_INO, b"old", kind.clone(), 0o755, 0, 0).unwrap().ino;
        vol.looked_up(old);
        vol.looked_up(old); // two lookups: one FORGET of one is not enough
        if kind == CreateKind::Dir {
            vol.rmdir(ROOT_INO, b"old").unwrap();
        } else {
            vol.unlink(ROOT_INO, b"old").unwrap();
        }
        assert!(vol.inode(old).unwrap().links_count() == 0, "freed on disk");
        let mut made = Vec::new();
        let full = loop {
            match vol.create(ROOT_INO, format!("new{}", made.len()).as_bytes(), CreateKind::File, 0o644, 0, 0) {
                Ok(i) => made.push(i.ino),
                Err(e) => break e,
            }
            assert!(made.len() < 100, "the group never filled");
        };
        assert!(matches!(full, FsError::NoSpace), "{full:?}");
        assert!(!made.contains(&old), "{kind:?}: a new inode got number {old}, which the kernel holds");
        vol.forgotten(old, 1);
        assert!(vol.kernel_knows(old));
        assert!(matches!(vol.create(ROOT_INO, b"still-held", CreateKind::File, 0o644, 0, 0), Err(FsError::NoSpace)));
        vol.forgotten(old, 1);
        assert!(!vol.kernel_knows(old));
        let again = vol.create(ROOT_INO, b"after-forget", CreateKind::File, 0o644, 0, 0).unwrap();
        assert_eq!(again.ino, old, "once forgotten, the number is free again");
        // Leave the image as it was for the next kind.
        for (n, _) in made.iter().enumerate() {
            vol.unlink(ROOT_INO, format!("new{n}").as_bytes()).unwrap();
        }
        vol.unlink(ROOT_INO, b"after-forget").unwrap();
        vol.shutdown().unwrap();
        drop(vol);
        common::e2fsck_clean(&img);
    }
}

/// The kernel queues an unlinked file's FORGET before unlink returns, but
/// another request thread may serve the next create first. A create whose
/// only free inode is held that way waits for the FORGET (without the write
/// lock, which the FORGET's thread may need) instead of reporting ENOSPC;
/// with no FORGET coming it reports ENOSPC after a bounded wait. Found by
/// opfuzz (`inodes` profile; D8 in docs/TESTING.md); that the FORGET may
/// come late (a loaded CI machine, 800 ms here) by its CI batch.
#[test]
fn a_create_waits_for_a_forget_on_its_way() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let (img, vol) = few_inodes(work.path(), &empty, &[]);
    let made = fill_inodes(&vol, false);
    let ino = *made.last().unwrap();
    vol.unlink(ROOT_INO, format!("f{}", made.len() - 1).as_bytes()).unwrap();

    // No FORGET comes: ENOSPC, after a bounded wait.
    let t = std::time::Instant::now();
    let r = vol.create(ROOT_INO, b"nobody-forgets", CreateKind::File, 0o644, 0, 0);
    assert!(matches!(r, Err(FsError::NoSpace)), "{r:?}");
    assert!(t.elapsed() < std::time::Duration::from_secs(5), "waited {:?}", t.elapsed());

    // Another unlink, whose FORGET comes while the create waits, even late:
    // the create gets that number (the first one is still held).
    let next = made[made.len() - 2];
    vol.unlink(ROOT_INO, format!("f{}", made.len() - 2).as_bytes()).unwrap();
    let got = create_during(Arc::new(vol), &img, 800, move |vol| vol.forgotten(next, 1));
    assert_eq!(got, next);
    assert_ne!(got, ino);
}

/// With kernel-side opens (`kernel_opens`) the kernel's lookups of a regular
/// file hold it alive: an unlink it still holds leaves an orphan, freed at
/// the FORGET. A create that finds no inode meanwhile waits for that FORGET
/// too, and gets the number.
#[test]
fn a_create_waits_for_an_orphan_the_kernel_holds() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let (img, vol) = few_inodes(work.path(), &empty, &[]);
    let made = fill_inodes(&vol, true);
    let ino = *made.last().unwrap();
    vol.unlink(ROOT_INO, format!("f{}", made.len() - 1).as_bytes()).unwrap();
    assert_eq!(vol.inode(ino).unwrap().links_count(), 0, "an orphan, kept while held");
    let got = create_during(Arc::new(vol), &img, 30, move |vol| {
        vol.forgotten(ino, 1);
        vol.unhold(ino, 1).unwrap();
    });
    assert_eq!(got, ino);
}

/// Only running out of inodes waits for a FORGET: a write that runs out of
/// blocks on a volume whose free inodes are all held fails at once.
#[test]
fn a_full_disk_does_not_wait_for_forgets() {
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let (_img, vol) = few_inodes(work.path(), &empty, &["-m", "0"]);
    let made = fill_inodes(&vol, false);
    let big = made[0];
    for k in 1..made.len() {
        vol.unlink(ROOT_INO, format!("f{k}").as_bytes()).unwrap();
    }
    assert_eq!(vol.statfs().ffree, 0, "every free inode is held");
    let chunk = vec![7u8; 1 << 20];
    let mut off = 0u64;
    let err = loop {
        match vol.write(big, off, &chunk) {
            Ok(n) => off += n as u64,
            Err(e) => break e,
        }
        assert!(off < 64 << 20, "the 16 MiB volume never filled");
    };
    assert!(matches!(err, FsError::NoSpace), "{err:?}");
    let t = std::time::Instant::now();
    let r = vol.write(big, off, &chunk);
    assert!(matches!(r, Err(FsError::NoSpace)), "{r:?}");
    assert!(t.elapsed() < std::time::Duration::from_millis(200), "a block ENOSPC waited {:?}", t.elapsed());
}

/// A read-write 16 MiB volume of one group of 64 inodes (`extra`: more mkfs options).
fn few_inodes(work: &Path, empty: &Path, extra: &[&str]) -> (PathBuf, Volume) {
    let mkfs: Vec<&str> = ["-b", "4096", "-N", "64"].iter().chain(extra).copied().collect();
    let img = common::make_image(work, "few.img", 16, &mkfs, empty);
    let dev = Arc::new(blockdev::FileDevice::open(&img, true).unwrap());
    (img, Volume::open(dev, VolumeOptions { read_only: false, ..Default::default() }).unwrap())
}

/// Create f0, f1, ... in the root until the inodes run out (ENOSPC), each
/// looked up by the kernel; with `kernel_opens` each lookup also holds its
/// file alive, as the FUSE frontend counts it then. Returns their numbers.
fn fill_inodes(vol: &Volume, kernel_opens: bool) -> Vec<u32> {
    let mut made = Vec::new();
    loop {
        match vol.create(ROOT_INO, format!("f{}", made.len()).as_bytes(), CreateKind::File, 0o644, 0, 0) {
            Ok(i) => {
                vol.looked_up(i.ino);
                if kernel_opens {
                    vol.hold(i.ino, 1);
                }
                made.push(i.ino);
            }
            Err(e) => {
                assert!(matches!(e, FsError::NoSpace), "{e:?}");
                return made;
            }
        }
        assert!(made.len() < 100, "the group never filled");
    }
}

/// Create `after-forget` while `release` (a FORGET's work) runs `delay_ms`
/// later on another thread: the create must wait for it. Returns the new
/// inode's number, after a clean unmount that e2fsck accepts.
fn create_during(vol: Arc<Volume>, img: &Path, delay_ms: u64, release: impl FnOnce(&Volume) + Send + 'static) -> u32 {
    let forgetter = {
        let vol = Arc::clone(&vol);
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(delay_ms));
            release(&vol);
        })
    };
    let made = vol.create(ROOT_INO, b"after-forget", CreateKind::File, 0o644, 0, 0).expect("waits for the FORGET");
    forgetter.join().unwrap();
    let vol = Arc::try_unwrap(vol).ok().unwrap();
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(img);
    made.ino
}

/// A FORGET served while the create runs, after it found no free inode but
/// before it decides whether to wait, must not be missed: the create then
/// retries at once. (The CI machine hit that window once: `mkfifo` ENOSPC
/// right after an unlink, in opfuzz's `inodes` profile.) The FORGET lands at
/// a random moment around the create's run, thousands of times.
#[test]
fn a_forget_served_while_the_create_runs_is_not_missed() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::{Duration, Instant};
    let Some((work, empty)) = common::setup_empty() else {
        return;
    };
    let (img, vol) = few_inodes(work.path(), &empty, &[]);
    let vol = Arc::new(vol);
    let made = fill_inodes(&vol, false);
    // How long a create that finds no inode runs, to spread the FORGETs over.
    let t = Instant::now();
    let mut runs = 0u32;
    while t.elapsed() < Duration::from_millis(20) {
        assert!(matches!(vol.create(ROOT_INO, b"x", CreateKind::File, 0o644, 0, 0), Err(FsError::NoSpace)));
        runs += 1;
    }
    let failing_create = t.elapsed() / runs;
    // The forgetter spins on `go` (round, number, delay in ns) so that its
    // FORGET and the create start together, without a thread start between.
    let go = Arc::new((AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)));
    let done = Arc::new(AtomicU64::new(0));
    let rounds = 3000u64;
    let forgetter = {
        let (vol, go, done) = (Arc::clone(&vol), Arc::clone(&go), Arc::clone(&done));
        std::thread::spawn(move || {
            for round in 1..=rounds {
                while go.0.load(Ordering::Acquire) != round {
                    std::hint::spin_loop();
                }
                let (ino, delay) =
                    (go.1.load(Ordering::Relaxed) as u32, Duration::from_nanos(go.2.load(Ordering::Relaxed)));
                let t = Instant::now();
                while t.elapsed() < delay {
                    std::hint::spin_loop();
                }
                vol.forgotten(ino, 1);
                done.store(round, Ordering::Release);
            }
        })
    };
    let (mut name, mut held) = (format!("f{}", made.len() - 1), *made.last().unwrap());
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 1..=rounds {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = failing_create.mul_f64((seed >> 11) as f64 / (1u64 << 53) as f64 * 2.0);
        vol.unlink(ROOT_INO, name.as_bytes()).unwrap();
        go.1.store(u64::from(held), Ordering::Relaxed);
        go.2.store(delay.as_nanos() as u64, Ordering::Relaxed);
        go.0.store(round, Ordering::Release);
        name = format!("g{round}");
        let r = vol.create(ROOT_INO, name.as_bytes(), CreateKind::File, 0o644, 0, 0);
        while done.load(Ordering::Acquire) != round {
            std::hint::spin_loop();
        }
        let made = r.unwrap_or_else(|e| panic!("round {round}: FORGET {delay:?} after the create began: {e:?}"));
        assert_eq!(made.ino, held, "the only number free");
        vol.looked_up(made.ino);
        held = made.ino;
    }
    forgetter.join().unwrap();
    eprintln!("{rounds} rounds, a failing create takes {failing_create:?}");
    let vol = Arc::try_unwrap(vol).ok().unwrap();
    vol.shutdown().unwrap();
    drop(vol);
    common::e2fsck_clean(&img);
}
