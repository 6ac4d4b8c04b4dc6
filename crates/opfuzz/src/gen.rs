//! The seeded, path-based generator. It keeps a model of the namespace (what
//! exists where, file sizes, xattr names) that the caller updates with each
//! operation's outcome ([`Gen::observe`]), and uses it to pick mostly
//! plausible targets (plus a share of wrong ones, for the errnos). It knows
//! nothing of mounts: the driver feeds it the kernel's outcomes, the crash
//! harness can feed it a `Volume`'s.
//!
//! Profiles push one structure at a time to the sizes where its on-disk shape
//! changes, in stages of growing size (so a short CI run still reaches every
//! shape), then keep changing it randomly; every profile mixes in a share of
//! all other operations.

use crate::apply::Outcome;
use crate::op::{falloc, rename, Op};
use crate::rng::Rng;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// One profile: the volume it needs and the structure it grows.
#[derive(Clone, Debug)]
pub struct Profile {
    pub name: &'static str,
    pub what: &'static str,
    /// mkfs.ext4 arguments (besides -F -q, the image and its size). Always
    /// with -b: below 512 MiB mke2fs picks 1 KiB blocks on its own.
    pub mkfs: &'static [&'static str],
    /// Image size in bytes.
    pub size: u64,
    pub block: u64,
    /// Operations between remounts.
    pub batch: usize,
    /// Burst sizes, first in this order, then drawn at random.
    pub stages: &'static [u64],
}

pub const PROFILES: &[Profile] = &[
    Profile {
        name: "mixed",
        what: "every operation on a small tree: namespace, data, attributes, xattrs, all rename and fallocate flags",
        mkfs: &["-b", "4096", "-I", "256"],
        size: 256 << 20,
        block: 4096,
        batch: 600,
        stages: &[],
    },
    Profile {
        name: "extents",
        what: "fragmented files (every other block, random order) with extent trees of depth 0, 1, 2; then punch, truncate, rewrite",
        mkfs: &["-b", "4096", "-I", "256"],
        size: 256 << 20,
        block: 4096,
        batch: 1500,
        stages: &[3, 300, 2000],
    },
    Profile {
        name: "deep-extents",
        what: "1 KiB blocks: extent trees of depth 0 to 3 (~30,000 discontiguous extents)",
        mkfs: &["-b", "1024", "-I", "256"],
        size: 512 << 20,
        block: 1024,
        batch: 12000,
        stages: &[3, 300, 3000, 30000],
    },
    Profile {
        name: "htree",
        what: "1 KiB blocks, large_dir, 250-byte names: htree directories of 1, 2 and 3 levels, then mass unlink",
        mkfs: &["-b", "1024", "-I", "256", "-O", "large_dir", "-N", "200000"],
        size: 512 << 20,
        block: 1024,
        batch: 25000,
        stages: &[3, 300, 5000, 50000],
    },
    Profile {
        name: "inline",
        what: "inline_data with 1 KiB inodes: small files and directories that outgrow the inode",
        mkfs: &["-b", "4096", "-I", "1024", "-O", "inline_data"],
        size: 128 << 20,
        block: 4096,
        batch: 800,
        stages: &[],
    },
    Profile {
        name: "xattr",
        what: "xattrs (user.*, trusted.*) that move from the inode to a block and back; values up to past a block",
        mkfs: &["-b", "4096", "-I", "256"],
        size: 128 << 20,
        block: 4096,
        batch: 800,
        stages: &[],
    },
    Profile {
        name: "big",
        what: "sparse files of 4 GiB and more: writes, truncates and fallocates around 4 GiB boundaries, up to the 16 TiB limit",
        mkfs: &["-b", "4096", "-I", "256"],
        size: 256 << 20,
        block: 4096,
        batch: 400,
        stages: &[],
    },
    Profile {
        name: "inodes",
        what: "a volume of 128 inodes that stays out of inodes: every create, mkdir, symlink and fifo meets the last free number and the one just freed",
        mkfs: &["-b", "4096", "-I", "256", "-N", "128"],
        size: 64 << 20,
        block: 4096,
        batch: 600,
        stages: &[],
    },
    Profile {
        name: "enospc",
        what: "a 24 MiB volume filled to ENOSPC and past it, then emptied a little and filled again",
        mkfs: &["-b", "1024", "-I", "256"],
        size: 24 << 20,
        block: 1024,
        batch: 500,
        stages: &[],
    },
];

pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// Temporary exclusions, each for a known divergence (docs/TESTING.md).
#[derive(Clone, Debug, Default)]
pub struct Switches {
    /// Generate COLLAPSE_RANGE and INSERT_RANGE. Off by default: the kernel's
    /// FUSE refuses them (EOPNOTSUPP) before any daemon sees them.
    pub fuse_unpassed_falloc: bool,
    /// Verbs never generated (e.g. "setxattr").
    pub skip: BTreeSet<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Dir,
    Symlink,
    Other,
}

#[derive(Clone, Copy, Debug)]
struct Node {
    kind: Kind,
    id: u64,
}

/// A set of paths with O(1) insert, remove and random pick.
#[derive(Default, Debug)]
struct PathSet {
    v: Vec<String>,
    at: HashMap<String, usize>,
}

impl PathSet {
    fn insert(&mut self, p: &str) {
        if !self.at.contains_key(p) {
            self.at.insert(p.to_string(), self.v.len());
            self.v.push(p.to_string());
        }
    }
    fn remove(&mut self, p: &str) {
        if let Some(i) = self.at.remove(p) {
            self.v.swap_remove(i);
            if i < self.v.len() {
                let moved = self.v[i].clone();
                self.at.insert(moved, i);
            }
        }
    }
    fn pick(&self, rng: &mut Rng) -> Option<&str> {
        if self.v.is_empty() {
            None
        } else {
            Some(&self.v[rng.below(self.v.len() as u64) as usize])
        }
    }
    fn len(&self) -> usize {
        self.v.len()
    }
}

/// What the generator believes exists.
#[derive(Default, Debug)]
struct Model {
    nodes: BTreeMap<String, Node>,
    by_kind: [PathSet; 4],
    size: HashMap<u64, u64>,
    xnames: HashMap<u64, BTreeSet<String>>,
    next_id: u64,
}

fn kidx(k: Kind) -> usize {
    match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink => 2,
        Kind::Other => 3,
    }
}

fn parent(p: &str) -> &str {
    p.rfind('/').map(|i| &p[..i]).unwrap_or("")
}

