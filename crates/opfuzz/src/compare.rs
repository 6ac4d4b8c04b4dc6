//! What must be equal between the oracle's tree (the kernel's ext4) and the
//! tree under test, and what only has to be sane.
//!
//! Compared exactly: the set of paths, type, permission bits, owner, link
//! count, size (not of directories: their block layout may legitimately
//! differ, e.g. inline directories converted to blocks), device numbers,
//! symlink targets, every xattr's value, the number of names in a directory,
//! hard-link groups, and the bytes of every file (the oracle's data regions
//! read on both sides, and samples of its holes, which must read as zeros).
//!
//! Times: a time outside the run's wall-clock window can only have been set
//! explicitly (utimes picks times far from now), so it must be equal to the
//! nanosecond; a time inside the window was set by the file system ("now")
//! and only has to be inside the window on both sides.
//!
//! Seek maps: every hole either side reports must read as zeros, and errors
//! must agree; the maps themselves may differ (allocators decide what is a
//! hole: the kernel zeroes short unwritten extents into data blocks), and are
//! only counted: equal, generic (all data, the VFS's answer when a file
//! system leaves SEEK_DATA/SEEK_HOLE to it), or otherwise different.
//!
//! FIFOs' times are not compared: pipe I/O changes them in the kernel's ext4,
//! and FUSE never tells the daemon about it.

use crate::tree::{Rec, Tree};
use std::collections::{BTreeMap, BTreeSet};

/// The wall-clock window of a run, in ns since the epoch.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub lo: i64,
    pub hi: i64,
}

impl Window {
    fn has(&self, t: i64) -> bool {
        t >= self.lo && t <= self.hi
    }
}

/// Paths whose state is allowed to differ (after a tolerated ENOSPC
/// difference), with everything below them.
#[derive(Clone, Debug, Default)]
pub struct Tainted(
    BTreeSet<String>,
    std::collections::HashSet<u64>,
    std::collections::HashSet<u64>,
    std::collections::HashSet<u64>,
);

