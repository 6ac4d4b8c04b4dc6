//! libext4lazy_preload.so: StepAhead's exact full-path hints (issue #7, item 3c)
//! for unmodified programs.
//!
//! Loaded with `LD_PRELOAD`, it wraps the libc calls that take a path
//! ([`wrap`] lists them) and, before making the real call, sends the call's
//! absolute path to the ext4lazy daemon of the mount holding it, as one
//! datagram on the mount's hint socket (`/run/ext4lazy/<fnv1a64 of the mount
//! point>.hints`, made by a daemon mounted with `-o stepahead`). It never waits
//! for the daemon and never changes a call's arguments, result or errno.
//! Paths on no such mount cost a clock read and a prefix check.
//! docs/STEPAHEAD.md ("Full-path hints") has the design and its costs.

pub mod hint;
pub mod mounts;
pub mod path;
pub mod sys;
#[cfg(not(test))]
mod wrap;
