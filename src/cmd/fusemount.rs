//! The mount(2) call for a FUSE file system, done here rather than by a FUSE library so
//! that the mount shows the image as its source and `fuse.ext4lazy` as its
//! type (or plain `fuse` with `nosubtype`, which xfstests needs), with the
//! kernel flags the options ask for.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Kernel-level mount settings.
#[derive(Clone, Debug, Default)]
pub struct KernelMount {
    pub read_only: bool,
    pub allow_other: bool,
    /// Show type `fuse` instead of `fuse.ext4lazy`.
    pub no_subtype: bool,
    /// MS_* flags from options such as nosuid, nodev, noexec, noatime, sync, dirsync.
    pub flags: libc::c_ulong,
}

/// Open /dev/fuse and mount it at `mnt`; returns the channel descriptor.
pub fn mount(image: &Path, mnt: &Path, k: &KernelMount) -> Result<OwnedFd> {
    let dev: File = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .context("cannot open /dev/fuse (is FUSE available?)")?;
    let mut data = format!("fd={},rootmode=40000,user_id=0,group_id=0,default_permissions", dev.as_raw_fd());
    if k.allow_other {
        data.push_str(",allow_other");
    }
    let fstype = if k.no_subtype { "fuse" } else { "fuse.ext4lazy" };
    let mut flags = k.flags;
    if k.read_only {
        flags |= libc::MS_RDONLY;
    }
    let c = |s: &[u8]| CString::new(s).context("path contains a NUL byte");
    let (source, target, ty, d) =
        (c(image.as_os_str().as_bytes())?, c(mnt.as_os_str().as_bytes())?, c(fstype.as_bytes())?, c(data.as_bytes())?);
    // SAFETY: valid C strings; the descriptor stays open in `dev`.
    let r = unsafe { libc::mount(source.as_ptr(), target.as_ptr(), ty.as_ptr(), flags, d.as_ptr().cast()) };
    if r != 0 {
        bail!("mount(2) on {}: {}", mnt.display(), std::io::Error::last_os_error());
    }
    Ok(OwnedFd::from(dev))
}

/// Map a mount(8)-style flag option to its MS_* bit (Some(0) clears nothing: a positive default).
pub fn flag_option(opt: &str) -> Option<libc::c_ulong> {
    Some(match opt {
        "nosuid" => libc::MS_NOSUID,
        "nodev" => libc::MS_NODEV,
        "noexec" => libc::MS_NOEXEC,
        "noatime" => libc::MS_NOATIME,
        "nodiratime" => libc::MS_NODIRATIME,
        "relatime" => libc::MS_RELATIME,
        "strictatime" => libc::MS_STRICTATIME,
        "sync" => libc::MS_SYNCHRONOUS,
        "dirsync" => libc::MS_DIRSYNC,
        "lazytime" => libc::MS_LAZYTIME,
        "suid" | "dev" | "exec" | "atime" | "diratime" | "async" => 0,
        _ => return None,
    })
}