fn under(p: &str, dir: &str) -> bool {
    dir.is_empty() || p == dir || (p.starts_with(dir) && p.as_bytes().get(dir.len()) == Some(&b'/'))
}

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.insert("", Kind::Dir, None);
        m.insert("lost+found", Kind::Dir, None);
        m
    }

    fn insert(&mut self, p: &str, kind: Kind, id: Option<u64>) {
        let id = id.unwrap_or_else(|| {
            self.next_id += 1;
            self.next_id
        });
        self.nodes.insert(p.to_string(), Node { kind, id });
        self.by_kind[kidx(kind)].insert(p);
        self.size.entry(id).or_insert(0);
    }

    fn remove(&mut self, p: &str) -> Option<Node> {
        let n = self.nodes.remove(p)?;
        self.by_kind[kidx(n.kind)].remove(p);
        Some(n)
    }

    /// Remove `p` and everything below it; the removed nodes relative to `p`.
    fn take_subtree(&mut self, p: &str) -> Vec<(String, Node)> {
        let keys: Vec<String> = if p.is_empty() {
            return vec![];
        } else {
            let prefix = format!("{p}/");
            std::iter::once(p.to_string())
                .filter(|k| self.nodes.contains_key(k))
                .chain(
                    self.nodes
                        .range(prefix.clone()..)
                        .take_while(|(k, _)| k.starts_with(&prefix))
                        .map(|(k, _)| k.clone()),
                )
                .collect()
        };
        keys.into_iter().filter_map(|k| self.remove(&k).map(|n| (k[p.len()..].to_string(), n))).collect()
    }

    fn put_subtree(&mut self, p: &str, nodes: Vec<(String, Node)>) {
        for (rel, n) in nodes {
            self.insert(&format!("{p}{rel}"), n.kind, Some(n.id));
        }
    }

    fn get(&self, p: &str) -> Option<Node> {
        self.nodes.get(p).copied()
    }

    fn size_of(&self, p: &str) -> u64 {
        self.get(p).and_then(|n| self.size.get(&n.id).copied()).unwrap_or(0)
    }

    fn set_size(&mut self, p: &str, s: u64) {
        if let Some(n) = self.get(p) {
            self.size.insert(n.id, s);
        }
    }

    fn children(&self, dir: &str) -> Vec<String> {
        let prefix = if dir.is_empty() { String::new() } else { format!("{dir}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k.is_empty() && !k[prefix.len()..].contains('/'))
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The generator.
pub struct Gen {
    pub profile: &'static Profile,
    rng: Rng,
    model: Model,
    queue: VecDeque<Op>,
    sw: Switches,
    stage: usize,
    names: u64,
    /// Files that bursts made (fragmented files, big files), for the follow-ups.
    focus: Vec<String>,
}

const UIDS: [u32; 4] = [0, 1000, 65534, 4_294_967_294];
/// Explicit times are drawn from ext4's range (1901..2446 with 256-byte
/// inodes, up to 2262 here) but never from 2020..2040, the window a run's own "now"
/// lies in, so that the comparison can tell them apart.
/// (2262 is where nanoseconds in an i64 end; 1680 lies before ext4's range,
/// which the file system must clamp as the kernel does.)
const T_MIN: i64 = -(1 << 31);
const T_MAX: i64 = 9_200_000_000;
const T_FAR_PAST: i64 = -9_200_000_000;
const NOW_LO: i64 = 1_577_836_800;
const NOW_HI: i64 = 2_208_988_800;
/// The largest file ext4 allows with extents: 2^32 blocks.
fn max_file(block: u64) -> u64 {
    block << 32
}

impl Gen {
    pub fn new(profile: &'static Profile, seed: u64, sw: Switches) -> Gen {
        Gen {
            profile,
            rng: Rng::new(seed),
            model: Model::new(),
            queue: VecDeque::new(),
            sw,
            stage: 0,
            names: 0,
            focus: Vec::new(),
        }
    }

    /// Tell the generator what an op it made did (the oracle's outcome).
    pub fn observe(&mut self, op: &Op, out: &Outcome) {
        let Outcome::Ok(v) = *out else { return };
        let m = &mut self.model;
        match op {
            Op::Create { path, .. } => m.insert(path, Kind::File, None),
            Op::Mkfifo { path, .. } => m.insert(path, Kind::Other, None),
            Op::Mkdir { path, .. } => m.insert(path, Kind::Dir, None),
            Op::Symlink { path, .. } => m.insert(path, Kind::Symlink, None),
            Op::Write { path, off, .. } => {
                let s = m.size_of(path).max(off + v);
                m.set_size(path, s);
            }
            Op::Append { path, .. } => {
                let s = m.size_of(path) + v;
                m.set_size(path, s);
            }
            Op::Truncate { path, size } => m.set_size(path, *size),
            Op::Fallocate { path, mode, off, len } => {
                let s = m.size_of(path);
                if mode & falloc::COLLAPSE_RANGE != 0 {
                    m.set_size(path, s.saturating_sub(*len));
                } else if mode & falloc::INSERT_RANGE != 0 {
                    m.set_size(path, s + len);
                } else if mode & (falloc::KEEP_SIZE | falloc::PUNCH_HOLE) == 0 {
                    m.set_size(path, s.max(off + len));
                }
            }
            Op::Rename { from, to, flags } => {
                let (a, b) = (m.get(from), m.get(to));
                if flags & rename::EXCHANGE != 0 {
                    let ta = m.take_subtree(from);
                    let tb = m.take_subtree(to);
                    m.put_subtree(to, ta);
                    m.put_subtree(from, tb);
                } else if !(matches!((a, b), (Some(x), Some(y)) if x.id == y.id)) {
                    m.take_subtree(to);
                    let t = m.take_subtree(from);
                    m.put_subtree(to, t);
                    if flags & rename::WHITEOUT != 0 {
                        m.insert(from, Kind::Other, None);
                    }
                }
            }
            Op::Link { from, to } => {
                if let Some(n) = m.get(from) {
                    m.insert(to, n.kind, Some(n.id));
                }
            }
            Op::Unlink { path } | Op::Rmdir { path } => {
                m.take_subtree(path);
            }
            Op::SetXattr { path, name, .. } => {
                if let Some(n) = m.get(path) {
                    m.xnames.entry(n.id).or_default().insert(name.clone());
                }
            }
            Op::RemoveXattr { path, name } => {
                if let Some(n) = m.get(path) {
                    m.xnames.entry(n.id).or_default().remove(name);
                }
            }
            _ => {}
        }
    }

    /// The next operation.
    pub fn next_op(&mut self) -> Op {
        loop {
            if self.queue.is_empty() {
                self.plan();
            }
            if let Some(op) = self.queue.pop_front() {
                if !self.sw.skip.contains(op.verb()) {
                    return op;
                }
            }
        }
    }

    fn stage_size(&mut self) -> Option<u64> {
        let st = self.profile.stages;
        if st.is_empty() {
            return None;
        }
        let s = if self.stage < st.len() { st[self.stage] } else { st[self.rng.below(st.len() as u64) as usize] };
        self.stage += 1;
        Some(s)
    }

    /// Fill the queue: a burst for the profile's structure now and then,
    /// otherwise one random operation with the profile's weights.
    fn plan(&mut self) {
        let p = self.profile.name;
        // The stages come soon one after another (a short run reaches the
        // largest shape), later bursts rarely.
        let staged = self.stage < self.profile.stages.len();
        let burst = match p {
            _ if self.stage == 0 && staged => true,
            "extents" | "deep-extents" => self.rng.chance(1, if staged { 50 } else { 400 }),
            "htree" => self.rng.chance(1, if staged { 50 } else { 2000 }),
            "xattr" => self.rng.chance(1, 40),
            "big" => self.rng.chance(1, 30),
            _ => false,
        };
        if burst {
            match p {
                "extents" | "deep-extents" => self.burst_fragment(),
                "htree" => self.burst_htree(),
                "xattr" => self.burst_xattr(),
                "big" => self.burst_big(),
                _ => {}
            }
            if !self.queue.is_empty() {
                return;
            }
        }
        let op = self.random_op();
        self.queue.push_back(op);
    }

    fn name(&mut self, prefix: &str) -> String {
        self.names += 1;
        if self.profile.name == "htree" || self.rng.chance(1, 50) {
            // Long names: few per block, so that directories grow deep cheaply.
            let n = format!("{prefix}{}", self.names);
            format!("{n}{}", "x".repeat(250 - n.len()))
        } else {
            format!("{prefix}{}", self.names)
        }
    }

    fn new_path(&mut self, prefix: &str) -> String {
        let dir = self.pick_dir();
        let n = self.name(prefix);
        if dir.is_empty() {
            n
        } else {
            format!("{dir}/{n}")
        }
    }

    fn pick_dir(&mut self) -> String {
        // Prefer shallow directories: deep chains make every path long.
        for _ in 0..4 {
            let d = self.model.by_kind[1].pick(&mut self.rng).unwrap_or("").to_string();
            if d.len() < 1500 && d != "lost+found" {
                return d;
            }
        }
        String::new()
    }

    /// An existing path of `kind` (usually), any path, or a missing one.
    fn pick(&mut self, kind: Kind) -> String {
        let r = self.rng.below(100);
        if r < 6 {
            return self.new_path("missing");
        }
        if r < 14 {
            let k = [Kind::File, Kind::Dir, Kind::Symlink, Kind::Other][self.rng.below(4) as usize];
            if let Some(p) = self.model.by_kind[kidx(k)].pick(&mut self.rng) {
                return p.to_string();
            }
        }
        if kind == Kind::File && !self.focus.is_empty() && self.rng.chance(1, 2) {
            let i = self.rng.below(self.focus.len() as u64) as usize;
            return self.focus[i].clone();
        }
        match self.model.by_kind[kidx(kind)].pick(&mut self.rng) {
            Some(p) => p.to_string(),
            None => self.new_path("none"),
        }
    }

    fn any_path(&mut self) -> String {
        let k = [Kind::File, Kind::File, Kind::Dir, Kind::Symlink, Kind::Other][self.rng.below(5) as usize];
        self.pick(k)
    }

    fn log_len(&mut self, max: u64) -> u64 {
        // Log-uniform: as many tiny as huge.
        let bits = 64 - max.leading_zeros() as u64;
        let b = self.rng.below(bits + 1);
        (self.rng.below(1u64 << b) + 1).min(max)
    }

    fn offset_for(&mut self, path: &str) -> u64 {
        let bs = self.profile.block;
        let size = self.model.size_of(path);
        let far = match self.profile.name {
            "big" => max_file(bs),
            "inline" => 4096,
            "enospc" => 4 << 20,
            _ => 16 << 20,
        };
        match self.rng.below(10) {
            0..=3 => size.saturating_sub(self.rng.below(bs * 2)), // dense: at or near the end
            4..=5 => self.rng.below(size.max(1)),                 // inside
            6..=7 => self.rng.below(far / bs) * bs,               // aligned, sparse
            _ => self.rng.below(far),                             // anywhere
        }
    }

    fn len_for(&mut self) -> u64 {
        match self.profile.name {
            "inline" => {
                if self.rng.chance(9, 10) {
                    self.rng.range(1, 200)
                } else {
                    self.log_len(64 << 10)
                }
            }
            "enospc" => self.log_len(2 << 20),
            _ => {
                if self.rng.chance(1, 4) {
                    self.profile.block * self.rng.range(1, 16)
                } else {
                    self.log_len(1 << 20)
                }
            }
        }
    }

    fn mode(&mut self, base: u32) -> u32 {
        if self.rng.chance(1, 5) {
            self.rng.below(0o10000) as u32
        } else {
            base
        }
    }

    fn time(&mut self) -> i64 {
        let lo = if self.rng.chance(1, 20) { T_FAR_PAST } else { T_MIN };
        let s = loop {
            let s = lo + self.rng.below((T_MAX - lo) as u64) as i64;
            if !(NOW_LO..NOW_HI).contains(&s) {
                break s;
            }
        };
        s * 1_000_000_000 + self.rng.below(1_000_000_000) as i64
    }

    fn xattr_name(&mut self, path: &str) -> String {
        let known = self.model.get(path).and_then(|n| self.model.xnames.get(&n.id)).filter(|s| !s.is_empty());
        if let Some(set) = known {
            if self.rng.chance(1, 2) {
                let v: Vec<&String> = set.iter().collect();
                return v[self.rng.below(v.len() as u64) as usize].clone();
            }
        }
        let ns = if self.rng.chance(1, 3) { "trusted" } else { "user" };
        let n = self.rng.below(40);
        if self.rng.chance(1, 20) {
            format!("{ns}.{}{n}", "long".repeat(50))
        } else {
            format!("{ns}.a{n}")
        }
    }

    fn xattr_len(&mut self) -> u64 {
        let bs = self.profile.block;
        match self.rng.below(20) {
            0..=9 => self.rng.below(40),
            10..=15 => self.rng.range(40, 400),
            16..=18 => self.rng.range(400, bs),
            _ => self.rng.range(bs - 200, bs + 2000), // around and past one block: ENOSPC/E2BIG
        }
    }

    fn falloc_mode(&mut self) -> i32 {
        use falloc::*;
        let mut modes = vec![0, KEEP_SIZE, PUNCH_HOLE | KEEP_SIZE, ZERO_RANGE, ZERO_RANGE | KEEP_SIZE, PUNCH_HOLE];
        if self.sw.fuse_unpassed_falloc {
            modes.extend([COLLAPSE_RANGE, INSERT_RANGE]);
        }
        modes[self.rng.below(modes.len() as u64) as usize]
    }

    fn weights(&self) -> [u32; 19] {
        // create mkdir mkfifo write append read truncate fallocate rename link
        // unlink rmdir symlink setxattr removexattr chmod chown utimes fsync
        match self.profile.name {
            "extents" | "deep-extents" | "big" => [3, 1, 0, 20, 3, 6, 8, 10, 2, 1, 2, 1, 1, 1, 1, 1, 1, 2, 3],
            "htree" => [30, 3, 1, 2, 1, 1, 1, 1, 8, 4, 20, 1, 3, 1, 1, 1, 1, 1, 1],
            "xattr" => [4, 2, 1, 3, 1, 1, 1, 1, 2, 2, 2, 1, 2, 30, 15, 2, 2, 2, 1],
            "inline" => [12, 6, 1, 20, 10, 6, 6, 3, 4, 2, 5, 2, 3, 6, 2, 1, 1, 1, 2],
            "enospc" => [8, 3, 1, 30, 10, 3, 5, 6, 2, 1, 8, 1, 3, 5, 1, 1, 1, 1, 1],
            "inodes" => [20, 6, 3, 3, 1, 2, 1, 1, 8, 4, 14, 4, 4, 2, 1, 1, 1, 1, 1],
            _ => [10, 4, 1, 14, 5, 5, 5, 6, 6, 3, 6, 2, 3, 5, 2, 2, 2, 2, 2],
        }
    }

    fn random_op(&mut self) -> Op {
        let w = self.weights();
        match self.rng.weighted(&w) {
            0 => Op::Create { path: self.new_path("f"), mode: self.mode(0o644) },
            1 => Op::Mkdir { path: self.new_path("d"), mode: self.mode(0o755) },
            2 => Op::Mkfifo { path: self.new_path("p"), mode: self.mode(0o644) },
            3 => {
                let path = self.pick(Kind::File);
                let off = self.offset_for(&path);
                let len = self.len_for();
                Op::Write { path, off, len, seed: self.rng.next_u64() >> 12 }
            }
            4 => Op::Append { path: self.pick(Kind::File), len: self.len_for(), seed: self.rng.next_u64() >> 12 },
            5 => {
                let path = self.pick(Kind::File);
                let off = self.offset_for(&path);
                Op::Read { path, off, len: self.log_len(1 << 20) }
            }
            6 => {
                let path = self.pick(Kind::File);
                let s = self.model.size_of(&path);
                let bs = self.profile.block;
                let size = match self.rng.below(6) {
                    0 => 0,
                    1 | 2 => self.rng.below(s + 1),
                    3 => s + self.log_len(1 << 20),
                    4 => self.offset_for(&path),
                    _ => (self.rng.below(s + 1) / bs) * bs,
                };
                Op::Truncate { path, size }
            }
            7 => {
                let path = self.pick(Kind::File);
                let mode = self.falloc_mode();
                let bs = self.profile.block;
                let (mut off, mut len) = (self.offset_for(&path), self.len_for());
                if mode & (falloc::COLLAPSE_RANGE | falloc::INSERT_RANGE) != 0 && self.rng.chance(4, 5) {
                    off = off / bs * bs;
                    len = len.div_ceil(bs) * bs;
                }
                Op::Fallocate { path, mode, off, len }
            }
            8 => {
                let from = self.any_path();
                let to = if self.rng.chance(1, 2) { self.any_path() } else { self.new_path("r") };
                let flags = [0, 0, rename::NOREPLACE, rename::EXCHANGE, rename::WHITEOUT][self.rng.below(5) as usize];
                Op::Rename { from, to, flags }
            }
            9 => Op::Link { from: self.pick(Kind::File), to: self.new_path("h") },
            10 => {
                let k = if self.rng.chance(1, 4) { Kind::Other } else { Kind::File };
                Op::Unlink { path: self.pick(k) }
            }
            11 => Op::Rmdir { path: self.pick(Kind::Dir) },
            12 => {
                let len = if self.rng.chance(1, 3) {
                    self.rng.range(60, self.profile.block - 1)
                } else {
                    self.rng.range(1, 59)
                };
                let base = self.any_path();
                let target: String = base.chars().chain(std::iter::repeat('t')).take(len as usize).collect();
                Op::Symlink { target, path: self.new_path("l") }
            }
            13 => {
                let path = self.any_path();
                let name = self.xattr_name(&path);
                let flags =
                    [0, 0, 0, libc::XATTR_CREATE as u32, libc::XATTR_REPLACE as u32][self.rng.below(5) as usize];
                Op::SetXattr { path, name, len: self.xattr_len(), seed: self.rng.next_u64() >> 12, flags }
            }
            14 => {
                let path = self.any_path();
                Op::RemoveXattr { name: self.xattr_name(&path), path }
            }
            15 => {
                let path = self.any_path();
                Op::Chmod { path, mode: self.rng.below(0o10000) as u32 }
            }
            16 => {
                let path = self.any_path();
                let (u, g) = (self.rng.below(4) as usize, self.rng.below(4) as usize);
                Op::Chown { path, uid: UIDS[u], gid: UIDS[g] }
            }
            17 => {
                let path = self.any_path();
                Op::Utimes { path, atime: self.time(), mtime: self.time() }
            }
            _ => Op::Fsync { path: self.any_path() },
        }
    }

    /// A new file written every other block in random order: as many
    /// extents as blocks written, and no two mergeable.
    fn burst_fragment(&mut self) {
        let Some(n) = self.stage_size() else { return };
        let bs = self.profile.block;
        let path = self.new_path("frag");
        self.queue.push_back(Op::Create { path: path.clone(), mode: 0o644 });
        let mut blocks: Vec<u64> = (0..n).map(|i| 2 * i).collect();
        self.rng.shuffle(&mut blocks);
        for b in blocks {
            // Mostly whole blocks; some partial ones (a block's worth of mapping all the same).
            let (off, len) = if self.rng.chance(1, 10) {
                (b * bs + self.rng.below(bs / 2), self.rng.range(1, bs / 2))
            } else {
                (b * bs, bs)
            };
            self.queue.push_back(Op::Write { path: path.clone(), off, len, seed: self.rng.next_u64() >> 12 });
        }
        self.queue.push_back(Op::Read { path: path.clone(), off: 0, len: 2 * n * bs });
        self.focus.push(path);
        if self.focus.len() > 6 {
            self.focus.remove(0);
        }
    }

    /// A new directory filled with long names, then (at random) mostly emptied.
    fn burst_htree(&mut self) {
        let Some(n) = self.stage_size() else { return };
        let dir = self.new_path("dir");
        self.queue.push_back(Op::Mkdir { path: dir.clone(), mode: 0o755 });
        let mut names = Vec::new();
        for _ in 0..n {
            let nm = self.name("e");
            let p = format!("{dir}/{nm}");
            names.push(p.clone());
            let op = match self.rng.below(20) {
                0 => Op::Mkdir { path: p, mode: 0o755 },
                1 => Op::Symlink { target: "t".repeat(self.rng.range(1, 100) as usize), path: p },
                _ => Op::Create { path: p, mode: 0o644 },
            };
            self.queue.push_back(op);
        }
        if self.rng.chance(1, 2) {
            // Shrink: unlink 90% in random order (directories shrink, blocks free).
            self.rng.shuffle(&mut names);
            for p in names.iter().take(n as usize * 9 / 10) {
                self.queue.push_back(Op::Unlink { path: p.clone() });
                self.queue.push_back(Op::Rmdir { path: p.clone() });
            }
        }
    }

    /// Xattrs on one path added until they leave the inode and fill a block,
    /// then removed again (or replaced by smaller values).
    fn burst_xattr(&mut self) {
        let path = if self.rng.chance(1, 4) { self.any_path() } else { self.pick(Kind::File) };
        let n = self.rng.range(2, 30);
        let mut names = Vec::new();
        for i in 0..n {
            let ns = if i % 3 == 0 { "trusted" } else { "user" };
            let name = format!("{ns}.x{}", self.rng.below(60));
            let len = self.rng.range(10, 400);
            names.push(name.clone());
            self.queue.push_back(Op::SetXattr {
                path: path.clone(),
                name,
                len,
                seed: self.rng.next_u64() >> 12,
                flags: 0,
            });
        }
        self.rng.shuffle(&mut names);
        for name in names {
            if self.rng.chance(1, 3) {
                let len = self.rng.below(20);
                self.queue.push_back(Op::SetXattr {
                    path: path.clone(),
                    name,
                    len,
                    seed: self.rng.next_u64() >> 12,
                    flags: 0,
                });
            } else {
                self.queue.push_back(Op::RemoveXattr { path: path.clone(), name });
            }
        }
    }

    /// Data at and around 4 GiB boundaries and the end of the largest file.
    fn burst_big(&mut self) {
        let path = if self.rng.chance(1, 3) || self.focus.is_empty() {
            let p = self.new_path("big");
            self.queue.push_back(Op::Create { path: p.clone(), mode: 0o644 });
            self.focus.push(p.clone());
            p
        } else {
            self.focus[self.rng.below(self.focus.len() as u64) as usize].clone()
        };
        let bs = self.profile.block;
        let max = max_file(bs);
        for _ in 0..self.rng.range(1, 8) {
            let g = self.rng.range(1, 8) << 32;
            let base = match self.rng.below(4) {
                0 => g,
                1 => max,
                2 => self.rng.below(max),
                _ => 4 << 30,
            };
            let off = (base as i64 + self.rng.range(0, 2 * bs) as i64 - bs as i64).max(0) as u64;
            let len = self.rng.range(1, 3 * bs);
            let op = match self.rng.below(6) {
                0..=2 => Op::Write { path: path.clone(), off, len, seed: self.rng.next_u64() >> 12 },
                3 => Op::Truncate { path: path.clone(), size: off },
                4 => Op::Fallocate { path: path.clone(), mode: self.falloc_mode(), off, len },
                _ => Op::Read { path: path.clone(), off, len },
            };
            self.queue.push_back(op);
        }
    }

    /// How many paths the model holds (for progress lines).
    pub fn model_paths(&self) -> usize {
        self.model.nodes.len()
    }

    /// Files, dirs, symlinks, others in the model.
    pub fn model_counts(&self) -> [usize; 4] {
        [0, 1, 2, 3].map(|i| self.model.by_kind[i].len())
    }

    /// Direct children the model knows of `dir` (tests).
    pub fn model_children(&self, dir: &str) -> Vec<String> {
        self.model.children(dir)
    }

    #[doc(hidden)]
    pub fn model_has(&self, p: &str) -> bool {
        self.model.get(p).is_some() && under(p, parent(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_ops() {
        for p in PROFILES {
            let mut a = Gen::new(p, 7, Switches::default());
            let mut b = Gen::new(p, 7, Switches::default());
            for _ in 0..3000 {
                let (x, y) = (a.next_op(), b.next_op());
                assert_eq!(x, y);
                // Pretend everything succeeds: the model must stay consistent.
                a.observe(&x, &Outcome::Ok(1));
                b.observe(&y, &Outcome::Ok(1));
                assert_eq!(x.to_string().parse::<Op>().unwrap(), x);
            }
        }
    }

    #[test]
    fn model_follows_renames() {
        let p = profile("mixed").unwrap();
        let mut g = Gen::new(p, 1, Switches::default());
        for op in ["mkdir a 755", "mkdir a/b 755", "create a/b/f 644", "mkdir c 755", "create c/y 644"] {
            let op: Op = op.parse().unwrap();
            g.observe(&op, &Outcome::Ok(0));
        }
        let op: Op = "rename c/y a/b/f exchange".parse().unwrap();
        g.observe(&op, &Outcome::Ok(0));
        assert!(g.model_has("c/y") && g.model_has("a/b/f"));
        let op: Op = "rename a c/x 0".parse().unwrap();
        g.observe(&op, &Outcome::Ok(0));
        assert!(g.model_has("c/x/b/f"));
        assert!(!g.model_has("a/b/f"));
    }
}
