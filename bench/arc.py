#!/usr/bin/env python3
"""ARC control-directory benchmark (issue #8): cold scans of ARC's GMJobsInfo collect() on kernel ext4, kernel
XFS, dbfs-sqlite (through FUSE, and its database read directly) and ext4lazy, on image files (the `file` device).

    python3 bench/arc.py [--jobs 5000,20000] [--layout flat|arc6|arc7] [--runs 2]
                         [--systems ext4,xfs,dbfs-sqlite,dbfs-sqlite-direct,ext4lazy] [--out PATH]

Setup, once per system (untimed): a fresh sparse image (64 KiB per job of all sizes + 2 GiB, at least 8 GiB),
made by mkfs.ext4 (defaults; `-N` 12 inodes per job when the default one per 16 KiB is fewer) or mkfs.xfs
(defaults), mounted read-write (kernel: loop device; ext4lazy: `ext4lazy mount -o rw IMG MNT`;
dbfs-sqlite: its database file `fs.db` on a kernel ext4 image, `dbfs-sqlite mount DB MNT`), then
`arc-cd gen --jobs N --layout L MNT/cd-N` for every N (each its own control directory, as the thesis kept one
per size; the smaller is the first jobs of the larger), then unmounted.
Each measured run: mount afresh, `sync; echo 3 > /proc/sys/vm/drop_caches` (arc-cd --drop-caches), one
`arc-cd scan` (single-threaded, as the Perl), unmount. The runs are interleaved: run 1 of every (size, system),
then run 2, so that load from elsewhere falls on all alike; the 1-minute load average is recorded per run.
dbfs-sqlite-direct is the same scan through SQLite on the same database file without FUSE
(`arc-cd scan --sqlite DB`), after the same drop of caches.
Needs root. Binaries: EXT4LAZY_BIN (ext4lazy), the others beside it (`cargo build --release --workspace`).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
from harness import util  # noqa: E402

import benchlib  # noqa: E402

log = benchlib.logger("arc")
SYSTEMS = ("ext4", "xfs", "dbfs-sqlite", "dbfs-sqlite-direct", "ext4lazy")
LABEL = {"ext4": "kernel ext4", "xfs": "kernel XFS", "dbfs-sqlite": "dbfs-sqlite (FUSE)",
         "dbfs-sqlite-direct": "dbfs-sqlite direct SQLite", "ext4lazy": "ext4lazy ordered"}


def sh(cmd, timeout=3600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: rc={p.returncode}\n{p.stderr[-2000:]}")
    return p.stdout


def sh_umount(cmd, timeout=600):
    """An unmount, retried while the kernel still holds the last files closed (a FUSE release in
    flight right after the generator exits gives EBUSY)."""
    for i in range(40):
        try:
            return sh(cmd, timeout)
        except RuntimeError as e:
            if "busy" not in str(e) or i == 39:
                raise
            time.sleep(0.5)


class Bins:
    def __init__(self, args):
        self.ext4lazy = args.ext4lazy_bin or os.environ.get("EXT4LAZY_BIN") or os.path.join(REPO, "target", "release", "ext4lazy")
        d = os.path.dirname(self.ext4lazy)
        self.arc_cd = os.path.join(d, "arc-cd")
        self.dbfs = os.path.join(d, "dbfs-sqlite")
        for b in (self.ext4lazy, self.arc_cd, self.dbfs):
            if not os.access(b, os.X_OK):
                sys.exit(f"missing {b}: cargo build --release --workspace")


class System:
    """One system's volume: make it, mount it, unmount it."""

    def __init__(self, name, workdir, bins, image_gb, inodes):
        self.name, self.bins = name, bins
        base = "dbfs-sqlite" if name.startswith("dbfs-sqlite") else name
        self.dir = os.path.join(workdir, base)
        self.image = os.path.join(self.dir, "disk.img")
        self.mnt = os.path.join(self.dir, "mnt")
        self.host = os.path.join(self.dir, "host")     # dbfs-sqlite: the kernel ext4 holding fs.db
        self.db = os.path.join(self.host, "fs.db")
        self.image_gb, self.inodes = image_gb, inodes

    def make(self):
        os.makedirs(self.mnt, exist_ok=True)
        os.makedirs(self.host, exist_ok=True)
        if os.path.exists(self.image):
            os.unlink(self.image)
        with open(self.image, "wb") as f:
            f.truncate(self.image_gb << 30)
        if self.name == "xfs":
            sh(["mkfs.xfs", "-q", "-f", self.image])          # XFS allocates inodes as it goes
        else:
            # mkfs's default (one inode per 16 KiB) can run out (the thesis hit the limit): more only then.
            more = ["-N", str(self.inodes)] if self.inodes > (self.image_gb << 30) // 16384 else []
            sh(["mkfs.ext4", "-q", "-F", *more, self.image])

    def mount(self):
        if self.name in ("ext4", "xfs"):
            sh(["mount", "-o", "loop", self.image, self.mnt])
        elif self.name == "ext4lazy":
            sh([self.bins.ext4lazy, "mount", "-o", "rw", self.image, self.mnt])
        else:
            sh(["mount", "-o", "loop", self.image, self.host])
            if self.name == "dbfs-sqlite":
                # Request counters (and time in SQLite) of each mount, read back after the unmount.
                self.stats = os.path.join(self.dir, "dbfs-stats.json")
                if os.path.exists(self.stats):
                    os.unlink(self.stats)
                sh([self.bins.dbfs, "mount", "-o", f"stats={self.stats}", self.db, self.mnt])
        return self.mnt

    def umount(self):
        if self.name in ("ext4", "xfs"):
            sh_umount(["umount", self.mnt])
            util.detach_loops(self.image)
        elif self.name == "ext4lazy":
            sh_umount([self.bins.ext4lazy, "umount", self.mnt])
        else:
            if self.name == "dbfs-sqlite":
                sh_umount([self.bins.dbfs, "umount", self.mnt])
            sh_umount(["umount", self.host])
            util.detach_loops(self.image)

    def cleanup(self):
        for m in (self.mnt, self.host):
            util.force_unmount(m)
        util.detach_loops(self.image)


