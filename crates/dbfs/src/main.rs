//! `dbfs-sqlite`: mount a SQLite database as a file system.
//!
//! ```text
//! dbfs-sqlite mount [-o OPTS] DB MNT   # creates DB if missing; returns once the mount is live
//! dbfs-sqlite umount MNT               # returns once the daemon has committed and exited
//! ```
//! Options (comma-separated): `foreground`, `allow_other`, `cache_mb=N` (SQLite page cache,
//! default 64), `mmap_mb=N` (memory-mapped database reads, default 0), `threads=N` (FUSE
//! workers, default 2), `ttl=S` (kernel entry/attribute cache, default 1 s), `stats=FILE` (requests
//! served and time in SQLite per kind of request, as JSON at unmount), `kernel_opens` (OPEN answered
//! ENOSYS, so the kernel opens files itself; its lookup counts keep unlinked files alive).
//! The daemon holds an exclusive flock on DB for its life; `umount` waits on it.

use anyhow::{bail, Context, Result};
use dbfs::fuse::{DbFs, Shared};
use dbfs::store::{Store, StoreOptions};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const READY_FD_ENV: &str = "DBFS_SQLITE_READY_FD";
const USAGE: &str = "usage: dbfs-sqlite mount [-o OPTIONS] DB MOUNTPOINT | dbfs-sqlite umount MOUNTPOINT";

#[derive(Clone, Debug)]
struct MountOpts {
    foreground: bool,
    allow_other: bool,
    store: StoreOptions,
    threads: usize,
    ttl: Duration,
    /// Write the request counters here at unmount.
    stats: Option<PathBuf>,
    /// The kernel opens files without asking (as ext4lazy's `kernel_opens`).
    kernel_opens: bool,
}

impl MountOpts {
    fn parse(list: &[String]) -> Result<MountOpts> {
        let mut o = MountOpts {
            foreground: false,
            allow_other: false,
            store: StoreOptions::default(),
            threads: 2,
            ttl: Duration::from_secs(1),
            stats: None,
            kernel_opens: false,
        };
        for opt in list.iter().flat_map(|s| s.split(',')).filter(|s| !s.is_empty()) {
            let (k, v) = opt.split_once('=').map_or((opt, None), |(k, v)| (k, Some(v)));
            let num = |v: Option<&str>| -> Result<u64> {
                v.with_context(|| format!("option {k} needs a value"))?
                    .parse()
                    .with_context(|| format!("option {opt}: not a number"))
            };
            match k {
                "foreground" => o.foreground = true,
                "allow_other" => o.allow_other = true,
                "rw" | "dev" | "suid" | "default_permissions" => {}
                "cache_mb" => o.store.cache_mb = num(v)? as u32,
                "mmap_mb" => o.store.mmap_mb = num(v)? as u32,
                "threads" => o.threads = (num(v)? as usize).clamp(1, 64),
                "ttl" => o.ttl = Duration::from_secs(num(v)?),
                "stats" => o.stats = Some(PathBuf::from(v.context("option stats needs a file")?)),
                "kernel_opens" => o.kernel_opens = true,
                _ => bail!("unknown option {opt}"),
            }
        }
        Ok(o)
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("dbfs-sqlite: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("mount") => {
            let mut opts = Vec::new();
            let mut pos = Vec::new();
            let mut it = args[1..].iter();
            while let Some(a) = it.next() {
                if a == "-o" {
                    opts.push(it.next().context("-o needs a value")?.clone());
                } else if let Some(rest) = a.strip_prefix("-o") {
                    opts.push(rest.to_string());
                } else {
                    pos.push(PathBuf::from(a));
                }
            }
            let [db, mnt] = pos.as_slice() else { bail!("{USAGE}") };
            mount(&opts, db, mnt)
        }
        Some("umount") if args.len() == 2 => umount(Path::new(&args[1])),
        _ => bail!("{USAGE}"),
    }
}

fn mount(opt_args: &[String], db: &Path, mnt: &Path) -> Result<()> {
    let opts = MountOpts::parse(opt_args)?;
    if let Ok(fd) = std::env::var(READY_FD_ENV) {
        let fd: i32 = fd.parse().context("bad readiness descriptor")?;
        // SAFETY: the parent made this pipe end for us and passed its number.
        let ready = unsafe { File::from_raw_fd(fd) };
        return serve(&opts, db, mnt, Some(ready));
    }
    if opts.foreground {
        return serve(&opts, db, mnt, None);
    }
    // Re-run ourselves as the daemon (no fork in a threaded program); it says "OK" or why not.
    let (mut rd, wr) = pipe()?;
    let mut cmd = Command::new(std::env::current_exe().context("cannot find our executable")?);
    cmd.arg("mount");
    for o in opt_args {
        cmd.arg("-o").arg(o);
    }
    cmd.arg(db).arg(mnt).env(READY_FD_ENV, wr.as_raw_fd().to_string());
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = cmd.spawn().context("cannot start the daemon")?;
    drop(wr);
    let mut msg = String::new();
    rd.read_to_string(&mut msg).context("reading the daemon's status")?;
    if msg.trim() == "OK" {
        return Ok(());
    }
    let _ = child.wait();
    bail!("{}", if msg.trim().is_empty() { "the daemon exited before the mount was live" } else { msg.trim() })
}

