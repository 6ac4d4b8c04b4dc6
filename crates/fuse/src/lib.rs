//! FUSE frontend: turns kernel requests into calls on a [`fs::Volume`].
//!
//! Requests arrive on several threads at once (fusewire's /dev/fuse workers
//! and io_uring queues); the engine below is `Sync`, so handlers call it
//! directly. FUSE inode 1 is the root; ext4's root
//! is inode 2 and inode 1 (bad blocks) is never visible, so only those two swap.

#![forbid(unsafe_code)]

mod attr;
mod caller;
mod floor;
mod inject;
mod ioctl;
mod serve;
mod write;

use fs::{FsError, Volume};
use fusewire::Errno;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::Duration;

pub use attr::to_file_attr;
pub use floor::{FloorData, FloorFs};
pub use inject::{PanicTrigger, TriggerError};

/// How the kernel may cache what we tell it.
#[derive(Clone, Copy, Debug)]
pub struct CachePolicy {
    /// Entries and attributes (a read-only volume cannot change under us).
    pub ttl: Duration,
    /// How reads update access times.
    pub atime: AtimePolicy,
    /// The kernel opens files without asking us (FUSE_NO_OPEN_SUPPORT; the
    /// `kernel_opens` mount option): no OPEN and RELEASE round trips, but
    /// open(2) for writing of an immutable or append-only file succeeds
    /// (its writes still fail), and only the kernel's lookups tell us which
    /// unlinked files are still in use.
    pub kernel_opens: bool,
}

/// The mount's access-time option (FUSE leaves atime to the file system).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtimePolicy {
    NoAtime,
    RelAtime,
    StrictAtime,
}

impl Ext4Fuse {
    /// The directory a readdir(plus) by `reader` lists; the start of a
    /// listing is an access.
    fn listing(&self, reader: fs::Cred, ino: u64, offset: u64) -> Result<fs::Inode, Errno> {
        let dir = self.inode(ino)?;
        if offset == 0 {
            self.accessed(dir.ino);
            // StepAhead: fetch the listing and what the next steps need at
            // once, below it only what the reader could list itself.
            self.vol.hint_listing(&dir, reader);
        } else {
            self.vol.hint_listing_continues(&dir, offset);
        }
        Ok(dir)
    }

    /// Update an accessed inode's atime as the policy says; failures only log.
    fn accessed(&self, ino: u32) {
        if self.vol.is_read_only() || self.policy.atime == AtimePolicy::NoAtime {
            return;
        }
        match self.vol.touch_atime(ino, self.policy.atime == AtimePolicy::StrictAtime) {
            // The kernel caches attributes: have it ask again (offset -1: attributes only).
            Ok(true) => {
                if let Some(n) = self.notifier.get() {
                    let _ = n.inval_inode(fuse_ino(ino), -1, 0);
                }
            }
            Ok(false) => {}
            Err(e) => {
                errno(&e);
            }
        }
    }
}

pub struct Ext4Fuse {
    pub(crate) vol: Arc<Volume>,
    pub(crate) policy: CachePolicy,
    /// Set once the session exists: tells the kernel to drop stale attributes.
    notifier: Arc<std::sync::OnceLock<fusewire::Notifier>>,
    /// Requests that panic on purpose (`inject_panic=`, for tests).
    pub(crate) inject: Option<PanicTrigger>,
}

/// ext4 inode number of a FUSE node id.
pub(crate) fn ext4_ino(ino: u64) -> Result<u32, Errno> {
    match ino {
        1 => Ok(fs::ROOT_INO),
        2 => Ok(1), // never handed out; reading it fails cleanly below
        n => u32::try_from(n).map_err(|_| Errno::ENOENT),
    }
}

/// FUSE node id of an ext4 inode number.
pub fn fuse_ino(ino: u32) -> u64 {
    match ino {
        fs::ROOT_INO => 1,
        1 => 2,
        n => u64::from(n),
    }
}

