//! Files the daemon (root) keeps beside the image or in /run: the jmap
//! snapshot, the live and final stats, the daemon's log.
//!
//! Their directories may be writable by others (an image in a user's home),
//! so no path is followed: a symlink planted where such a file goes must
//! neither redirect our write (root truncating /etc/shadow) nor feed us a
//! file someone else wrote.
//! - [`replace`] writes a new file under a fresh name (O_CREAT|O_EXCL|
//!   O_NOFOLLOW, mode 0600), fsyncs it and renames it over the target:
//!   rename replaces a symlink itself, never what it points to.
//! - [`open_log`] opens an append log only if it is a regular file we own
//!   with one link; anything else at the path is removed and the file made
//!   afresh with O_EXCL.
//! - [`create_fresh`] removes whatever is at the path and makes the file
//!   anew with O_EXCL.
//! - [`read_trusted`] reads a file only if it is regular, owned by root or
//!   us, and writable by nobody else ([`open_trusted`] opens one).

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Mode of every file made here: nobody else reads the daemon's files.
const MODE: u32 = 0o600;

fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn invalid(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {why}", path.display()))
}

/// A temporary name beside `path` that no earlier call used: the process
/// ID, a counter and the clock, so that a name someone planted ahead only
/// fails one O_EXCL attempt.
fn temp_name(path: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().ok_or_else(|| invalid(path, "not a file name"))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{}.{n}.{t:08x}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// Create a file that did not exist, never through a symlink, mode 0600.
fn create_new(path: &Path, append: bool) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .append(append)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Replace `path` with `bytes`, atomically (a reader sees the old file or
/// the new one) and without following a symlink at `path`: see the module.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut tries = 0;
    let (tmp, mut f) = loop {
        let tmp = temp_name(path)?;
        match create_new(&tmp, false) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
            Err(e) => return Err(e),
        }
    };
    let written = f.write_all(bytes).and_then(|()| f.sync_all()).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Open `path` as an append log for the daemon's life: an existing regular
/// file that we own and that has one name is kept (made 0600); anything else
/// there (a symlink, a FIFO, another user's file, a hard link to a file
/// elsewhere) is removed, and the file made anew with O_EXCL.
pub fn open_log(path: &Path) -> io::Result<File> {
    // O_NONBLOCK: opening a FIFO planted here must not hang the daemon.
    let existing =
        OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK).open(path);
    match existing {
        Ok(f) => {
            let m = f.metadata()?;
            if m.file_type().is_file() && m.uid() == euid() && m.nlink() == 1 {
                if m.mode() & 0o7777 != MODE {
                    f.set_permissions(std::fs::Permissions::from_mode(MODE))?;
                }
                // O_NONBLOCK stays: on a regular file it changes nothing.
                return Ok(f);
            }
            drop(f);
            std::fs::remove_file(path)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        // ELOOP (a symlink), ENXIO (a FIFO without reader), and the like.
        Err(_) => std::fs::remove_file(path)?,
    }
    create_new(path, true)
}

/// Make `path` a new empty file, read-write, whatever was there before
/// (removed first: a symlink, a file of an earlier run).
pub fn create_fresh(path: &Path) -> io::Result<File> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Read `path` if it is a file we may trust: not a symlink, a regular file,
/// owned by root or by us, writable by no one else, at most `max_len` bytes.
/// `Ok(None)` when there is no file; an error says why one is refused.
pub fn read_trusted(path: &Path, max_len: u64) -> io::Result<Option<Vec<u8>>> {
    let Some(f) = open_trusted(path)? else { return Ok(None) };
    let len = f.metadata()?.len();
    if len > max_len {
        return Err(invalid(path, &format!("{len} bytes, more than the {max_len} it can hold")));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // take(): the file may grow after the check.
    f.take(max_len + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_len {
        return Err(invalid(path, "grew while read"));
    }
    Ok(Some(bytes))
}

/// Open `path` for reading if it is a file we may trust (see
/// [`read_trusted`]); `Ok(None)` when there is none.
pub fn open_trusted(path: &Path) -> io::Result<Option<File>> {
    let f = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(invalid(path, "a symbolic link")),
        Err(e) => return Err(e),
    };
    let m = f.metadata()?;
    if !m.file_type().is_file() {
        return Err(invalid(path, "not a regular file"));
    }
    if m.uid() != 0 && m.uid() != euid() {
        return Err(invalid(path, &format!("owned by uid {}", m.uid())));
    }
    if m.mode() & 0o022 != 0 {
        return Err(invalid(path, &format!("writable by others (mode {:o})", m.mode() & 0o7777)));
    }
    Ok(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn replace_does_not_follow_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let target = d.path().join("out.json");
        symlink(&victim, &target).unwrap();
        replace(&target, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        let m = std::fs::symlink_metadata(&target).unwrap();
        assert!(m.file_type().is_file(), "the symlink itself was replaced");
        assert_eq!(m.mode() & 0o7777, 0o600);
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn open_log_replaces_what_it_must_not_append_to() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let log = d.path().join("x.log");
        for plant in 0..3 {
            let _ = std::fs::remove_file(&log);
            match plant {
                0 => symlink(&victim, &log).unwrap(),
                1 => std::fs::hard_link(&victim, &log).unwrap(),
                _ => assert!(std::process::Command::new("mkfifo").arg(&log).status().unwrap().success()),
            }
            let mut f = open_log(&log).unwrap();
            f.write_all(b"line\n").unwrap();
            assert_eq!(std::fs::read(&victim).unwrap(), b"precious", "plant {plant}");
            let m = std::fs::symlink_metadata(&log).unwrap();
            assert!(m.file_type().is_file() && m.nlink() == 1 && m.mode() & 0o7777 == 0o600, "plant {plant}");
        }
        // Our own log is kept and appended to.
        drop(open_log(&log).unwrap().write_all(b"more\n"));
        assert_eq!(std::fs::read(&log).unwrap(), b"line\nmore\n");
    }

    #[test]
    fn read_trusted_refuses_what_others_could_have_written() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("snap");
        assert!(read_trusted(&f, 100).unwrap().is_none());
        std::fs::write(&f, b"abc").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_trusted(&f, 100).unwrap().unwrap(), b"abc");
        assert!(read_trusted(&f, 2).is_err(), "too long");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read_trusted(&f, 100).is_err(), "world-writable");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = d.path().join("link");
        symlink(&f, &link).unwrap();
        assert!(read_trusted(&link, 100).is_err(), "a symlink");
    }
}
