//! Walks a directory tree into one record per path: what the comparison
//! looks at. Errors become values (an errno in the field), so that they show
//! up as differences instead of stopping the walk.

use crate::apply::cpath;
use crate::rng::Fnv;
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

/// Data regions of a file: [start, end) pairs from SEEK_DATA/SEEK_HOLE.
pub type SeekMap = Vec<(u64, u64)>;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Xattr {
    pub len: usize,
    pub digest: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// Digest of the bytes in the data regions read (the oracle's regions
    /// when a plan is given, so that both sides read the same ranges).
    pub digest: u64,
    /// Bytes read for the digest.
    pub read: u64,
    /// First non-zero byte found by sampling the holes between the regions.
    pub nonzero_in_hole: Option<u64>,
    /// The same for the holes of the file's own seek map, where it differs
    /// from the regions read: a hole this side reports must read as zeros.
    pub nonzero_in_own_hole: Option<u64>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    /// f d l p c b s
    pub kind: char,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u64,
    pub size: u64,
    pub rdev: u64,
    pub ino: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub target: Option<Result<Vec<u8>, i32>>,
    pub xattrs: Result<BTreeMap<String, Result<Xattr, i32>>, i32>,
    pub seek: Option<Result<SeekMap, i32>>,
    pub content: Option<Result<Content, i32>>,
    /// Names in a directory (without . and ..).
    pub entries: Option<Result<u64, i32>>,
}

/// Path (relative, "" for the root) -> record, or the lstat errno.
pub type Tree = BTreeMap<String, Result<Rec, i32>>;

fn os_err(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Reading more than this from one file for a digest means something is
/// wrong (a generic seek map over a terabyte-sized sparse file): refuse.
const MAX_READ: u64 = 1 << 30;
const SAMPLE: u64 = 4096;

/// Walk `root`. `plan` (the oracle's tree) says which regions to read of
/// each file; without it (or where it has no such file) a file's own seek map
/// does.
pub fn walk(root: &Path, plan: Option<&Tree>) -> Tree {
    let mut tree = Tree::new();
    let mut stack = vec![String::new()];
    while let Some(dir) = stack.pop() {
        let rec = record(root, &dir, plan);
        let is_dir = matches!(&rec, Ok(r) if r.kind == 'd');
        tree.insert(dir.clone(), rec);
        if !is_dir {
            continue;
        }
        let full = root.join(&dir);
        let names = match std::fs::read_dir(&full) {
            Ok(it) => {
                it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned())).collect::<Result<Vec<_>, _>>()
            }
            Err(e) => Err(e),
        };
        match names {
            Ok(names) => {
                if let Some(Ok(r)) = tree.get_mut(&dir) {
                    r.entries = Some(Ok(names.len() as u64));
                }
                for n in names {
                    let p = join(&dir, &n);
                    match std::fs::symlink_metadata(root.join(&p)) {
                        Ok(m) if m.is_dir() => stack.push(p),
                        _ => {
                            let r = record(root, &p, plan);
                            tree.insert(p, r);
                        }
                    }
                }
            }
            Err(e) => {
                if let Some(Ok(r)) = tree.get_mut(&dir) {
                    r.entries = Some(Err(os_err(&e)));
                }
            }
        }
    }
    tree
}

fn record(root: &Path, rel: &str, plan: Option<&Tree>) -> Result<Rec, i32> {
    let full = root.join(rel);
    let m = std::fs::symlink_metadata(&full).map_err(|e| os_err(&e))?;
    let ft = m.file_type();
    let kind = if ft.is_file() {
        'f'
    } else if ft.is_dir() {
        'd'
    } else if ft.is_symlink() {
        'l'
    } else if ft.is_fifo() {
        'p'
    } else if ft.is_char_device() {
        'c'
    } else if ft.is_block_device() {
        'b'
    } else {
        's'
    };
    let mut rec = Rec {
        kind,
        perm: m.mode() & 0o7777,
        uid: m.uid(),
        gid: m.gid(),
        nlink: m.nlink(),
        size: m.size(),
        rdev: m.rdev(),
        ino: m.ino(),
        atime: m.atime() * 1_000_000_000 + m.atime_nsec(),
        mtime: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        ctime: m.ctime() * 1_000_000_000 + m.ctime_nsec(),
        target: None,
        xattrs: xattrs(root, rel),
        seek: None,
        content: None,
        entries: None,
    };
    if kind == 'l' {
        rec.target =
            Some(std::fs::read_link(&full).map(|t| t.into_os_string().into_encoded_bytes()).map_err(|e| os_err(&e)));
    }
    if kind == 'f' {
        let planned = plan.and_then(|t| t.get(rel)).and_then(|r| match r {
            Ok(r) if r.kind == 'f' && r.size == rec.size => match &r.seek {
                Some(Ok(map)) => Some(map.clone()),
                // The oracle's own SEEK_DATA failed and it read the whole file: so does this side.
                Some(Err(_)) => Some(vec![(0, rec.size)]),
                None => None,
            },
            _ => None,
        });
        match file_data(root, rel, rec.size, planned) {
            Ok((seek, content)) => {
                rec.seek = Some(seek);
                rec.content = Some(content);
            }
            Err(e) => {
                rec.seek = Some(Err(e));
                rec.content = Some(Err(e));
            }
        }
    }
    Ok(rec)
}

