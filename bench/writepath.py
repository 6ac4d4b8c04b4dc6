#!/usr/bin/env python3
"""Write-path benchmark (issue #4): MakeDirs, CreateFiles and untar on kernel ext4, fuse2fs and ext4lazy, and the
journal-size experiment of the ext4-lazy paper (FAST'17, §3 and Fig. 6).

    python3 bench/writepath.py [--dirs 20000] [--files 20000] [--runs 3] [--systems kernel,fuse2fs,ext4lazy]
                               [--workloads makedirs,createfiles,untar] [--workers 8]
                               [--out bench/results/writepath-COMMIT] [--image-dir /var/tmp/ext4lazy-bench]
    python3 bench/writepath.py --journal [--journal-files 100000] [--journal-sizes default,128,1024]
                               [--journal-systems ext4lazy,kernel]
    python3 bench/writepath.py --all ...        # both of the above into one results file

Every run starts from a freshly made image (8 GiB sparse file, mkfs.ext4 defaults unless a journal size is asked
for) mounted read-write: the kernel through a loop device (`mount -t ext4 -o rw`), fuse2fs as
`fuse2fs IMG MNT -o rw,fakeroot -f`, ext4lazy as `ext4lazy mount -o rw IMG MNT`.  After a global `sync` (so that
nobody's earlier dirty data is flushed inside the timed window) the clock starts; it stops when the workload,
`syncfs` on the mount and the unmount have all returned.  The unmount is the one that waits for everything to
be on the image: `umount` + loop detach for the kernel, `fusermount3 -u` and then the fuse2fs process's exit,
`ext4lazy umount` (which returns once the daemon has written everything home and exited).  Best of --runs.
Afterwards `e2fsck -fn` checks every image (not timed; --no-fsck skips it).

Workloads (the paper's Filebench microbenchmarks, scaled down; they ran with 8 threads, so --workers 8
processes share the work here):
  makedirs     DIRS directories (paper: 800,000 "in a directory tree of depth 10"), made breadth-first with
               at most WIDTH subdirectories each; WIDTH defaults to the smallest width for which a tree of
               depth 10 holds DIRS (paper scale: 4; 20,000 dirs: 3, depth 9).
  createfiles  FILES files of --file-size bytes (paper: 600,000 4 KiB files "in a directory tree"), spread
               round-robin over ceil(FILES / --files-per-dir) directories (default 100 a directory: the
               mean directory width of Filebench's createfiles); the directories are made first, in the timed
               window, as a breadth-first tree --files-per-dir wide.
  untar        `tar -xf` of a tarball of --untar-src (default /usr/include) made once, deterministically
               (sorted names, numeric owners) and cached in --image-dir; its file count, bytes and sha256
               are in the results.  The tarball is read into the page cache before each run.

Journal mode (--journal): the paper shows (Fig. 6) that creating 100,000 small files "in over 60,000
directories" on ext4 with a 128 MiB journal stalls on forced checkpoints once the journal fills, and that a
10 GiB journal avoids them.  Here the createfiles workload with --journal-files files (4 KiB) in
--journal-dirs directories (default 0.6 x files, made breadth-first, depth <= 10) runs on ext4lazy (and the
kernel as the reference) with mkfs's default journal for the image size (64 MiB at 8 GiB), with
`mkfs.ext4 -J size=128` and with `-J size=1024`.  Reported per run: wall time and what the journal did.
  ext4lazy: the engine keeps its WriteStats counters (commits, journal blocks logged, checkpoints, blocks
    written home) only in memory; no command or file exposes them.  They are observed from outside instead,
    with uprobes on the daemon's binary (as the paper traced jbd2): every call of
    `<FileDevice as BlockDevice>::write_at` with its offset, length and IoClass (journal / metadata home /
    data), and every call of the engine's `Volume::checkpoint`, whose only caller is the commit path when the
    journal lacks space: each one is a forced checkpoint.  Commits are the journal superblock's sequence
    number after the unmount minus before the mount (`ext4lazy stat --json`).  The probes cost a trap per
    device write, so journal-mode times carry that overhead (the main workloads run without probes).
  kernel: jbd2 tracepoints on the loop device (jbd2_end_commit, jbd2_run_stats.blocks_logged,
    jbd2_checkpoint, which fires when the journal is short of space and again while unmounting).
  Forced checkpoints are counted up to the start of the unmount; the JSON has every count split by phase.

Results: Markdown tables (stdout and OUT.md) and JSON (OUT.json) with every run.  Progress goes to stderr.
Needs root (loop devices, mounts, tracefs).  Systems that are not available are reported as such.
Set EXT4LAZY_BIN (or --ext4lazy-bin) to the binary to measure.
"""
import argparse
import ctypes
import hashlib
import json
import multiprocessing
import os
import platform
import random
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
from harness import adapters, images, util  # noqa: E402

