"""CompileMix: a stand-in for building a kernel source tree (FAST'17 section 4.2.2, Figures 3 and 10).

The paper compiled Linux 4.6 with all its modules (`make -j16`) on ext4-baseline: 12 GiB of data writes, 185 MiB
of journal writes, 98 MiB of metadata writes (0.77% of the writes), and found the build CPU-bound, so ext4-lazy
did not speed it up.  It gives the workload no name; we call ours CompileMix.  No compiler runs: the file system
sees what kbuild makes it see, from a deterministic plan (seeded sizes), so every system does the same I/O.

The source tree (made in an unrecorded setup phase, as an untar before the build): `SOURCES` .c files round-robin
over `DIRS` directories (breadth-first, at most `WIDTH` subdirectories each), `LOCAL_HEADERS` .h files beside
them and `SHARED_HEADERS` in include/ (64 subdirectories); sizes log-normal (median 9 KiB for .c, 3 KiB for .h).
The build, on a cold cache, 8 worker processes (make -j8), in kbuild's order:
1. compile, one job per .c (worker k takes sources k, k+8, ...: the jobs run in the same directory at once, as
   make's): read the .c, its directory's headers and `INCLUDES` of include/'s; write the object as
   `.tmp_NAME.o` (`OBJ_FACTOR` x the source size with debug information, log-normal spread), the dependency list
   `.NAME.o.d`, read it back (fixdep), write `.NAME.o.cmd`, delete the `.d`, rename `.tmp_NAME.o` to `NAME.o`;
2. modules (`MODULE_SHARE` of the objects, allmodconfig): write `NAME.mod.c`, `NAME.mod.o`, read both objects,
   write `NAME.ko` (their sum);
3. `built-in.o` of every directory, deepest first (`ld -r` of its built-in objects and its subdirectories'
   `built-in.o`: read them, write their sum: Linux 4.6 still linked real objects, not thin archives);
4. the final link, one process: read the top directories' `built-in.o`, write `vmlinux` (their sum) and
   `System.map`.
The runner then syncs and unmounts.  At scale 1 the plan writes ~12 GiB (the paper's figure); `--scale` multiplies
the counts, the sizes stay.
"""
import math
import os
import random

from . import shapes
from .core import KiB, MiB, Workload, scaled

# the tree at scale 1
SOURCES, DIRS, WIDTH = 20_000, 2_000, 8
LOCAL_HEADERS, SHARED_HEADERS, SHARED_DIRS = 8_000, 8_000, 64
INCLUDES = 40                         # include/ headers read by each compile (the page cache serves repeats)
SRC_MEDIAN, HDR_MEDIAN, SIGMA = 9 * KiB, 3 * KiB, 1.0
SRC_MAX, HDR_MAX = 512 * KiB, 256 * KiB
OBJ_FACTOR, OBJ_SIGMA = 13.0, 0.3     # object bytes per source byte (debug info): ~12 GiB written at scale 1
MODULE_SHARE = 0.75                   # every 4th object is built in, the others go into modules
DEP_BYTES = 1 * KiB + 64 * INCLUDES   # .d and .cmd: a header line and one line per included file
MOD_C, MOD_O = 1536, 24 * KiB         # modpost's NAME.mod.c and its object
ELF_OVERHEAD = 512                    # what `ld -r` adds to the sum of its inputs
MAP_BYTES_PER_OBJECT = 1 * KiB        # System.map: ~25 symbols of ~40 bytes per built-in object
CHUNK = 64 * KiB                      # write size (as/ld write through stdio: the page cache merges anyway)
SEED = 4_6                            # Linux 4.6

_PATTERN = random.Random(SEED).randbytes(MiB + CHUNK)


def lognormal_sizes(rnd, n, median, sigma, cap):
    mu = math.log(median)
    return [min(cap, max(64, int(rnd.lognormvariate(mu, sigma)))) for _ in range(n)]


