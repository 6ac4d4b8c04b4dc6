//! The `volume` and `journal` fuzz targets' inputs without libFuzzer: every
//! kept crash input (fuzz/regressions/TARGET/*) and every seed
//! (fuzz/seeds/TARGET/*) goes through the same harness the targets run
//! (fuzz/src/volume.rs, compiled in here): open a small image on an
//! in-memory device, walk it, change it, reopen it; recover a journal and
//! commit to it. To reproduce one input under the fuzzer instead:
//! `cargo +nightly fuzz run TARGET FILE` in fuzz/.

#[path = "../../../fuzz/src/image.rs"]
#[allow(dead_code)]
mod image;
#[path = "../../../fuzz/src/volume.rs"]
mod volume;

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

#[test]
fn volume() {
    run("volume", volume::volume);
}

#[test]
fn journal() {
    run("journal", volume::journal_target);
}
