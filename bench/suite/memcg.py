"""`bench run --memory MiB`: every record (one system, one workload, one repetition) in a memory cgroup of its own,
so that no system's run fits in the machine's page cache when the paper's did not (issue #26 item 4, issue #27).

Layout, the same on both cgroup versions:

    PARENT = e4lbench-mem-<pid>        the run's own, made when the run starts, removed when it ends
    PARENT/rNNN-<system>-<workload>    one record: the limit (v2 memory.max and memory.swap.max = 0; v1
                                       memory.limit_in_bytes and memory.memsw.limit_in_bytes = the limit)
    PARENT/rNNN-.../daemon             the file-system daemon (`ext4lazy mount`, fuse2fs, `dbfs-sqlite mount`),
                                       from its start: it is spawned through `sh -c 'echo $$ > PROCS; exec CMD'`
    PARENT/rNNN-.../workload           the process that runs the workload (bench/suite/child.py), started the
                                       same way, and everything it starts (worker pool, shell commands)

Outside: the bench's own process, the disk models (`ext4lazy emu serve`, a process of its own), the loop devices
and the kernel's writeback threads.  A kernel file system's page cache is charged to the process that first
touches a page, i.e. the workload's, so the limit holds it as it holds a FUSE daemon's memory.

Where PARENT goes: cgroup v2 (preferred, when the unified hierarchy has the memory controller): at the root of
the hierarchy, because a v2 cgroup that holds processes (the bench's own) cannot have children with controllers;
the memory controller is enabled down to the leaves (cgroup.subtree_control).  cgroup v1 (a machine whose
memory controller is mounted on its own, as the one this was written on: cgroup2 at /sys/fs/cgroup/unified has
no memory controller there): under the bench's own memory cgroup, so that any limit set on the bench holds too.
No usable hierarchy: the run is refused (Unavailable), never run without the limit.
"""
import os
import re
import threading
import time

MiB = 1 << 20
PLACE = 'echo $$ > "$0" && exec "$@"'       # sh -c PLACE PROCS CMD...: CMD runs in the cgroup from its start
LEAVES = ("daemon", "workload")


class Unavailable(Exception):
    """No memory cgroup can be made here: the run must be refused."""


class Misplaced(Exception):
    """A record's process is not in the cgroup it was started in: the record fails."""


def _read(path):
    with open(path) as f:
        return f.read()


def _write(path, value):
    with open(path, "w") as f:
        f.write(str(value))


def _int(path):
    try:
        v = _read(path).strip()
    except OSError:
        return None
    return None if v == "max" else int(v)


def _kv(path):
    """A flat-keyed cgroup file ("key value" lines) as a dict of ints; {} when it cannot be read."""
    out = {}
    try:
        for line in _read(path).splitlines():
            k, _, v = line.partition(" ")
            if v.strip().lstrip("-").isdigit():
                out[k] = int(v)
    except OSError:
        pass
    return out


def cgroup_mounts(mountinfo="/proc/self/mountinfo"):
    """(the cgroup2 mount point or None, the v1 mount point of the memory controller or None)."""
    v2 = v1 = None
    for line in _read(mountinfo).splitlines():
        pre, _, post = line.partition(" - ")
        fields, post = pre.split(), post.split()
        if len(fields) < 5 or len(post) < 3:
            continue
        if post[0] == "cgroup2" and v2 is None:
            v2 = fields[4]
        elif post[0] == "cgroup" and "memory" in post[2].split(",") and v1 is None:
            v1 = fields[4]
    return v2, v1


def memory_path(pid="self", version=None):
    """The memory cgroup of process `pid` as /proc/PID/cgroup names it (a path inside its hierarchy), from the
    v1 line naming the memory controller, else the v2 line ("0::"); `version` picks one.  None when gone."""
    try:
        lines = _read(f"/proc/{pid}/cgroup").splitlines()
    except OSError:
        return None
    v1 = v2 = None
    for line in lines:
        hid, ctrl, path = line.split(":", 2)
        if "memory" in ctrl.split(","):
            v1 = path
        elif hid == "0" and ctrl == "":
            v2 = path
    if version == "v2":
        return v2
    if version == "v1":
        return v1
    return v1 if v1 is not None else v2


