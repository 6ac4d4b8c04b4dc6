//! The differential loop: one op sequence applied to the kernel's ext4 and to
//! ext4lazy on copies of one fresh image; outcomes compared op by op, whole
//! trees after every batch, then both unmounted, e2fsck'd, remounted and
//! compared again.

use crate::sys::{self, Mode, Sides, Worker};
use opfuzz::apply::{apply, Outcome};
use opfuzz::compare::{compare, self_compare, Tainted, Window};
use opfuzz::gen::{Gen, Profile, Switches};
use opfuzz::op::Op;
use opfuzz::tree::{walk, Tree};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

#[derive(Clone)]
pub struct Config {
    pub bin: PathBuf,
    pub workdir: PathBuf,
    /// Where replay files of divergences go.
    pub outdir: PathBuf,
    pub op_timeout: Duration,
    pub walk_timeout: Duration,
    pub cmd_timeout: Duration,
    /// Also compare the trees right after each remount (what reached the disk).
    pub remount_walk: bool,
    pub quiet: bool,
    /// Print every op with both outcomes.
    pub verbose: bool,
    /// Temporary switch (D4, docs/TESTING.md): a setxattr the kernel refuses
    /// with ENOSPC and ext4lazy takes (the kernel never moves placed entries
    /// between inode and block; ext4lazy re-lays all out) leaves that inode's
    /// xattrs (only) out of the comparison instead of stopping the run.
    pub tolerate_xattr_enospc: bool,
    /// Keep the images after a run without divergence (to look at them).
    pub keep: bool,
}

/// Where the ops come from.
pub enum Source {
    Gen { gen: Box<Gen>, ops: u64, until: Option<Instant> },
    Replay(Vec<Op>),
}

pub struct Run {
    pub label: String,
    pub profile: String,
    pub mkfs: Vec<String>,
    pub size: u64,
    pub mode: Mode,
    pub seed: u64,
    pub batch: usize,
    pub switches: Switches,
    pub source: Source,
}

impl Run {
    pub fn generated(
        p: &'static Profile,
        mode: Mode,
        seed: u64,
        ops: u64,
        until: Option<Instant>,
        sw: Switches,
    ) -> Run {
        Run {
            label: format!("{}/{}/seed {seed}", p.name, mode.name()),
            profile: p.name.into(),
            mkfs: p.mkfs.iter().map(|s| s.to_string()).collect(),
            size: p.size,
            mode,
            seed,
            batch: p.batch,
            switches: sw.clone(),
            source: Source::Gen { gen: Box::new(Gen::new(p, seed, sw)), ops, until },
        }
    }
}

#[derive(Debug, Default)]
pub struct Stats {
    pub ops: u64,
    pub batches: u64,
    pub secs: f64,
    pub errnos: u64,
    pub tolerated: u64,
    pub tolerated_xattr: u64,
    /// Inodes e2fsck flagged that the K3 check accepted (`sys::e2fsck_k3`).
    pub k3_inodes: usize,
    pub generic_seek: usize,
    pub other_seek: usize,
    pub compared_paths: usize,
    pub first_enospc: [Option<u64>; 2],
}

pub struct Divergence {
    pub what: String,
    pub replay: Option<PathBuf>,
}

/// Set by SIGINT/SIGTERM: the run stops after the current op, compares,
/// unmounts and checks as at its end (hours-long runs get stopped by hand).
pub static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, std::sync::atomic::Ordering::Relaxed);
}

pub fn stop_on_signals() {
    let h = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    unsafe {
        libc::signal(libc::SIGINT, h);
        libc::signal(libc::SIGTERM, h);
    }
}

pub fn stopped() -> bool {
    STOP.load(std::sync::atomic::Ordering::Relaxed)
}

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Ops whose success depends on free space (outcomes tolerated once full).
fn allocates(op: &Op) -> bool {
    !matches!(
        op,
        Op::Read { .. }
            | Op::Unlink { .. }
            | Op::Rmdir { .. }
            | Op::RemoveXattr { .. }
            | Op::Chmod { .. }
            | Op::Chown { .. }
            | Op::Utimes { .. }
            | Op::Fsync { .. }
            | Op::Remount
    )
}

fn op_len(op: &Op) -> u64 {
    match op {
        Op::Write { len, .. } | Op::Append { len, .. } | Op::Fallocate { len, .. } | Op::SetXattr { len, .. } => *len,
        _ => 0,
    }
}

