//! Harnesses of the fuzz targets (fuzz_targets/*.rs call one each). The
//! modules are also compiled, with `#[path]`, into the regression tests of
//! crates/ondisk and crates/fs, which run every kept input
//! (fuzz/regressions/TARGET/*) and every seed (fuzz/seeds/TARGET/*) through
//! the same code without libFuzzer.

pub mod image;
pub mod parsers;
pub mod volume;
