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
        (f.get(4) == Some(&&*m))
            .then(|| f.get(2).and_then(|d| d.split(':').nth(1)).and_then(|n| n.parse().ok()))
            .flatten()
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
    /// Ok(the inodes accepted only through the K3 check, see [`e2fsck_k3`]).
    pub fn fsck(&self, scratch: &Path) -> Result<usize, String> {
        let k3_copy = scratch.with_extension("k3.img");
        let mut k3 = fsck_img(&self.kimg, &k3_copy).map_err(|e| format!("kernel image: {e}"))?;
        let img = if self.mode == Mode::Lazy {
            copy_sparse(&self.eimg, scratch)?;
            let (rc, out) = run_cmd(
                Command::new("e2fsck").args(["-y", "-E", "journal_only"]).arg(scratch),
                Duration::from_secs(600),
            )?;
            if rc > 1 {
                return Err(format!("ext4lazy image: journal replay exited {rc}: {}", out.trim()));
            }
            scratch.to_path_buf()
        } else {
            self.eimg.clone()
        };
        let r = fsck_img(&img, &k3_copy).map_err(|e| format!("ext4lazy image: {e}"));
        let _ = std::fs::remove_file(scratch);
        k3 += r?;
        Ok(k3)
    }
}

/// `e2fsck -fn`: Ok(inodes accepted by the K3 check) or its complaint.
fn fsck_img(img: &Path, k3_copy: &Path) -> Result<usize, String> {
    let (rc, out) = run_cmd(Command::new("e2fsck").arg("-fn").arg(img), Duration::from_secs(600))?;
    if rc == 0 {
        return Ok(0);
    }
    let complaint = || {
        let lines: Vec<&str> = out.lines().take(40).collect();
        format!("e2fsck -fn exited {rc}:\n{}", lines.join("\n"))
    };
    match e2fsck_k3(img, &out, k3_copy) {
        Ok(Some(n)) => Ok(n),
        Ok(None) => Err(complaint()),
        Err(e) => Err(format!("{}\n(K3 check: {e})", complaint())),
    }
}

/// K3, e2fsck's own bug (e2fsprogs issue #145): in a tree of depth 2 or
/// more, e2fsck bounds the root's last index entry by i_size, so an index
/// entry below it that reaches past the end of the file (extents
/// preallocated with FALLOC_FL_KEEP_SIZE) is "end of extent exceeds allowed
/// value" (index entries carry no unwritten flag to exempt them), and the
/// blocks under it are then missing from its counts. The kernel builds such
/// trees too. Accepted only when every complaint names such an inode
/// (depth >= 2, every leaf extent past the end unwritten) and, on a copy
/// whose i_size of those inodes covers all their extents, `e2fsck -fn` finds
/// nothing at all. Ok(Some(inodes)) when accepted, Ok(None) when not K3.
fn e2fsck_k3(img: &Path, out: &str, copy: &Path) -> Result<Option<usize>, String> {
    const MARK: &str = ", end of extent exceeds allowed value";
    let mut inodes: Vec<u32> =
        out.lines().filter_map(|l| l.strip_prefix("Inode ")?.strip_suffix(MARK)?.parse().ok()).collect();
    inodes.sort_unstable();
    inodes.dedup();
    if inodes.is_empty() {
        return Ok(None);
    }
    let debugfs =
        |img: &Path, req: &str| must(Command::new("debugfs").arg("-R").arg(req).arg(img), Duration::from_secs(120));
    let stats = debugfs(img, "stats")?;
    let block_size: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("Block size:")?.trim().parse().ok())
        .ok_or("no block size in debugfs stats")?;
    let mut sizes = Vec::new();
    for &ino in &inodes {
        let stat = debugfs(img, &format!("stat <{ino}>"))?;
        let size: u64 = stat
            .split("Size: ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next()?.parse().ok())
            .ok_or(format!("no size for inode {ino}"))?;
        let eof_block = size.div_ceil(block_size);
        // `ex` rows: "level/depth  entry/entries  first - last  ...  [Uninit]".
        let ex = debugfs(img, &format!("ex <{ino}>"))?;
        let mut depth = 0;
        let mut end = 0u64;
        for row in ex.lines().skip(1) {
            let f: Vec<&str> = row.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|s| s.trim_end_matches('/').parse::<u64>().ok());
            let (Some(level), Some(d), Some(last)) = (num(0), num(1), num(6)) else { continue };
            depth = d;
            if level != d {
                continue; // an index entry
            }
            if last >= eof_block && !row.contains("Uninit") {
                return Ok(None); // written blocks past the end: not K3
            }
            end = end.max(last + 1);
        }
        if depth < 2 || end <= eof_block {
            return Ok(None);
        }
        sizes.push((ino, end * block_size));
    }
    copy_sparse(img, copy)?;
    let r = (|| {
        for &(ino, size) in &sizes {
            must(
                Command::new("debugfs").args(["-w", "-R", &format!("sif <{ino}> size {size}")]).arg(copy),
                Duration::from_secs(120),
            )?;
        }
        let (rc, out) = run_cmd(Command::new("e2fsck").arg("-fn").arg(copy), Duration::from_secs(600))?;
        Ok(if rc == 0 {
            Some(sizes.len())
        } else {
            eprintln!(
                "K3 check: with the sizes covering the extents, e2fsck still finds:\n{}",
                out.lines().take(20).collect::<Vec<_>>().join("\n")
            );
            None
        })
    })();
    let _ = std::fs::remove_file(copy);
    r
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