class Plan:
    """Every file of the tree and of the build, with its size, at one scale (deterministic)."""

    def __init__(self, scale):
        self.sources = scaled(SOURCES, scale, least=8)
        self.ndirs = scaled(DIRS, scale, least=2)
        self.nlocal = scaled(LOCAL_HEADERS, scale, least=2)
        self.nshared = scaled(SHARED_HEADERS, scale, least=2)
        self.shared_dirs = min(SHARED_DIRS, self.nshared)
        rnd = random.Random(SEED)
        self.dirs = [f"linux/{d}" for d in shapes.bfs_tree(self.ndirs, WIDTH)]
        src_sizes = lognormal_sizes(rnd, self.sources, SRC_MEDIAN, SIGMA, SRC_MAX)
        local_sizes = lognormal_sizes(rnd, self.nlocal, HDR_MEDIAN, SIGMA, HDR_MAX)
        shared_sizes = lognormal_sizes(rnd, self.nshared, HDR_MEDIAN, SIGMA, HDR_MAX)
        # files the setup phase writes: (relative path, size)
        self.local = [(f"{self.dirs[j % self.ndirs]}/h{j}.h", s) for j, s in enumerate(local_sizes)]
        self.shared = [(f"linux/include/g{k % self.shared_dirs}/h{k}.h", s) for k, s in enumerate(shared_sizes)]
        self.local_of = {}
        for j, (path, _) in enumerate(self.local):
            self.local_of.setdefault(self.dirs[j % self.ndirs], []).append(path)
        # compile jobs: (directory, stem, source size, object size, include indices, module?)
        self.jobs = []
        for i, size in enumerate(src_sizes):
            obj = max(4 * KiB, int(size * OBJ_FACTOR * rnd.lognormvariate(-OBJ_SIGMA ** 2 / 2, OBJ_SIGMA)))
            includes = rnd.sample(range(self.nshared), min(INCLUDES, self.nshared))
            self.jobs.append((self.dirs[i % self.ndirs], f"f{i}", size, obj, includes, i % 4 != 0))
        self.builtin_size = self._builtin_sizes()

    def _builtin_sizes(self):
        """built-in.o size per directory: its built-in objects plus its subdirectories' built-in.o."""
        own = {d: 0 for d in self.dirs}
        for d, _, _, obj, _, module in self.jobs:
            if not module:
                own[d] += obj
        size = {}
        for d in sorted(self.dirs, key=lambda p: -p.count("/")):
            size[d] = own[d] + sum(size[c] for c in self.children(d)) + ELF_OVERHEAD
        return size

    def children(self, d):
        if not hasattr(self, "_children"):
            self._children = {}
            for p in self.dirs:
                self._children.setdefault(os.path.dirname(p), []).append(p)
        return self._children.get(d, [])

    def top_dirs(self):
        return self.children("linux")

    def levels(self):
        """Directories grouped by depth, deepest first (the order built-in.o files can be linked in)."""
        by = {}
        for d in self.dirs:
            by.setdefault(d.count("/"), []).append(d)
        return [by[k] for k in sorted(by, reverse=True)]

    def source_files(self):
        return [(f"{d}/{stem}.c", size) for d, stem, size, _, _, _ in self.jobs] + self.local + self.shared

    def totals(self):
        """Bytes and files the build leaves behind (what syncfs must write), and the temporaries."""
        objs = sum(j[3] for j in self.jobs)
        mods = [j for j in self.jobs if j[5]]
        kos = sum(j[3] + MOD_O for j in mods)
        builtin = sum(self.builtin_size.values())
        vmlinux = sum(self.builtin_size[d] for d in self.top_dirs())
        builtins = sum(1 for j in self.jobs if not j[5])
        final = (objs + len(self.jobs) * DEP_BYTES + len(mods) * (MOD_C + MOD_O) + kos + builtin + vmlinux
                 + builtins * MAP_BYTES_PER_OBJECT)
        return {"source_bytes": sum(s for _, s in self.source_files()), "source_files": len(self.source_files()),
                "objects": len(self.jobs), "modules": len(mods), "builtin_dirs": len(self.dirs),
                "output_bytes": final, "vmlinux_bytes": vmlinux, "temporary_files": len(self.jobs),
                "temporary_bytes": len(self.jobs) * DEP_BYTES,
                "output_files": len(self.jobs) * 2 + len(mods) * 3 + len(self.dirs) + 2}


