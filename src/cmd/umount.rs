//! `ext4lazy umount`: unmount, then wait until the daemon has let go of the
//! image (it holds an exclusive flock on it while it runs), and fail when
//! its final write-back did not finish.

use anyhow::{bail, Context, Result};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

pub fn run(mountpoint: &Path) -> Result<()> {
    let mnt = std::fs::canonicalize(mountpoint).with_context(|| format!("{}", mountpoint.display()))?;
    let Some(entry) = fuse_mount(&mnt)? else {
        bail!("{} is not an ext4lazy mount", mnt.display());
    };
    let source = PathBuf::from(&entry.source);
    let c = CString::new(mnt.as_os_str().as_bytes())?;
    // SAFETY: umount2 with a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        let e = std::io::Error::last_os_error();
        bail!("cannot unmount {}: {e}", mnt.display());
    }
    let said = super::outcome::wait(&entry.dev, &source, &super::mount::log_path(&mnt));
    wait_for_daemon(&source)?;
    said
}

/// Lazily detach a mount (cleanup after a failed handshake).
pub fn detach(mnt: &Path) -> Result<()> {
    let c = CString::new(mnt.as_os_str().as_bytes())?;
    // SAFETY: umount2 with a valid C string.
    unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    Ok(())
}

/// The newest FUSE mount at `mnt`, if there is one.
pub fn fuse_mount(mnt: &Path) -> Result<Option<MountEntry>> {
    Ok(mounts()?.into_iter().rev().find(|m| m.target == mnt && m.fstype.starts_with("fuse")))
}

/// One line of /proc/self/mountinfo.
pub struct MountEntry {
    pub target: PathBuf,
    pub fstype: String,
    pub source: String,
    /// The mount's device number as `major:minor` (a FUSE mount's names its
    /// backing-device info in /sys/class/bdi).
    pub dev: String,
}

pub fn mounts() -> Result<Vec<MountEntry>> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").context("reading /proc/self/mountinfo")?;
    let mut out = Vec::new();
    for line in info.lines() {
        // fields: id parent maj:min root mountpoint opts [optional...] - fstype source superopts
        let Some((left, right)) = line.split_once(" - ") else { continue };
        let fields: Vec<&str> = left.split(' ').collect();
        let (Some(dev), Some(mp)) = (fields.get(2), fields.get(4).map(|f| unescape(f))) else { continue };
        let mut r = right.split(' ');
        let fstype = r.next().unwrap_or("").to_string();
        let source = r.next().map(unescape).unwrap_or_default();
        out.push(MountEntry { target: PathBuf::from(mp), fstype, source, dev: dev.to_string() });
    }
    Ok(out)
}

/// mountinfo escapes space, tab, newline and backslash as \ooo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Block until no ext4lazy daemon holds the image's lock.
pub fn wait_for_daemon(image: &Path) -> Result<()> {
    let Ok(f) = std::fs::File::open(image) else {
        return Ok(()); // not a file we can lock (gone or a foreign source): nothing to wait for
    };
    super::outcome::wait_for_lock(&f, image)
}

/// Where `image` is mounted now, by ext4lazy (as the source) or by the kernel
/// through a loop device backed by it.
pub fn mounted_at(image: &Path) -> Result<Option<PathBuf>> {
    let image_s = image.display().to_string();
    let loops = loop_devices_of(image);
    for m in mounts()? {
        if m.source == image_s || loops.contains(&m.source) {
            return Ok(Some(m.target));
        }
    }
    Ok(None)
}

/// /dev/loopN devices whose backing file is `image`.
fn loop_devices_of(image: &Path) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let backing = std::fs::read_to_string(e.path().join("loop/backing_file")).ok()?;
            (Path::new(backing.trim()) == image).then(|| format!("/dev/{name}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn unescape_octal() {
        assert_eq!(super::unescape(r"/a\040b"), "/a b");
        assert_eq!(super::unescape(r"/plain"), "/plain");
        assert_eq!(super::unescape(r"/end\04"), r"/end\04");
    }
}