class Hierarchy:
    """Where the run's cgroups go: version, mount point, and the directory PARENT is made in."""

    def __init__(self, version, mount, base):
        self.version, self.mount, self.base = version, mount, base

    def rel(self, path):
        """A cgroup directory as /proc/PID/cgroup names it."""
        return "/" + os.path.relpath(path, self.mount).lstrip(".")


def find(mountinfo="/proc/self/mountinfo"):
    """The hierarchy to use, or Unavailable saying why none can be."""
    v2, v1 = cgroup_mounts(mountinfo)
    why = []
    if v2:
        try:
            controllers = _read(os.path.join(v2, "cgroup.controllers")).split()
        except OSError as e:
            controllers = []
            why.append(f"cgroup2 at {v2}: {e}")
        if "memory" in controllers:
            return Hierarchy("v2", v2, v2)
        why.append(f"cgroup2 is mounted at {v2} but its memory controller is not available there (controllers: "
                   f"{' '.join(controllers) or 'none'}; it is bound to a v1 hierarchy)")
    else:
        why.append("no cgroup2 mount")
    if v1:
        own = memory_path("self", "v1")
        base = os.path.join(v1, (own or "/").lstrip("/"))
        if own is not None and os.path.isdir(base):
            return Hierarchy("v1", v1, base)
        why.append(f"the v1 memory hierarchy at {v1} does not show this process's cgroup ({own})")
    else:
        why.append("no v1 memory hierarchy either")
    raise Unavailable("no memory cgroup can be made on this machine: " + "; ".join(why))


def _rmdir_tree(path, wait=0.0):
    """Remove a cgroup directory and its children (deepest first); True when gone.  Retries for `wait` seconds
    (a process that has just exited may still be counted in it for a moment)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            for d, subs, _ in sorted(os.walk(path), key=lambda x: -x[0].count("/")):
                os.rmdir(d)
            return True
        except FileNotFoundError:
            if not os.path.exists(path):
                return True
        except OSError:
            pass
        if time.monotonic() >= deadline:
            return not os.path.exists(path)
        time.sleep(0.1)


def procs(path):
    """PIDs in a cgroup directory and its children."""
    out = []
    for d, _, _ in os.walk(path):
        try:
            out += [int(p) for p in _read(os.path.join(d, "cgroup.procs")).split()]
        except (OSError, ValueError):
            pass
    return out


class Memory:
    """The run's parent cgroup and its records.  `limit_mib` None: cgroups without a limit (`--memory max`), to
    measure each record's peak the same way."""

    def __init__(self, limit_mib):
        self.limit_mib = limit_mib
        self.limit = None if limit_mib is None else int(limit_mib * MiB) // 4096 * 4096
        self.h = find()
        self.parent = None
        self.n = 0
        self.left = []                      # record cgroups that could not be removed when their record ended

    # ---- the run
    def open(self):
        """Make PARENT (enabling the memory controller where v2 needs it) and try a record cgroup with the limit
        once; Unavailable when anything of that fails."""
        h = self.h
        self._remove_stale()
        self.parent = os.path.join(h.base, f"e4lbench-mem-{os.getpid()}")
        try:
            if h.version == "v2":
                self._enable(h.base)
            os.makedirs(self.parent, exist_ok=True)
            if h.version == "v2":
                self._enable(self.parent)
            else:
                if _int(os.path.join(self.parent, "memory.use_hierarchy")) == 0:
                    raise Unavailable(f"{self.parent}: memory.use_hierarchy is 0 (children would not count)")
            probe = Record(self, "probe")
            probe.create()
            probe.remove(wait=5)
        except Unavailable:
            self.close()
            raise
        except OSError as e:
            self.close()
            raise Unavailable(f"cannot make a memory cgroup with a limit under {h.base} ({h.version}): {e}")
        return self

    @staticmethod
    def _enable(path):
        ctl = os.path.join(path, "cgroup.subtree_control")
        if "memory" not in _read(ctl).split():
            _write(ctl, "+memory")

    def _remove_stale(self):
        """PARENTs of runs that died (their PID gone), empty of processes: removed."""
        try:
            names = os.listdir(self.h.base)
        except OSError:
            return
        for n in names:
            m = re.fullmatch(r"e4lbench-mem-(\d+)", n)
            if m and not os.path.exists(f"/proc/{m.group(1)}"):
                d = os.path.join(self.h.base, n)
                if not procs(d):
                    _rmdir_tree(d)

    def record(self, system_slug, workload, rep=0):
        self.n += 1
        name = re.sub(r"[^A-Za-z0-9._-]+", "_", f"r{self.n:03d}-{system_slug}-{workload}"
                      + (f"-rep{rep}" if rep else ""))[:200]
        return Record(self, name)

    def close(self):
        """Remove PARENT (and what records left behind); a list of what could not be removed."""
        left = []
        if self.parent and os.path.isdir(self.parent):
            if not _rmdir_tree(self.parent, wait=10):
                left.append(f"{self.parent} (processes {procs(self.parent)})")
        self.parent = None
        return left

    # ---- for meta.json and the report
    def meta(self):
        return {"limit_mib": self.limit_mib, "cgroup_version": self.h.version, "parent": self.parent,
                "how": self.describe()}

    def describe(self):
        size = f"of {self.limit_mib:g} MiB" if self.limit is not None else "without a limit (memory.max = max)"
        swap = ("memory.swap.max = 0" if self.h.version == "v2" else
                "memory.memsw.limit_in_bytes = the limit, so no swap either")
        return (f"each record in a memory cgroup (cgroup {self.h.version}) {size} holding the workload's processes "
                f"and the file-system daemon (from its start), created for the record and removed after it"
                + (f" ({swap})" if self.limit is not None else "")
                + "; disk models (`ext4lazy emu serve`), loop devices and the bench itself outside; a kernel file "
                "system's page cache is charged to the workload's processes that write and read it; ext4lazy on a "
                "model reaches it through the same server and loop device (only its `-inproc` ablation runs the "
                "model inside its daemon, and so inside the cgroup)")


