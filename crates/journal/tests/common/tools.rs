//! Helpers for tests that drive the real tools (mkfs.ext4, mount, debugfs, e2fsck).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use journal::{JournalMap, JournalReader};

/// Why tests needing root and e2fsprogs cannot run here, if they cannot.
pub fn skip_reason(need_root: bool) -> Option<String> {
    for tool in ["mkfs.ext4", "debugfs", "e2fsck", "dumpe2fs"] {
        let found = ["/sbin", "/usr/sbin", "/bin", "/usr/bin"].iter().any(|d| Path::new(d).join(tool).exists());
        if !found {
            return Some(format!("{tool} not found (install e2fsprogs)"));
        }
    }
    if need_root {
        let uid =
            Command::new("id").arg("-u").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        if uid.as_deref() != Some("0") {
            return Some("not root (loop mounts need root)".into());
        }
    }
    None
}

/// Skip the calling test (return early) with a message when tools are missing.
#[macro_export]
macro_rules! require_tools {
    ($root:expr) => {
        if let Some(why) = common::tools::skip_reason($root) {
            // A skipped check is not a passed one: tests/run.sh asks for every oracle.
            if std::env::var("EXT4LAZY_REQUIRE_ORACLES").is_ok_and(|v| v == "1") {
                panic!("oracle unavailable under EXT4LAZY_REQUIRE_ORACLES=1: {why}");
            }
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
}

/// Run a command; panic with its output unless it exits with one of `ok` codes.
pub fn run_ok(cmd: &str, args: &[&str], ok: &[i32]) -> String {
    let out = Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    let code = out.status.code().unwrap_or(-1);
    if !ok.contains(&code) {
        panic!(
            "{cmd} {args:?} exited {code}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn run(cmd: &str, args: &[&str]) -> String {
    run_ok(cmd, args, &[0])
}

pub fn sh(script: &str) -> String {
    run("sh", &["-c", script])
}

pub fn debugfs(img: &Path, request: &str) -> String {
    run("debugfs", &["-R", request, img.to_str().unwrap()])
}

pub fn debugfs_write(img: &Path, requests: &str) -> String {
    let cmdfile = img.with_extension("cmds");
    std::fs::write(&cmdfile, requests).unwrap();
    run("debugfs", &["-w", "-f", cmdfile.to_str().unwrap(), img.to_str().unwrap()])
}

/// A field of `dumpe2fs -h`, e.g. "Block size".
pub fn dumpe2fs_field(img: &Path, field: &str) -> Option<String> {
    let out = run_ok("dumpe2fs", &["-h", img.to_str().unwrap()], &[0, 1]);
    out.lines().find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_string()))
}

/// The journal of an ext4 image, read through the journal inode's extents.
pub struct ImageJournal {
    pub file: File,
    pub bs: u32,
    /// logical start -> (physical start, length)
    pub map: BTreeMap<u64, (u64, u64)>,
    pub len: u64,
}

impl ImageJournal {
    pub fn open(img: &Path) -> ImageJournal {
        let bs: u32 = dumpe2fs_field(img, "Block size").expect("block size").parse().unwrap();
        let stat = debugfs(img, "stat <8>");
        let map = parse_block_map(&stat);
        let len = map.iter().map(|(l, (_, n))| l + n).max().unwrap_or(0);
        ImageJournal { file: File::open(img).unwrap(), bs, map, len }
    }

    /// The journal inode's extents as the writer's map.
    pub fn journal_map(&self) -> JournalMap {
        let runs: Vec<(u64, u64, u64)> = self.map.iter().map(|(l, (p, n))| (*l, *p, *n)).collect();
        JournalMap::new(runs, self.len, self.bs).unwrap()
    }

    /// Physical block of journal block `j`.
    pub fn phys(&self, j: u64) -> Option<u64> {
        let (l, (p, n)) = self.map.range(..=j).next_back()?;
        (j < l + n).then(|| p + (j - l))
    }
}

impl JournalReader for ImageJournal {
    fn block_size(&self) -> u32 {
        self.bs
    }
    fn len_blocks(&self) -> u64 {
        self.len
    }
    fn read_block(&self, jblock: u64, buf: &mut [u8]) -> io::Result<()> {
        let p = self.phys(jblock).ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "unmapped journal block"))?;
        self.file.read_exact_at(buf, p * u64::from(self.bs))
    }
}

/// Parse the EXTENTS/BLOCKS list of `debugfs stat`: "(0-1023):16385-17408, (ETB0):..".
pub fn parse_block_map(stat: &str) -> BTreeMap<u64, (u64, u64)> {
    let mut map = BTreeMap::new();
    let start = stat.find("EXTENTS:").or_else(|| stat.find("BLOCKS:")).expect("no block list");
    for tok in stat[start..].split([',', ' ', '\n']).filter(|t| t.starts_with('(')) {
        let Some((lhs, rhs)) = tok.split_once("):") else {
            continue;
        };
        let lhs = &lhs[1..];
        let range = |s: &str| -> Option<(u64, u64)> {
            match s.split_once('-') {
                Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                None => s.parse().ok().map(|a| (a, a)),
            }
        };
        let (Some((l0, l1)), Some((p0, _))) = (range(lhs), range(rhs)) else {
            continue;
        };
        map.insert(l0, (p0, l1 - l0 + 1));
    }
    map
}

/// Read file-system block `b` of an image.
pub fn read_fs_block(img: &File, bs: u32, b: u64) -> Vec<u8> {
    let mut buf = vec![0u8; bs as usize];
    img.read_exact_at(&mut buf, b * u64::from(bs)).unwrap();
    buf
}

/// What `debugfs -R 'logdump -a'` reports.
#[derive(Debug, Default)]
pub struct LogDump {
    pub commits: u32,
    /// (sequence, fs block, journal block) for every tag, in log order.
    pub tags: Vec<(u32, u64, u64)>,
    pub revokes: Vec<(u32, u64)>,
}

pub fn logdump(img: &Path) -> LogDump {
    let out = debugfs(img, "logdump -a");
    let mut d = LogDump::default();
    let mut seq = 0u32;
    for line in out.lines() {
        let t = line.trim();
        if let Some(rest) = t
            .strip_prefix("Dumping descriptor block, sequence ")
            .or_else(|| t.strip_prefix("Dumping revoke block, sequence "))
        {
            seq = rest.split(',').next().unwrap().trim().parse().unwrap();
        } else if t.contains("type 2 (commit block)") {
            d.commits += 1;
        } else if let Some(rest) = t.strip_prefix("FS block ") {
            let w: Vec<&str> = rest.split_whitespace().collect();
            if w.len() >= 6 && w[1] == "logged" {
                d.tags.push((seq, w[0].parse().unwrap(), w[5].parse().unwrap()));
            }
        } else if let Some(rest) = t.strip_prefix("Revoke FS block ") {
            d.revokes.push((seq, rest.split_whitespace().next().unwrap().parse().unwrap()));
        }
    }
    d
}

pub fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("journal-test").tempdir_in(std::env::temp_dir()).unwrap()
}

pub fn p(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
