//! `ext4lazy install` / `uninstall`: put the binary on PATH and the mount(8)
//! helper where mount looks for it, and let FUSE servers use io_uring (the
//! kernel's `fuse.enable_uring`, off by default; only servers that ask for it
//! are affected). Idempotent.

use anyhow::{Context, Result};
use std::path::Path;

const BIN: &str = "/usr/local/bin/ext4lazy";
const HELPERS: [&str; 4] =
    ["/sbin/mount.fuse.ext4lazy", "/sbin/mount.ext4lazy", "/sbin/umount.fuse.ext4lazy", "/sbin/umount.ext4lazy"];
/// The running kernel's switch, and the file that sets it at every module load.
const URING_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";
const MODPROBE_CONF: &str = "/etc/modprobe.d/ext4lazy.conf";

/// Allow FUSE over io_uring now and after reboots. A kernel without it
/// (before 6.14, or built without CONFIG_FUSE_IO_URING) has no parameter:
/// mounts then use /dev/fuse, and install says so.
fn enable_uring() -> Result<()> {
    if let Some(dir) = Path::new(MODPROBE_CONF).parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(MODPROBE_CONF, "# ext4lazy: let FUSE file systems serve requests over io_uring (transport=uring)\noptions fuse enable_uring=1\n")
        .with_context(|| format!("writing {MODPROBE_CONF}"))?;
    if !Path::new(URING_PARAM).exists() {
        println!("this kernel has no FUSE over io_uring ({URING_PARAM} is missing): mounts will use /dev/fuse");
        return Ok(());
    }
    std::fs::write(URING_PARAM, "Y").with_context(|| format!("writing {URING_PARAM}"))?;
    println!("enabled FUSE over io_uring ({URING_PARAM}, {MODPROBE_CONF})");
    Ok(())
}

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
    enable_uring()
}

pub fn uninstall() -> Result<()> {
    // The running kernel's setting stays: other FUSE servers may rely on it by now.
    for p in HELPERS.iter().chain([&BIN, &MODPROBE_CONF]) {
        match std::fs::remove_file(p) {
            Ok(()) => println!("removed {p}"),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("removing {p}")),
        }
    }
    Ok(())
}