class Record:
    """One record's cgroup: REC with the limit, REC/daemon and REC/workload.  create() before the mount,
    close() after the unmount: the figures for the record, and REC removed."""

    SAMPLE_S = 0.2

    def __init__(self, memory, name):
        self.m, self.h = memory, memory.h
        self.path = os.path.join(memory.parent, name)
        self.samples, self.max_sampled = 0, 0
        self.stop_flag = threading.Event()
        self.thread = None
        self.daemon = None
        self.workload_cgroup = None
        self.swap = None

    def leaf(self, name):
        return os.path.join(self.path, name)

    def procs_file(self, leaf):
        return os.path.join(self.leaf(leaf), "cgroup.procs")

    def wrap(self, cmd, leaf="daemon"):
        """`cmd` started inside the leaf from its first instruction (the shell writes its own PID, then execs)."""
        return ["sh", "-c", PLACE, self.procs_file(leaf)] + list(cmd)

    def create(self):
        if os.path.isdir(self.path):
            _rmdir_tree(self.path, wait=2)
        os.mkdir(self.path)
        lim = self.m.limit
        if self.h.version == "v2":
            if lim is not None:
                _write(os.path.join(self.path, "memory.max"), lim)
                if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                    _write(os.path.join(self.path, "memory.swap.max"), 0)
                    self.swap = "memory.swap.max = 0"
            self.m._enable(self.path)
            got = _int(os.path.join(self.path, "memory.max"))
        else:
            if lim is not None:
                _write(os.path.join(self.path, "memory.limit_in_bytes"), lim)
                if os.path.exists(os.path.join(self.path, "memory.memsw.limit_in_bytes")):
                    _write(os.path.join(self.path, "memory.memsw.limit_in_bytes"), lim)
                    self.swap = "memory.memsw.limit_in_bytes = the limit"
            got = _int(os.path.join(self.path, "memory.limit_in_bytes"))
            if got is not None and got >= 1 << 62:
                got = None
        if got != lim:
            raise Unavailable(f"{self.path}: the limit reads back as {got}, not {lim}")
        for leaf in LEAVES:
            os.mkdir(self.leaf(leaf))
        self.thread = threading.Thread(target=self._sample_loop, daemon=True)
        self.thread.start()
        return self

    # ---- figures
    def _usage(self, path):
        return _int(os.path.join(path, "memory.current" if self.h.version == "v2" else "memory.usage_in_bytes"))

    def _peak(self, path):
        """(peak bytes, the file it came from) or (None, None) when the kernel keeps none."""
        name = "memory.peak" if self.h.version == "v2" else "memory.max_usage_in_bytes"
        v = _int(os.path.join(path, name))
        return (v, name) if v is not None else (None, None)

    def _sample_loop(self):
        while not self.stop_flag.wait(self.SAMPLE_S):
            self._sample()

    def _sample(self):
        v = self._usage(self.path)
        if v is not None:
            self.samples += 1
            self.max_sampled = max(self.max_sampled, v)

    def events(self):
        """{"oom", "oom_kill", "max", "high"} of REC (None: the version has no such count), the source, and the
        OOM kills by leaf.  v2: memory.events (hierarchical).  v1 has no memory.events: oom_kill is counted in
        memory.oom_control of the cgroup of the process killed (a leaf here), so it is summed over REC and its
        leaves; v1's memory.failcnt and memory.memsw.failcnt are kept as they are (on the kernel this was written
        on they stay 0 even while the limit reclaims and kills: not v2's "max")."""
        if self.h.version == "v2":
            ev = _kv(os.path.join(self.path, "memory.events"))
            out = {k: ev.get(k) for k in ("oom", "oom_kill", "max", "high")}
            by = {leaf: _kv(os.path.join(self.leaf(leaf), "memory.events")).get("oom_kill") for leaf in LEAVES}
            return out, "memory.events", by
        by = {leaf: _kv(os.path.join(self.leaf(leaf), "memory.oom_control")).get("oom_kill") for leaf in LEAVES}
        own = _kv(os.path.join(self.path, "memory.oom_control"))
        kills = [v for v in [own.get("oom_kill")] + list(by.values()) if v is not None]
        out = {"oom": None, "oom_kill": sum(kills) if kills else None, "max": None, "high": None,
               "under_oom": own.get("under_oom"),
               "failcnt": _int(os.path.join(self.path, "memory.failcnt")),
               "memsw_failcnt": _int(os.path.join(self.path, "memory.memsw.failcnt"))}
        return out, "memory.oom_control (oom_kill of the record's cgroup and its leaves), memory.failcnt", by

    def where(self, pid):
        """The memory cgroup of `pid` (a path inside the hierarchy), or None once it is gone."""
        return memory_path(pid, self.h.version)

    def check_daemon(self, pid, system):
        """The daemon must be in REC/daemon: recorded, else the record fails."""
        if pid is None:
            raise Misplaced(f"{system}: no daemon process found to check its memory cgroup")
        got, want = self.where(pid), self.h.rel(self.leaf("daemon"))
        self.daemon = {"pid": pid, "cgroup": got}
        if got != want:
            raise Misplaced(f"{system}: the daemon (PID {pid}) is in memory cgroup {got}, not in {want}")

    def result(self):
        """The record's `memory` (read before the cgroup goes)."""
        self.stop_flag.set()
        if self.thread:
            self.thread.join()
        self._sample()
        peak, src = self._peak(self.path)
        events, ev_src, by = self.events()
        leaf_peaks = {leaf: self._peak(self.leaf(leaf))[0] for leaf in LEAVES}
        if peak is None:
            peak, src = self.max_sampled or None, f"the largest of {self.samples} samples of memory usage"
        return {"limit_mib": self.m.limit_mib, "limit_bytes": self.m.limit, "cgroup_version": self.h.version,
                "cgroup": self.h.rel(self.path), "swap": self.swap, "peak_bytes": peak, "peak_source": src,
                "peak_sampled_bytes": self.max_sampled or None, "samples": self.samples,
                "daemon_peak_bytes": leaf_peaks["daemon"], "workload_peak_bytes": leaf_peaks["workload"],
                "events": events, "events_source": ev_src, "oom_kill_by": by, "daemon": self.daemon,
                "workload_cgroup": self.workload_cgroup}

    def remove(self, wait=30):
        """Remove REC once its processes are gone; False (and REC kept for the run's end) when some stay."""
        self.stop_flag.set()
        if _rmdir_tree(self.path, wait=wait):
            return True
        self.m.left.append(self.path)
        return False

    def close(self, wait=30):
        out = self.result()
        out["removed"] = self.remove(wait)
        if not out["removed"]:
            out["left_processes"] = procs(self.path)
        return out


def oom_text(mem):
    """A record's OOM kills as one loud line, or None."""
    ev = (mem or {}).get("events") or {}
    if not ev.get("oom_kill"):
        return None
    by = ", ".join(f"{k} {v}" for k, v in (mem.get("oom_kill_by") or {}).items() if v)
    lim = f"{mem['limit_mib']:g} MiB" if mem.get("limit_mib") is not None else "no limit"
    return f"OOM KILL in the record's memory cgroup ({lim}): {ev['oom_kill']} process(es) killed ({by or '?'})"
