//! mount(8) integration: `/sbin/mount.fuse.ext4lazy IMAGE MNT [-o OPTS]`,
//! run by `mount -t fuse.ext4lazy` and by fstab entries of that type.

use anyhow::{bail, Result};
use std::path::Path;

/// Which helper name this process was started under, if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helper {
    Mount,
    Umount,
}

pub fn invoked_as() -> Option<Helper> {
    let name =
        std::env::args_os().next().and_then(|a| Path::new(&a).file_name().map(|n| n.to_string_lossy().into_owned()))?;
    match name.as_str() {
        "mount.fuse.ext4lazy" | "mount.ext4lazy" => Some(Helper::Mount),
        "umount.fuse.ext4lazy" | "umount.ext4lazy" => Some(Helper::Umount),
        _ => None,
    }
}

/// `umount.fuse.ext4lazy MNT [-n] [-l] [-f] [-v] [-r]` as umount(8) calls it:
/// unmount, then wait until the daemon has written everything back, so the
/// image is consistent (and may be mounted again) once umount returns.
pub fn run_umount_helper() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let targets: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
    let [mnt] = targets.as_slice() else {
        bail!("usage: umount.fuse.ext4lazy MOUNTPOINT");
    };
    super::umount::run(Path::new(mnt.as_str()))
}

/// `mount.fuse.ext4lazy IMAGE MNT [-o OPTS] [-n] [-s] [-f] [-v]` as mount(8) calls it.
pub fn run_helper() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "-o" => {
                i += 1;
                options.push(args.get(i).cloned().unwrap_or_default());
            }
            o if o.starts_with("-o") => options.push(o[2..].to_string()),
            "-n" | "-s" | "-f" | "-v" | "-i" => {} // mtab, sloppy, fake, verbose, internal-only: nothing to do
            "-t" => i += 1,
            o if o.starts_with('-') => bail!("unknown argument {o:?}"),
            p => positional.push(p.to_string()),
        }
        i += 1;
    }
    let [image, mnt] = positional.as_slice() else {
        bail!("usage: mount.fuse.ext4lazy IMAGE MOUNTPOINT [-o OPTIONS]");
    };
    // mount(8) defaults to read-write, as for any file system.
    let mut opts = vec!["rw".to_string()];
    opts.extend(options);
    super::mount::run(&opts, Path::new(image), Path::new(mnt))
}
