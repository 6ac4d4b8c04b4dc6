//! Differential operation fuzzer (issue 23, part 3).
//!
//! The library half is what other harnesses reuse: [`op`] (the operations and
//! their one-line text form), [`gen`] (a seeded, path-based generator with
//! profiles that push on-disk structures to the sizes where their shape
//! changes), [`apply`] (runs one operation on a directory through syscalls),
//! [`tree`] (walks a directory into a comparable record per path) and
//! [`compare`] (the rules for what must be equal). None of them mounts
//! anything; the binary (`ext4lazy-opfuzz`, `driver.rs`) does.

pub mod apply;
pub mod compare;
pub mod gen;
pub mod op;
pub mod rng;
pub mod tree;
