//! The binary's contact with the system: commands with deadlines, mounts of
//! both sides, e2fsck, and a worker thread per side so that a hung FUSE
//! daemon costs a timeout, never the fuzzer.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// Run a command with a deadline; Ok((status code, stdout+stderr)).
pub fn run_cmd(cmd: &mut Command, limit: Duration) -> Result<(i32, String), String> {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    // Drain both pipes on threads: a chatty e2fsck must not block on a full pipe.
    let mut out = child.stdout.take();
    let mut err = child.stderr.take();
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(o) = out.as_mut() {
            let _ = o.read_to_string(&mut s);
        }
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        if let Some(e) = err.as_mut() {
            let _ = e.read_to_string(&mut s);
        }
        s
    });
    let end = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() < end => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{shown}: no exit after {limit:?} (killed)"));
            }
            Err(e) => return Err(format!("{shown}: {e}")),
        }
    };
    let text = format!("{}{}", t1.join().unwrap_or_default(), t2.join().unwrap_or_default());
    Ok((status.code().unwrap_or(-1), text))
}

fn must(cmd: &mut Command, limit: Duration) -> Result<String, String> {
    let shown = format!("{cmd:?}");
    let (rc, out) = run_cmd(cmd, limit)?;
    if rc != 0 {
        return Err(format!("{shown} exited {rc}: {}", out.trim()));
    }
    Ok(out)
}

pub fn mkfs(img: &Path, args: &[String], size: u64) -> Result<(), String> {
    let _ = std::fs::remove_file(img);
    must(
        Command::new("mkfs.ext4").arg("-F").arg("-q").args(args).arg(img).arg(format!("{}k", size / 1024)),
        Duration::from_secs(120),
    )?;
    Ok(())
}

pub fn copy_sparse(a: &Path, b: &Path) -> Result<(), String> {
    must(Command::new("cp").arg("--sparse=always").arg(a).arg(b), Duration::from_secs(300)).map(|_| ())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Ordered,
    Lazy,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Ordered => "ordered",
            Mode::Lazy => "lazy",
        }
    }
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "ordered" => Some(Mode::Ordered),
            "lazy" => Some(Mode::Lazy),
            _ => None,
        }
    }
}

pub fn in_mounts(mnt: &Path) -> bool {
    let m = mnt.to_string_lossy();
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|s| s.lines().any(|l| l.split(' ').nth(4) == Some(&*m)))
        .unwrap_or(false)
}

/// The FUSE connection number of the mount at `mnt` (its st_dev minor).
pub fn fuse_conn(mnt: &Path) -> Option<u32> {
    let m = mnt.to_string_lossy();
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&&*m)).then(|| f.get(2).and_then(|d| d.split(':').nth(1)).and_then(|n| n.parse().ok())).flatten()
    })
}

/// Abort FUSE connection `conn` (unsticks every waiter with ENOTCONN). The
/// control file system is mounted first where nobody has.
pub fn abort_fuse(conn: u32) {
    let dir = Path::new("/sys/fs/fuse/connections");
    if !dir.join(conn.to_string()).exists() {
        let _ = run_cmd(Command::new("mount").args(["-t", "fusectl", "none"]).arg(dir), Duration::from_secs(10));
    }
    let _ = std::fs::write(dir.join(format!("{conn}/abort")), "1");
}

/// Both sides of one run: images, mount points, the ext4lazy binary.
pub struct Sides {
    pub bin: PathBuf,
    pub mode: Mode,
    pub kimg: PathBuf,
    pub eimg: PathBuf,
    pub kmnt: PathBuf,
    pub emnt: PathBuf,
    pub cmd_timeout: Duration,
    /// ext4lazy's FUSE connection, noted at mount: still abortable after a lazy unmount.
    pub conn: std::cell::Cell<Option<u32>>,
}

impl Sides {
    pub fn mount(&self) -> Result<(), String> {
        must(
            Command::new("mount").args(["-t", "ext4", "-o", "loop,noatime"]).arg(&self.kimg).arg(&self.kmnt),
            self.cmd_timeout,
        )
        .map_err(|e| format!("kernel mount: {e}"))?;
        let opts = match self.mode {
            Mode::Ordered => "rw,noatime",
            Mode::Lazy => "rw,noatime,journal=lazy",
        };
        must(Command::new(&self.bin).args(["mount", "-o", opts]).arg(&self.eimg).arg(&self.emnt), self.cmd_timeout)
            .map_err(|e| format!("ext4lazy mount: {e}"))?;
        self.conn.set(fuse_conn(&self.emnt));
        Ok(())
    }

