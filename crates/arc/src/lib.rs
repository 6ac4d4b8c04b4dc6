//! The ARC control-directory workload (issue #8, papers/dbfs-arc-thesis17.txt).
//!
//! - [`layout`]: where a job's files live in the flat (thesis), ARC 6 and ARC 7 layouts.
//! - [`job`]: a job's eleven files, made from (seed, index) alone, so that a control directory of
//!   N jobs is exactly the first N jobs of any larger one (the thesis's superset property).
//! - [`gen`]: writes a control directory and its manifest.
//! - [`scan`]: ARC's `GMJobsInfo::collect()` over any [`scan::ControlDir`]: the POSIX one, or the
//!   dbfs-sqlite database read directly ([`sqlite::SqliteDir`]).

pub mod gen;
pub mod job;
pub mod layout;
pub mod rng;
pub mod scan;
pub mod sqlite;