fn serve(opts: &MountOpts, db: &Path, mnt: &Path, mut ready: Option<File>) -> Result<()> {
    let prepared = (|| -> Result<_> {
        let mnt = std::fs::canonicalize(mnt).with_context(|| format!("mount point {}", mnt.display()))?;
        if !db.exists() {
            File::create(db).with_context(|| format!("cannot create {}", db.display()))?;
        }
        let db = std::fs::canonicalize(db)?;
        let lock = File::open(&db).with_context(|| format!("cannot open {}", db.display()))?;
        // SAFETY: flock on a descriptor we own.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            bail!("{} is in use by another dbfs-sqlite daemon", db.display());
        }
        let store = Store::open(&db, &opts.store).with_context(|| format!("{}", db.display()))?;
        let shared = Shared::new(store, db.parent().unwrap_or(Path::new("/")).to_path_buf());
        let fs = DbFs::new(shared.clone(), opts.ttl, opts.kernel_opens);
        let mut config = fuser::Config::default();
        config.mount_options = vec![
            fuser::MountOption::FSName(db.display().to_string()),
            fuser::MountOption::Subtype("dbfs-sqlite".into()),
            fuser::MountOption::DefaultPermissions,
            fuser::MountOption::RW,
        ];
        config.acl = if opts.allow_other { fuser::SessionACL::All } else { fuser::SessionACL::Owner };
        config.n_threads = Some(opts.threads);
        config.clone_fd = true;
        let session =
            fuser::Session::new(fs, &mnt, &config).with_context(|| format!("mounting on {}", mnt.display()))?;
        Ok((session, shared, lock))
    })();
    let (session, shared, lock) = match prepared {
        Ok(p) => p,
        Err(e) => {
            if let Some(r) = ready.as_mut() {
                let _ = write!(r, "{e:#}");
            }
            return Err(e);
        }
    };
    if let Some(mut r) = ready.take() {
        // SAFETY: detach from the caller's session; our stdio is /dev/null already.
        unsafe { libc::setsid() };
        let _ = r.write_all(b"OK");
    }
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let ticker = {
        let shared = shared.clone();
        std::thread::spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(Duration::from_millis(100))
            {
                shared.tick();
            }
        })
    };
    let served = session.run().context("serving FUSE requests");
    drop(stop_tx);
    let _ = ticker.join();
    // destroy() closed the database when the kernel let go; close here if it did not.
    let closed = shared.close().context("closing the database");
    if let Some(path) = &opts.stats {
        let ops: serde_json::Map<String, serde_json::Value> = shared
            .stats()
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!({"count": v.count, "db_s": v.db_ns as f64 / 1e9})))
            .collect();
        let j = serde_json::json!({"requests": ops});
        if let Err(e) = std::fs::write(path, format!("{j}\n")) {
            eprintln!("dbfs-sqlite: cannot write {}: {e}", path.display());
        }
    }
    drop(lock);
    served.and(closed)
}

fn umount(mnt: &Path) -> Result<()> {
    let mnt = std::fs::canonicalize(mnt).with_context(|| format!("{}", mnt.display()))?;
    let mounts = std::fs::read_to_string("/proc/self/mounts")?;
    let target = mnt.display().to_string();
    let source = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            Some((f.next()?, f.next()?, f.next()?))
        })
        .filter(|(_, m, t)| *m == target && t.starts_with("fuse"))
        .map(|(s, _, _)| s.to_string())
        .next_back()
        .with_context(|| format!("nothing dbfs-sqlite is mounted on {target}"))?;
    let c = std::ffi::CString::new(mnt.as_os_str().as_bytes())?;
    // SAFETY: umount2 of a NUL-terminated path.
    if unsafe { libc::umount2(c.as_ptr(), 0) } != 0 {
        bail!("umount {target}: {}", std::io::Error::last_os_error());
    }
    // The daemon commits and closes the database, then drops its lock.
    let lock = File::open(&source).with_context(|| format!("cannot open {source}"))?;
    let start = Instant::now();
    // SAFETY: flock on a descriptor we own.
    while unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if start.elapsed() > Duration::from_secs(120) {
            bail!("the daemon of {source} did not finish within 120 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

fn pipe() -> Result<(File, File)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe fills two descriptors; only the read end is close-on-exec.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    unsafe { libc::fcntl(fds[0], libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: both descriptors were just made and are ours.
    Ok(unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) })
}
