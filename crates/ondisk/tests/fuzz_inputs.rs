//! The parser fuzz targets' inputs without libFuzzer: every kept crash
//! input (fuzz/regressions/TARGET/*) and every seed (fuzz/seeds/TARGET/*)
//! goes through the same harness the targets run (fuzz/src/parsers.rs,
//! compiled in here), so CI catches a regression on stable. To reproduce one
//! input under the fuzzer instead: `cargo +nightly fuzz run TARGET FILE` in fuzz/.

#[path = "../../../fuzz/src/image.rs"]
#[allow(dead_code)]
mod image;
#[path = "../../../fuzz/src/parsers.rs"]
mod parsers;

use std::path::PathBuf;

/// Run every input of `target` through `harness`; a panic names its file.
fn run(target: &str, harness: fn(&[u8])) {
    let fuzz = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut n = 0;
    for kind in ["regressions", "seeds"] {
        let Ok(dir) = std::fs::read_dir(fuzz.join(kind).join(target)) else { continue };
        let mut files: Vec<PathBuf> = dir.map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files {
            let data = std::fs::read(&f).unwrap();
            if std::panic::catch_unwind(|| harness(&data)).is_err() {
                panic!("fuzz input {} panics", f.display());
            }
            n += 1;
        }
    }
    assert!(n > 0, "no inputs for fuzz target {target} under {}", fuzz.display());
}

macro_rules! targets {
    ($($t:ident),*) => { $( #[test] fn $t() { run(stringify!($t), parsers::$t); } )* };
}
targets!(
    superblock,
    group_desc,
    inode,
    extent,
    dir,
    htree,
    xattr_block,
    xattr_ibody,
    bitmap,
    jbd2_superblock,
    jbd2_descriptor,
    jbd2_commit,
    jbd2_revoke
);
