"""arc: ARC's control directory, millions of small files in one directory (issue #8; the thesis's Figures 4.1-4.4).

One group per control-directory size (--jobs N[,N...]; default the thesis's 5K, 10K, 20K, 40K, 80K and 160K jobs
x --scale), each on a fresh volume per system, in --layout flat (the thesis's; default), arc6 or arc7:
Generate = `arc-cd gen` (N jobs of 11 files, 2 writer threads; timed with syncfs and unmount, as the other
creates) and Scan = `arc-cd scan` (ARC's GMJobsInfo collect(), single-threaded, after drop_caches on a fresh
mount; timed alone).  Every record also has `jobs`, `layout`, `jobs_per_s` (Scan: the scanner's own clock, from
the listing to the last job; Generate: jobs / runtime) and `per_second` (Scan: jobs finished in each second).  A
scan that does not find every job with the manifest's states and digest fails its record.
dbfs-sqlite-direct: the same scan of dbfs-sqlite's database through SQLite alone (no FUSE).
"""
import fcntl
import json
import os
import struct
import subprocess

from ..core import GiB, KiB, MiB, Group, Suite, Workload, WorkloadError, scaled
from ..devices import dbfs_db
from ..report_arc import section

SIZES = (5_000, 10_000, 20_000, 40_000, 80_000, 160_000)     # the thesis's control directories (jobs)
LAYOUTS = ("flat", "arc6", "arc7")
WRITERS = 2                     # arc-cd gen threads (2 cores here)
CD = "cd"                       # the control directory under the mount point
# Options of `bench run` (configure): sizes, layout, the arc-cd binary
OPTIONS = {"jobs": None, "layout": "flat", "arc_cd": None}

FS_IOC_GETFLAGS = 0x80086601    # _IOR('f', 1, long)
INLINE_DATA_FL = 0x10000000


def parse_jobs(text):
    """"5000,20K" -> [5000, 20000] (sorted, no repeats); ValueError on anything else."""
    out = set()
    for part in text.split(","):
        p = part.strip().lower()
        mult = 1000 if p.endswith("k") else 1
        try:
            n = int(p[:-1] if mult > 1 else p) * mult
        except ValueError:
            raise ValueError(f"--jobs: {part!r} is not a number of jobs") from None
        if n <= 0:
            raise ValueError(f"--jobs: {part!r} must be positive")
        out.add(n)
    if not out:
        raise ValueError("--jobs: no sizes")
    return sorted(out)


def configure(args, binary):
    OPTIONS["jobs"] = parse_jobs(args.jobs) if args.jobs else None
    OPTIONS["layout"] = args.layout or "flat"
    arc_cd = os.environ.get("ARC_CD_BIN") or os.path.join(os.path.dirname(binary), "arc-cd")
    if not os.access(arc_cd, os.X_OK):
        raise ValueError(f"{arc_cd} is missing (cargo build --release --workspace, or set ARC_CD_BIN)")
    OPTIONS["arc_cd"] = arc_cd


