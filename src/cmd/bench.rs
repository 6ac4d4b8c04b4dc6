//! `ext4lazy bench ...`: the benchmark suites. The orchestration is Python
//! (bench/suite, docs/BENCH.md); this command finds it and hands over,
//! naming this binary as the ext4lazy under test.

use anyhow::{bail, Context, Result};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

/// Where bench/suite lives: $EXT4LAZY_BENCH_DIR, else the source tree this binary was built from.
fn bench_dir() -> PathBuf {
    match std::env::var_os("EXT4LAZY_BENCH_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let dir = bench_dir();
    let entry = dir.join("bench").join("suite").join("__main__.py");
    if !entry.is_file() {
        bail!(
            "the benchmark scripts are missing: {} does not exist (set EXT4LAZY_BENCH_DIR to a checkout of the \
             ext4lazy repository, the directory that holds bench/suite)",
            entry.display()
        );
    }
    let me = std::env::current_exe().context("cannot find the ext4lazy executable")?;
    let err = Command::new("python3").arg(entry.parent().unwrap_or(&dir)).args(args).env("EXT4LAZY_BIN", &me).exec();
    Err(err).context("cannot run python3 (install Debian's python3)")
}
