//! Test volumes made by the real mkfs.ext4 (`-d DIR` populates without mounting,
//! so these tests need neither root nor the kernel).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A small deterministic generator (xorshift64) for random operation
/// sequences that a seed replays.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform enough below `n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A test cannot run its oracle here (a tool missing, not root): say so, and
/// fail instead when the run asks for every oracle (`EXT4LAZY_REQUIRE_ORACLES=1`,
/// which tests/run.sh sets): a skipped check is not a passed one.
pub fn skip(why: &str) {
    if std::env::var("EXT4LAZY_REQUIRE_ORACLES").is_ok_and(|v| v == "1") {
        panic!("oracle unavailable under EXT4LAZY_REQUIRE_ORACLES=1: {why}");
    }
    eprintln!("SKIPPED: {why}");
}

pub fn have_mkfs() -> bool {
    Command::new("mkfs.ext4").arg("-V").output().is_ok()
}

/// A small tree with most kinds of things a directory can hold.
pub fn populate(dir: &Path) {
    std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
    std::fs::write(dir.join("a/hello.txt"), b"hello world\n").unwrap();
    std::fs::write(dir.join("a/b/big.bin"), (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>())
        .unwrap();
    for i in 0..400 {
        std::fs::write(dir.join(format!("a/b/c/file-{i:04}")), format!("{i}\n")).unwrap();
    }
    std::os::unix::fs::symlink("a/hello.txt", dir.join("short-link")).unwrap();
    std::os::unix::fs::symlink("x".repeat(300), dir.join("long-link")).unwrap();
    std::fs::write(dir.join("tiny"), b"in").unwrap();
}

/// mkfs.ext4 a fresh image of `size_mb` MiB with `extra` options, filled from `src`.
pub fn make_image(work: &Path, name: &str, size_mb: u64, extra: &[&str], src: &Path) -> PathBuf {
    let img = work.join(name);
    let f = std::fs::File::create(&img).unwrap();
    f.set_len(size_mb << 20).unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-F", "-q", "-E", "root_owner=0:0", "-d"])
        .arg(src)
        .args(extra)
        .arg(&img)
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "mkfs.ext4 {extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    img
}

/// Write an image's bytes to a fresh file, leaving runs of zeros as holes: a
/// crash test writes hundreds of mostly empty images, and writing every zero
/// byte was most of a cut's time.
pub fn write_image(path: &Path, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    const CHUNK: usize = 64 << 10;
    let f = std::fs::File::create(path).unwrap();
    f.set_len(bytes.len() as u64).unwrap();
    let mut at = 0;
    while at < bytes.len() {
        // A run of non-zero chunks goes out in one write.
        let start = at;
        while at < bytes.len() && bytes[at..(at + CHUNK).min(bytes.len())].iter().any(|&b| b != 0) {
            at = (at + CHUNK).min(bytes.len());
        }
        if at > start {
            f.write_all_at(&bytes[start..at], start as u64).unwrap();
        } else {
            at = (at + CHUNK).min(bytes.len());
        }
    }
}

/// A temp dir with a populated source tree in `src/`, or None (with a
/// message) where mkfs.ext4 is missing.
pub fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    let (work, src) = setup_empty()?;
    populate(&src);
    Some((work, src))
}

