//! Test volumes made by the real mkfs.ext4 (`-d DIR` populates without mounting,
//! so these tests need neither root nor the kernel).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn have_mkfs() -> bool {
    Command::new("mkfs.ext4").arg("-V").output().is_ok()
}

/// A small tree with most kinds of things a directory can hold.
pub fn populate(dir: &Path) {
    std::fs::create_dir_all(dir.join("a/b/c")).unwrap();
    std::fs::write(dir.join("a/hello.txt"), b"hello world\n").unwrap();
    std::fs::write(dir.join("a/b/big.bin"), (0..300_000u32).flat_map(|i| i.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
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

/// A temp dir with a populated source tree in `src/`, or None (with a
/// message) where mkfs.ext4 is missing.
pub fn setup() -> Option<(tempfile::TempDir, PathBuf)> {
    if !have_mkfs() {
        eprintln!("SKIPPED: mkfs.ext4 not installed");
        return None;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    populate(&src);
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