def arc_cd(*args, timeout):
    cmd = [OPTIONS["arc_cd"] or "arc-cd", *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise WorkloadError(f"`{' '.join(cmd)}` failed rc={p.returncode}: {p.stderr.strip()[-600:]}")
    return json.loads(p.stdout)


def inode_flags(path):
    """FS_IOC_GETFLAGS of a file (None where the file system has no such ioctl)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8)[:4])[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def first_files(top):
    """Regular files under `top`, depth first, listing lazily (a walk that stops early reads little of a
    directory of a million names)."""
    with os.scandir(top) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                yield from first_files(e.path)
            elif e.is_file(follow_symlinks=False):
                yield e.path


def inline_sample(cd, per_kind=5, walk=1000):
    """Which files of each kind (file name's last part -> [files, inline, bytes]) are inline, from up to
    `per_kind` files of each kind among the first `walk` files met in a walk of the control directory:
    whether small files really went into their inodes. Per kind, because a walk meets names in hash order,
    which differs with every mkfs. None where the file system has no FS_IOC_GETFLAGS."""
    by = {}
    for i, path in enumerate(first_files(cd)):
        if i >= walk:
            break
        e = by.setdefault(os.path.basename(path).rsplit(".", 1)[-1], [0, 0, 0])
        if e[0] >= per_kind:
            continue
        flags = inode_flags(path)
        if flags is None:
            return None
        e[0] += 1
        e[1] += 1 if flags & INLINE_DATA_FL else 0
        e[2] += os.path.getsize(path)
    return by


class ArcWorkload(Workload):
    def __init__(self, kind, jobs, layout):
        self.kind, self.jobs, self.layout = kind, jobs, layout
        self.name = f"{kind}-{jobs}-{layout}"

    def params(self):
        return {"jobs": self.jobs, "layout": self.layout, "files": self.jobs * 11, "control_directory": CD}


class Generate(ArcWorkload):
    writes = True

    def __init__(self, jobs, layout):
        super().__init__("Generate", jobs, layout)
        self.cost = 2.0 * jobs / 5000

    def params(self):
        return {**super().params(), "writers": WRITERS}

    def run(self, root, ctx):
        m = arc_cd("gen", "--jobs", self.jobs, "--layout", self.layout, "--threads", WRITERS,
                   os.path.join(root, CD), timeout=ctx.timeout)
        if m.get("jobs") != self.jobs:
            raise WorkloadError(f"arc-cd gen wrote {m.get('jobs')} jobs, not {self.jobs}")
        return {"manifest": {k: m.get(k) for k in ("files", "bytes", "digest", "states")},
                "inline_sample": inline_sample(os.path.join(root, CD))}

    def complete(self, rec):
        rec.update(jobs=self.jobs, layout=self.layout, per_second=None,
                   jobs_per_s=round(self.jobs / rec["runtime_s"], 2) if rec["runtime_s"] > 0 else None)


class Scan(ArcWorkload):
    writes = False
    timing = "work"

    def __init__(self, jobs, layout):
        super().__init__("Scan", jobs, layout)
        self.cost = 1.0 * jobs / 5000
        self.expect = None

    def prepare(self, work):
        if self.expect is None:             # what a complete scan must find (the generator's manifest)
            self.expect = arc_cd("manifest", "--jobs", self.jobs, "--layout", self.layout, timeout=600)

    def run(self, root, ctx):
        if ctx.system is not None and ctx.system.direct:
            r = arc_cd("scan", "--layout", self.layout, "--sqlite", dbfs_db(root), "--base", CD, timeout=ctx.timeout)
        else:
            r = arc_cd("scan", "--layout", self.layout, os.path.join(root, CD), timeout=ctx.timeout)
        e = self.expect
        if (r["jobs"], r["skipped"]) != (self.jobs, 0) or r["digest"] != e["digest"] or r["states"] != e["states"]:
            raise WorkloadError(f"scan found {r['jobs']} jobs ({r['skipped']} skipped, digest {r['digest']}, "
                                f"states {r['states']}); the manifest: {self.jobs} jobs, digest {e['digest']}, "
                                f"states {e['states']}")
        per_second = r.pop("per_second")
        return {"scan": r, "per_second": per_second}

    def complete(self, rec):
        extra = rec["extra"]
        t = rec.get("work_s_at_drive_speed")         # a run faster than the drive, brought back (modeltime.py)
        rec.update(jobs=self.jobs, layout=self.layout, jobs_per_s=extra["scan"]["jobs_per_s"],
                   per_second=extra.pop("per_second"), jobs_per_s_at_drive_speed=round(self.jobs / t, 2) if t else None)


def sizes(scale):
    return OPTIONS["jobs"] or sorted({scaled(n, scale, least=10) for n in SIZES})


def journal_mib(inodes):
    """The paper's 10 GiB large journal (ext4-lazy's), at most a quarter of the partition (runner.Plan).  A lazy
    journal must hold more than the live metadata: generating logs each inode block ~2.3 times, and the first
    scan logs every inode again (relatime).  Sized at twice the metadata (2 KiB an inode), 20,000 jobs in a
    1 GiB journal made the cleaner move 53,760 blocks during the scan on cmr and jobs/s fell to 0.78x the
    5,000-job figure."""
    del inodes                          # the size no longer depends on the group (kept for the call)
    return 10 * 1024


def cache_mb(inodes):
    """ext4lazy's metadata cache for a group: every inode at 2 KiB (the inline variant's) and half as much
    again for directory blocks and log stretches, 256 MiB at least: set per group, so that a record does not
    depend on the machine's memory as the default (an eighth of it) does.  The kernel's file systems cache inode
    tables in the page cache, bounded by RAM only; with a fixed 256 MiB, 20,000 jobs in 2 KiB inodes (440 MiB)
    thrashed: a cold scan on `file` read 10.6 GB from the log for 0.44 GB of inodes."""
    return int(max(256, inodes * 3 * KiB // MiB + 64))


def build(scale):
    layout = OPTIONS["layout"]
    groups = []
    for n in sizes(scale):
        inodes = 13 * n + 64            # 11 files a job, arc7's per-job directories, the tree above them
        groups.append(Group(f"jobs-{n}", [Generate(n, layout), Scan(n, layout)],
                            data_bytes=n * 48 * KiB + 64 * MiB, inodes=inodes, journal_mib=journal_mib(inodes),
                            ext4lazy_options=[f"cache_mb={cache_mb(inodes)}"]))
    return groups


PAPER = {
    # the thesis (REFERENCE.md section 1): Figure 4.1 (HDD), 4.2 (SSD); 4.3/4.4 the per-second series
    "thesis": "HDD: XFS best at every size; DBFS ~80 jobs/s and steady; ext4 degrades as the directory grows. "
              "SSD: ext4 ~ XFS; DBFS unchanged. XFS 4-5x DBFS up to 160K jobs.",
    "arc_goals": "ext4lazy >= kernel XFS at every size on the HDD model (cmr); no slowdown as the directory grows; "
                 ">= 4x dbfs-sqlite (issue #8).",
}

SUITE = Suite("arc", __doc__, build,
              ["kernel-ext4-stock", "kernel-xfs", "dbfs-sqlite", "dbfs-sqlite-direct", "ext4lazy-ordered",
               "ext4lazy-lazy", "ext4lazy-lazy-inline", "kernel-ext4-inline"], PAPER, min_size=2 * GiB,
              report=section, configure=configure)
