"""I/O by class for one phase, and throughput over time.

Where each number comes from (docs/BENCH.md has the full story):
- ext4lazy on `file`: its own counters (`-o stats=FILE`, "io"): every request the engine makes, tagged with
  the class it knows (journal / metadata / data), counted above the device.
- ext4lazy on a model (through the served model and a loop device, as the kernel's file systems): its own
  counters, because its O_DIRECT requests carry no REQ_META flag for the server to classify by; the model's
  report gives the drive's time, and the loop device's counters are the check of the totals.
- ext4lazy `-inproc` on a model: the model's report in the same stats file ("device": what the drive served, by
  the class ext4lazy gave each request); its own counters are kept beside as the check (they must be equal).
- kernel file systems and fuse2fs on `file`: the loop device's `block_rq_issue` trace events (tracefs, a private
  instance), classified as the image server does: inside the journal's extents -> journal; else flagged REQ_META
  (`M`) by the kernel or inside the static metadata (superblocks, descriptors, bitmaps, inode tables) ->
  metadata; else data.  Check: the traced bytes against the loop device's own counters (/sys/block/loopN/stat).
- kernel file systems and fuse2fs on a model: the served model's report (`emu report --json`), before and after
  the phase (it classifies with the same layout and REQ_META flags); check: the loop device's counters.
fuse2fs writes through the loop device's page cache, so the kernel never flags its requests: its directory and
extent blocks count as data (the layout alone cannot see them).
"""
import bisect
import json
import os
import random
import re
import threading
import time

from harness import util

TRACEFS = "/sys/kernel/tracing"
CLASSES = ("journal", "metadata", "data")
MiB = 1 << 20
ISSUE = re.compile(r"\s(\d+\.\d+): block_rq_issue: (\d+),(\d+) (\S+) \d+ \(.*?\) (\d+) \+ (\d+)")


def empty_bytes():
    return {c: {"read": 0, "write": 0} for c in CLASSES}


def io_mib(by_class):
    """{class: {read, write}} bytes -> the record's io_mib."""
    out = {}
    for c in CLASSES:
        for d in ("read", "write"):
            out[f"{c}_{d}"] = round(by_class[c][d] / MiB, 3)
    return out


def total_bytes(by_class):
    return {d: sum(by_class[c][d] for c in CLASSES) for d in ("read", "write")}