def write_file(path, size, salt=0):
    """Create `path` with `size` bytes written CHUNK at a time (content: a slice of a fixed random pattern)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        off, start = 0, salt % MiB
        while off < size:
            n = min(CHUNK, size - off)
            os.write(fd, _PATTERN[start:start + n])
            off += n
            start = (start + n) % MiB
    finally:
        os.close(fd)
    return size


def read_file(path):
    n = 0
    with open(path, "rb", buffering=0) as f:
        while b := f.read(CHUNK * 4):
            n += len(b)
    return n


def write_sources(args):
    """Setup worker: the files `files` [(relative path, size)] under root."""
    root, files = args
    for k, (rel, size) in enumerate(files):
        write_file(os.path.join(root, rel), size, salt=k * 4099)
    return len(files)


def compile_jobs(args):
    """Worker: stage 1 for its share of the jobs.  Returns its counts."""
    root, jobs, shared, local_of = args
    c = dict(read=0, written=0, temporaries=0, deleted=0, renamed=0)
    for d, stem, _, obj, includes, _ in jobs:
        base = os.path.join(root, d)
        c["read"] += read_file(os.path.join(base, stem + ".c"))
        for h in local_of.get(d, ()):
            c["read"] += read_file(os.path.join(root, h))
        for k in includes:
            c["read"] += read_file(os.path.join(root, shared[k][0]))
        tmp = os.path.join(base, f".tmp_{stem}.o")
        c["written"] += write_file(tmp, obj, salt=obj)
        dep = os.path.join(base, f".{stem}.o.d")
        write_file(dep, DEP_BYTES, salt=7)
        c["temporaries"] += 1
        c["read"] += read_file(dep)                   # fixdep turns the .d into the .cmd
        c["written"] += write_file(os.path.join(base, f".{stem}.o.cmd"), DEP_BYTES, salt=11)
        os.unlink(dep)
        c["deleted"] += 1
        os.rename(tmp, os.path.join(base, stem + ".o"))
        c["renamed"] += 1
    return c


def link_modules(args):
    """Worker: stage 2 (modpost and the .ko link) for its share of the module objects."""
    root, jobs = args
    c = dict(read=0, written=0)
    for d, stem, _, obj, _, _ in jobs:
        base = os.path.join(root, d, stem)
        c["written"] += write_file(base + ".mod.c", MOD_C, salt=3)
        c["read"] += read_file(base + ".mod.c")
        c["written"] += write_file(base + ".mod.o", MOD_O, salt=5)
        c["read"] += read_file(base + ".o") + read_file(base + ".mod.o")
        c["written"] += write_file(base + ".ko", obj + MOD_O, salt=obj)
    return c


def link_builtins(args):
    """Worker: stage 3 for some directories of one depth: read the inputs, write built-in.o."""
    root, items = args
    c = dict(read=0, written=0)
    for d, inputs, size in items:
        for rel in inputs:
            c["read"] += read_file(os.path.join(root, rel))
        c["written"] += write_file(os.path.join(root, d, "built-in.o"), size, salt=size)
    return c


def merge(total, part):
    for k, v in part.items():
        total[k] = total.get(k, 0) + v
    return total


def spread(pool, fn, parts, timeout):
    if pool is None:
        return [fn(p) for p in parts]
    return pool.map_async(fn, parts, chunksize=1).get(timeout)


class MakeSources(Workload):
    """Setup: the source tree (the untar before a build), made by the workers; never recorded."""
    name, recorded, cost = "MakeSources", False, 1.0

    def __init__(self, plan):
        self.plan = plan

    def params(self):
        return self.plan.totals()

    def run(self, root, ctx):
        p = self.plan
        for d in p.dirs + [f"linux/include/g{k}" for k in range(p.shared_dirs)]:
            os.makedirs(os.path.join(root, d), exist_ok=True)
        files = p.source_files()
        n = max(1, ctx.workers)
        spread(ctx.pool, write_sources, [(root, files[k::n]) for k in range(n)], ctx.timeout)


class CompileMix(Workload):
    """The build of the tree MakeSources made (see the module's doc)."""
    name, cost = "CompileMix", 3.0

    def __init__(self, plan):
        self.plan = plan

    def params(self):
        return {**self.plan.totals(), "sources": self.plan.sources, "dirs": self.plan.ndirs, "width": WIDTH,
                "includes_per_compile": INCLUDES, "obj_factor": OBJ_FACTOR, "module_share": MODULE_SHARE,
                "stages": ["compile (kbuild: .tmp_ object, .d read and deleted, .cmd, rename)",
                           "modules (.mod.c, .mod.o, .ko)", "built-in.o deepest first", "vmlinux + System.map"]}

    def run(self, root, ctx):
        p, n = self.plan, max(1, ctx.workers)
        counts = {}
        shared = p.shared
        parts = [(root, p.jobs[k::n], shared, p.local_of) for k in range(n)]
        for c in spread(ctx.pool, compile_jobs, parts, ctx.timeout):
            merge(counts, c)
        ctx.progress(0.5, "modules")
        mods = [j for j in p.jobs if j[5]]
        for c in spread(ctx.pool, link_modules, [(root, mods[k::n]) for k in range(n)], ctx.timeout):
            merge(counts, c)
        ctx.progress(0.7, "built-in.o")
        builtin_of = {}
        for d, stem, _, _, _, module in p.jobs:
            if not module:
                builtin_of.setdefault(d, []).append(f"{d}/{stem}.o")
        for level in p.levels():
            items = [(d, builtin_of.get(d, []) + [f"{c}/built-in.o" for c in p.children(d)], p.builtin_size[d])
                     for d in level]
            for c in spread(ctx.pool, link_builtins, [(root, items[k::n]) for k in range(n)], ctx.timeout):
                merge(counts, c)
        ctx.progress(0.9, "vmlinux")
        for d in p.top_dirs():
            counts["read"] += read_file(os.path.join(root, d, "built-in.o"))
        vmlinux = write_file(os.path.join(root, "linux", "vmlinux"), sum(p.builtin_size[d] for d in p.top_dirs()),
                             salt=13)
        builtins = sum(1 for j in p.jobs if not j[5])
        counts["written"] += vmlinux + write_file(os.path.join(root, "linux", "System.map"),
                                                  builtins * MAP_BYTES_PER_OBJECT, salt=17)
        return {"compile": {"bytes_read": counts["read"], "bytes_written": counts["written"],
                            "temporaries_created": counts["temporaries"], "temporaries_deleted": counts["deleted"],
                            "renamed": counts["renamed"], "vmlinux_bytes": vmlinux}}