def populate(sys_, sizes, layout, bins):
    t0 = time.time()
    sys_.make()
    sys_.mount()
    try:
        for n in sizes:
            sh([bins.arc_cd, "gen", "--jobs", str(n), "--layout", layout, "--threads", "2",
                os.path.join(sys_.mnt, f"cd-{n}")], timeout=7200)
    finally:
        sys_.umount()
    log(f"{sys_.name}: generated {'+'.join(map(str, sizes))} jobs ({layout}) in {time.time() - t0:.0f} s")
    return time.time() - t0


def scan(sys_, n, layout, bins):
    load = os.getloadavg()[0]
    sys_.mount()
    try:
        if sys_.name == "dbfs-sqlite-direct":
            out = sh([bins.arc_cd, "scan", "--drop-caches", "--layout", layout, "--sqlite", sys_.db, "--base", f"cd-{n}"])
        else:
            out = sh([bins.arc_cd, "scan", "--drop-caches", "--layout", layout, os.path.join(sys_.mnt, f"cd-{n}")])
    finally:
        sys_.umount()
    rec = json.loads(out)
    rec["loadavg_1m"] = load
    if sys_.name == "dbfs-sqlite":
        with open(sys_.stats) as f:
            reqs = json.load(f)["requests"]
        rec["fuse_requests"] = reqs
        rec["fuse_requests_per_job"] = sum(v["count"] for v in reqs.values()) / max(rec["jobs"], 1)
        rec["sqlite_s"] = sum(v["db_s"] for v in reqs.values())
    return rec