struct State<'a> {
    cfg: &'a Config,
    run: &'a Run,
    sides: Sides,
    kw: Worker,
    ew: Worker,
    log: Vec<Op>,
    tainted: Tainted,
    /// Kernel-side inode numbers of tainted files: their other names are tainted too.
    taint_inos: std::collections::HashSet<u64>,
    /// Both trees as walked before the last unmount.
    before: Option<(Tree, Tree)>,
    full: bool,
    start: i64,
    stats: Stats,
}

impl State<'_> {
    fn replay_text(&self) -> String {
        let r = self.run;
        let mut s = String::new();
        let _ = writeln!(s, "# ext4lazy-opfuzz replay file: `ext4lazy-opfuzz replay FILE` runs it against the kernel");
        let _ = writeln!(s, "@profile {}", r.profile);
        let _ = writeln!(s, "@seed {}", r.seed);
        let _ = writeln!(s, "@mode {}", r.mode.name());
        let _ = writeln!(s, "@size {}", r.size);
        let _ = writeln!(s, "@mkfs {}", r.mkfs.join(" "));
        let _ = writeln!(
            s,
            "# generator switches: collapse_insert={} skip={:?}",
            r.switches.fuse_unpassed_falloc, r.switches.skip
        );
        if self.cfg.tolerate_xattr_enospc {
            let _ = writeln!(s, "@tolerate-xattr-enospc");
        }
        for op in &self.log {
            let _ = writeln!(s, "{op}");
        }
        s
    }

    fn diverge(&mut self, what: String) -> Divergence {
        let name =
            format!("opfuzz-{}-{}-{}-{}.ops", self.run.profile, self.run.mode.name(), self.run.seed, self.log.len());
        let path = self.cfg.outdir.join(name);
        let _ = std::fs::create_dir_all(&self.cfg.outdir);
        let replay = std::fs::write(&path, self.replay_text()).ok().map(|_| path);
        Divergence { what, replay }
    }

    /// Run `f` on both sides at once (the kernel's worker and ext4lazy's).
    fn both<T: Send + 'static>(
        &self,
        limit: Duration,
        f: impl Fn(&Path) -> T + Send + Sync + Clone + 'static,
    ) -> Result<(T, T), String> {
        let (km, em) = (self.sides.kmnt.clone(), self.sides.emnt.clone());
        let f2 = f.clone();
        self.kw.start(move || f(&km));
        self.ew.start(move || f2(&em));
        let k = self.kw.wait::<T>(limit).ok_or_else(|| format!("the kernel side did not answer within {limit:?}"))?;
        let e = self
            .ew
            .wait::<T>(limit)
            .ok_or_else(|| format!("ext4lazy did not answer within {limit:?} (hung daemon? connection aborted)"))?;
        Ok((k, e))
    }

    fn step(&mut self, op: Op) -> Result<Outcome, Divergence> {
        self.log.push(op.clone());
        let idx = self.log.len() - 1;
        // On a tainted path (or another name of a tainted inode): its state may
        // differ. Above one (a directory holding tainted names): its outcome may.
        let on_taint =
            op.paths().iter().any(|p| self.tainted.covers(p) || self.ino_tainted(p) || self.links_into_taint(p));
        let touches_taint = on_taint || op.paths().iter().any(|p| self.tainted.below(p));
        let xattr_ino = match &op {
            Op::SetXattr { path, .. } | Op::RemoveXattr { path, .. } => self.kernel_ino(path),
            _ => None,
        };
        // K4: the kernel's RENAME_WHITEOUT sets the source directory's times even when it fails.
        let whiteout_dir = match &op {
            Op::Rename { from, flags, .. } if flags & opfuzz::op::rename::WHITEOUT != 0 => {
                self.kernel_ino(from.rsplit_once('/').map_or("", |(d, _)| d))
            }
            _ => None,
        };
        let o = op.clone();
        let (k, e) = match self.both(self.cfg.op_timeout, move |root| apply(root, &o)) {
            Ok(r) => r,
            Err(why) => return Err(self.diverge(format!("op #{idx} `{op}`: {why}"))),
        };
        self.stats.ops += 1;
        if self.cfg.verbose {
            println!("#{idx} {op} -> kernel {k}, ext4lazy {e}");
        }
        if !k.is_ok() {
            self.stats.errnos += 1;
            if let Some(d) = whiteout_dir {
                self.tainted.add_times(d);
            }
        }
        for (i, out) in [k, e].iter().enumerate() {
            if out.errno() == Some(libc::ENOSPC) && self.stats.first_enospc[i].is_none() {
                self.stats.first_enospc[i] = Some(idx as u64);
            }
        }
        let short = |o: &Outcome| matches!((o, &op), (Outcome::Ok(v), Op::Write { len, .. } | Op::Append { len, .. }) if v < len);
        // "Full" only when a side that ran out is really nearly full: an xattr
        // too big for its block is ENOSPC too, and must still match exactly.
        for (o, mnt) in [(&k, &self.sides.kmnt), (&e, &self.sides.emnt)] {
            if !self.full && (o.errno() == Some(libc::ENOSPC) || short(o)) {
                let (free, total) = sys::free_bytes(mnt).unwrap_or((0, 1));
                self.full = free <= total / 10 + op_len(&op);
            }
        }
        let space_out = k.errno() == Some(libc::ENOSPC) || e.errno() == Some(libc::ENOSPC) || short(&k) || short(&e);
        // Only this direction: ext4lazy holding less than the kernel is a bug (fixed, 4b23a38).
        let xattr_capacity = self.cfg.tolerate_xattr_enospc
            && matches!(op, Op::SetXattr { .. })
            && k.errno() == Some(libc::ENOSPC)
            && e.is_ok();
        // An xattr op on an inode whose xattrs already differ (D4): its
        // outcome may differ too; nothing else of the inode does.
        let on_xattr_taint = matches!(op, Op::SetXattr { .. } | Op::RemoveXattr { .. })
            && xattr_ino.is_some_and(|i| self.tainted.xattrs_of(i));
        if xattr_capacity || (on_xattr_taint && k != e && !touches_taint) {
            self.stats.tolerated_xattr += 1;
            if let Some(i) = xattr_ino {
                self.tainted.add_xattrs(i);
            }
        } else if k != e {
            // A full volume: allocators differ, so which allocating op fails first may too.
            let space = space_out;
            // Taints come only from tolerated differences: an op on a tainted
            // path may see them, full volume or not.
            if touches_taint || (self.full && space && allocates(&op)) {
                if space && !touches_taint {
                    self.check_nearly_full(idx, &op, &k, &e)?;
                }
                self.stats.tolerated += 1;
                self.taint(&op);
            } else {
                return Err(self.diverge(format!("op #{idx} `{op}`: kernel {k}, ext4lazy {e}")));
            }
        } else if on_taint || (self.full && space_out) || (matches!(op, Op::Rename { .. }) && touches_taint) {
            // (A directory holding tainted names moved: its whole new subtree
            // is tainted, since taints are paths.)
            // Both said ENOSPC (or wrote short) on a full volume: what the op
            // did before failing may differ (the kernel's fallocate keeps the
            // part it allocated; ext4lazy's operations are all or nothing).
            self.taint(&op);
        }
        Ok(k)
    }

    fn kernel_ino(&self, p: &str) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(self.sides.kmnt.join(p)).ok().map(|m| m.ino())
    }

    /// A component of `p` is a symbolic link (on the oracle's side) whose
    /// target lies on or under a tainted path: an op through it may see the
    /// difference as an op on that path would (H3: a fallocate through a
    /// link into a directory exchanged on one side only).
    fn links_into_taint(&self, p: &str) -> bool {
        if self.tainted.is_empty() {
            return false;
        }
        let comps: Vec<&str> = p.split('/').filter(|c| !c.is_empty()).collect();
        (1..=comps.len()).any(|i| {
            let link = comps[..i].join("/");
            let Ok(target) = std::fs::read_link(self.sides.kmnt.join(&link)) else { return false };
            let Some(target) = target.to_str() else { return false };
            // Relative to the link's directory; the rest of `p` follows it.
            let mut resolved: Vec<&str> = if target.starts_with('/') { Vec::new() } else { comps[..i - 1].to_vec() };
            for c in target.split('/').chain(comps[i..].iter().copied()) {
                match c {
                    "" | "." => {}
                    ".." => {
                        resolved.pop();
                    }
                    c => resolved.push(c),
                }
            }
            self.tainted.covers(&resolved.join("/"))
        })
    }

    fn ino_tainted(&self, p: &str) -> bool {
        !self.taint_inos.is_empty() && self.kernel_ino(p).is_some_and(|i| self.taint_inos.contains(&i))
    }

    /// Leave the op's paths (and every other name of their inodes) out of
    /// further comparison.
    fn taint(&mut self, op: &Op) {
        for p in op.paths() {
            self.tainted.add(p);
            if let Some(i) = self.kernel_ino(p) {
                self.taint_inos.insert(i);
                self.tainted.add_ino(i);
            }
        }
    }

    /// The side that said ENOSPC must be nearly full: "about the same point".
    fn check_nearly_full(&mut self, idx: usize, op: &Op, k: &Outcome, e: &Outcome) -> Result<(), Divergence> {
        let (side, mnt) =
            if k.errno() == Some(libc::ENOSPC) { ("kernel", &self.sides.kmnt) } else { ("ext4lazy", &self.sides.emnt) };
        if k.errno() == Some(libc::ENOSPC) && e.errno() == Some(libc::ENOSPC) {
            return Ok(());
        }
        let mnt = mnt.clone();
        let (free, total) = sys::free_bytes(&mnt).unwrap_or((0, 1));
        // 5% of the volume plus what the op asked for, and metadata slack.
        let slack = total / 20 + op_len(op) + (1 << 20);
        if free > slack {
            return Err(self.diverge(format!(
                "op #{idx} `{op}`: kernel {k}, ext4lazy {e}: {side} reports ENOSPC with {free} of {total} bytes free"
            )));
        }
        Ok(())
    }

    fn walk_both(&mut self, when: &str) -> Result<(Tree, Tree), Divergence> {
        let limit = self.cfg.walk_timeout;
        let km = self.sides.kmnt.clone();
        self.kw.start(move || walk(&km, None));
        let kt: Tree = match self.kw.wait(limit) {
            Some(t) => t,
            None => return Err(self.diverge(format!("{when}: the kernel walk did not finish within {limit:?}"))),
        };
        let kt = Arc::new(kt);
        let (em, plan) = (self.sides.emnt.clone(), kt.clone());
        self.ew.start(move || walk(&em, Some(&plan)));
        let et: Tree = match self.ew.wait(limit) {
            Some(t) => t,
            None => {
                return Err(
                    self.diverge(format!("{when}: the ext4lazy walk did not finish within {limit:?} (hung daemon?)"))
                )
            }
        };
        let w = Window { lo: self.start, hi: now_ns() + 2_000_000_000 };
        let kt = Arc::try_unwrap(kt).unwrap_or_else(|a| (*a).clone());
        if let Some((kb, eb)) = self.before.take() {
            // Nothing ran between the two walks: each side must show what it
            // showed before its unmount. A change on the kernel's side is an
            // oracle (kernel) bug, not ext4lazy's, and is reported as such.
            for (side, before, after) in [("the KERNEL (oracle bug)", &kb, &kt), ("ext4lazy", &eb, &et)] {
                let rep = self_compare(before, after, (&kb, &kt), &w, &self.tainted);
                if !rep.diffs.is_empty() {
                    let first: Vec<String> = rep.diffs.iter().take(25).cloned().collect();
                    return Err(self.diverge(format!(
                        "{when}: {side} changed across its own unmount/remount in {} places after op #{} (before=, after= below):\n  {}",
                        rep.diffs.len(),
                        self.log.len(),
                        first.join("\n  ").replace("kernel=", "before=").replace("ext4lazy=", "after=")
                    )));
                }
            }
        }
        let rep = compare(&kt, &et, &w, &self.tainted, when == "after remount");
        self.stats.generic_seek = self.stats.generic_seek.max(rep.generic_seek);
        self.stats.other_seek = self.stats.other_seek.max(rep.other_seek);
        self.stats.compared_paths = rep.compared;
        if !rep.diffs.is_empty() {
            let n = rep.diffs.len();
            let first: Vec<String> = rep.diffs.into_iter().take(25).collect();
            return Err(self.diverge(format!(
                "{when}: trees differ in {n} places after op #{}:\n  {}",
                self.log.len(),
                first.join("\n  ")
            )));
        }
        // Inodes in use: allocators differ in blocks, never in how many inodes live.
        // ext4lazy counts a freed number as used until the kernel's FORGET of
        // it is served, which FUSE sends asynchronously: on a loaded machine
        // that may take a moment, so a difference must last 3 s to count.
        if !self.full {
            let ki = sys::used_inodes(&self.sides.kmnt);
            let mut ei = sys::used_inodes(&self.sides.emnt);
            let patience = Instant::now() + Duration::from_secs(3);
            while ki != ei && Instant::now() < patience {
                std::thread::sleep(Duration::from_millis(50));
                ei = sys::used_inodes(&self.sides.emnt);
            }
            if ki != ei {
                return Err(self.diverge(format!("{when}: inodes in use: kernel {ki:?} ext4lazy {ei:?}")));
            }
        }
        Ok((kt, et))
    }

    /// Compare, unmount, e2fsck both, remount (unless last), compare again.
    fn batch_end(&mut self, last: bool) -> Result<(), Divergence> {
        let trees = self.walk_both("before unmount")?;
        if self.cfg.remount_walk && !last {
            self.before = Some(trees);
        }
        if let Err(e) = self.sides.umount() {
            self.sides.force_umount();
            return Err(self.diverge(format!("unmount after op #{}: {e}", self.log.len())));
        }
        let scratch = self.cfg.workdir.join("fsck-copy.img");
        match self.sides.fsck(&scratch) {
            Ok(k3) => self.stats.k3_inodes += k3,
            Err(e) => return Err(self.diverge(format!("e2fsck after op #{}: {e}", self.log.len()))),
        }
        self.stats.batches += 1;
        if last {
            return Ok(());
        }
        if let Err(e) = self.sides.mount() {
            self.sides.force_umount();
            return Err(self.diverge(format!("remount after op #{}: {e}", self.log.len())));
        }
        if self.cfg.remount_walk {
            self.walk_both("after remount")?;
        }
        Ok(())
    }
}

