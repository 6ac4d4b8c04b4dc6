//! `ext4lazy checkpoint IMAGE`: write every journalled metadata block home
//! and empty the journal, so that the volume needs no recovery (what a lazy
//! volume's unmount deliberately does not do). It is an ordered-mode mount
//! and clean unmount without FUSE: recovery writes the newest copies home,
//! then the journal is marked empty and the recovery flag cleared.

use anyhow::{bail, Context, Result};
use blockdev::FileDevice;
use fs::{Volume, VolumeOptions};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;

pub fn run(image: &Path) -> Result<()> {
    let image = std::fs::canonicalize(image).with_context(|| format!("cannot open {}", image.display()))?;
    if let Some(at) = super::umount::mounted_at(&image)? {
        bail!("{} is mounted on {}: unmount it first", image.display(), at.display());
    }
    // The same lock a mounting daemon holds until it has written everything.
    let lock = File::open(&image).with_context(|| format!("cannot open {}", image.display()))?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        bail!("{} is in use by an ext4lazy daemon", image.display());
    }
    let dev = FileDevice::open(&image, true).with_context(|| format!("{}", image.display()))?;
    let vol = Volume::open(
        Arc::new(dev),
        VolumeOptions { read_only: false, lazy: false, cache_bytes: 64 << 20, ..Default::default() },
    )
    .with_context(|| format!("{}: recovering the journal", image.display()))?;
    // What the open's recovery scan found, before the shutdown empties the log.
    let (live, used) = vol.journal().map_or((0, 0), |j| (j.replayed_blocks, j.used_blocks));
    vol.shutdown().with_context(|| format!("{}: writing home and emptying the journal", image.display()))?;
    println!(
        "{}: {live} journalled blocks written home from {used} journal blocks in use; the journal is empty",
        image.display()
    );
    Ok(())
}
