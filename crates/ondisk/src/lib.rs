//! ext4 and jbd2 on-disk structures.
//!
//! One module per structure, each parsing from `&[u8]` (never panicking on short
//! or hostile input) and serialising back, with its checksum, in one place.
//! Policy (allocation, caching, journaling modes) lives in other crates.

#![forbid(unsafe_code)]

pub mod bitmap;
pub mod bytes;
pub mod csum;
pub mod dir;
mod error;
pub mod extent;
pub mod group_desc;
pub mod hash;
pub mod htree;
pub mod inode;
pub mod jbd2;
pub mod superblock;
pub mod xattr;

pub use error::{Corruption, FormatError, Location, Result};