    /// Unmount both; errors say which side failed.
    pub fn umount(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        if in_mounts(&self.kmnt) {
            if let Err(e) = must(Command::new("umount").arg(&self.kmnt), self.cmd_timeout) {
                errs.push(format!("kernel umount: {e}"));
            }
        }
        if in_mounts(&self.emnt) {
            match must(Command::new(&self.bin).arg("umount").arg(&self.emnt), self.cmd_timeout) {
                // The number may go to someone else's mount now: forget it.
                Ok(_) => self.conn.set(None),
                Err(e) => errs.push(format!("ext4lazy umount: {e}")),
            }
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }

    /// Whatever state things are in: get both unmounted.
    pub fn force_umount(&self) {
        if let Some(c) = self.conn.take() {
            abort_fuse(c);
        }
        for mnt in [&self.emnt, &self.kmnt] {
            if in_mounts(mnt) {
                let _ = run_cmd(Command::new("umount").arg(mnt), Duration::from_secs(20));
                if in_mounts(mnt) {
                    let _ = run_cmd(Command::new("umount").arg("-l").arg(mnt), Duration::from_secs(20));
                }
            }
        }
    }

    /// `e2fsck -fn` on both images; ext4lazy's lazy image first has its
    /// journal replayed on a copy (lazy mode leaves the journal to replay).
    pub fn fsck(&self, scratch: &Path) -> Result<(), String> {
        fsck_img(&self.kimg).map_err(|e| format!("kernel image: {e}"))?;
        let img = if self.mode == Mode::Lazy {
            copy_sparse(&self.eimg, scratch)?;
            let (rc, out) = run_cmd(Command::new("e2fsck").args(["-y", "-E", "journal_only"]).arg(scratch), Duration::from_secs(600))?;
            if rc > 1 {
                return Err(format!("ext4lazy image: journal replay exited {rc}: {}", out.trim()));
            }
            scratch.to_path_buf()
        } else {
            self.eimg.clone()
        };
        let r = fsck_img(&img).map_err(|e| format!("ext4lazy image: {e}"));
        let _ = std::fs::remove_file(scratch);
        r
    }
}

fn fsck_img(img: &Path) -> Result<(), String> {
    let (rc, out) = run_cmd(Command::new("e2fsck").arg("-fn").arg(img), Duration::from_secs(600))?;
    if rc != 0 {
        let lines: Vec<&str> = out.lines().take(40).collect();
        return Err(format!("e2fsck -fn exited {rc}:\n{}", lines.join("\n")));
    }
    Ok(())
}

/// Free blocks and block count of a mounted file system (statvfs), as bytes.
pub fn free_bytes(mnt: &Path) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_bfree as u64 * s.f_frsize as u64, s.f_blocks as u64 * s.f_frsize as u64))
}

/// Used inodes (files - ffree): allocators differ in blocks, never in inodes.
pub fn used_inodes(mnt: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).ok()?;
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_files as u64 - s.f_ffree as u64)
}

type Job = Box<dyn FnOnce() -> Box<dyn std::any::Any + Send> + Send>;

/// A thread that runs one side's syscalls, so the caller can give up on a
/// call that never returns (a hung daemon) instead of hanging with it.
pub struct Worker {
    tx: Sender<Job>,
    rx: Receiver<Box<dyn std::any::Any + Send>>,
}

impl Worker {
    pub fn new(name: &str) -> Worker {
        let (tx, jobs) = channel::<Job>();
        let (done, rx) = channel();
        let _ = std::thread::Builder::new().name(name.into()).spawn(move || {
            for job in jobs {
                if done.send(job()).is_err() {
                    break;
                }
            }
        });
        Worker { tx, rx }
    }

    pub fn start<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) {
        let _ = self.tx.send(Box::new(move || Box::new(f()) as Box<dyn std::any::Any + Send>));
    }

    /// The result of the job started last, or None after `limit`.
    pub fn wait<T: 'static>(&self, limit: Duration) -> Option<T> {
        match self.rx.recv_timeout(limit) {
            Ok(b) => b.downcast::<T>().ok().map(|b| *b),
            Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => None,
        }
    }
}
