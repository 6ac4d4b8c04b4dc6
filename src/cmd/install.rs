//! `ext4lazy install` / `uninstall`: put the binary on PATH and the mount(8)
//! helper where mount looks for it. Idempotent.

use anyhow::{Context, Result};
use std::path::Path;

const BIN: &str = "/usr/local/bin/ext4lazy";
const HELPERS: [&str; 4] =
    ["/sbin/mount.fuse.ext4lazy", "/sbin/mount.ext4lazy", "/sbin/umount.fuse.ext4lazy", "/sbin/umount.ext4lazy"];

pub fn install() -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the running executable")?;
    if exe != Path::new(BIN) {
        // Copy to a temporary name and rename: replacing a running binary in place fails.
        let tmp = format!("{BIN}.new");
        std::fs::copy(&exe, &tmp).with_context(|| format!("copying {} to {tmp}", exe.display()))?;
        std::fs::rename(&tmp, BIN).with_context(|| format!("installing {BIN}"))?;
    }
    for h in HELPERS {
        let _ = std::fs::remove_file(h);
        std::os::unix::fs::symlink(BIN, h).with_context(|| format!("linking {h}"))?;
    }
    println!("installed {BIN} and the mount(8) helpers {}", HELPERS.join(", "));
    Ok(())
}

pub fn uninstall() -> Result<()> {
    for p in HELPERS.iter().chain(std::iter::once(&BIN)) {
        match std::fs::remove_file(p) {
            Ok(()) => println!("removed {p}"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {p}")),
        }
    }
    Ok(())
}
