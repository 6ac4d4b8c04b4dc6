//! How a daemon's final write-back ended, for `ext4lazy umount`.
//!
//! The daemon keeps `/run/ext4lazy/fuse-<major>-<minor>.outcome`, named
//! by its FUSE connection's device number (the mount's, in mountinfo), locked
//! for its whole life, with "running" in it. Once its final write-back has
//! ended it removes the file (everything written) or writes the error into
//! it, and lets go. `umount` finds the same number in mountinfo and waits
//! for that lock. Named by the connection, the file stays the mount's own
//! whatever happens to paths: the mount point or a directory above renamed,
//! a second mount stacked on the same point, an image renamed while
//! mounted; a daemon that died first leaves "running" behind.

use anyhow::{bail, Result};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const RUNNING: &str = "running";

/// The most of an error kept: the rest is in the daemon's log.
const MAX_TEXT: usize = 4096;

/// Where the outcome of the daemon serving the FUSE connection `dev`
/// (`major:minor`, as mountinfo gives it) is kept.
pub fn path(dev: &str) -> PathBuf {
    PathBuf::from(format!("/run/ext4lazy/fuse-{}.outcome", dev.replace(':', "-")))
}

/// The connection of the newest FUSE mount at `mountpoint`: the daemon's
/// own, read right after its mount.
fn connection_at(mountpoint: &Path) -> Option<String> {
    let m = std::fs::canonicalize(mountpoint).ok()?;
    super::umount::fuse_mount(&m).ok()?.map(|e| e.dev)
}

/// The daemon's side: its outcome file, locked, saying "running".
pub struct Outcome {
    file: File,
    path: PathBuf,
}

impl Outcome {
    /// Make the file of the FUSE mount just made at `mountpoint` anew (an
    /// earlier connection of the same number may have left one), lock it
    /// and say "running". None when /run has no room for it: `umount` then
    /// only waits for the image's lock.
    pub fn claim(mountpoint: &Path) -> Option<Outcome> {
        let path = path(&connection_at(mountpoint)?);
        let mut file = fs::safefile::create_fresh(&path).ok()?;
        // SAFETY: flock on a descriptor we own; a fresh file nobody else holds.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return None;
        }
        file.write_all(RUNNING.as_bytes()).ok()?;
        Some(Outcome { file, path })
    }

    /// The final write-back ended with `done`: the file goes, or holds the
    /// error; the lock goes with the descriptor.
    pub fn settle(self, done: &Result<()>) {
        let written = match done {
            Ok(()) => std::fs::remove_file(&self.path),
            Err(e) => {
                let text = format!("{e:#}");
                let cut = text.char_indices().map(|(i, _)| i).take_while(|&i| i <= MAX_TEXT).last().unwrap_or(0);
                let text = if text.len() > MAX_TEXT { &text[..cut] } else { &text[..] };
                self.file.set_len(0).and_then(|()| self.file.write_all_at(text.as_bytes(), 0))
            }
        };
        if let Err(e) = written {
            fuse::report(format_args!("cannot record the unmount's outcome in {}: {e}", self.path.display()));
        }
    }
}

/// `umount`'s side: wait until the daemon of the FUSE connection `dev` has
/// let go of its outcome file, then return its word: Ok when it removed
/// the file (or never kept one), else why the final write-back did not
/// finish.
pub fn wait(dev: &str, image: &Path, log: &Path) -> Result<()> {
    let path = path(dev);
    let mut file = match fs::safefile::open_trusted(&path) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(()),
        Err(e) => bail!("cannot read how the daemon for {} ended: {e}", image.display()),
    };
    wait_for_lock(&file, image)?;
    if file.metadata()?.nlink() == 0 {
        return Ok(()); // removed: everything went out
    }
    let mut text = String::new();
    (&mut file).take(MAX_TEXT as u64 + 1).read_to_string(&mut text)?;
    let _ = std::fs::remove_file(&path);
    match text.trim() {
        RUNNING => bail!(
            "the daemon for {} ended before its final write-back; the journal is replayed at the next mount (see {})",
            image.display(),
            log.display()
        ),
        why => bail!("the final write-back of {} failed: {why} (see {})", image.display(), log.display()),
    }
}

/// Block until `file`'s lock is free (the daemon holding it let go or died).
pub fn wait_for_lock(file: &File, image: &Path) -> Result<()> {
    let start = Instant::now();
    let mut told = false;
    loop {
        // SAFETY: flock on a descriptor we own; released when it closes.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(());
        }
        if !told && start.elapsed() > Duration::from_secs(2) {
            eprintln!("ext4lazy: waiting for the daemon to finish writing {} ...", image.display());
            told = true;
        }
        if start.elapsed() > Duration::from_secs(3600) {
            bail!("the daemon for {} did not exit within an hour", image.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