/// Run one differential session; Ok(stats) when nothing diverged.
pub fn run(cfg: &Config, mut run: Run) -> Result<Stats, Divergence> {
    let dir = cfg.workdir.join(format!("{}-{}-{}", run.profile, run.mode.name(), run.seed));
    let _ = std::fs::create_dir_all(&dir);
    let sides = Sides {
        bin: cfg.bin.clone(),
        mode: run.mode,
        kimg: dir.join("kernel.img"),
        eimg: dir.join("ext4lazy.img"),
        kmnt: dir.join("mnt-kernel"),
        emnt: dir.join("mnt-ext4lazy"),
        cmd_timeout: cfg.cmd_timeout,
        conn: Default::default(),
    };
    let setup = (|| -> Result<(), String> {
        std::fs::create_dir_all(&sides.kmnt).map_err(|e| e.to_string())?;
        std::fs::create_dir_all(&sides.emnt).map_err(|e| e.to_string())?;
        sides.force_umount();
        sys::mkfs(&sides.kimg, &run.mkfs, run.size)?;
        let _ = std::fs::remove_file(&sides.eimg);
        sys::copy_sparse(&sides.kimg, &sides.eimg)?;
        sides.mount()
    })();
    let source = std::mem::replace(&mut run.source, Source::Replay(vec![]));
    let mut st = State {
        cfg,
        run: &run,
        sides,
        kw: Worker::new("kernel-side"),
        ew: Worker::new("ext4lazy-side"),
        log: Vec::new(),
        tainted: Tainted::default(),
        taint_inos: Default::default(),
        before: None,
        full: false,
        start: now_ns() - 2_000_000_000,
        stats: Stats::default(),
    };
    if let Err(e) = setup {
        st.sides.force_umount();
        return Err(Divergence { what: format!("setup: {e}"), replay: None });
    }
    let t0 = Instant::now();
    let result = drive(&mut st, source, t0);
    if result.is_err() {
        st.sides.force_umount();
    } else if !cfg.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    st.stats.secs = t0.elapsed().as_secs_f64();
    result.map(|_| std::mem::take(&mut st.stats))
}