impl Tainted {
    /// The whole inode (the oracle's inode number) may differ, under any of
    /// its names, including names its tainted name's unlink left it with.
    pub fn add_ino(&mut self, ino: u64) {
        self.3.insert(ino);
    }
    /// Only the times of the inode (the oracle's inode number) may differ.
    pub fn add_times(&mut self, ino: u64) {
        self.2.insert(ino);
    }
    pub fn times_of(&self, ino: u64) -> bool {
        self.2.contains(&ino)
    }
    pub fn add(&mut self, p: &str) {
        self.0.insert(p.to_string());
    }
    /// Only the xattrs of the inode (the oracle's inode number) may differ.
    pub fn add_xattrs(&mut self, ino: u64) {
        self.1.insert(ino);
    }
    pub fn xattrs_of(&self, ino: u64) -> bool {
        self.1.contains(&ino)
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    /// Something below `p` is tainted (an op on `p` may see the difference).
    pub fn below(&self, p: &str) -> bool {
        if p.is_empty() {
            return !self.0.is_empty();
        }
        let prefix = format!("{p}/");
        self.0.range(prefix.clone()..).next().is_some_and(|k| k.starts_with(&prefix))
    }
    pub fn covers(&self, p: &str) -> bool {
        // Check p and each of its ancestors: cheap with a sorted set.
        let mut cur = p;
        loop {
            if self.0.contains(cur) {
                return true;
            }
            match cur.rfind('/') {
                Some(i) => cur = &cur[..i],
                None => return false,
            }
        }
    }
}

#[derive(Debug, Default)]
pub struct Report {
    pub diffs: Vec<String>,
    /// Files whose seek map under test was the generic one while the oracle's differed.
    pub generic_seek: usize,
    /// Files whose seek maps differ otherwise on a cold mount (allowed, counted).
    pub other_seek: usize,
    pub compared: usize,
}

fn groups(t: &Tree) -> BTreeMap<&str, Vec<&str>> {
    let mut by_ino: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
    for (p, r) in t {
        if let Ok(r) = r {
            if r.kind != 'd' && r.nlink > 1 {
                by_ino.entry(r.ino).or_default().push(p);
            }
        }
    }
    let mut out = BTreeMap::new();
    for v in by_ino.values() {
        for p in v {
            out.insert(*p, v.clone());
        }
    }
    out
}

fn time_diff(what: &str, k: i64, e: i64, w: &Window) -> Option<String> {
    let ok = if w.has(k) && w.has(e) { true } else { k == e };
    (!ok).then(|| format!("{what}: kernel={k} ext4lazy={e} (window {}..{})", w.lo, w.hi))
}

#[allow(clippy::too_many_arguments)]
fn rec_diffs(
    k: &Rec,
    e: &Rec,
    w: &Window,
    rep: &mut Report,
    taint_below: bool,
    cold: bool,
    xattrs_tainted: bool,
    times_tainted: bool,
) -> Vec<String> {
    let mut d = Vec::new();
    macro_rules! eq {
        ($f:ident) => {
            if k.$f != e.$f {
                d.push(format!("{}: kernel={:?} ext4lazy={:?}", stringify!($f), k.$f, e.$f));
            }
        };
    }
    eq!(kind);
    if k.kind != e.kind {
        return d;
    }
    eq!(perm);
    eq!(uid);
    eq!(gid);
    // A directory with tainted names in it: its count of names and links may differ.
    if !(k.kind == 'd' && taint_below) {
        eq!(nlink);
        eq!(entries);
    }
    if k.kind != 'd' {
        eq!(size);
    }
    if k.kind == 'c' || k.kind == 'b' {
        eq!(rdev);
    }
    eq!(target);
    if !xattrs_tainted {
        eq!(xattrs);
    }
    // The digests and the oracle's hole samples; the own-hole samples apart.
    let strip = |c: &Option<Result<crate::tree::Content, i32>>| {
        c.clone().map(|r| {
            r.map(|mut c| {
                c.nonzero_in_own_hole = None;
                c
            })
        })
    };
    if strip(&k.content) != strip(&e.content) {
        d.push(format!("content: kernel={:?} ext4lazy={:?}", k.content, e.content));
    }
    if let Some(Ok(c)) = &e.content {
        if let Some(at) = c.nonzero_in_hole {
            d.push(format!("data where the kernel has a hole, at byte {at}"));
        }
        if let Some(at) = c.nonzero_in_own_hole {
            d.push(format!("SEEK_HOLE reports a hole that holds data, at byte {at}"));
        }
    }
    // Seek maps need not be equal: allocators decide what is data and what
    // is a hole (the kernel writes short unwritten extents out as zeroed
    // blocks, up to 32 KiB; with pages cached it calls unwritten extents
    // data). What must hold: the bytes (above), every hole either side
    // reports reads as zeros (the samples), and the same errors.
    match (&k.seek, &e.seek) {
        (Some(Ok(km)), Some(Ok(em))) if km != em => {
            let generic = if e.size == 0 { em.is_empty() } else { em == &vec![(0, e.size)] };
            if generic {
                rep.generic_seek += 1;
            } else if cold {
                rep.other_seek += 1;
            }
        }
        // The kernel's own SEEK_DATA fails on some inline-data files (ENOENT
        // on 6.18): nothing to compare against then.
        (Some(Err(_)), _) | (Some(Ok(_)), Some(Ok(_))) => {}
        _ => eq!(seek),
    }
    // A FIFO's times change with pipe I/O that FUSE never tells the daemon
    // about (the kernel updates them only for its own ext4): not comparable.
    if k.kind == 'p' {
        return d;
    }
    // A directory with tainted names in it: a tolerated op (ENOSPC on one
    // side only) changed its times on the other side alone.
    if (k.kind == 'd' && taint_below) || times_tainted {
        return d;
    }
    d.extend(time_diff("atime", k.atime, e.atime, w));
    d.extend(time_diff("mtime", k.mtime, e.mtime, w));
    // ctime cannot be set: both must simply be recent.
    if w.has(k.ctime) != w.has(e.ctime) {
        d.push(format!("ctime: kernel={} ext4lazy={} (window {}..{})", k.ctime, e.ctime, w.lo, w.hi));
    }
    d
}

/// Compare the oracle's tree `k` with `e`; tainted paths are left out.
/// `cold`: both were walked right after a mount (seek maps are comparable).
pub fn compare(k: &Tree, e: &Tree, w: &Window, tainted: &Tainted, cold: bool) -> Report {
    compare_named(k, e, k, w, tainted, cold)
}

/// [`compare`], with the inode numbers taints are kept by (the oracle's)
/// taken from `oracle`, a tree of the oracle at the same moment: when `k`
/// is not the oracle's (one side against itself), its numbers are not the
/// ones tainted.
fn compare_named(k: &Tree, e: &Tree, oracle: &Tree, w: &Window, tainted: &Tainted, cold: bool) -> Report {
    let mut rep = Report::default();
    let oracle_ino = |p: &str| oracle.get(p).and_then(|r| r.as_ref().ok()).map(|r| r.ino);
    let (gk, ge) = (groups(k), groups(e));
    // A hard-link group with a tainted member is tainted as a whole.
    let group_tainted = |p: &str| gk.get(p).into_iter().chain(ge.get(p)).flatten().any(|q| tainted.covers(q));
    let ino_tainted = |p: &str| oracle_ino(p).is_some_and(|i| tainted.3.contains(&i));
    let skip = |p: &str| tainted.covers(p) || group_tainted(p) || ino_tainted(p);
    let paths: BTreeSet<&String> = k.keys().chain(e.keys()).collect();
    for p in paths {
        if skip(p) {
            continue;
        }
        rep.compared += 1;
        let shown = if p.is_empty() { "/" } else { p.as_str() };
        match (k.get(p), e.get(p)) {
            (Some(_), None) => rep.diffs.push(format!("{shown}: only on the kernel")),
            (None, Some(_)) => rep.diffs.push(format!("{shown}: only on ext4lazy")),
            (Some(Err(a)), Some(Err(b))) if a == b => {}
            (Some(Ok(a)), Some(Ok(b))) => {
                for x in rec_diffs(
                    a,
                    b,
                    w,
                    &mut rep,
                    tainted.below(p),
                    cold,
                    oracle_ino(p).is_some_and(|i| tainted.xattrs_of(i)),
                    oracle_ino(p).is_some_and(|i| tainted.times_of(i)),
                ) {
                    rep.diffs.push(format!("{shown}: {x}"));
                }
                let strip = |v: Option<&Vec<&str>>| -> Vec<String> {
                    v.map(|v| v.iter().filter(|q| !tainted.covers(q)).map(|q| q.to_string()).collect())
                        .unwrap_or_default()
                };
                let (a, b) = (strip(gk.get(p.as_str())), strip(ge.get(p.as_str())));
                if a != b {
                    rep.diffs.push(format!("{shown}: hard links: kernel={a:?} ext4lazy={b:?}"));
                }
            }
            (a, b) => rep.diffs.push(format!("{shown}: lstat: kernel={a:?} ext4lazy={b:?}")),
        }
    }
    rep
}

/// One side's tree before and after its own unmount/remount. `plans` are
/// the oracle's trees of the same two moments (whose seek maps said which
/// regions were read). Data is compared only where both walks read the same
/// regions: a seek map may change at writeback (unwritten extents under dirty
/// pages are data before it, holes after).
pub fn self_compare(before: &Tree, after: &Tree, plans: (&Tree, &Tree), w: &Window, tainted: &Tainted) -> Report {
    let seek = |t: &Tree, p: &str| t.get(p).and_then(|r| r.as_ref().ok()).map(|r| r.seek.clone());
    let strip = |a: &Tree, b: &Tree| -> Tree {
        a.iter()
            .map(|(p, r)| {
                let mut r = r.clone();
                let same_regions = seek(a, p) == seek(b, p) && seek(plans.0, p) == seek(plans.1, p);
                if let Ok(x) = &mut r {
                    if !same_regions {
                        x.seek = None;
                        x.content = None;
                    }
                }
                (p.clone(), r)
            })
            .collect()
    };
    compare_named(&strip(before, after), &strip(after, before), plans.0, w, tainted, false)
}