def commit_id():
    p = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def table(results, sizes, systems, layout):
    lines = [f"# ARC control-directory scan, layout {layout}, cold cache, file device\n",
             f"Commit {commit_id()}, {platform.node()}, {time.strftime('%Y-%m-%d %H:%M')}. Jobs/s of a GMJobsInfo "
             "collect() scan: best / median of the runs (all runs in the JSON). Load average (1 min) at each run's "
             "start in brackets.\n",
             "| system | " + " | ".join(f"{n} jobs (jobs/s)" for n in sizes) + " |",
             "|---|" + "---|" * len(sizes)]
    for s in systems:
        cells = []
        for n in sizes:
            rs = [r for r in results if r["system"] == s and r["jobs_expected"] == n]
            if not rs:
                cells.append("-")
                continue
            v = sorted(r["jobs_per_s"] for r in rs)
            loads = ", ".join(f"{r['loadavg_1m']:.1f}" for r in rs)
            cells.append(f"{v[-1]:,.0f} / {v[len(v) // 2]:,.0f} [{loads}]")
        lines.append(f"| {LABEL.get(s, s)} | " + " | ".join(cells) + " |")
    base = {n: max((r["jobs_per_s"] for r in results if r["system"] == "dbfs-sqlite" and r["jobs_expected"] == n), default=0)
            for n in sizes}
    if all(base.values()):
        lines.append("\nRatio to dbfs-sqlite (FUSE), best runs:\n")
        lines.append("| system | " + " | ".join(f"{n}" for n in sizes) + " |")
        lines.append("|---|" + "---|" * len(sizes))
        for s in systems:
            cells = []
            for n in sizes:
                rs = [r["jobs_per_s"] for r in results if r["system"] == s and r["jobs_expected"] == n]
                cells.append(f"{max(rs) / base[n]:.2f}x" if rs else "-")
            lines.append(f"| {LABEL.get(s, s)} | " + " | ".join(cells) + " |")
    dbfs = [r for r in results if r["system"] == "dbfs-sqlite"]
    if dbfs:
        lines.append("\ndbfs-sqlite through FUSE, where the time goes (mean over its runs):\n")
        lines.append("| jobs | FUSE requests per job | time in SQLite / scan time |")
        lines.append("|---|---|---|")
        for n in sizes:
            rs = [r for r in dbfs if r["jobs_expected"] == n]
            if rs:
                per_job = sum(r["fuse_requests_per_job"] for r in rs) / len(rs)
                share = sum(r["sqlite_s"] / r["elapsed_s"] for r in rs) / len(rs)
                lines.append(f"| {n} | {per_job:.1f} | {share:.0%} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", default="5000,20000")
    ap.add_argument("--layout", default="flat", choices=("flat", "arc6", "arc7"))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--image-gb", type=int, default=0,
                    help="image size (default: 64 KiB per job of all sizes, plus 2 GiB, at least 8 GiB)")
    ap.add_argument("--workdir", default="/var/tmp/arc-bench")
    ap.add_argument("--ext4lazy-bin")
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    bins = Bins(args)
    sizes = [int(x) for x in args.jobs.split(",")]
    systems = args.systems.split(",")
    for s in systems:
        if s not in SYSTEMS:
            sys.exit(f"unknown system {s}; known: {', '.join(SYSTEMS)}")
    if "dbfs-sqlite-direct" in systems and "dbfs-sqlite" not in systems:
        sys.exit("dbfs-sqlite-direct reads the database dbfs-sqlite makes: list both")
    out = args.out or os.path.join(HERE, "results", f"arc-{args.layout}-{commit_id()}")
    os.makedirs(args.workdir, exist_ok=True)
    total_jobs = sum(sizes)
    image_gb = args.image_gb or max(8, (total_jobs * 64 * 1024 >> 30) + 2)
    inodes = total_jobs * 12 + 4096       # 11 files per job, the jobs/ directories of arc7, margin
    objs = {s: System(s, args.workdir, bins, image_gb, inodes) for s in systems}
    results, setup = [], {}
    try:
        for s in systems:
            if s == "dbfs-sqlite-direct" and "dbfs-sqlite" in systems:
                continue                    # shares dbfs-sqlite's database
            setup[s] = populate(objs[s], sizes, args.layout, bins)
        for run in range(1, args.runs + 1):
            for n in sizes:
                for s in systems:
                    rec = scan(objs[s], n, args.layout, bins)
                    if rec["jobs"] != n or rec["skipped"]:
                        raise RuntimeError(f"{s}: scanned {rec['jobs']} of {n} jobs ({rec['skipped']} skipped)")
                    rec.update({"suite": "arc", "system": s, "jobs_expected": n, "run": run})
                    results.append(rec)
                    log(f"run {run} {s} {n} jobs: {rec['jobs_per_s']:.0f} jobs/s ({rec['elapsed_s']:.1f} s, load {rec['loadavg_1m']:.1f})")
    finally:
        for o in objs.values():
            o.cleanup()
            if os.path.exists(o.image):
                os.unlink(o.image)
    meta = {"setup_s": setup, "layout": args.layout, "sizes": sizes, "runs": args.runs, "commit": commit_id(),
            "kernel": platform.release(), "cpus": os.cpu_count()}
    benchlib.save(out, table(results, sizes, systems, args.layout), {"meta": meta, "runs": results}, log)


if __name__ == "__main__":
    main()