/// Report a problem on the daemon's log (the kernel log when mounted in the
/// background): one write per line, so that each line stays one record.
pub fn report(msg: impl std::fmt::Display) {
    use std::io::Write;
    let line = format!("ext4lazy: {msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

pub(crate) fn errno(e: &FsError) -> Errno {
    if e.is_corruption() || matches!(e, FsError::Io { .. }) {
        log::error!("{e}");
        report(e);
    }
    Errno(e.errno())
}

impl Ext4Fuse {
    pub fn new(vol: Arc<Volume>, policy: CachePolicy) -> Self {
        Ext4Fuse { vol, policy, notifier: Default::default(), inject: None }
    }

    /// Make the requests `t` names panic (`inject_panic=`, for tests).
    pub fn with_panic_trigger(mut self, t: PanicTrigger) -> Self {
        self.inject = Some(t);
        self
    }

    /// Where the daemon puts the session's notifier once the session exists.
    pub fn notifier_slot(&self) -> Arc<std::sync::OnceLock<fusewire::Notifier>> {
        self.notifier.clone()
    }

    pub(crate) fn inode(&self, ino: u64) -> Result<fs::Inode, Errno> {
        let n = ext4_ino(ino)?;
        if n == 1 {
            return Err(Errno::ENOENT);
        }
        self.vol.inode(n).map_err(|e| errno(&e))
    }

    fn lookup_inode(&self, parent: u64, name: &OsStr) -> Result<fs::Inode, Errno> {
        let parent_ino = ext4_ino(parent)?;
        // Counted as one translation, served from memory or not (the hit
        // rate per lookup), whatever it reads: hint, directory or inode.
        self.vol.translate(|| {
            // StepAhead: what the KB says this lookup and the next step read, at once.
            self.vol.hint_lookup(parent_ino, name.as_bytes());
            let dir = self.inode(parent)?;
            match self.vol.lookup(&dir, name.as_bytes()) {
                Ok(Some((ino, _))) => {
                    let child = self.vol.inode(ino).map_err(|e| errno(&e))?;
                    self.vol.hint_looked_up(&child);
                    Ok(child)
                }
                Ok(None) => Err(Errno::ENOENT),
                Err(e) => Err(errno(&e)),
            }
        })
    }

    pub(crate) fn attr(&self, inode: &fs::Inode) -> fusewire::Attr {
        to_file_attr(&self.vol.stat(inode), fuse_ino(inode.ino))
    }

    pub(crate) fn entry(&self, inode: &fs::Inode) -> fusewire::Entry {
        fusewire::Entry { attr: self.attr(inode), generation: u64::from(inode.base.generation), ttl: self.policy.ttl }
    }

    /// The entry of a reply about to be sent: the kernel counts it as a lookup.
    pub(crate) fn entry_out(&self, inode: &fs::Inode) -> fusewire::Entry {
        self.handed_out(inode);
        self.entry(inode)
    }

    /// True when the kernel opens files without asking us, so that its
    /// lookups are what keeps an unlinked file alive (read-only volumes
    /// never free anything).
    pub(crate) fn counts_lookups(&self) -> bool {
        self.policy.kernel_opens && !self.vol.is_read_only()
    }

    /// A handle was opened on `ino` (OPEN, CREATE, TMPFILE). When lookups
    /// are counted they alone keep the inode: an open handle pins the
    /// kernel's inode, so FORGET comes only after the last close (and once
    /// the kernel opens files itself it sends RELEASE for none, not even for
    /// CREATE's handles: measured on Linux 6.18).
    pub(crate) fn opened(&self, ino: u32) {
        if !self.counts_lookups() {
            self.vol.opened(ino);
        }
    }

    /// RELEASE: the counterpart of [`Self::opened`].
    pub(crate) fn released(&self, nodeid: u64) -> Result<(), Errno> {
        if self.counts_lookups() {
            return Ok(());
        }
        self.vol.released(ext4_ino(nodeid)?).map_err(|e| errno(&e))
    }

    /// The kernel now holds one more lookup of `inode`. Counted for every
    /// inode on read-write volumes, so that its number is not reused while
    /// the kernel may still send requests on it (`Volume::looked_up`); with
    /// kernel-side opens, regular files are also held alive by it: their
    /// data must outlive their last name while open.
    pub(crate) fn handed_out(&self, inode: &fs::Inode) {
        self.vol.looked_up(inode.ino);
        if self.counts_lookups() && inode.is_reg() {
            self.vol.hold(inode.ino, 1);
        }
    }
}
