#!/usr/bin/env python3
"""Write-path benchmark (issue #4): MakeDirs, CreateFiles and untar on kernel ext4, fuse2fs and ext4lazy (in both
journal modes), and the journal-size experiment of the ext4-lazy paper (FAST'17, §3 and Fig. 6).

    python3 bench/writepath.py [--dirs 20000] [--files 20000] [--runs 3]
                               [--systems kernel,fuse2fs,ext4lazy,ext4lazy-lazy]
                               [--workloads makedirs,createfiles,untar] [--workers 8]
    python3 bench/writepath.py --journal [--journal-files 100000] [--journal-sizes default,128,1024]
    python3 bench/writepath.py --all ...        # both into one results file (bench/results/writepath-COMMIT)

Every run: a fresh 8 GiB sparse image (mkfs.ext4 defaults, or -J size=N), mounted read-write — the kernel
through a loop device, fuse2fs as `fuse2fs IMG MNT -o rw,fakeroot -f`, ext4lazy (ordered journaling) as
`ext4lazy mount -o rw,stats=FILE IMG MNT`, ext4lazy-lazy (the same binary, lazy journaling) as
`ext4lazy mount -o rw,journal=lazy,stats=FILE IMG MNT`.  After a global `sync` the clock starts; it stops when the
workload, `syncfs` on the mount and the unmount have returned.  The unmount is what waits for everything to be
on the image: `umount` (kernel; the loop device is detached afterwards), `fusermount3 -u` + the fuse2fs
process's exit, `ext4lazy umount` (returns once the daemon has committed everything, written it home in ordered
mode, and exited).  Best of --runs, the systems' runs interleaved (run 1 of every system, then run 2, ...) so
that load from elsewhere on a shared machine falls on all of them alike; the 1-minute load average is recorded
as each run starts.  `e2fsck -fn` and an inode count check afterwards (untimed; --no-fsck skips them).  A lazy volume is left needing recovery by design (its metadata lives in the journal), so for
ext4lazy-lazy the check first replays the journal with `e2fsck -y -E journal_only IMG` (exit 0 or 1 is fine;
no -f there, which would add a full check whose repairs the -fn after it would miss);
an ordered or kernel volume that needs recovery after its unmount is an error.

Workloads (the paper's Filebench microbenchmarks scaled down; --workers processes, the paper's 8 threads):
  makedirs     DIRS directories made breadth-first, at most WIDTH subdirectories each (WIDTH: the smallest
               for which a depth-10 tree holds DIRS).
  createfiles  FILES files of --file-size bytes, round-robin over ceil(FILES / --files-per-dir) directories
               (made first, in the timed window, as a breadth-first tree --files-per-dir wide).
  untar        `tar -xf` of a deterministic tarball of --untar-src, made once and cached in --image-dir.
Journal mode: createfiles with --journal-files files in 0.6 x as many directories (the paper's 100,000 files
"in over 60,000 directories"), depth <= 10, with mkfs's default journal, -J size=128 and -J size=1024.

Journal counters, recorded for every run:
  ext4lazy  the daemon's own counters, which `-o stats=FILE` writes at unmount: commits, journal blocks logged,
            forced checkpoints (a commit found the journal short of space and waited for write-back; this may
            include one made by the final commit inside the unmount; in lazy mode: the oldest blocks migrated
            home from their journal copies) and metadata blocks written home (lazy: migrations home only), and
            the journal figures at unmount: journal_blocks, journal_used_blocks, journal_live_blocks,
            jmap_entries, jmap_bytes, cleaner_blocks_moved (lazy: live blocks logged again to free the tail),
            blocks_migrated_home.
  kernel    jbd2 tracepoints in a private tracefs instance, filtered on the loop device: jbd2_end_commit,
            jbd2_run_stats.blocks_logged, jbd2_checkpoint before the unmount starts (the unmount checkpoints
            everything, so later events are not forced).  These are the kernel's stable tracepoints, read by
            field name, not probes on code.  Metadata written home is derived: the loop device's sectors
            written minus the journal minus the files' data (createfiles only).
  fuse2fs   none (it has no journal).

Needs root (loop devices, mounts, tracefs).  EXT4LAZY_BIN or --ext4lazy-bin names the binary.
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # run as a script: the repository root, where `harness` lives
from harness import adapters, images, util  # noqa: E402

import benchlib  # noqa: E402  (beside this script)
from bench.suite import shapes  # noqa: E402

WORKLOADS = ("makedirs", "createfiles", "untar")
# system -> (harness adapter, mount options; ext4lazy adds stats=FILE)
SYSTEMS = {"kernel": ("kernel", ["rw"]), "fuse2fs": ("fuse2fs", ["rw", "fakeroot"]),
           "ext4lazy": ("ext4lazy", ["rw"]), "ext4lazy-lazy": ("ext4lazy", ["rw", "journal=lazy"]),
           # The transport ablations: /dev/fuse, and io_uring with the queue threads at normal priority.
           "ext4lazy-dev": ("ext4lazy", ["rw", "transport=dev"]),
           "ext4lazy-uring-normal": ("ext4lazy", ["rw", "uring_sched=normal"])}
LAZY = {"ext4lazy-lazy"}                # volumes left with a journal to replay, by design
EXT4LAZY_KEYS = ("journal_blocks", "journal_used_blocks", "journal_live_blocks", "jmap_entries", "jmap_bytes",
                 "cleaner_blocks_moved", "blocks_migrated_home")
LABEL = {"kernel": "kernel", "fuse2fs": "fuse2fs", "ext4lazy": "ext4lazy ordered", "ext4lazy-lazy": "ext4lazy lazy"}
IMAGE_SIZE = 8 * images.GiB
GOAL_VS_FUSE2FS = 3.0   # issue #4: at least this much faster than fuse2fs
GOAL_VS_KERNEL = 2.0    # ... and at most this much slower than the kernel
TRACEFS = "/sys/kernel/tracing"
JBD2_EVENTS = {"jbd2_end_commit": "dev", "jbd2_run_stats": "blocks_logged", "jbd2_checkpoint": "dev"}


log = benchlib.logger("writepath")


# ---------------------------------------------------------------------------------------------- tree shapes
# (in bench/suite/shapes.py, shared with `ext4lazy bench`)
depth10_width, bfs_tree, tree_depth, split_tree = (shapes.depth10_width, shapes.bfs_tree, shapes.tree_depth,
                                                   shapes.split_tree)
_mkdirs, _create_files, syncfs = shapes.mkdirs, shapes.create_files, shapes.syncfs


class Workload:
    """What to do inside the mount: `prepare` before the clock starts, `run` inside the timed window."""

    def __init__(self, name, **kw):
        self.name, self.kw = name, kw

    def expected_inodes(self):
        """Inodes in use afterwards: mkfs's 11 (root, lost+found, reserved), the run's root, what it made."""
        k = self.kw
        return {"makedirs": lambda: 12 + k["dirs"], "createfiles": lambda: 12 + k["dirs"] + k["files"],
                "untar": lambda: 11 + k["inodes"]}[self.name]()

    def prepare(self):
        if self.name == "untar":
            with open(self.kw["tarball"], "rb") as f:       # into the page cache: the source is not measured
                while f.read(8 << 20):
                    pass

    def run(self, root, pool, workers, timeout):
        k = self.kw
        if self.name == "untar":
            p = subprocess.run(["tar", "-xf", k["tarball"], "-C", root], capture_output=True, text=True,
                               timeout=timeout)
            if p.returncode != 0:
                raise RuntimeError(f"tar -xf failed rc={p.returncode}: {p.stderr.strip()[-500:]}")
            return
        serial, lists = split_tree(k["dirs"], k["width"], workers)
        _mkdirs((root, serial))
        if lists:
            pool.map_async(_mkdirs, [(root, x) for x in lists], chunksize=1).get(timeout)
        if self.name == "createfiles":
            dirs = bfs_tree(k["dirs"], k["width"])
            names = [f"{dirs[j % len(dirs)]}/f{j}" if dirs else f"f{j}" for j in range(k["files"])]
            parts = [(root, names[w::workers], k["file_size"], 100 + w) for w in range(workers)]
            if pool:
                pool.map_async(_create_files, parts, chunksize=1).get(timeout)
            else:
                _create_files(parts[0])


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
    if not os.path.exists(tar + ".json"):
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
        with open(tar + ".json", "w") as f:
            json.dump(info, f, indent=1)
    with open(tar + ".json") as f:
        return json.load(f)


# ---------------------------------------------------------------------------------------------- kernel counters
class Jbd2Trace:
    """jbd2 tracepoints for one loop device, in a private tracefs instance (removed on close)."""

    def __init__(self, dev):
        st = os.stat(dev)
        kdev = (os.major(st.st_rdev) << 20) | os.minor(st.st_rdev)     # the kernel's dev_t
        self.inst = os.path.join(TRACEFS, "instances", f"e4lwp{os.getpid()}")
        if os.path.isdir(self.inst):
            os.rmdir(self.inst)
        os.mkdir(self.inst)
        self._write("trace_clock", "mono")                                 # = time.monotonic()
        for ev, field in JBD2_EVENTS.items():
            d = f"events/jbd2/{ev}"
            with open(os.path.join(self.inst, d, "format")) as f:
                fields = re.findall(r"field:[^;]*?(\w+);", f.read())
            if "dev" not in fields or field not in fields:
                raise RuntimeError(f"tracepoint jbd2/{ev} has no field dev or {field}: its format changed")
            self._write(d + "/filter", f"dev == {kdev}")
            self._write(d + "/enable", "1")

    def _write(self, rel, text):
        fd = os.open(os.path.join(self.inst, rel), os.O_WRONLY | os.O_TRUNC)   # tracefs refuses Python's seek
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def counters(self, t_umount):
        """Commits, blocks logged and forced checkpoints (jbd2_checkpoint events before `t_umount`)."""
        c = {"commits": 0, "journal_blocks_logged": 0, "forced_checkpoints": 0, "checkpoints_total": 0}
        with open(os.path.join(self.inst, "trace")) as f:
            for line in f:
                m = re.search(r"\s(\d+\.\d+):\s+(jbd2_\w+):\s?(.*)$", line)
                if not m:
                    continue
                ts, ev, rest = float(m.group(1)), m.group(2), m.group(3)
                if ev == "jbd2_end_commit":
                    c["commits"] += 1
                elif ev == "jbd2_run_stats":
                    c["journal_blocks_logged"] += int(re.search(r"blocks_logged (\d+)", rest).group(1))
                elif ev == "jbd2_checkpoint":
                    c["checkpoints_total"] += 1
                    c["forced_checkpoints"] += ts < t_umount
        lost = 0
        for cpu in os.listdir(os.path.join(self.inst, "per_cpu")):
            with open(os.path.join(self.inst, "per_cpu", cpu, "stats")) as f:
                lost += sum(int(v) for k, v in re.findall(r"^(overrun|dropped events): (\d+)", f.read(), re.M))
        c["lost_events"] = lost
        return c

    def close(self):
        for ev in JBD2_EVENTS:
            try:
                self._write(f"events/jbd2/{ev}/enable", "0")
            except OSError:
                pass
        for _ in range(50):
            try:
                os.rmdir(self.inst)
                return
            except OSError:
                time.sleep(0.1)


def loop_sectors_written(dev):
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        return int(f.read().split()[6])


# ---------------------------------------------------------------------------------------------- one run
class RunError(Exception):
    pass


def fsck(img, lazy=False):
    """`e2fsck -fn`, after replaying the journal with `e2fsck -y -E journal_only` if the volume is lazy (a lazy
    volume needs recovery after a clean unmount by design; any other volume must not)."""
    out = {"needs_recovery": "needs_recovery" in images.features(images.fs_info(img))}
    if lazy:
        t = time.monotonic()
        p = subprocess.run(["e2fsck", "-y", "-E", "journal_only", img], capture_output=True, text=True,
                           timeout=3600, errors="replace")
        out["replay"] = {"rc": p.returncode, "seconds": round(time.monotonic() - t, 2)}
        if p.returncode not in (0, 1):
            return dict(out, rc=p.returncode, clean=False, inodes_used=None,
                        tail="e2fsck -y -E journal_only: " + (p.stdout + p.stderr).strip()[-1500:])
    elif out["needs_recovery"]:
        return dict(out, rc=None, clean=False, inodes_used=None,
                    tail="the volume needs journal recovery after a clean unmount")
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True, timeout=3600, errors="replace")
    m = re.search(r"(\d+)/(\d+) files", p.stdout)
    return dict(out, rc=p.returncode, clean=p.returncode == 0, inodes_used=int(m.group(1)) if m else None,
                tail=None if p.returncode == 0 else (p.stdout + p.stderr).strip()[-1500:])


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
    m.unmounted = True


def run_once(args, system, adapter, workload, img, mnt, pool, mkfs_opts=()):
    """mkfs, mount, time the workload + syncfs + umount, collect the journal counters, fsck."""
    images.mkfs("mkfs.ext4", img, IMAGE_SIZE, list(mkfs_opts))
    info = images.fs_info(img)
    bs = int(info["Block size"])
    rec = {"journal_mib": int(info.get("Total journal blocks", 0)) * bs // images.MiB}
    stats = img + ".stats.json"
    if os.path.exists(stats):
        os.unlink(stats)
    opts = SYSTEMS[system][1] + (["stats=" + stats] if adapter.name == "ext4lazy" else [])
    m = trace = dev = None
    try:
        workload.prepare()
        m = adapter.mount(img, mnt, options=opts, ro=False)
        if adapter.name == "kernel":
            dev = util.loops_for(img)[0]
            sectors0 = loop_sectors_written(dev)
            try:
                trace = Jbd2Trace(dev)
            except (OSError, RuntimeError) as e:        # no tracefs, or jbd2's events changed: time it anyway
                rec["counters"] = {"error": f"jbd2 tracepoints unavailable: {e}"}
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
        if adapter.name == "ext4lazy":
            with open(stats) as f:
                s = json.load(f)
            w = s.get("write") or {}
            missing = [k for k in EXT4LAZY_KEYS if k not in s]
            if missing:
                raise RunError(f"the stats file has no {', '.join(missing)}: the binary predates them")
            rec["counters"] = dict(w, source="ext4lazy -o stats", block_size=s["block_size"], cache=s["cache"],
                                   failure=s["failure"], **{k: s[k] for k in EXT4LAZY_KEYS})
        elif trace:
            c = trace.counters(t2)
            written = (loop_sectors_written(dev) - sectors0) * 512
            c.update(source="jbd2 tracepoints", block_size=bs, device_bytes_written=written)
            if workload.name == "createfiles":
                data = workload.kw["files"] * -(-workload.kw["file_size"] // bs) * bs
                c["blocks_written_home"] = (written - c["journal_blocks_logged"] * bs - data) // bs
            rec["counters"] = c
        c = rec.get("counters")
        if c and "block_size" in c:
            for k, mib in (("journal_blocks_logged", "journal_mib"), ("blocks_written_home", "home_mib"),
                           ("blocks_migrated_home", "migrated_mib"), ("cleaner_blocks_moved", "cleaner_mib"),
                           ("journal_used_blocks", "journal_used_mib")):
                if c.get(k) is not None:
                    c[mib] = c[k] * c["block_size"] / images.MiB
    finally:
        if trace:
            trace.close()
        if m is not None and not m.unmounted:
            util.abort_fuse(mnt)
            adapter.cleanup(m)
        util.detach_loops(img)
        if m is not None and m.log is not None:     # fuse2fs's output
            m.log.close()
            os.unlink(m.log.name)
        if os.path.exists(stats):
            os.unlink(stats)
    if args.fsck:
        rec["fsck"] = fsck(img, lazy=system in LAZY)
        want = workload.expected_inodes()
        if rec["fsck"]["clean"] and rec["fsck"]["inodes_used"] != want:
            rec["fsck"].update(clean=False, tail=f"{rec['fsck']['inodes_used']} inodes in use, expected {want}")
    return rec


def run_series(args, systems, workload, pool, mkfs_opts=(), label=None):
    """--runs runs of one workload [and journal size] on each of `systems`, interleaved (run 1 of every system,
    then run 2, ...) so that load from elsewhere on a shared machine falls on all systems alike rather than on
    whichever one it coincides with.  Returns {system: the entry for the JSON}."""
    mnt = os.path.join(args.image_dir, "writepath-mnt")
    os.makedirs(mnt, exist_ok=True)
    label = label or workload.name
    entries, adapter = {}, {}
    for system in systems:
        a = adapter[system] = adapters.get(SYSTEMS[system][0])
        if a.name == "ext4lazy":
            a.bin = args.ext4lazy_bin
        ok, why = a.available()
        entries[system] = {"available": ok, "reason": why, "runs": [], "errors": []}
    for r in range(args.runs):
        for system in systems:
            entry, a = entries[system], adapter[system]
            if not entry["available"]:
                continue
            img = os.path.join(args.image_dir, f"writepath-{system}.img")
            log(f"{system}: {label} run {r + 1}/{args.runs}")
            load = os.getloadavg()[0]
            try:
                rec = run_once(args, system, a, workload, img, mnt, pool, mkfs_opts)
            except adapters.MountFailed as e:
                entry.update(available=False, reason="mount failed: " + " ".join(str(e).splitlines()[:3]))
                log(f"{system}: {entry['reason']}")
                continue
            except Exception as e:  # a failed run is a result, not a crash of the benchmark
                msg = f"{type(e).__name__}: {str(e).strip()[-400:]}"
                entry["runs"].append({"seconds": None, "error": msg, "loadavg_1m": load})
                entry["errors"].append(msg)
                log(f"{system}: {label} FAILED: {msg}")
                util.force_unmount(mnt)
                util.detach_loops(img)
                continue
            finally:
                if os.path.exists(img):
                    os.unlink(img)
            rec["loadavg_1m"] = load            # the 1-minute load average as the run started
            if args.fsck and not rec["fsck"]["clean"]:
                entry["errors"].append(f"e2fsck -fn found errors (rc={rec['fsck']['rc']}): {rec['fsck']['tail']}")
                log(f"{system}: {entry['errors'][-1]}")
            entry["runs"].append(rec)
            c = rec.get("counters") or {}
            extra = "" if "commits" not in c else (f"; commits {c.get('commits')}, journal {c.get('journal_mib', 0):.1f} "
                                                   f"MiB, forced checkpoints {c.get('forced_checkpoints')}")
            if "home_mib" in c:
                extra += f", home {c['home_mib']:.1f} MiB"
            if c.get("cleaner_blocks_moved"):
                extra += f", cleaner moved {c['cleaner_blocks_moved']}"
            log(f"{system}: {label} {rec['seconds']:.2f} s (work {rec['work_s']:.2f} + syncfs {rec['syncfs_s']:.2f} "
                f"+ umount {rec['umount_s']:.2f}){extra}; load {load:.2f}")
    for entry in entries.values():
        good = [x for x in entry["runs"] if x.get("seconds") is not None]
        best = min(good, key=lambda x: x["seconds"]) if good and not entry["errors"] else None
        entry["best"] = best["seconds"] if best else None
        entry["best_run"] = entry["runs"].index(best) if best else None
    return entries


# ---------------------------------------------------------------------------------------------- report
def fmt(x, nd=2):
    return "—" if x is None else f"{x:.{nd}f}"


def report(args, results, workloads, tar_info):
    systems, commit = results["params"]["systems"], results["params"]["commit"]
    host = f"kernel {platform.release()}, {os.cpu_count()} CPUs"
    lines = []
    lazies = [s for s in systems if s.startswith("ext4lazy")]

    def entry(s, w):
        e = results["systems"].get(s, {}).get("workloads", {}).get(w)
        return e if e and e.get("available") else None

    def best(s, w):
        e = entry(s, w)
        return e["best"] if e else None

    def best_counters(e):
        if not e or e.get("best_run") is None:
            return {}
        return e["runs"][e["best_run"]].get("counters") or {}

    def ratio(a, b):
        return None if a is None or b is None or b == 0 else a / b

    def x(v):
        return "—" if v is None else f"{v:.2f}x"

    def goal(sp, vk):
        return "—" if sp is None or vk is None else \
            "met" if sp >= GOAL_VS_FUSE2FS and vk <= GOAL_VS_KERNEL else "not met"

    if workloads:
        lines += [f"Write path, best of {args.runs}: each run mkfs.ext4 (defaults) on a fresh 8 GiB sparse image, "
                  f"mount rw, then timed: workload + syncfs + unmount (which returns once everything is on the "
                  f"image); {args.workers} worker processes; commit {commit}; {host}; {results['started']}. "
                  f"ext4lazy ordered = `-o rw`, ext4lazy lazy = `-o rw,journal=lazy`.", "",
                  "| workload | " + " | ".join(f"{LABEL.get(s, s)} (s)" for s in systems) + " |",
                  "|" + "---|" * (len(systems) + 1)]
        desc = {"makedirs": lambda k: f"MakeDirs: {k['dirs']:,} dirs, width {k['width']}, depth {k['depth']}",
                "createfiles": lambda k: f"CreateFiles: {k['files']:,} x {k['file_size']} B files in {k['dirs']:,} dirs",
                "untar": lambda k: (f"untar {tar_info['source']} ({tar_info['regular_files']:,} files, "
                                    f"{tar_info['directories']:,} dirs, {tar_info['file_bytes'] / images.MiB:.0f} MiB)")}
        short = {"makedirs": "MakeDirs", "createfiles": "CreateFiles", "untar": "untar"}
        for w, wl in workloads.items():
            lines.append("| " + " | ".join([desc[w](wl.kw)] + [fmt(best(s, w)) for s in systems]) + " |")
        if lazies:
            lines += ["", f"Ratios and goal (issue #4: >= {GOAL_VS_FUSE2FS:g}x faster than fuse2fs, "
                      f"<= {GOAL_VS_KERNEL:g}x the kernel's time); metadata home and journal from the best run's "
                      f"counters:", "",
                      "| workload | ext4lazy mode | speed-up vs fuse2fs | time / kernel | goal "
                      "| metadata written home (MiB) | journal written (MiB) | commits |",
                      "|---|---|---|---|---|---|---|---|"]
            for w in workloads:
                for s in lazies:
                    sp, vk = ratio(best("fuse2fs", w), best(s, w)), ratio(best(s, w), best("kernel", w))
                    c = best_counters(entry(s, w))
                    lines.append("| " + " | ".join([short[w], LABEL.get(s, s).split()[-1], x(sp), x(vk), goal(sp, vk),
                                                    fmt(c.get("home_mib"), 1), fmt(c.get("journal_mib"), 1),
                                                    str(c.get("commits", "—"))]) + " |")
            lines += ["", "fuse2fs / kernel: " + ", ".join(
                f"{short[w]} {x(ratio(best('fuse2fs', w), best('kernel', w)))}" for w in workloads) + "."]
        notes = []
        for s in systems:
            e = results["systems"].get(s, {})
            if not e.get("available", True):
                notes.append(f"- {s}: not available: {e.get('reason')}")
            for w, o in e.get("workloads", {}).items():
                notes += [f"- {s} {w}: {err}" for err in o["errors"][:1]]
        lines += ([""] + notes if notes else []) + [
            "", "All runs (s, in the order run; * = best; load = 1-minute load average as each run started) "
            "and the best run's split (work + syncfs + unmount, s) and counters:", ""]
        for s in systems:
            for w in workloads:
                e = results["systems"].get(s, {}).get("workloads", {}).get(w)
                if not e or not e.get("runs"):
                    continue
                runs = " ".join(("FAIL" if r.get("seconds") is None else f"{r['seconds']:.2f}")
                                + ("*" if i == e.get("best_run") else "") for i, r in enumerate(e["runs"]))
                line = f"- {LABEL.get(s, s)} {w}: {runs}"
                loads = [r.get("loadavg_1m") for r in e["runs"]]
                if all(v is not None for v in loads):
                    line += " (load " + " ".join(f"{v:.1f}" for v in loads) + ")"
                if e.get("best_run") is not None:
                    r = e["runs"][e["best_run"]]
                    c = r.get("counters") or {}
                    line += f"; split {r['work_s']:.2f} + {r['syncfs_s']:.2f} + {r['umount_s']:.2f}"
                    if "commits" in c:
                        line += (f"; {c['commits']} commits, {c['journal_mib']:.1f} MiB journal, "
                                 f"{c['forced_checkpoints']} forced checkpoints")
                    if "home_mib" in c and s.startswith("ext4lazy"):
                        line += f", {c['home_mib']:.1f} MiB metadata home"
                    if "jmap_entries" in c:
                        line += (f"; at unmount: journal {c['journal_used_blocks']:,}/{c['journal_blocks']:,} "
                                 f"blocks used, {c['journal_live_blocks']:,} live, jmap {c['jmap_entries']:,} "
                                 f"entries ({c['jmap_bytes'] / images.MiB:.1f} MiB), cleaner moved "
                                 f"{c['cleaner_blocks_moved']:,}, migrated home {c['blocks_migrated_home']:,}")
                    f = r.get("fsck") or {}
                    if "replay" in f:
                        line += f"; replay rc {f['replay']['rc']} in {f['replay']['seconds']:.1f} s"
                lines.append(line)
    j = results.get("journal")
    if j:
        k = j["workload"]
        lines += ([""] if lines else []) + [
            f"Journal size (paper §3, Fig. 6): CreateFiles {k['files']:,} x {k['file_size']} B files in "
            f"{k['dirs']:,} dirs (width {k['width']}, depth {k['depth']}), best of {args.runs}, 8 GiB image, "
            f"{args.workers} worker processes, commit {commit}; counters of the best run", "",
            "| system | journal (MiB) | time (s) | commits | journal written (MiB) | metadata written home (MiB) "
            "| forced checkpoints / migrations home | cleaner moved (MiB) | live in journal at unmount (MiB) |",
            "|---|---|---|---|---|---|---|---|---|"]
        notes = []
        for s, sizes in j["systems"].items():
            for js, e in sizes.items():
                if not e["available"]:
                    notes.append(f"- {s}: not available: {e['reason']}")
                    break
                r = e["runs"][e["best_run"]] if e.get("best_run") is not None else (e["runs"] or [{}])[-1]
                c = r.get("counters") or {}
                home = fmt(c.get("home_mib"), 1)
                own = s.startswith("ext4lazy")
                live = (fmt(c["journal_live_blocks"] * c["block_size"] / images.MiB, 1)
                        if own and "journal_live_blocks" in c else "—")
                row = [LABEL.get(s, s), f"{r.get('journal_mib')} ({js})" if js == "default" else str(r.get("journal_mib")),
                       fmt(e["best"]), str(c.get("commits", "—")), fmt(c.get("journal_mib"), 1),
                       home if own or home == "—" else "≈ " + home, str(c.get("forced_checkpoints", "—")),
                       fmt(c.get("cleaner_mib"), 1) if s in LAZY else "—", live]
                lines.append("| " + " | ".join(row) + " |")
                notes += [f"- {s} journal {js}: {err}" for err in e["errors"][:1]]
                if c.get("error"):
                    notes.append(f"- {s} journal {js}: {c['error']}")
                if c.get("lost_events"):
                    notes.append(f"- {s} journal {js}: {c['lost_events']} trace events lost: counts are low")
                good = [x for x in e["runs"] if x.get("seconds") is not None]
                if len(good) > 1:
                    notes.append(f"- {LABEL.get(s, s)} journal {js}: runs " + " ".join(
                        f"{x['seconds']:.2f}" for x in e["runs"] if x.get("seconds") is not None) + " s (load " +
                        " ".join(f"{x.get('loadavg_1m') or 0:.1f}" for x in e["runs"]) + ")")
        lines += ["", "ext4lazy: the daemon's counters (`-o stats=FILE`, written at unmount). Ordered: forced "
                  "checkpoints are those a commit made for want of journal space, the unmount's last commit "
                  "included. Lazy: a forced checkpoint is the fallback when the cleaner cannot free enough of the "
                  "log: the oldest blocks migrate home from their journal copies, and that migration is all the "
                  "metadata lazy mode writes home; cleaner moved = live blocks logged again to free the log's "
                  "tail (included in journal written). "
                  "Kernel: jbd2 tracepoints — jbd2_end_commit events, the sum of jbd2_run_stats blocks_logged, "
                  "jbd2_checkpoint events before the unmount starts; metadata home ≈ the loop device's bytes "
                  "written minus the journal and the files' data."] + ([""] + notes if notes else [])
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- driver
def git_commit():
    """HEAD, plus -dirty when what the binary is built from (crates/, src/, Cargo.*) differs from it."""
    c = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    d = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", "crates", "src",
                        "Cargo.toml", "Cargo.lock"], capture_output=True, text=True).stdout.strip()
    return (c.stdout.strip() or "unknown") + ("-dirty" if d else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=20000, help="makedirs: directories (default 20,000)")
    ap.add_argument("--width", type=int, default=0, help="makedirs: max subdirectories per directory")
    ap.add_argument("--files", type=int, default=20000, help="createfiles: files (default 20,000)")
    ap.add_argument("--file-size", type=int, default=4096, help="createfiles: bytes per file (default 4096)")
    ap.add_argument("--files-per-dir", type=int, default=100, help="createfiles: files per directory (default 100)")
    ap.add_argument("--untar-src", default="/usr/include", help="untar: tree to tar once (default /usr/include)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma list of: " + ", ".join(WORKLOADS))
    ap.add_argument("--systems", default="kernel,fuse2fs,ext4lazy,ext4lazy-lazy")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--journal", action="store_true", help="run only the journal-size experiment")
    mode.add_argument("--all", action="store_true", help="run the workloads and the journal-size experiment")
    ap.add_argument("--journal-files", type=int, default=100000, help="journal mode: files (default 100,000)")
    ap.add_argument("--journal-dirs", type=int, default=None, help="journal mode: directories (default 0.6 x files)")
    ap.add_argument("--journal-sizes", default="default,128,1024",
                    help="journal mode: comma list of journal sizes in MiB, or 'default' (mkfs's choice)")
    ap.add_argument("--journal-systems", default="ext4lazy,ext4lazy-lazy,kernel")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workers", type=int, default=8, help="worker processes (the paper's 8 Filebench threads)")
    ap.add_argument("--no-fsck", dest="fsck", action="store_false", help="skip e2fsck -fn after each run")
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/writepath-<commit>)")
    ap.add_argument("--commit", default=None, help="commit to record (default: the repository's HEAD)")
    ap.add_argument("--image-dir", default="/var/tmp/ext4lazy-bench")
    ap.add_argument("--ext4lazy-bin", default=os.environ.get("EXT4LAZY_BIN") or
                    os.path.join(REPO, "target", "release", "ext4lazy"))
    ap.add_argument("--timeout", type=int, default=3600, help="per workload and per unmount (s)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("writepath.py: needs root (loop devices, mounts, tracefs)")
    args.ext4lazy_bin = os.path.abspath(args.ext4lazy_bin)
    split = lambda s: [x.strip() for x in s.split(",") if x.strip()]   # noqa: E731
    systems, jsystems, jsizes = split(args.systems), split(args.journal_systems), split(args.journal_sizes)
    wls = [] if args.journal else split(args.workloads)
    for s in systems + jsystems:
        if s not in SYSTEMS:
            sys.exit(f"writepath.py: unknown system {s!r} (choose from {', '.join(SYSTEMS)})")
    for w in wls:
        if w not in WORKLOADS:
            sys.exit(f"writepath.py: unknown workload {w!r}")
    for x in jsizes:
        if x != "default" and not x.isdigit():
            sys.exit(f"writepath.py: journal size {x!r} is neither 'default' nor MiB")
    commit = args.commit or git_commit()
    out = args.out or os.path.join(HERE, "results", "writepath-" + commit)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    os.makedirs(args.image_dir, exist_ok=True)

    workloads, tar_info = {}, None
    if "makedirs" in wls:
        width = args.width or depth10_width(args.dirs)
        workloads["makedirs"] = Workload("makedirs", dirs=args.dirs, width=width, depth=tree_depth(args.dirs, width))
    if "createfiles" in wls:
        nd = -(-args.files // args.files_per_dir)
        workloads["createfiles"] = Workload("createfiles", files=args.files, file_size=args.file_size, dirs=nd,
                                            width=args.files_per_dir, depth=tree_depth(nd, args.files_per_dir))
    if "untar" in wls:
        tar_info = make_tarball(args.untar_src, args.image_dir)
        workloads["untar"] = Workload("untar", tarball=tar_info["tarball"], source=tar_info["source"],
                                      inodes=tar_info["inodes"])
    binary_sha = None
    if os.path.exists(args.ext4lazy_bin):
        with open(args.ext4lazy_bin, "rb") as f:
            binary_sha = hashlib.sha256(f.read()).hexdigest()
    results = {"params": vars(args) | {"workloads": wls, "systems": systems, "journal_systems": jsystems,
                                       "journal_sizes": jsizes, "commit": commit, "image_size": IMAGE_SIZE,
                                       "ext4lazy_bin_sha256": binary_sha},
               "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
               "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
               "workloads": {k: dict(w.kw, name=k) for k, w in workloads.items()}, "untar_source": tar_info,
               "systems": {}, "journal": None}
    pool = multiprocessing.get_context("fork").Pool(args.workers) if args.workers > 1 else None
    try:
        for s in systems if wls else []:
            results["systems"][s] = {"available": True, "reason": "", "workloads": {}}
        for name, w in workloads.items():
            live = [s for s in systems if results["systems"][s]["available"]]
            for s, e in run_series(args, live, w, pool).items():
                results["systems"][s]["workloads"][name] = e
                if not e["available"]:
                    results["systems"][s].update(available=False, reason=e["reason"])
                    log(f"{s}: NOT AVAILABLE: {e['reason']}")
        if args.journal or args.all:
            jd = args.journal_dirs if args.journal_dirs is not None else int(args.journal_files * 0.6)
            jw = depth10_width(jd)
            jwl = Workload("createfiles", files=args.journal_files, file_size=args.file_size, dirs=jd, width=jw,
                           depth=tree_depth(jd, jw))
            results["journal"] = {"workload": dict(jwl.kw, name="createfiles"), "systems": {}}
            results["journal"]["systems"] = {s: {} for s in jsystems}
            for js in jsizes:
                live = [s for s in jsystems if all(e["available"] for e in results["journal"]["systems"][s].values())]
                for s, e in run_series(args, live, jwl, pool, mkfs_opts=[] if js == "default" else ["-J", f"size={js}"],
                                       label=f"journal {js} createfiles {args.journal_files}").items():
                    results["journal"]["systems"][s][js] = e
                    if not e["available"]:
                        log(f"{s}: NOT AVAILABLE: {e['reason']}")
    finally:
        if pool:
            pool.terminate()
            pool.join()
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    md = report(args, results, workloads, tar_info)
    benchlib.save(out, md, results, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