/// A temp dir with an empty source tree in `src/` (for images mkfs leaves
/// empty), or None (with a message) where mkfs.ext4 is missing.
pub fn setup_empty() -> Option<(tempfile::TempDir, PathBuf)> {
    if !have_mkfs() {
        skip("mkfs.ext4 not installed");
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    Some((work, src))
}

/// The oracle: `e2fsck -fn` must find nothing.
pub fn e2fsck_clean(img: &Path) {
    let out = Command::new("e2fsck").args(["-fn"]).arg(img).output().expect("run e2fsck");
    assert!(
        out.status.success(),
        "e2fsck -fn found problems:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The inode flags of `path` as debugfs reports them (`Flags: 0x...`).
pub fn debugfs_flags(img: &Path, path: &str) -> u32 {
    let out = Command::new("debugfs").arg("-R").arg(format!("stat {path}")).arg(img).output().expect("run debugfs");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = text.split("Flags: 0x").nth(1).and_then(|s| s.split_whitespace().next());
    hex.and_then(|h| u32::from_str_radix(h, 16).ok()).unwrap_or_else(|| panic!("debugfs stat {path}: {text}"))
}

/// Bytes of inline data `path` keeps in its system.data attribute (debugfs
/// lists it as `system.data (N)`); None when it has none.
pub fn debugfs_system_data_len(img: &Path, path: &str) -> Option<usize> {
    let out = Command::new("debugfs").arg("-R").arg(format!("stat {path}")).arg(img).output().expect("run debugfs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let rest = text.split("system.data (").nth(1)?;
    rest.split(')').next()?.parse().ok()
}

/// Mount `img` with the kernel (loop), let `f` change the tree, unmount
/// (retrying a busy unmount: see [`kernel_mounted`]). False (with a
/// message) when this process may not mount, so callers can skip what
/// needs it; a refusal of the image fails.
pub fn with_kernel_mount(img: &Path, f: impl FnOnce(&Path)) -> bool {
    if !is_root() {
        skip("kernel part: not root");
        return false;
    }
    let mnt = tempfile::tempdir().unwrap();
    kernel_mounted(img, mnt.path(), f);
    true
}

/// The oracle for a volume whose journal may need recovery (lazy mode leaves
/// one at every unmount): e2fsck replays the journal and nothing else, then
/// `e2fsck -fn` must find nothing. Without the replay, `-n` would check the
/// home locations only, an older (consistent) state.
pub fn e2fsck_clean_after_replay(img: &Path) {
    // No -f: with it e2fsck also runs a full check and repairs what it finds,
    // which the -fn below would then miss.
    let out = Command::new("e2fsck").args(["-y", "-E", "journal_only"]).arg(img).output().expect("run e2fsck");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "e2fsck -E journal_only:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    e2fsck_clean(img);
}

/// Mount `img` with the kernel at `mnt` (replaying its journal), call `f`,
/// unmount, and wait until the loop device lets go of the image. Loop
/// devices and udev are shared with whatever else runs on the machine: a
/// lost race for a free loop device and a busy unmount are retried; a
/// refusal of the image is not.
pub fn kernel_mounted<T>(img: &Path, mnt: &Path, f: impl FnOnce(&Path) -> T) -> T {
    let mut tries = 0;
    loop {
        let out =
            Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(img).arg(mnt).output().expect("run mount");
        if out.status.success() {
            break;
        }
        let msg = String::from_utf8_lossy(&out.stderr).into_owned();
        tries += 1;
        assert!(tries < 5 && msg.contains("loop"), "the kernel refused to mount {}: {msg}", img.display());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    struct Unmount<'a>(&'a Path, &'a Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            // udev may still be probing the new mount: a busy unmount is retried.
            let mut tries = 0;
            while !Command::new("umount").arg(self.0).status().is_ok_and(|s| s.success()) {
                tries += 1;
                if tries >= 20 {
                    eprintln!("umount {} failed", self.0.display());
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            // The loop device lets go of the image asynchronously: wait, so that
            // nothing of this mount reaches the next use of the file.
            for _ in 0..200 {
                let held = Command::new("losetup")
                    .arg("-j")
                    .arg(self.1)
                    .output()
                    .map(|o| !o.stdout.is_empty())
                    .unwrap_or(false);
                if !held {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            eprintln!("the loop device over {} was not released", self.1.display());
        }
    }
    let _unmount = Unmount(mnt, img);
    f(mnt)
}

/// Whether this process may mount (the kernel's half of the oracles).
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The data ranges lseek(2) reports, alternating SEEK_DATA and SEEK_HOLE
/// from the start (`seek(offset, data?)` gives None for ENXIO).
pub fn seek_map(size: u64, mut seek: impl FnMut(u64, bool) -> Option<u64>) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < size {
        let Some(data) = seek(at, true) else { break };
        let hole = seek(data, false).expect("a hole follows data (the end of the file at least)");
        assert!(hole > data, "SEEK_HOLE from data at {data} gave {hole}");
        out.push((data, hole));
        at = hole;
    }
    out
}

/// The oracle after an unmount in either journal mode (a lazy volume's
/// journal is replayed first).
pub fn e2fsck_clean_in(img: &Path, lazy: bool) {
    if lazy {
        e2fsck_clean_after_replay(img);
    } else {
        e2fsck_clean(img);
    }
}

/// Read-write options, ordered or lazy journal mode.
pub fn rw_options(lazy: bool) -> fs::VolumeOptions {
    fs::VolumeOptions { read_only: false, lazy, ..Default::default() }
}

/// A read-write volume on `dev`.
pub fn open_rw_on(dev: std::sync::Arc<dyn blockdev::BlockDevice>, lazy: bool) -> fs::Volume {
    fs::Volume::open(dev, rw_options(lazy)).unwrap()
}

/// A read-write volume on image `img`.
pub fn open_rw(img: &Path, lazy: bool) -> fs::Volume {
    open_rw_on(std::sync::Arc::new(blockdev::FileDevice::open(img, true).unwrap()), lazy)
}