def loop_stat(dev):
    """(bytes read, bytes written) the loop device completed so far."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        v = f.read().split()
    return int(v[2]) * 512, int(v[6]) * 512


class Ranges:
    def __init__(self, ranges):
        self.r = sorted((int(a), int(b)) for a, b in ranges)
        self.ends = [b for _, b in self.r]

    def overlaps(self, off, length):
        i = bisect.bisect_right(self.ends, off)
        return i < len(self.r) and self.r[i][0] < off + max(1, length)


class Classifier:
    def __init__(self, layout):
        self.journal, self.metadata = Ranges(layout.get("journal", [])), Ranges(layout.get("metadata", []))

    def __call__(self, off, length, meta_flag):
        if self.journal.overlaps(off, length):
            return "journal"
        if meta_flag or self.metadata.overlaps(off, length):
            return "metadata"
        return "data"


class BlockTrace:
    """block_rq_issue events of one block device in a private tracefs instance, drained by a thread."""

    def __init__(self, dev, layout, keep_offsets=20000):
        st = os.stat(dev)
        self.major, self.minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        self.classify = Classifier(layout)
        self.bytes, self.requests, self.discard_bytes = empty_bytes(), 0, 0
        self.offsets, self.keep = [], keep_offsets
        self.seen, self.rnd = 0, random.Random(1)
        if not os.path.isdir(os.path.join(TRACEFS, "instances")):
            os.system(f"mount -t tracefs nodev {TRACEFS} 2>/dev/null")
        self.inst = os.path.join(TRACEFS, "instances", f"e4lbench-{os.getpid()}-{self.minor}")
        if os.path.isdir(self.inst):
            os.rmdir(self.inst)
        os.mkdir(self.inst)
        try:
            self._write("buffer_size_kb", "16384")
            self._write("trace_clock", "mono")
            self._write("events/block/block_rq_issue/filter", f"dev == {(self.major << 20) | self.minor}")
            self._write("events/block/block_rq_issue/enable", "1")
            self.pipe = os.open(os.path.join(self.inst, "trace_pipe"), os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            os.rmdir(self.inst)
            raise
        self.t0, self.partial, self.stop_flag = time.monotonic(), b"", False
        self.thread = threading.Thread(target=self._drain_loop, daemon=True)
        self.thread.start()

    def _write(self, rel, text):
        fd = os.open(os.path.join(self.inst, rel), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)

    def _drain(self):
        got = False
        while True:
            try:
                b = os.read(self.pipe, 1 << 16)
            except BlockingIOError:
                break
            if not b:
                break
            got = True
            data = self.partial + b
            lines = data.split(b"\n")
            self.partial = lines.pop()
            for line in lines:
                self._line(line.decode(errors="replace"))
        return got

    def _line(self, line):
        m = ISSUE.search(line)
        if not m or int(m.group(2)) != self.major or int(m.group(3)) != self.minor:
            return
        ts, rwbs, sector, n = float(m.group(1)), m.group(4), int(m.group(5)), int(m.group(6))
        if n == 0:
            return                          # a flush carries no data
        if "D" in rwbs:
            self.discard_bytes += n * 512
            return
        d = "read" if "R" in rwbs else "write" if "W" in rwbs else None
        if d is None:
            return
        c = self.classify(sector * 512, n * 512, "M" in rwbs)
        self.bytes[c][d] += n * 512
        self.requests += 1
        self.seen += 1
        # a uniform sample of at most `keep` requests for the offsets plot (reservoir sampling)
        item = [round(ts - self.t0, 4), sector * 512, n * 512, c, d[0]]
        if len(self.offsets) < self.keep:
            self.offsets.append(item)
        else:
            j = self.rnd.randrange(self.seen)
            if j < self.keep:
                self.offsets[j] = item

    def _drain_loop(self):
        while not self.stop_flag:
            if not self._drain():
                time.sleep(0.05)

    def stop(self):
        """Stop tracing, read what is left, remove the instance; returns (bytes by class, lost events)."""
        time.sleep(0.1)
        self._write("tracing_on", "0")
        self.stop_flag = True
        self.thread.join()
        self._drain()
        lost = 0
        for cpu in os.listdir(os.path.join(self.inst, "per_cpu")):
            with open(os.path.join(self.inst, "per_cpu", cpu, "stats")) as f:
                lost += sum(int(v) for v in re.findall(r"^(?:overrun|dropped events): (\d+)", f.read(), re.M))
        os.close(self.pipe)
        try:
            self._write("events/block/block_rq_issue/enable", "0")
        except OSError:
            pass
        for _ in range(50):
            try:
                os.rmdir(self.inst)
                break
            except OSError:
                time.sleep(0.1)
        self.offsets.sort()
        return self.bytes, lost


def dirty_bytes():
    """Dirty of /proc/meminfo: page cache waiting for writeback, machine-wide (the paper's Figure 6 (b))."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Dirty:"):
                return int(line.split()[1]) * 1024
    raise ValueError("no Dirty line in /proc/meminfo")


def cpu_jiffies():
    """(busy, total) jiffies of all CPUs from /proc/stat (idle and iowait are not busy)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    total = sum(v[:8])                     # guest time is already inside user and nice
    return total - v[3] - v[4], total


def busy_ms(dev):
    """Milliseconds the block device had a request in flight (io_ticks): its utilisation, as iostat's %util."""
    with open(f"/sys/block/{os.path.basename(dev)}/stat") as f:
        return int(f.read().split()[9])


class Sampler:
    """Series over time, one row every `every` seconds: [t_s, device read MiB/s, device write MiB/s, Dirty MiB,
    CPU busy %, device busy %].  read_totals() -> (bytes read, bytes written); `device`: the block device whose
    busy time is the disk's utilisation (None where the file system has none, the last column is then None).
    The paper's Figures 9 and 12 are the throughput columns, Figure 6 (b) the dirty one, Figure 10 the last two."""
    COLUMNS = ["t_s", "read_mib_s", "write_mib_s", "dirty_mib", "cpu_busy_pct", "device_busy_pct"]

    def __init__(self, read_totals, every=1.0, device=None):
        self.read_totals, self.every, self.device = read_totals, every, device
        self.series, self.stop_flag = [], threading.Event()
        self.t0 = time.monotonic()
        self.last_t = self.t0
        self.last = self._safe()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _read(self):
        return (self.read_totals(), cpu_jiffies(), busy_ms(self.device) if self.device else None)

    def _safe(self):
        try:
            return self._read()
        except (OSError, ValueError, KeyError, IndexError):
            return None

    def _loop(self):
        while not self.stop_flag.wait(self.every):
            self._sample()

    def _sample(self):
        now, cur = time.monotonic(), self._safe()
        if cur is not None and self.last is not None:
            dt = max(1e-6, now - self.last_t)
            (r0, w0), (b0, t0), d0 = self.last
            (r1, w1), (b1, t1), d1 = cur
            try:
                dirty = round(dirty_bytes() / MiB, 1)
            except (OSError, ValueError):
                dirty = None
            cpu = round(100 * (b1 - b0) / (t1 - t0), 1) if t1 > t0 else None
            disk = round(min(100.0, 100 * (d1 - d0) / 1000 / dt), 1) if d0 is not None and d1 is not None else None
            self.series.append([round(now - self.t0, 2), round(max(0, (r1 - r0) / MiB / dt), 3),
                                round(max(0, (w1 - w0) / MiB / dt), 3), dirty, cpu, disk])
        if cur is not None:
            self.last, self.last_t = cur, now

    def stop(self):
        self.stop_flag.set()
        self.thread.join()
        self._sample()
        return self.series


def load_raw(out, rec):
    """A record's raw file (its series and offsets, runner.py writes it under OUT), or None."""
    path = os.path.join(out, (rec or {}).get("raw") or "")
    if not (rec or {}).get("raw") or not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def series_points(raw, name):
    """(t_s, value) of one Sampler column of a raw file's series, the samples without a value left out; [] where
    the file has no such column (raw files written before the utilisation columns hold the first three only)."""
    cols = (raw or {}).get("series_columns") or ["t_s", "read_mib_s", "write_mib_s"]
    if name not in cols:
        return []
    i = cols.index(name)
    return [(p[0], p[i]) for p in raw.get("series") or [] if p[i] is not None]


def ext4lazy_live_totals(path):
    """(bytes read, bytes written) from an ext4lazy daemon's live stats file."""
    def read():
        with open(path) as f:
            io = json.load(f)["io"]
        return (sum(io[c]["read"]["bytes"] for c in CLASSES), sum(io[c]["write"]["bytes"] for c in CLASSES))
    return read


def ext4lazy_classes(stats):
    """Own counters and (on a model) the model's figures from an ext4lazy stats file."""
    own = {c: {d: stats["io"][c][d]["bytes"] for d in ("read", "write")} for c in CLASSES}
    dev = stats.get("device")
    model = None if dev is None else {c: {d: dev["classes"][c][d]["bytes"] for d in ("read", "write")}
                                      for c in CLASSES}
    return own, model


def request_counts(io):
    """Requests by class and direction from ext4lazy's `io` counters (the log's share: `journal` reads)."""
    return {c: {d: io[c][d]["requests"] for d in ("read", "write")} for c in CLASSES}


def request_delta(before, after):
    """Requests by class and direction between two model reports."""
    return {c: {d: after["classes"][c][d]["requests"] - before["classes"][c][d]["requests"]
                for d in ("read", "write")} for c in CLASSES}


def latency_sums(classes):
    """Seconds of request latency (queueing included) by class and direction, from a model report's classes."""
    return {c: {d: classes[c][d]["requests"] * classes[c][d]["mean_latency_s"] for d in ("read", "write")}
            for c in CLASSES}


def model_time(after, before=None):
    """Where a model's time went over a phase: `busy_s` (the drive busy with host requests) and the summed
    latency of the requests by class and direction (what each class cost; overlapping requests count twice)."""
    lat1 = latency_sums(after["classes"])
    lat0 = latency_sums(before["classes"]) if before else None
    return {"busy_s": round(after["busy_s"] - (before["busy_s"] if before else 0.0), 3),
            "latency_s": {c: {d: round(lat1[c][d] - (lat0[c][d] if lat0 else 0.0), 3) for d in ("read", "write")}
                          for c in CLASSES}}


def report_delta(before, after):
    """Bytes by class between two model reports."""
    out = empty_bytes()
    for c in CLASSES:
        for d in ("read", "write"):
            out[c][d] = after["classes"][c][d]["bytes"] - before["classes"][c][d]["bytes"]
    return out


def model_trace_offsets(csv_path, t_from, t_to, keep=20000):
    """Requests of a model trace (CSV: arrival_s,start_s,end_s,op,offset,len,class,latency_s) arriving in
    [t_from, t_to) model seconds, sampled down to `keep`, as [t - t_from, offset, len, class, op]."""
    rows = []
    if not csv_path or not os.path.exists(csv_path):
        return rows
    with open(csv_path) as f:
        for line in f:
            p = line.rstrip("\n").split(",")
            if len(p) < 7 or not p[0][:1].isdigit():
                continue
            t = float(p[0])
            if t_from <= t < t_to and p[3] in ("read", "write"):
                rows.append([round(t - t_from, 4), int(p[4]), int(p[5]), p[6], p[3][0]])
    step = max(1, len(rows) // keep)
    return rows[::step]


# ---- kernel memory of a walk: the dentry and inode caches it fills (StepAhead's Table 3 comparison)
SLABS = ("dentry", "ext4_inode_cache", "fuse_inode", "xfs_inode")
CGROUP_FS = "/sys/fs/cgroup"


def process_cpu_s(pid):
    """User + system CPU seconds of process `pid` so far, all its threads (live and exited) together
    (/proc/PID/stat: utime and stime, in clock ticks); None once it is gone.  What bench/untar_ab.sh read."""
    fields = None if pid is None else util.proc_stat(pid)
    if not fields:
        return None
    utime, stime = int(fields[11]), int(fields[12])        # fields 14 and 15 of proc(5)
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


def cpu_delta(a, b):
    return None if a is None or b is None else round(b - a, 3)


def _own_cgroup():
    """('v1', path) or ('v2', path) of the memory cgroup this process is in, or (None, why)."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError as e:
        return None, f"/proc/self/cgroup: {e}"
    for line in lines:
        _, ctrl, path = line.split(":", 2)
        if "memory" in ctrl.split(","):
            base = os.path.join(CGROUP_FS, "memory")
            if os.path.exists(os.path.join(base, "memory.kmem.usage_in_bytes")):
                return "v1", base + path
    for line in lines:
        if line.startswith("0::"):
            d = CGROUP_FS + line[3:]
            if os.path.exists(os.path.join(d, "memory.stat")) or os.path.exists(os.path.join(d, "cgroup.controllers")):
                ctl = open(os.path.join(d, "cgroup.subtree_control")).read().split() \
                    if os.path.exists(os.path.join(d, "cgroup.subtree_control")) else []
                if "memory" in ctl:
                    return "v2", d
    return None, "no memory cgroup with kernel-memory accounting (v1 memory.kmem.* or v2 memory.stat)"


def _slab_objects():
    out = {}
    for s in SLABS:
        try:
            with open(f"/sys/kernel/slab/{s}/objects") as f:
                out[s] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return out


def drop_caches_count():
    """(page-cache drops, slab drops) anyone made since boot (/proc/vmstat drop_pagecache, drop_slab: writes to
    /proc/sys/vm/drop_caches).  Other benchmarks on a shared machine drop caches too: a drop inside a phase frees
    the phase's cached blocks or its unused dentries and inodes, so the phase is flagged."""
    got = {}
    try:
        with open("/proc/vmstat") as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k in ("drop_pagecache", "drop_slab"):
                    got[k] = int(v)
    except (OSError, ValueError):
        return None
    return (got["drop_pagecache"], got["drop_slab"]) if len(got) == 2 else None


def drops_between(a, b):
    """Drops between two drop_caches_count() readings (echo 3 counts once), or None."""
    return None if a is None or b is None else max(b[0] - a[0], b[1] - a[1])


def _slab_object_size(s):
    try:
        with open(f"/sys/kernel/slab/{s}/slab_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


class KernelMemory:
    """Kernel memory charged to the workload while it runs: this process (and so every process it starts)
    moves into a fresh child of its own memory cgroup for the workload and back after.  A path walk allocates
    its dentries and inodes (ext4_inode_cache, fuse_inode, ...) in the walking process's context, and both
    caches are memcg-accounted, so the child's kernel-memory charge is what the walk made the kernel keep, with
    nothing from other processes on the machine; plus a few pages of its processes' own (page tables, task
    structs).  v1: the peak, memory.kmem.max_usage_in_bytes (a walk's dentries only accumulate, so the peak is
    the end unless someone drops caches meanwhile; the final usage is kept too); v2: memory.stat `slab` at the
    end.  Page cache charged to it (cached directory and inode blocks) is kept apart.  A drop_caches by anyone
    during the workload frees unused dentries and inodes: counted (`drop_caches_during`) so such figures can be
    set aside.  Also the system-wide change of each slab's object count (/sys/kernel/slab/NAME/objects), which
    other processes disturb (a cross-check only)."""

    def __init__(self, tag, leaf=None):
        """`leaf`: (version, directory) of a memory cgroup the workload runs in already (`bench run --memory`:
        the record's REC/workload, bench/suite/memcg.py): read, neither made nor entered nor removed here."""
        self.leaf = leaf
        if leaf:
            self.kind, self.cg, self.parent, self.why = leaf[0], leaf[1], None, None
        else:
            self.kind, parent = _own_cgroup()
            self.why = None if self.kind else parent
            self.parent, self.cg = parent, None
        self.tag = tag

    def __enter__(self):
        self.slabs0, self.drops0 = _slab_objects(), drop_caches_count()
        if self.kind and not self.leaf:
            try:
                self.cg = os.path.join(self.parent, f"e4lbench-{os.getpid()}-{self.tag}")
                if os.path.isdir(self.cg):
                    os.rmdir(self.cg)
                os.mkdir(self.cg)
                with open(os.path.join(self.cg, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            except OSError as e:
                self.why, self.kind = f"cannot use a memory cgroup under {self.parent}: {e}", None
                self._remove()
        return self

    def _stat(self):
        vals = {}
        with open(os.path.join(self.cg, "memory.stat")) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if v.strip().isdigit():
                    vals[k] = int(v)
        return vals

    def _remove(self):
        if self.cg and os.path.isdir(self.cg):
            for _ in range(50):
                try:
                    os.rmdir(self.cg)
                    break
                except OSError:
                    time.sleep(0.05)
        self.cg = None

    def __exit__(self, *exc):
        self.result = {"source": None, "kmem_bytes": None, "page_cache_bytes": None}
        try:
            if self.kind and self.cg:
                if not self.leaf:
                    with open(os.path.join(self.parent, "cgroup.procs"), "w") as f:
                        f.write(str(os.getpid()))
                st = self._stat()
                if self.kind == "v1":
                    kmem = int(open(os.path.join(self.cg, "memory.kmem.max_usage_in_bytes")).read())
                    final = int(open(os.path.join(self.cg, "memory.kmem.usage_in_bytes")).read())
                    cache = st.get("cache")
                else:
                    kmem, cache = st.get("slab"), st.get("file")
                    final = kmem
                what = "memory.kmem.max_usage_in_bytes" if self.kind == "v1" else "memory.stat slab"
                where = "the record's workload cgroup (--memory)" if self.leaf else "a child cgroup the workload ran in"
                self.result.update(source=f"memory cgroup {self.kind} ({what}) of {where}",
                                   kmem_bytes=kmem, kmem_final_bytes=final, page_cache_bytes=cache)
            else:
                self.result["source"] = self.why
        except (OSError, ValueError) as e:       # a figure lost is no reason to fail the phase
            self.result["source"] = f"reading memory cgroup {self.cg}: {e}"
        finally:
            if not self.leaf:
                self._remove()
        slabs1, drops1 = _slab_objects(), drop_caches_count()
        self.result["drop_caches_during"] = None if drops1 is None or self.drops0 is None else \
            drops1[1] - self.drops0[1]
        self.result["slab_objects_delta"] = {s: slabs1[s] - self.slabs0[s] for s in slabs1 if s in self.slabs0}
        self.result["slab_object_bytes"] = {s: _slab_object_size(s) for s in self.result["slab_objects_delta"]}
        return False