WORKLOADS = ("makedirs", "createfiles", "untar")
IMAGE_SIZE = 8 * images.GiB
GOAL_VS_FUSE2FS = 3.0   # issue #4: at least this much faster than fuse2fs
GOAL_VS_KERNEL = 2.0    # ... and at most this much slower than the kernel
TRACEFS = "/sys/kernel/tracing"
_libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(f"[writepath {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- tree shapes
def depth10_width(n, depth=10):
    """The smallest width w >= 2 for which a tree of `depth` levels below the root holds n directories."""
    w = 2
    while sum(w ** k for k in range(1, depth + 1)) < n:
        w += 1
    return w


def bfs_tree(n, width):
    """Relative paths of n directories made breadth-first, at most `width` children each, parents first."""
    paths = ["."]
    for i in range(1, n + 1):
        parent = paths[(i - 1) // width]
        paths.append("d%d" % i if parent == "." else parent + "/d%d" % i)
    return paths[1:]


def tree_depth(n, width):
    depth, level, total = 0, 1, 0
    while total < n:
        level *= width
        total += level
        depth += 1
    return depth


def split_tree(n, width, workers):
    """Split the breadth-first tree of n directories into a serial prefix (the top levels, made by the parent)
    and `workers` lists, one per worker, each a set of whole subtrees in breadth-first order (parents first).
    The top levels go down to the first level with at least 4 x workers directories, so the subtrees balance."""
    paths = bfs_tree(n, width)
    if workers <= 1 or n == 0:
        return paths, []
    # index i (1-based) has parent (i-1)//width; level sizes width, width^2, ...
    level_end, size = 0, 1
    while level_end < n:
        size *= width
        level_end = min(n, level_end + size)
        if size >= 4 * workers:
            break
    serial = paths[:level_end]
    group = {}
    lists = [[] for _ in range(workers)]
    for i in range(level_end + 1, n + 1):
        p = (i - 1) // width
        g = p if p <= level_end else group[p]
        group[i] = g
        lists[g % workers].append(paths[i - 1])
    return serial, [x for x in lists if x]


# ---------------------------------------------------------------------------------------------- worker side
def _mkdirs(args):
    root, rel = args
    for r in rel:
        os.mkdir(os.path.join(root, r))
    return len(rel)


def _create_files(args):
    root, rel_files, size, seed = args
    data = random.Random(seed).randbytes(size)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    for r in rel_files:
        fd = os.open(os.path.join(root, r), flags, 0o644)
        try:
            if data:
                os.write(fd, data)
        finally:
            os.close(fd)
    return len(rel_files)


def syncfs(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"syncfs({path}): {os.strerror(e)}")
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------- workloads
class Workload:
    """What to do inside the mount; `prepare` runs before the clock starts, `run` inside the timed window."""

    def __init__(self, name, **kw):
        self.name, self.kw = name, kw

    def describe(self):
        return dict(self.kw, name=self.name)

    def expected_inodes(self):
        """Inodes in use afterwards: mkfs's 11 (root, lost+found, reserved) plus what the workload made."""
        k = self.kw
        if self.name == "makedirs":
            return 11 + 1 + k["dirs"]
        if self.name == "createfiles":
            return 11 + 1 + k["dirs"] + k["files"]
        return 11 + k["inodes"]

    def prepare(self, args):
        if self.name == "untar":
            with open(self.kw["tarball"], "rb") as f:       # into the page cache: the source is not measured
                while f.read(8 << 20):
                    pass

    def run(self, root, pool, workers, timeout):
        k = self.kw

        def pmap(fn, tasks):
            return pool.map_async(fn, tasks, chunksize=1).get(timeout)

        if self.name == "makedirs":
            serial, lists = split_tree(k["dirs"], k["width"], workers)
            _mkdirs((root, serial))
            if lists:
                pmap(_mkdirs, [(root, x) for x in lists])
        elif self.name == "createfiles":
            serial, lists = split_tree(k["dirs"], k["width"], workers)
            _mkdirs((root, serial))
            if lists:
                pmap(_mkdirs, [(root, x) for x in lists])
            dirs = bfs_tree(k["dirs"], k["width"])
            names = [f"{dirs[j % len(dirs)]}/f{j}" if dirs else f"f{j}" for j in range(k["files"])]
            parts = [names[w::workers] for w in range(workers)] if workers > 1 else [names]
            parts = [p for p in parts if p]
            if workers > 1:
                pmap(_create_files, [(root, p, k["file_size"], 100 + i) for i, p in enumerate(parts)])
            else:
                _create_files((root, names, k["file_size"], 100))
        elif self.name == "untar":
            p = subprocess.run(["tar", "-xf", k["tarball"], "-C", root], capture_output=True, text=True,
                               timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"tar -xf failed rc={p.returncode}: {p.stderr.strip()[-500:]}")
        else:
            raise ValueError(self.name)


def make_tarball(src, image_dir):
    """A deterministic tarball of `src`, cached in image_dir, keyed by what the tree holds now."""
    files = dirs = links = others = nbytes = 0
    seen = set()                                # hard links share an inode
    h = hashlib.sha256()
    for top, dnames, fnames in os.walk(src):
        dnames.sort()
        dirs += 1
        st = os.lstat(top)
        seen.add((st.st_dev, st.st_ino))
        for f in sorted(fnames) + [d for d in dnames if os.path.islink(os.path.join(top, d))]:
            p = os.path.join(top, f)
            st = os.lstat(p)
            seen.add((st.st_dev, st.st_ino))
            h.update(f"{p}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
            if os.path.islink(p):
                links += 1
            elif os.path.isfile(p):
                files += 1
                nbytes += st.st_size
            else:
                others += 1
    slug = re.sub(r"[^A-Za-z0-9]+", "-", os.path.abspath(src)).strip("-")
    tar = os.path.join(image_dir, f"writepath-src-{slug}-{h.hexdigest()[:10]}.tar")
    info_path = tar + ".json"
    if not os.path.exists(info_path):
        log(f"making the untar source {tar} from {src}")
        parent, base = os.path.split(os.path.abspath(src).rstrip("/"))
        util.run(["tar", "--sort=name", "--numeric-owner", "--owner=0", "--group=0", "-cf", tar + ".tmp",
                  "-C", parent, base], timeout=1800)
        os.rename(tar + ".tmp", tar)
        sha = hashlib.sha256()
        with open(tar, "rb") as f:
            while b := f.read(8 << 20):
                sha.update(b)
        info = {"source": os.path.abspath(src), "tarball": tar, "tar_bytes": os.path.getsize(tar),
                "sha256": sha.hexdigest(), "regular_files": files, "directories": dirs, "symlinks": links,
                "other_entries": others, "file_bytes": nbytes, "inodes": len(seen)}
        with open(info_path, "w") as f:
            json.dump(info, f, indent=1)
    else:
        log(f"reusing the untar source {tar}")
    with open(info_path) as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------- tracing
class Tracer:
    """A private tracefs instance with uprobes (ext4lazy) or jbd2 tracepoints (kernel); always cleaned up."""

    def __init__(self, buffer_kb):
        self.tag = f"e4lwp{os.getpid()}"
        self.inst = os.path.join(TRACEFS, "instances", self.tag)
        self.buffer_kb = buffer_kb
        self.probes = []        # uprobe event names we registered
        self.enabled = []       # event dirs (inside the instance) we enabled
        self.error = None

    @staticmethod
    def available():
        if not os.path.isdir(TRACEFS) or not os.path.exists(os.path.join(TRACEFS, "uprobe_events")):
            return False, f"no tracefs with uprobe_events at {TRACEFS}"
        return True, ""

    @staticmethod
    def remove_stale():
        """Drop uprobes and instances left by an earlier run of this script that died."""
        try:
            with open(os.path.join(TRACEFS, "uprobe_events")) as f:
                lines = f.read().splitlines()
        except OSError:
            return
        for line in lines:
            m = re.match(r"p:(e4lwp(\d+))/(\S+)", line)
            if m and not util.pid_alive(int(m.group(2))):
                inst = os.path.join(TRACEFS, "instances", m.group(1))
                if os.path.isdir(inst):
                    try:
                        os.rmdir(inst)
                    except OSError:
                        pass
                Tracer._write(os.path.join(TRACEFS, "uprobe_events"), f"-:{m.group(1)}/{m.group(3)}\n",
                              append=True)

    @staticmethod
    def _write(path, text, append=False):
        # os.open, not open(): Python's append mode seeks to the end, which tracefs files refuse
        fd = os.open(path, os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC))
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def open(self):
        os.mkdir(self.inst)
        self._write(os.path.join(self.inst, "buffer_size_kb"), str(self.buffer_kb))
        self._write(os.path.join(self.inst, "trace_clock"), "mono")   # = time.monotonic()

    def add_uprobe(self, name, binary, file_offset, fetch=""):
        spec = f"p:{self.tag}/{name} {binary}:0x{file_offset:x} {fetch}".rstrip() + "\n"
        self._write(os.path.join(TRACEFS, "uprobe_events"), spec, append=True)
        self.probes.append(name)

    def enable(self, group, event, filt=None):
        d = os.path.join(self.inst, "events", group, event)
        if filt:
            self._write(os.path.join(d, "filter"), filt)
        self._write(os.path.join(d, "enable"), "1")
        self.enabled.append(d)

    def stop(self):
        for d in self.enabled:
            try:
                self._write(os.path.join(d, "enable"), "0")
            except OSError:
                pass

    def lost_events(self):
        lost = 0
        for cpu in os.listdir(os.path.join(self.inst, "per_cpu")):
            with open(os.path.join(self.inst, "per_cpu", cpu, "stats")) as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k.strip() in ("overrun", "dropped events"):
                        lost += int(v.strip() or 0)
        return lost

    def events(self):
        """(event name, timestamp (CLOCK_MONOTONIC s), fields) for every recorded event."""
        out = []
        rx = re.compile(r"\s(\d+\.\d+):\s+(\w+):\s?(.*)$")
        with open(os.path.join(self.inst, "trace")) as f:
            for line in f:
                if line.startswith("#"):
                    continue
                m = rx.search(line)
                if not m:
                    continue
                fields = dict(re.findall(r"(\w+)[=\s](-?\d+(?:,\d+)?)", m.group(3)))
                out.append((m.group(2), float(m.group(1)), fields))
        return out

    def close(self):
        self.stop()
        if os.path.isdir(self.inst):
            for _ in range(50):
                try:
                    os.rmdir(self.inst)
                    break
                except OSError:
                    time.sleep(0.1)
        for name in self.probes:
            try:
                self._write(os.path.join(TRACEFS, "uprobe_events"), f"-:{self.tag}/{name}\n", append=True)
            except OSError as e:
                log(f"could not remove uprobe {self.tag}/{name}: {e}")
        self.probes = []


def elf_symbols(binary):
    """{demangled name: [file offsets]} for the text symbols the journal mode probes, via nm and readelf."""
    p = util.run(["nm", "-C", "--defined-only", binary], timeout=120)
    syms = {}
    for line in p.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in "tT":
            syms.setdefault(parts[2], []).append(int(parts[0], 16))
    segs = []
    for line in util.run(["readelf", "-lW", binary]).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and "E" in f[6:-1]:
            segs.append((int(f[2], 16), int(f[1], 16), int(f[4], 16)))   # vaddr, offset, filesz
    out = {}
    for name, addrs in syms.items():
        for a in addrs:
            for vaddr, off, size in segs:
                if vaddr <= a < vaddr + size:
                    out.setdefault(name, []).append(a - vaddr + off)
    return out


PROBES = {
    # name: (demangled symbol, fetch args).  write_at(&self, offset: u64, buf: &[u8], class: IoClass) is
    # called through the dyn BlockDevice vtable, so it keeps the plain x86-64 argument order:
    # rdi = self, rsi = offset, rdx/rcx = buf (pointer, length), r8 = class.
    "write_at": ("<blockdev::file::FileDevice as blockdev::BlockDevice>::write_at",
                 "off=%si:u64 len=%cx:u64 class=%r8:u8"),
    "checkpoint": ("fs::write::<impl fs::volume::Volume>::checkpoint", ""),
}
IOCLASS = {0: "journal", 1: "metadata", 2: "data"}   # blockdev::IoClass declaration order


# ---------------------------------------------------------------------------------------------- one run
class RunError(Exception):
    pass


def journal_extents(img):
    """Byte ranges of the journal inode's blocks (for checking the IoClass the probe reads)."""
    bs = images.block_size(img)
    out = util.run(["debugfs", "-R", "stat <8>", img], check=False).stdout
    ranges = []
    for a, b in re.findall(r"\(\d+(?:-\d+)?\):(\d+)(?:-(\d+))?", out.split("EXTENTS:")[-1]):
        lo, hi = int(a), int(b or a)
        ranges.append((lo * bs, (hi + 1) * bs))
    return ranges


def ext4lazy_journal_sequence(binary, img):
    p = subprocess.run([binary, "stat", "--json", img], capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        return None
    j = json.loads(p.stdout).get("journal") or {}
    return j.get("sequence")


def fsck(img):
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True, timeout=3600, errors="replace")
    m = re.search(r"(\d+)/(\d+) files", p.stdout)
    return {"rc": p.returncode, "clean": p.returncode == 0, "inodes_used": int(m.group(1)) if m else None,
            "tail": None if p.returncode == 0 else (p.stdout + p.stderr).strip()[-1500:]}


def mount_rw(adapter, img, mnt):
    if adapter.name == "fuse2fs":
        return adapter.mount(img, mnt, options=["rw", "fakeroot"])
    return adapter.mount(img, mnt, options=["rw"])


def umount_timed(adapter, m, timeout):
    """Unmount so that it returns only when everything is on the image; raise on failure."""
    if adapter.name == "ext4lazy":
        p = subprocess.run([adapter.bin, "umount", m.mnt], capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0 or util.in_proc_mounts(m.mnt):
            raise RunError(f"ext4lazy umount failed rc={p.returncode}: {p.stderr.strip()[-300:]}")
    elif adapter.name == "fuse2fs":
        p = subprocess.run(["fusermount3", "-u", m.mnt], capture_output=True, text=True)
        if p.returncode != 0:
            raise RunError(f"fusermount3 -u failed: {p.stderr.strip()[-300:]}")
        m.proc.wait(timeout=timeout)           # fuse2fs writes back and closes the image before it exits
        if m.proc.returncode != 0:
            raise RunError(f"fuse2fs exited with rc={m.proc.returncode}")
    else:
        p = subprocess.run(["umount", m.mnt], capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RunError(f"umount failed: {p.stderr.strip()[-300:]}")
        util.detach_loops(m.image)
    m.unmounted = True


def run_once(args, adapter, workload, img, mnt, pool, mkfs_opts=(), trace=False):
    """mkfs, mount, time the workload + syncfs + umount, fsck.  Returns a dict for the JSON."""
    images.mkfs("mkfs.ext4", img, IMAGE_SIZE, list(mkfs_opts))
    info = images.fs_info(img)
    jblocks = info.get("Total journal blocks", "")
    rec = {"journal_mib": int(jblocks) * int(info["Block size"]) // images.MiB if jblocks.isdigit() else None}
    tracer, seq0, jranges = None, None, None
    if trace:
        tracer = Tracer(args.trace_buffer_kb)
        if adapter.name == "ext4lazy":
            seq0 = ext4lazy_journal_sequence(adapter.bin, img)
            jranges = journal_extents(img)
    m = None
    try:
        workload.prepare(args)
        if tracer and adapter.name == "ext4lazy":
            tracer.open()
            syms = elf_symbols(adapter.bin)
            rec["probes"] = {}
            for name, (sym, fetch) in PROBES.items():
                offs = syms.get(sym, [])
                if not offs:
                    rec["probes"][name] = f"symbol not found: {sym}"
                    continue
                if fetch and platform.machine() != "x86_64":
                    rec["probes"][name] = f"argument registers are only known for x86_64, not {platform.machine()}"
                    continue
                try:
                    tracer.add_uprobe(name, adapter.bin, offs[0], fetch)
                    tracer.enable(tracer.tag, name)
                    rec["probes"][name] = "ok"
                except OSError as e:
                    rec["probes"][name] = f"uprobe refused: {e}"
        m = mount_rw(adapter, img, mnt)
        if tracer and adapter.name == "kernel":
            tracer.open()
            dev = util.loops_for(img)[0]
            st = os.stat(dev)
            kdev = (os.major(st.st_rdev) << 20) | os.minor(st.st_rdev)
            for ev in ("jbd2_end_commit", "jbd2_run_stats", "jbd2_checkpoint"):
                tracer.enable("jbd2", ev, f"dev == {kdev}")
        root = mnt if workload.name == "untar" else os.path.join(mnt, "w")
        if root != mnt:
            os.mkdir(root)
        os.sync()
        t0 = time.monotonic()
        workload.run(root, pool, args.workers, args.timeout)
        t1 = time.monotonic()
        syncfs(mnt)
        t2 = time.monotonic()
        umount_timed(adapter, m, args.timeout)
        t3 = time.monotonic()
        rec.update(seconds=t3 - t0, work_s=t1 - t0, syncfs_s=t2 - t1, umount_s=t3 - t2)
        if tracer:
            tracer.stop()
            rec["counters"] = counters(adapter, tracer, t0, t2, jranges)
            if adapter.name == "ext4lazy":
                seq1 = ext4lazy_journal_sequence(adapter.bin, img)
                rec["counters"]["commits"] = (seq1 - seq0) if seq0 is not None and seq1 is not None else None
    finally:
        if m is not None and not m.unmounted:
            util.abort_fuse(mnt)
            adapter.cleanup(m)
        if tracer:
            tracer.close()
        if m is not None and m.log is not None:     # fuse2fs's output: only kept on failure (in the error)
            m.log.close()
            os.unlink(m.log.name)
    if args.fsck:
        rec["fsck"] = fsck(img)
        want = workload.expected_inodes()
        if rec["fsck"]["clean"] and rec["fsck"]["inodes_used"] != want:
            rec["fsck"].update(clean=False, tail=f"{rec['fsck']['inodes_used']} inodes in use, expected {want}")
    return rec


def counters(adapter, tracer, t0, t_umount, jranges):
    """The journal's work, from the trace.  'before_umount' = from the clock's start to the unmount's start."""
    ev = tracer.events()
    c = {"source": "uprobes" if adapter.name == "ext4lazy" else "jbd2 tracepoints",
         "lost_events": tracer.lost_events(), "events": len(ev)}
    if adapter.name == "ext4lazy":
        by_class = {n: {"writes": 0, "bytes": 0} for n in IOCLASS.values()}
        bad_class = outside = 0
        ckpt = ckpt_before = 0
        for name, ts, f in ev:
            if name == "write_at":
                cls = IOCLASS.get(int(f.get("class", -1)))
                off, ln = int(f.get("off", 0)), int(f.get("len", 0))
                if cls is None:
                    bad_class += 1
                    continue
                by_class[cls]["writes"] += 1
                by_class[cls]["bytes"] += ln
                if cls == "journal" and jranges and not any(lo <= off < hi for lo, hi in jranges):
                    outside += 1
            elif name == "checkpoint":
                ckpt += 1
                if ts < t_umount:
                    ckpt_before += 1
        c.update(forced_checkpoints=ckpt_before, forced_checkpoints_total=ckpt,
                 journal_mib=by_class["journal"]["bytes"] / images.MiB,
                 home_metadata_mib=by_class["metadata"]["bytes"] / images.MiB,
                 data_mib=by_class["data"]["bytes"] / images.MiB, writes_by_class=by_class,
                 unknown_class_writes=bad_class, journal_writes_outside_journal=outside)
        if bad_class or outside:
            c["warning"] = ("the probe's IoClass argument does not match the journal's location: "
                            "the register layout may have changed; byte counts by class are unreliable")
    else:
        commits = [x for x in ev if x[0] == "jbd2_end_commit"]
        stats = [x for x in ev if x[0] == "jbd2_run_stats"]
        ck = [x for x in ev if x[0] == "jbd2_checkpoint"]
        logged = sum(int(f.get("blocks_logged", 0)) for _, _, f in stats)
        c.update(commits=len(commits), commits_before_umount=sum(1 for x in commits if x[1] < t_umount),
                 journal_blocks_logged=logged, journal_mib=logged * 4096 / images.MiB,
                 forced_checkpoints=sum(1 for x in ck if x[1] < t_umount), checkpoint_events_total=len(ck),
                 home_metadata_mib=None, data_mib=None)
    return c


# ---------------------------------------------------------------------------------------------- driver
def run_series(args, system, workload, pool, mkfs_opts=(), trace=False, label=None):
    """--runs runs of one (system, workload[, journal]); returns the entry for the JSON."""
    a = adapters.get(system)
    if system == "ext4lazy":
        a.bin = args.ext4lazy_bin
    ok, why = a.available()
    if not ok:
        return {"available": False, "reason": why, "runs": [], "best": None, "errors": []}
    img = os.path.join(args.image_dir, f"writepath-{system}.img")
    mnt = os.path.join(args.image_dir, "writepath-mnt")
    os.makedirs(mnt, exist_ok=True)
    entry = {"available": True, "reason": "", "runs": [], "errors": []}
    for r in range(args.runs):
        log(f"{system}: {label or workload.name} run {r + 1}/{args.runs}")
        try:
            rec = run_once(args, a, workload, img, mnt, pool, mkfs_opts, trace)
        except adapters.MountFailed as e:
            entry.update(available=False, reason="mount failed: " + " ".join(str(e).splitlines()[:3]))
            log(f"{system}: {entry['reason']}")
            break
        except Exception as e:  # a failed run is a result, not a crash of the benchmark
            msg = f"{type(e).__name__}: {str(e).strip()[-400:]}"
            entry["runs"].append({"seconds": None, "error": msg})
            entry["errors"].append(msg)
            log(f"{system}: {label or workload.name} FAILED: {msg}")
            util.force_unmount(mnt)
            util.detach_loops(img)
            continue
        finally:
            if os.path.exists(img):
                os.unlink(img)
        if args.fsck and not rec["fsck"]["clean"]:
            msg = f"e2fsck -fn found errors after the run (rc={rec['fsck']['rc']}): {rec['fsck']['tail']}"
            entry["errors"].append(msg)
            log(f"{system}: {msg}")
        entry["runs"].append(rec)
        extra = ""
        if "counters" in rec:
            c = rec["counters"]
            extra = (f"; commits {c.get('commits')}, journal {c.get('journal_mib') or 0:.1f} MiB, "
                     f"forced checkpoints {c.get('forced_checkpoints')}")
        log(f"{system}: {label or workload.name} {rec['seconds']:.2f} s (work {rec['work_s']:.2f} + syncfs "
            f"{rec['syncfs_s']:.2f} + umount {rec['umount_s']:.2f}){extra}")
    good = [x for x in entry["runs"] if x.get("seconds") is not None]
    best = min(good, key=lambda x: x["seconds"]) if good and not entry["errors"] else None
    entry["best"] = best["seconds"] if best else None
    entry["best_run"] = entry["runs"].index(best) if best else None
    return entry


def fmt(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}"


def git_commit():
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    c = p.stdout.strip() or "unknown"
    d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                       text=True).stdout.strip()
    return c + ("-dirty" if d else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=20000, help="makedirs: directories (default 20,000)")
    ap.add_argument("--width", type=int, default=0,
                    help="makedirs: max subdirectories per directory (default: the depth-10 width for --dirs)")
    ap.add_argument("--files", type=int, default=20000, help="createfiles: files (default 20,000)")
    ap.add_argument("--file-size", type=int, default=4096, help="createfiles: bytes per file (default 4096)")
    ap.add_argument("--files-per-dir", type=int, default=100, help="createfiles: files per directory (default 100)")
    ap.add_argument("--untar-src", default="/usr/include", help="untar: tree to tar once (default /usr/include)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: " + ", ".join(WORKLOADS))
    ap.add_argument("--systems", default="kernel,fuse2fs,ext4lazy")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--journal", action="store_true", help="run only the journal-size experiment")
    mode.add_argument("--all", action="store_true", help="run the workloads and the journal-size experiment")
    ap.add_argument("--journal-files", type=int, default=100000, help="journal mode: files (default 100,000)")
    ap.add_argument("--journal-dirs", type=int, default=None,
                    help="journal mode: directories (default 0.6 x files: the paper's 60,000 per 100,000)")
    ap.add_argument("--journal-sizes", default="default,128,1024",
                    help="journal mode: comma list of journal sizes in MiB, or 'default' (mkfs's choice)")
    ap.add_argument("--journal-systems", default="ext4lazy,kernel")
    ap.add_argument("--trace-buffer-kb", type=int, default=65536, help="journal mode: trace buffer per CPU")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8,
                    help="processes sharing makedirs/createfiles (the paper's 8 Filebench threads)")
    ap.add_argument("--no-fsck", dest="fsck", action="store_false", help="skip e2fsck -fn after each run")
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/writepath-<commit>)")
    ap.add_argument("--image-dir", default="/var/tmp/ext4lazy-bench")
    ap.add_argument("--ext4lazy-bin", default=os.environ.get("EXT4LAZY_BIN") or
                    os.path.join(REPO, "target", "release", "ext4lazy"))
    ap.add_argument("--timeout", type=int, default=3600, help="per workload and per unmount (s)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("writepath.py: needs root (loop devices, mounts, tracefs)")
    args.ext4lazy_bin = os.path.abspath(args.ext4lazy_bin)
    do_workloads = not args.journal
    do_journal = args.journal or args.all
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    jsystems = [s.strip() for s in args.journal_systems.split(",") if s.strip()]
    wls = [w.strip() for w in args.workloads.split(",") if w.strip()] if do_workloads else []
    for s in systems + jsystems:
        if s not in adapters.ALL:
            sys.exit(f"writepath.py: unknown system {s!r} (choose from {', '.join(adapters.ALL)})")
    for w in wls:
        if w not in WORKLOADS:
            sys.exit(f"writepath.py: unknown workload {w!r}")
    jsizes = [x.strip() for x in args.journal_sizes.split(",") if x.strip()]
    for x in jsizes:
        if x != "default" and not x.isdigit():
            sys.exit(f"writepath.py: journal size {x!r} is neither 'default' nor MiB")
    commit = git_commit()
    out = args.out or os.path.join(HERE, "results", "writepath-" + commit)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    os.makedirs(args.image_dir, exist_ok=True)
    width = args.width or depth10_width(args.dirs)

    workloads = {}
    if "makedirs" in wls:
        workloads["makedirs"] = Workload("makedirs", dirs=args.dirs, width=width, depth=tree_depth(args.dirs, width))
    if "createfiles" in wls:
        nd = -(-args.files // args.files_per_dir)
        workloads["createfiles"] = Workload("createfiles", files=args.files, file_size=args.file_size, dirs=nd,
                                            width=args.files_per_dir)
    tar_info = None
    if "untar" in wls:
        tar_info = make_tarball(args.untar_src, args.image_dir)
        workloads["untar"] = Workload("untar", tarball=tar_info["tarball"], source=tar_info["source"],
                                      inodes=tar_info["inodes"])

    results = {"params": vars(args) | {"workloads": wls, "systems": systems, "journal_systems": jsystems,
                                       "journal_sizes": jsizes, "commit": commit, "image_size": IMAGE_SIZE},
               "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
               "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "workloads": {k: w.describe() for k, w in workloads.items()}, "untar_source": tar_info,
               "systems": {}, "journal": None}
    pool = multiprocessing.get_context("fork").Pool(args.workers) if args.workers > 1 else None
    try:
        for s in systems if do_workloads else []:
            results["systems"][s] = {"workloads": {}}
            for name, w in workloads.items():
                e = run_series(args, s, w, pool)
                results["systems"][s]["workloads"][name] = e
                if not e["available"]:
                    results["systems"][s].update(available=False, reason=e["reason"])
                    log(f"{s}: NOT AVAILABLE: {e['reason']}")
                    break
            else:
                results["systems"][s].update(available=True, reason="")
        if do_journal:
            ok, why = Tracer.available()
            jd = args.journal_dirs if args.journal_dirs is not None else int(args.journal_files * 0.6)
            jw = depth10_width(jd)
            jwl = Workload("createfiles", files=args.journal_files, file_size=args.file_size, dirs=jd, width=jw)
            results["journal"] = {"workload": jwl.describe(), "tracing": ok, "tracing_reason": why, "systems": {}}
            if ok:
                Tracer.remove_stale()
            for s in jsystems:
                results["journal"]["systems"][s] = {}
                for js in jsizes:
                    opts = [] if js == "default" else ["-J", f"size={js}"]
                    e = run_series(args, s, jwl, pool, mkfs_opts=opts, trace=ok,
                                   label=f"journal {js} createfiles {args.journal_files}")
                    results["journal"]["systems"][s][js] = e
                    if not e["available"]:
                        log(f"{s}: NOT AVAILABLE: {e['reason']}")
                        break
    finally:
        if pool:
            pool.terminate()
            pool.join()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    md = report(args, results, systems, workloads, tar_info, commit, width)
    with open(out + ".md", "w") as f:
        f.write(md)
    with open(out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    print(md)
    log(f"wrote {out}.md and {out}.json")
    return 0


def report(args, results, systems, workloads, tar_info, commit, width):
    lines = []
    host = f"kernel {platform.release()}, {os.cpu_count()} CPUs"
    if workloads:
        def best(s, w):
            e = results["systems"].get(s, {}).get("workloads", {}).get(w)
            return e["best"] if e and e.get("available") else None

        head = ["workload"] + [f"{s} (s)" for s in systems]
        ratios = []
        if "ext4lazy" in systems and "fuse2fs" in systems:
            ratios.append(("ext4lazy speed-up vs fuse2fs", lambda w: (best("fuse2fs", w), best("ext4lazy", w))))
        if "ext4lazy" in systems and "kernel" in systems:
            ratios.append(("ext4lazy / kernel", lambda w: (best("ext4lazy", w), best("kernel", w))))
        if "fuse2fs" in systems and "kernel" in systems:
            ratios.append(("fuse2fs / kernel", lambda w: (best("fuse2fs", w), best("kernel", w))))
        head += [c for c, _ in ratios]
        if len(ratios) >= 2 and "ext4lazy" in systems:
            head.append(f"goal (>= {GOAL_VS_FUSE2FS:g}x fuse2fs, <= {GOAL_VS_KERNEL:g}x kernel)")
        lines += [f"Write path, best of {args.runs}: each run mkfs.ext4 (defaults) on a fresh 8 GiB sparse image, "
                  f"mount rw, then timed: workload + syncfs + unmount (which returns once everything is on the "
                  f"image); {args.workers} worker processes; commit {commit}; {host}; {results['started']}", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        desc = {
            "makedirs": lambda k: f"MakeDirs: {k['dirs']:,} dirs, width {k['width']}, depth {k['depth']}",
            "createfiles": lambda k: (f"CreateFiles: {k['files']:,} x {k['file_size']} B files in "
                                      f"{k['dirs']:,} dirs"),
            "untar": lambda k: (f"untar {tar_info['source']} ({tar_info['regular_files']:,} files, "
                                f"{tar_info['directories']:,} dirs, {tar_info['file_bytes'] / images.MiB:.0f} MiB)"),
        }
        for w, wl in workloads.items():
            row = [desc[w](wl.kw)] + [fmt(best(s, w)) for s in systems]
            vals = []
            for _, f in ratios:
                a, b = f(w)
                v = None if a is None or b is None or b == 0 else a / b
                vals.append(v)
                row.append("—" if v is None else f"{v:.2f}x")
            if len(head) > len(row):
                sp, vk = vals[0], vals[1]
                row.append("—" if sp is None or vk is None else
                           ("met" if sp >= GOAL_VS_FUSE2FS and vk <= GOAL_VS_KERNEL else "not met"))
            lines.append("| " + " | ".join(row) + " |")
        notes = []
        for s in systems:
            e = results["systems"].get(s, {})
            if not e.get("available", True):
                notes.append(f"- {s}: not available: {e.get('reason')}")
            for w, o in e.get("workloads", {}).items():
                for err in o["errors"][:1]:
                    notes.append(f"- {s} {w}: {err}")
        if notes:
            lines += [""] + notes
        lines += ["", "Time split of the best runs (work + syncfs + unmount, s):", ""]
        for s in systems:
            for w in workloads:
                e = results["systems"].get(s, {}).get("workloads", {}).get(w)
                if e and e.get("best_run") is not None:
                    r = e["runs"][e["best_run"]]
                    lines.append(f"- {s} {w}: {r['work_s']:.2f} + {r['syncfs_s']:.2f} + {r['umount_s']:.2f}")
    j = results.get("journal")
    if j:
        k = j["workload"]
        if lines:
            lines += [""]
        lines += [f"Journal size (paper §3, Fig. 6): CreateFiles {k['files']:,} x {k['file_size']} B files in "
                  f"{k['dirs']:,} dirs (width {k['width']}), best of {args.runs}, 8 GiB image; counters of the "
                  f"best run ({'uprobes on ext4lazy, jbd2 tracepoints on the kernel' if j['tracing'] else 'none: ' + j['tracing_reason']}); "
                  f"forced checkpoints counted up to the unmount", "",
                  "| system | journal (MiB) | time (s) | commits | journal written (MiB) | metadata written home (MiB) "
                  "| data written (MiB) | forced checkpoints |", "|---|---|---|---|---|---|---|---|"]
        notes = []
        for s, sizes in j["systems"].items():
            for js, e in sizes.items():
                if not e["available"]:
                    notes.append(f"- {s}: not available: {e['reason']}")
                    break
                r = e["runs"][e["best_run"]] if e.get("best_run") is not None else (e["runs"] or [{}])[-1]
                c = r.get("counters") or {}
                jm = r.get("journal_mib")
                row = [s, f"{jm} ({js})" if js == "default" else str(jm), fmt(e["best"]),
                       "—" if c.get("commits") is None else str(c["commits"]),
                       fmt(c.get("journal_mib"), 1), fmt(c.get("home_metadata_mib"), 1), fmt(c.get("data_mib"), 1),
                       "—" if c.get("forced_checkpoints") is None else str(c["forced_checkpoints"])]
                lines.append("| " + " | ".join(row) + " |")
                for err in e["errors"][:1]:
                    notes.append(f"- {s} journal {js}: {err}")
                if c.get("lost_events"):
                    notes.append(f"- {s} journal {js}: {c['lost_events']} trace events lost (raise "
                                 f"--trace-buffer-kb): byte counts are low")
                if c.get("warning"):
                    notes.append(f"- {s} journal {js}: {c['warning']}")
                for name, st in (r.get("probes") or {}).items():
                    if st != "ok":
                        notes.append(f"- {s} journal {js}: probe {name}: {st}")
        lines += ["", "ext4lazy: commits = journal sequence after minus before; journal / metadata home / data "
                  "= bytes passed to the image by IoClass; forced checkpoints = calls of the engine's "
                  "checkpoint (only made when a commit finds the journal short of space).  Kernel: "
                  "jbd2_end_commit events, sum of jbd2_run_stats blocks_logged, jbd2_checkpoint events before "
                  "the unmount; its home writes are not traced (—)."]
        if notes:
            lines += [""] + notes
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