fn drive(st: &mut State, source: Source, t0: Instant) -> Result<(), Divergence> {
    let mut last_print = Instant::now();
    let mut in_batch = 0usize;
    let progress = |st: &State, extra: &str| {
        if !st.cfg.quiet {
            let secs = t0.elapsed().as_secs_f64();
            eprintln!(
                "[{}] {} ops, {} batches, {:.0} ops/s, {:.0} s{}{}",
                st.run.label,
                st.stats.ops,
                st.stats.batches,
                st.stats.ops as f64 / secs.max(0.001),
                secs,
                if st.full { ", volume full" } else { "" },
                extra
            );
        }
    };
    match source {
        Source::Replay(ops) => {
            for op in ops {
                if stopped() {
                    break;
                }
                if op == Op::Remount {
                    st.log.push(Op::Remount);
                    st.batch_end(false)?;
                } else {
                    st.step(op)?;
                }
                if last_print.elapsed() > Duration::from_secs(5) {
                    progress(st, "");
                    last_print = Instant::now();
                }
            }
        }
        Source::Gen { mut gen, ops, until } => {
            while st.stats.ops < ops && until.is_none_or(|u| Instant::now() < u) && !stopped() {
                let op = gen.next_op();
                let out = st.step(op.clone())?;
                gen.observe(&op, &out);
                in_batch += 1;
                if in_batch >= st.run.batch && st.stats.ops < ops {
                    st.log.push(Op::Remount);
                    st.batch_end(false)?;
                    in_batch = 0;
                }
                if last_print.elapsed() > Duration::from_secs(5) {
                    let [f, d, l, o] = gen.model_counts();
                    progress(st, &format!(", model: {f} files {d} dirs {l} symlinks {o} other"));
                    last_print = Instant::now();
                }
            }
        }
    }
    st.batch_end(true)
}
