//! The kernel's own metadata flag for requests of kernel file systems.
//!
//! A kernel file system marks its metadata bios with REQ_META; the loop device
//! in front of `disk.img` shows it as `M` in the rwbs field of the
//! `block_rq_issue` trace event (REFERENCE.md section 2: blktrace's relay
//! files are not usable here, tracefs is). The image server creates its own
//! tracefs instance (so it neither disturbs nor is disturbed by other users
//! of tracing), enables that one event in it, and reads it without blocking.
//!
//! No race: the event is recorded when the block layer hands the request to
//! the loop driver, before the loop worker issues the matching read or write
//! on `disk.img`; so when the FUSE request arrives, its event is already in
//! the ring buffer, and a non-blocking drain finds it.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TRACEFS: &str = "/sys/kernel/tracing";

struct Inner {
    /// None once shutting down (the instance cannot be removed while open).
    pipe: Option<File>,
    partial: String,
    /// Byte offset of a flagged loop request -> (length, read?, when seen).
    flagged: HashMap<u64, (u64, bool, Instant)>,
    /// Loop minor -> (is ours, when checked).
    minors: HashMap<u32, (bool, Instant)>,
    last_prune: Instant,
}

pub struct MetaFlags {
    instance: PathBuf,
    image: PathBuf,
    inner: Mutex<Inner>,
}

fn write_file(p: &Path, v: &str) -> io::Result<()> {
    std::fs::write(p, v).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", p.display())))
}

impl MetaFlags {
    /// Set up a tracefs instance following the loop devices whose backing
    /// file is `image`. Fails without root or tracefs.
    pub fn start(image: &Path) -> io::Result<MetaFlags> {
        let root = Path::new(TRACEFS);
        if !root.join("instances").is_dir() {
            let ok = std::process::Command::new("mount")
                .args(["-t", "tracefs", "nodev", TRACEFS])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if !ok || !root.join("instances").is_dir() {
                return Err(io::Error::new(io::ErrorKind::NotFound, "tracefs is not available"));
            }
        }
        remove_stale_instances(&root.join("instances"));
        let instance = root.join("instances").join(format!("ext4lazy-emu-{}", std::process::id()));
        if !instance.is_dir() {
            std::fs::create_dir(&instance)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", instance.display())))?;
        }
        let setup = || -> io::Result<File> {
            let _ = write_file(&instance.join("buffer_size_kb"), "4096");
            write_file(&instance.join("events/block/block_rq_issue/enable"), "1")?;
            write_file(&instance.join("tracing_on"), "1")?;
            OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(instance.join("trace_pipe"))
        };
        let pipe = match setup() {
            Ok(p) => p,
            Err(e) => {
                let _ = std::fs::remove_dir(&instance);
                return Err(e);
            }
        };
        let image = std::fs::canonicalize(image).unwrap_or_else(|_| image.to_path_buf());
        Ok(MetaFlags {
            instance,
            image,
            inner: Mutex::new(Inner {
                pipe: Some(pipe),
                partial: String::new(),
                flagged: HashMap::new(),
                minors: HashMap::new(),
                last_prune: Instant::now(),
            }),
        })
    }

    /// Did the kernel flag the loop request behind this image request as
    /// metadata? Consumes the match.
    pub fn is_metadata(&self, offset: u64, len: u64, read: bool) -> bool {
        let Ok(mut g) = self.inner.lock() else {
            return false;
        };
        drain(&mut g, &self.image);
        if let Some(&(l, r, _)) = g.flagged.get(&offset) {
            if r == read && l >= len.min(l) {
                g.flagged.remove(&offset);
                return true;
            }
        }
        false
    }
}

impl Drop for MetaFlags {
    fn drop(&mut self) {
        if let Ok(mut g) = self.inner.lock() {
            g.pipe = None;
        }
        let _ = write_file(&self.instance.join("events/block/block_rq_issue/enable"), "0");
        let _ = std::fs::remove_dir(&self.instance);
    }
}

/// Remove the instances of servers that died without cleaning up.
fn remove_stale_instances(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let Some(pid) = name.strip_prefix("ext4lazy-emu-").and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

fn is_our_loop(minors: &mut HashMap<u32, (bool, Instant)>, minor: u32, image: &Path) -> bool {
    if let Some(&(ours, at)) = minors.get(&minor) {
        if ours || at.elapsed() < Duration::from_secs(1) {
            return ours;
        }
    }
    let p = format!("/sys/block/loop{minor}/loop/backing_file");
    let ours = std::fs::read_to_string(p)
        .map(|s| {
            let s = s.trim();
            Path::new(s) == image || std::fs::canonicalize(s).map(|c| c == image).unwrap_or(false)
        })
        .unwrap_or(false);
    minors.insert(minor, (ours, Instant::now()));
    ours
}

/// Read every pending event without blocking.
fn drain(g: &mut Inner, image: &Path) {
    let mut buf = [0u8; 65536];
    let Some(pipe) = g.pipe.as_mut() else { return };
    loop {
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => g.partial.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => break, // EAGAIN: nothing more now
        }
    }
    let text = std::mem::take(&mut g.partial);
    let mut rest = text.as_str();
    while let Some(nl) = rest.find('\n') {
        let line = &rest[..nl];
        rest = &rest[nl + 1..];
        if let Some(ev) = parse_issue(line) {
            if ev.major == 7 && ev.meta && is_our_loop(&mut g.minors, ev.minor, image) {
                g.flagged.insert(ev.sector * 512, (ev.sectors * 512, ev.read, Instant::now()));
            }
        }
    }
    g.partial = rest.to_string();
    if g.last_prune.elapsed() > Duration::from_secs(5) {
        g.flagged.retain(|_, v| v.2.elapsed() < Duration::from_secs(30));
        g.last_prune = Instant::now();
    }
}

#[derive(Debug, PartialEq)]
pub struct IssueEvent {
    pub major: u32,
    pub minor: u32,
    pub read: bool,
    pub meta: bool,
    pub sector: u64,
    pub sectors: u64,
}

/// Parse one `block_rq_issue` line of a trace.
pub fn parse_issue(line: &str) -> Option<IssueEvent> {
    let body = line.split("block_rq_issue: ").nth(1)?;
    let mut it = body.split_whitespace();
    let (maj, min) = it.next()?.split_once(',')?;
    let rwbs = it.next()?;
    let plus = body.find(" + ")?;
    let sector = body[..plus].rsplit(' ').next()?.parse().ok()?;
    let sectors = body[plus + 3..].split_whitespace().next()?.parse().ok()?;
    Some(IssueEvent {
        major: maj.parse().ok()?,
        minor: min.parse().ok()?,
        read: rwbs.contains('R'),
        meta: rwbs.contains('M'),
        sector,
        sectors,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_issue_lines() {
        let l = "  kworker/u8:2-81 [001] ..... 1234.567890: block_rq_issue: 7,3 WSM 4096 () 264192 + 8 none,0,0 [kworker/u8:2]";
        assert_eq!(
            parse_issue(l),
            Some(IssueEvent { major: 7, minor: 3, read: false, meta: true, sector: 264192, sectors: 8 })
        );
        let l = "  cat-1 [000] ..... 1.0: block_rq_issue: 7,0 R 0 () 8 + 16 be,0,4 [cat]";
        let e = parse_issue(l).unwrap();
        assert!(e.read && !e.meta);
        assert_eq!(parse_issue("garbage"), None);
    }
}
