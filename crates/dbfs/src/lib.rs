//! dbfs-sqlite: a file system whose files are BLOBs in SQLite, the database-backed peer of the
//! ARC control-directory benchmark (issue #8; the thesis measured Oracle DBFS). `store` is the
//! database and can be read directly (the benchmark's scan without FUSE); `fuse` serves it.

pub mod fuse;
pub mod store;