fn xattrs(root: &Path, rel: &str) -> Result<BTreeMap<String, Result<Xattr, i32>>, i32> {
    let p = cpath(root, rel);
    let mut buf = vec![0u8; 4096];
    let n = loop {
        let n = unsafe { libc::llistxattr(p.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            break n as usize;
        }
        let e = std::io::Error::last_os_error();
        if os_err(&e) == libc::ERANGE && buf.len() < (1 << 20) {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        return Err(os_err(&e));
    };
    let mut out = BTreeMap::new();
    for name in buf[..n].split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let key = String::from_utf8_lossy(name).into_owned();
        let mut cname = name.to_vec();
        cname.push(0);
        let mut v = vec![0u8; 65536];
        let r = unsafe { libc::lgetxattr(p.as_ptr(), cname.as_ptr().cast(), v.as_mut_ptr().cast(), v.len()) };
        let val = if r < 0 {
            Err(os_err(&std::io::Error::last_os_error()))
        } else {
            let mut h = Fnv::default();
            h.update(&v[..r as usize]);
            Ok(Xattr { len: r as usize, digest: h.0 })
        };
        out.insert(key, val);
    }
    Ok(out)
}

/// A file's seek map and content digest, each or both failed with an errno.
type FileData = (Result<SeekMap, i32>, Result<Content, i32>);

/// The file's own seek map, and the digest of the regions `planned` (else
/// its own map) names, with samples of the holes between them.
fn file_data(root: &Path, rel: &str, size: u64, planned: Option<SeekMap>) -> Result<FileData, i32> {
    let p = cpath(root, rel);
    let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW) };
    if fd < 0 {
        return Err(os_err(&std::io::Error::last_os_error()));
    }
    let own = seek_map(fd, size);
    let regions = match (&planned, &own) {
        (Some(m), _) => m.clone(),
        (None, Ok(m)) => m.clone(),
        (None, Err(_)) => vec![(0, size)],
    };
    let mut content = digest(fd, size, &regions);
    if let (Ok(c), Ok(m)) = (&mut content, &own) {
        if *m != regions {
            c.nonzero_in_own_hole = holes_nonzero(fd, size, m)?;
        }
    }
    unsafe { libc::close(fd) };
    Ok((own, content))
}

fn seek_map(fd: libc::c_int, size: u64) -> Result<SeekMap, i32> {
    let mut map = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let d = unsafe { libc::lseek(fd, pos as libc::off_t, libc::SEEK_DATA) };
        if d < 0 {
            let e = os_err(&std::io::Error::last_os_error());
            if e == libc::ENXIO {
                break;
            }
            return Err(e);
        }
        let h = unsafe { libc::lseek(fd, d, libc::SEEK_HOLE) };
        if h < 0 {
            return Err(os_err(&std::io::Error::last_os_error()));
        }
        if h <= d || map.len() > 1_000_000 {
            return Err(libc::EINVAL); // no progress or absurd: report instead of looping
        }
        map.push((d as u64, h as u64));
        pos = h as u64;
    }
    Ok(map)
}

fn pread_all(fd: libc::c_int, off: u64, len: u64, mut each: impl FnMut(&[u8])) -> Result<u64, i32> {
    let mut buf = vec![0u8; len.min(1 << 20) as usize];
    let mut done = 0;
    while done < len {
        let want = (len - done).min(buf.len() as u64) as usize;
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), want, (off + done) as libc::off_t) };
        if n < 0 {
            return Err(os_err(&std::io::Error::last_os_error()));
        }
        if n == 0 {
            break;
        }
        each(&buf[..n as usize]);
        done += n as u64;
    }
    Ok(done)
}

fn holes_of(size: u64, regions: &SeekMap) -> Vec<(u64, u64)> {
    let mut holes = Vec::new();
    let mut prev_end = 0u64;
    for &(a, b) in regions {
        if a > prev_end {
            holes.push((prev_end, a.min(size)));
        }
        prev_end = prev_end.max(b.min(size));
    }
    if size > prev_end {
        holes.push((prev_end, size));
    }
    holes.retain(|(a, b)| b > a);
    holes
}

/// Sample each hole at its start, middle and end: the first non-zero byte.
fn holes_nonzero(fd: libc::c_int, size: u64, regions: &SeekMap) -> Result<Option<u64>, i32> {
    let mut nonzero = None;
    for (a, b) in holes_of(size, regions) {
        let mut starts = vec![a, a + (b - a) / 2, b.saturating_sub(SAMPLE).max(a)];
        starts.dedup();
        for s in starts {
            let mut at = s;
            pread_all(fd, s, SAMPLE.min(b - s), |d| {
                if nonzero.is_none() {
                    if let Some(i) = d.iter().position(|&x| x != 0) {
                        nonzero = Some(at + i as u64);
                    }
                }
                at += d.len() as u64;
            })?;
        }
    }
    Ok(nonzero)
}

fn digest(fd: libc::c_int, size: u64, regions: &SeekMap) -> Result<Content, i32> {
    let total: u64 = regions.iter().map(|(a, b)| b.min(&size).saturating_sub(*a)).sum();
    if total > MAX_READ {
        return Err(libc::EFBIG);
    }
    let mut h = Fnv::default();
    let mut read = 0;
    for &(a, b) in regions {
        let b = b.min(size);
        if b > a {
            h.update(&a.to_le_bytes());
            read += pread_all(fd, a, b - a, |d| h.update(d))?;
        }
    }
    // Holes are sampled, not read: a terabyte-sized sparse file must stay cheap.
    let nonzero = holes_nonzero(fd, size, regions)?;
    Ok(Content { digest: h.0, read, nonzero_in_hole: nonzero, nonzero_in_own_hole: None })
}
