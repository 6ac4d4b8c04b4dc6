"""What a suite is made of.

A *workload* is one timed phase with one of the paper's names (MakeDirs, ListDirs, ..., Postmark).  A *group* is
a list of workloads that run in order on one fresh volume per system (ListDirs lists what MakeDirs made).  A
*suite* builds its groups for a scale factor and carries the paper's figures for the report.
"""
import math
import subprocess

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


class WorkloadError(Exception):
    pass


class Ctx:
    """What a running workload may use: the worker pool, its size, a timeout, a logger, progress."""

    def __init__(self, pool, workers, timeout, log, progress=None, system=None):
        self.pool, self.workers, self.timeout, self.log = pool, workers, timeout, log
        self.progress = progress or (lambda frac, what="": None)
        self.system = system        # the systems.System under test (a workload may read it another way)


class Workload:
    name = "?"
    writes = True       # False: a traversal that starts from a cold cache and writes (nearly) nothing
    cost = 1.0          # relative cost for the ETA before anything has run
    # "total": runtime = workload + syncfs + unmount (the default: everything on the medium); "work": the
    # workload alone (the journal-size experiment measures how fast the files are made, as the paper's Fig 6)
    timing = "total"
    # False: a setup phase (e.g. making the tree the traversals walk): run on every system, never recorded
    recorded = True

    def params(self):
        """The shape, for the record (JSON)."""
        return {}

    def prepare(self, work):
        """Before the phase's cold cache and mount, untimed: make inputs outside the volume under `work`."""

    def run(self, root, ctx):
        """Do the work under mount point `root`; return extra figures for the record (or None)."""
        raise NotImplementedError

    def complete(self, rec):
        """Add the suite's own top-level fields to the finished record (after the unmount; the arc suite's
        jobs, layout, jobs_per_s)."""


class Group:
    def __init__(self, name, workloads, data_bytes, inodes, journal_mib=None, ext4lazy_options=(),
                 stock_journal_mib=None):
        """data_bytes: what the group stores at most (blocks of files and directories); inodes: at most in use;
        journal_mib: the large journal's size, when the suite sizes it (default: the paper's 10 GiB x scale);
        ext4lazy_options: mount options ext4lazy systems get on this group's volumes (the arc suite's cache_mb);
        stock_journal_mib: the stock systems' journal instead of mkfs's default (journal-size: the paper's)."""
        self.name, self.workloads, self.data_bytes, self.inodes = name, workloads, data_bytes, inodes
        self.journal_mib, self.stock_journal_mib = journal_mib, stock_journal_mib
        self.ext4lazy_options = list(ext4lazy_options)


class Suite:
    """A suite module defines SUITE = Suite(...)."""

    def __init__(self, name, doc, build, default_systems, paper=None, min_size=2 * GiB, partitions=None,
                 report=None, configure=None):
        self.name, self.doc, self.build, self.default_systems = name, doc, build, default_systems
        # configure(args, binary): takes the suite's own options of `bench run` (the arc suite's --jobs and
        # --layout) before build(); raises ValueError when they are wrong.  None: the suite has none.
        self.configure = configure
        # report(records_by_(system, workload), systems, workloads, device, scale) -> Markdown lines of the
        # suite's own section (after the runtime table); None: the generic report only
        self.report = report
        self.paper = paper or {}       # {"notes": [...], "goals": [...], ...}: rendered by the report
        self.min_size = min_size
        # device -> partition bytes, or "drive" for the whole modelled drive: the paper's partitions, so that
        # seek distances are the paper's; devices not listed (and `file`) get a size from the workload
        self.partitions = {"cmr": "drive", "smr-seagate": 2000 * 10**9, "smr-wd": "drive"} \
            if partitions is None else partitions


def shell(cmd, cwd, timeout):
    """Run a shell pipeline; fail with its stderr."""
    p = subprocess.run(["sh", "-c", cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout, errors="replace")
    if p.returncode != 0:
        raise WorkloadError(f"`{cmd}` failed rc={p.returncode}: {p.stderr.strip()[-400:]}")


def scaled(n, scale, least=1):
    return max(least, int(round(n * scale)))


def ceil_div(a, b):
    return -(-a // b)


def log2ceil(n):
    return max(1, math.ceil(math.log2(max(2, n))))
