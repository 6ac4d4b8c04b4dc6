//! The engine's own CPU cost of an untar, without FUSE: what the daemon spends
//! per request once the kernel has handed it over.
//!
//!     cargo run --release -p fs --example untarcpu -- [SOURCE_DIR] [IMAGE_DIR] [ROUNDS]
//!
//! Replays, through the library API, the requests the kernel sends the daemon
//! when GNU tar (as root) extracts SOURCE_DIR (default /usr/include) into a
//! fresh volume: per file, the parent's attributes (the permission check), a
//! negative lookup, the create, the writes in tar's 10 KiB records (each one
//! after the capability check a write makes), then utimensat, fchown and
//! fchmod as three setattrs, and the capability read of chown. Directories get
//! a lookup, a mkdir and the three setattrs. The volume is mkfs'd afresh
//! (defaults, 8 GiB sparse) for each round. Prints the wall and CPU time of the
//! replay and per request; the commit and write-back at unmount are timed apart.
//! Compare builds with it: it measures our code, with none of the context
//! switches that dominate a real untar. Needs mkfs.ext4.

use blockdev::FileDevice;
use fs::{CreateKind, SetAttr, Timestamp, Volume, VolumeOptions, ROOT_INO};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const RECORD: usize = 10240;

struct Entry {
    path: PathBuf,
    parent: usize,
    name: Vec<u8>,
    dir: bool,
    size: u64,
}

/// Every directory and regular file under `root`, parents before children, in name order (tar --sort=name).
fn walk(root: &Path) -> Vec<Entry> {
    let mut out = vec![Entry { path: root.into(), parent: 0, name: Vec::new(), dir: true, size: 0 }];
    let mut i = 0;
    while i < out.len() {
        if out[i].dir {
            let mut names: Vec<_> = std::fs::read_dir(&out[i].path).map(|r| r.flatten().collect()).unwrap_or_default();
            names.sort_by_key(|e| e.file_name());
            for e in names {
                let Ok(md) = std::fs::symlink_metadata(e.path()) else { continue };
                if md.is_dir() || md.is_file() {
                    use std::os::unix::ffi::OsStrExt;
                    let name = e.file_name().as_bytes().to_vec();
                    out.push(Entry { path: e.path(), parent: i, name, dir: md.is_dir(), size: md.len() });
                }
            }
        }
        i += 1;
    }
    out
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes into the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let src = PathBuf::from(args.get(1).cloned().unwrap_or_else(|| "/usr/include".into()));
    let dir = PathBuf::from(args.get(2).cloned().unwrap_or_else(|| "/var/tmp".into()));
    let rounds: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
    let entries = walk(&src);
    let contents: Vec<Vec<u8>> =
        entries.iter().map(|e| if e.dir { Vec::new() } else { std::fs::read(&e.path).unwrap_or_default() }).collect();
    let files = entries.iter().filter(|e| !e.dir).count();
    let bytes: u64 = entries.iter().map(|e| e.size).sum();
    println!(
        "{}: {} files, {} directories, {:.1} MiB",
        src.display(),
        files,
        entries.len() - files,
        bytes as f64 / (1 << 20) as f64
    );
    let img = dir.join("ext4lazy-untarcpu.img");
    for round in 1..=rounds {
        let _ = std::fs::remove_file(&img);
        std::fs::File::create(&img).and_then(|f| f.set_len(8 << 30)).expect("create the image");
        let st = std::process::Command::new("mkfs.ext4").args(["-F", "-q"]).arg(&img).status().expect("run mkfs.ext4");
        assert!(st.success(), "mkfs.ext4 failed");
        let opts = VolumeOptions { read_only: false, ..Default::default() };
        let vol = Volume::open(Arc::new(FileDevice::open(&img, true).expect("open")), opts).expect("mount");
        let mut ino = vec![0u32; entries.len()];
        ino[0] = ROOT_INO;
        let mtime = Some(Timestamp { sec: 1_700_000_000, nsec: 0 });
        let mut requests = 0u64;
        let (t0, c0) = (Instant::now(), cpu_seconds());
        for (i, e) in entries.iter().enumerate().skip(1) {
            let parent = ino[e.parent];
            let pdir = vol.inode(parent).expect("parent attributes");
            assert!(vol.lookup(&pdir, &e.name).expect("lookup").is_none());
            let kind = if e.dir { CreateKind::Dir } else { CreateKind::File };
            let new = vol.create_masked(parent, &e.name, kind, 0o700, 0o022, 0, 0).expect("create");
            ino[i] = new.ino;
            requests += 3;
            let data = &contents[i];
            let mut at = 0;
            while at < data.len() {
                // tar's first piece ends at its record boundary, then whole records.
                let n = (RECORD - (512 + at) % RECORD).min(data.len() - at);
                vol.drop_privileges(new.ino, false).expect("capability check");
                vol.write(new.ino, at as u64, &data[at..at + n]).expect("write");
                at += n;
                requests += 1;
            }
            vol.setattr(new.ino, &SetAttr { atime: mtime, mtime, ..Default::default() }).expect("utimensat");
            vol.setattr(new.ino, &SetAttr { uid: Some(0), gid: Some(0), ..Default::default() }).expect("fchown");
            vol.setattr(new.ino, &SetAttr { mode: Some(0o644), ..Default::default() }).expect("fchmod");
            let child = vol.inode(new.ino).expect("inode");
            let _ = vol.get_xattr(&child, b"security.capability", true);
            requests += 4;
        }
        let (work, cpu) = (t0.elapsed().as_secs_f64(), cpu_seconds() - c0);
        let t1 = Instant::now();
        vol.shutdown().expect("unmount");
        drop(vol);
        println!(
            "round {round}: replay {work:.3} s wall, {cpu:.3} s CPU, {requests} requests: {:.2} us CPU per request; unmount {:.3} s",
            cpu * 1e6 / requests as f64,
            t1.elapsed().as_secs_f64()
        );
    }
    let _ = std::fs::remove_file(&img);
}
