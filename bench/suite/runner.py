"""Runs a suite: the phases of every group on every system, interleaved (phase 1 of every system, then phase
2, ...) so that load from elsewhere falls on all systems alike; records as they finish; resumable."""
import contextlib
import hashlib
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import time

from . import accounting, child, devices, memcg, modeltime, repeats
from .core import Ctx, GiB, MiB
from .devices import SetupError, Volume, util
from .progress import Progress
from .shapes import syncfs
from . import systems as systems_mod
from .systems import baseline_journal_mib

# ext4lazy's StepAhead figures (-o stats=FILE, docs/STEPAHEAD.md): top-level in every record, None for the others
STEPAHEAD_KEYS = ("hit_rate", "prefetch_wasted_blocks", "kb_bytes")
STEPAHEAD_EXTRA = ("stepahead", "translation_hits", "translation_misses", "lookup_hits", "lookup_misses",
                   "lookup_hit_rate", "prefetch_blocks", "prefetch_used_blocks",
                   "prefetch_batches", "prefetch_backoffs", "prefetch_lone_skips", "kb_entries", "kb_dirs",
                   "path_hints", "path_hints_dropped", "path_hint_blocks")


@contextlib.contextmanager
def workload_env(changes):
    """Set environment variables for the workload's programs (inherited by its subprocesses), then restore."""
    old = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class Refused(Exception):
    """The run cannot be done as asked (does not fit, unknown names, no root): one clear message."""


class MemoryLimitError(Exception):
    """A record's memory cgroup saw an OOM kill (`--memory`): the record fails, whatever the phase returned."""

    def __init__(self, msg, memory):
        super().__init__(msg)
        self.memory = memory


def git_commit():
    c = subprocess.run(["git", "-C", util.REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return c.stdout.strip() or "unknown"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while b := f.read(8 << 20):
            h.update(b)
    return h.hexdigest()


def ram_bytes():
    """MemTotal of /proc/meminfo, or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def key(r):
    return (r["suite"], r["system"], r["device"], r["workload"])


class Results:
    """DIR/results.json (a list of records) and DIR/meta.json (commands, host, binary), written atomically."""

    def __init__(self, out):
        self.out = out
        self.path, self.meta_path = os.path.join(out, "results.json"), os.path.join(out, "meta.json")
        self.records = self._load(self.path, [])
        self.meta = self._load(self.meta_path, {"runs": []})

    @staticmethod
    def _load(path, default):
        if not os.path.exists(path):
            return default
        with open(path) as f:
            return json.load(f)

    def done_reps(self):
        """(suite, system, device, workload) -> indices of its repetitions finished without error."""
        return {key(r): repeats.done_reps(r) for r in self.records}

    def add(self, rec):
        self.records = [r for r in self.records if key(r) != key(rec)] + [rec]
        self._save(self.path, self.records)

    def add_repetition(self, rec, rep, repeat):
        """Store repetition `rep` of a record (replacing an earlier try of it) and the aggregate over them."""
        old = next((r for r in self.records if key(r) == key(rec)), None)
        reps = [r for r in repeats.repetitions_of(old) if r["rep"] != rep] + [{**rec, "rep": rep}]
        self.add(repeats.aggregate(reps, max(repeat, (old or {}).get("repeat") or 1)))

    def save_meta(self):
        self._save(self.meta_path, self.meta)

    @staticmethod
    def _save(path, data):
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)


class Plan:
    """Sizes and checks for one group, before anything is made."""

    def __init__(self, args, suite, group, systems, capacity):
        inode_bytes = group.inodes * 16 * 1024 * 13 // 10          # mkfs.ext4: one inode per 16 KiB
        want = max(suite.min_size, 3 * group.data_bytes + 2 * GiB, inode_bytes)
        paper = suite.partitions.get(args.device)
        if args.size:
            self.size = args.size
        elif paper == "drive":
            self.size = capacity
        elif paper:
            self.size = min(paper, capacity) if capacity else paper
        else:
            self.size = devices.round_up_gib(want)
        self.size -= self.size % MiB                               # models take multiples of 4 KiB
        self.journal_mib = baseline_journal_mib(args.scale, self.size) if not group.journal_mib else \
            int(min(group.journal_mib, max(16, self.size // MiB // 4)))
        if self.size <= 0 or (capacity is not None and self.size > capacity):
            raise Refused(f"group {group.name}: a {self.size / GiB:.0f} GiB partition does not fit on {args.device} "
                          f"({capacity / 1e9:.0f} GB); lower --scale or --size")
        if group.data_bytes * 12 // 10 + self.journal_mib * MiB > self.size:
            raise Refused(f"group {group.name}: {group.data_bytes / GiB:.2f} GiB of files and directories plus a "
                          f"{self.journal_mib} MiB journal do not fit in a {self.size / GiB:.1f} GiB partition; "
                          f"raise --size or lower --scale")
        if inode_bytes > self.size:
            raise Refused(f"group {group.name}: {group.inodes:,} inodes need a partition of at least "
                          f"{inode_bytes / GiB:.1f} GiB (mkfs.ext4 makes one inode per 16 KiB); raise --size")
        # Sparse images: each holds what the group writes, the journal and the inode tables.
        # (mkfs zeroes the inode tables with fallocate: they stay sparse)
        self.host_bytes = len(systems) * (group.data_bytes + self.journal_mib * MiB + self.size // 1000) * 12 // 10


class Runner:
    def __init__(self, args, suite, systems, binary):
        self.args, self.suite, self.systems, self.binary = args, suite, systems, binary
        self.results = Results(args.out)
        self.work = os.path.join(args.out, "work")
        self.raw = os.path.join(args.out, "raw")
        self.model = None if args.device == "file" else args.device
        self.commit = git_commit()
        # --memory: memcg.Memory, its parent cgroup made in run() (cli.py made sure the machine can)
        self.memory = None

    # ---- checks before anything is made
    def plans(self):
        capacity = devices.model_capacity(self.binary, self.model) if self.model else None
        groups = self.suite.build(self.args.scale)
        only = getattr(self.args, "groups", None)
        if only:
            names = [g.name for g in groups]
            unknown = sorted(set(only) - set(names))
            if unknown:
                raise Refused(f"--groups: {', '.join(unknown)} not in the {self.suite.name} suite at this scale "
                              f"(its groups: {', '.join(names)})")
            groups = [g for g in groups if g.name in only]
        plans = {g.name: Plan(self.args, self.suite, g, self.systems, capacity) for g in groups}
        os.makedirs(self.work, exist_ok=True)
        free = devices.host_free_bytes(self.work)
        need = max(p.host_bytes for p in plans.values())
        if need > free:
            raise Refused(f"the images need about {need / GiB:.1f} GiB on the disk holding {self.work}, "
                          f"which has {free / GiB:.1f} GiB free; lower --scale or use another --out")
        return groups, plans

    def limit_mismatch(self):
        """A finished record of this suite and device made under another memory limit than asked (records
        from before --memory existed: none): resuming would mix the two in one table."""
        want = getattr(self.args, "memory", None)
        names = {s.name for s in self.systems}
        for r in self.results.records:
            if r["suite"] != self.suite.name or r["device"] != self.args.device or r["system"] not in names:
                continue
            for x in repeats.repetitions_of(r):
                if x.get("error"):
                    continue
                m = x.get("memory")
                had = "none" if m is None else "max" if m.get("limit_mib") is None else m["limit_mib"]
                if had != ("none" if want is None else want):
                    return (f"{self.args.out} holds {r['system']} {r['workload']} made with --memory "
                            f"{had if had != 'none' else '(not given)'}; this run asks for "
                            f"{'no --memory' if want is None else '--memory ' + str(want)}: use another --out")
        return None

    def run(self):
        groups, plans = self.plans()
        mismatch = self.limit_mismatch()
        if mismatch:
            raise Refused(mismatch)
        want = getattr(self.args, "memory", None)
        if want is not None:
            try:
                self.memory = memcg.Memory(None if want == "max" else want).open()
            except memcg.Unavailable as e:
                raise Refused(f"--memory: {e}")
        try:
            return self._run(groups, plans)
        finally:
            if self.memory:
                left = self.memory.close()
                for what in left:
                    print(f"ext4lazy bench: memory cgroup left behind: {what}", file=sys.stderr)

    def _run(self, groups, plans):
        done, nrep = self.results.done_reps(), self.args.repeat
        # per repetition: the recorded workloads still missing (resumable repetition by repetition)
        todo = {(g.name, s.name, k): [w for w in g.workloads if w.recorded and k not in
                                      done.get((self.suite.name, s.name, self.args.device, w.name), ())]
                for g in groups for s in self.systems for k in range(nrep)}
        total = sum(w.cost for (g, s, k), ws in todo.items() if ws
                    for w in next(x for x in groups if x.name == g).workloads)
        skipped = sum(len([w for w in g.workloads if w.recorded]) - len(todo[(g.name, s.name, k)])
                      for g in groups for s in self.systems for k in range(nrep))
        prog = Progress(total)
        if skipped:
            prog.log(f"resuming {self.args.out}: {skipped} finished record(s) are kept, not re-run"
                     + (" (counted per repetition)" if nrep > 1 else ""))
        os.makedirs(self.raw, exist_ok=True)
        self.results.meta["runs"].append({
            "command": self.args.command, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "commit": self.commit,
            "binary": self.binary, "binary_sha256": sha256(self.binary), "kernel": platform.release(),
            "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(), "suite": self.suite.name,
            "device": self.args.device, "scale": self.args.scale, "speed": self.args.speed,
            "systems": [s.name for s in self.systems], "workers": self.args.workers, "repeat": nrep,
            "system_binaries": {s.name: {"binary": s.binary, "binary_sha256": sha256(s.binary)}
                                for s in self.systems if s.binary},
            "memory": self.memory.meta() if self.memory else None, "ram_bytes": ram_bytes()})
        self.results.save_meta()
        # with --memory each workload's process makes its own pool, inside its cgroup (child.py)
        pool = multiprocessing.get_context("fork").Pool(self.args.workers) \
            if self.args.workers > 1 and not self.memory else None
        failures = 0
        hints = contextlib.ExitStack()
        try:
            if any(s.preload for s in self.systems):
                before, during = hints.enter_context(
                    util.sysctl_at_least(systems_mod.HINT_QUEUE_SYSCTL, systems_mod.HINT_QUEUE))
                self.results.meta["runs"][-1]["unix_max_dgram_qlen"] = {"before": before, "during": during}
            # a fresh volume per system for every repetition of a group; the systems interleave inside it
            for g in groups:
                for k in range(nrep):
                    todo_k = {(g.name, s.name): todo[(g.name, s.name, k)] for s in self.systems}
                    systems = [s for s in self.systems if todo_k[(g.name, s.name)]]
                    if systems:
                        failures += self.run_group(g, plans[g.name], systems, todo_k, pool, prog, k)
        finally:
            hints.close()
            if pool:
                pool.terminate()
                pool.join()
            self.results.meta["runs"][-1].update(finished=time.strftime("%Y-%m-%dT%H:%M:%S"),
                                                 loadavg_end=os.getloadavg())
            self.results.save_meta()
        return failures

    def run_group(self, g, plan, systems, todo, pool, prog, rep=0):
        vols, broken, failures = {}, {}, 0
        # Setup phases (recorded = False) that finished on each system in this run, and which systems' volumes
        # are copies of another's: a system whose flags change nothing on disk (ext4lazy-lazy-stepahead) takes
        # a copy of its base's volume (ext4lazy-lazy) after setup, so with and without the flag walk the very
        # same tree, not two trees that parallel workers laid out differently.
        set_up, copied = {}, {}
        try:
            for s in systems:
                v = Volume(s, self.args.device, self.args.speed, self.work, g.name, plan.size, plan.journal_mib,
                           s.binary or self.binary, prog.log)
                v.extra_options = list(g.ext4lazy_options)
                v.stock_journal_mib = g.stock_journal_mib
                vols[s.name] = v
                try:
                    prog.status(f"{g.name}: mkfs for {s.name} ({plan.size / GiB:.0f} GiB partition)")
                    v.teardown()                          # leftovers of an interrupted run
                    v.create()
                    v.attach(traces=self.args.traces)
                except Exception as e:                    # noqa: BLE001 - a failed setup is a result, not a crash
                    broken[s.name] = f"setup failed: {type(e).__name__}: {str(e)[-600:]}"
            for w in g.workloads:
                for s in systems:
                    recorded = w in todo[(g.name, s.name)]
                    if s.name in broken:
                        if recorded:
                            self.results.add_repetition(self.error_record(s, w, broken[s.name]), rep,
                                                        self.args.repeat)
                            failures += 1
                            prog.done(w.cost)
                        continue
                    what = f"{w.name} on {s.name} ({self.args.device})" + (
                        f" [repetition {rep + 1}/{self.args.repeat}]" if self.args.repeat > 1 else "") + (
                        "" if recorded else " [setup, not recorded]" if not w.recorded else
                        " [setup for a later phase, not recorded]")
                    base = systems_mod.volume_base(s.name)
                    if not w.recorded and base in set_up.get(w.name, ()) and base not in broken:
                        try:
                            vols[s.name].copy_from(vols[base])
                        except Exception as e:            # noqa: BLE001
                            prog.log(f"{what}: copying {base}'s volume failed ({e}); making it instead")
                        else:
                            copied[s.name] = base
                            set_up.setdefault(w.name, set()).add(s.name)
                            prog.done(w.cost)
                            prog.log(f"{what}: a copy of {base}'s volume after this phase (same tree, same layout)")
                            continue
                    prog.status(what, 0.0)
                    ctx = Ctx(pool, self.args.workers, self.args.timeout, prog.log,
                              lambda f, what=what, c=w.cost: prog.status(what, f, c), system=s)
                    try:
                        rec = self.phase(vols[s.name], w, ctx, rep)
                    except Exception as e:                # noqa: BLE001
                        broken[s.name] = f"{type(e).__name__}: {str(e)[-800:]}"
                        prog.log(f"{what}: FAILED: {broken[s.name]}")
                        util.force_unmount(vols[s.name].mnt)
                        if recorded:
                            self.results.add_repetition(self.error_record(s, w, broken[s.name],
                                                                          getattr(e, "memory", None)), rep,
                                                        self.args.repeat)
                            failures += 1
                            prog.done(w.cost)
                        continue
                    if not w.recorded:
                        set_up.setdefault(w.name, set()).add(s.name)
                    if recorded:
                        rec["fsck"] = self.check(vols[s.name], w, what, prog)
                        if (rec["fsck"] or {}).get("clean") is False:
                            failures += 1
                        rec.update(plan=dict(partition_bytes=plan.size, journal_mib=plan.journal_mib,
                                             stock_journal_mib=g.stock_journal_mib,
                                             group=g.name, volume_copied_from=copied.get(s.name),
                                             ext4lazy_options=g.ext4lazy_options if s.kind == "ext4lazy" else None))
                        self.results.add_repetition(rec, rep, self.args.repeat)
                    prog.done(w.cost)
                    prog.log(f"{what}: {rec['runtime_s']:.2f} s, cleaning {rec['cleaning_s']:.1f} s; MiB "
                             + ", ".join(f"{k} {v:.1f}" for k, v in rec["io_mib"].items() if v)
                             + (f"; hit rate {rec['hit_rate']:.3f}" if rec.get("hit_rate") is not None else ""))
        finally:
            for v in vols.values():
                v.teardown(remove=not self.args.keep)
            for f in os.listdir(self.work):
                if f.endswith(".trace.csv"):
                    os.unlink(os.path.join(self.work, f))
        return failures

    def check(self, v, w, what, prog):
        """e2fsck of the volume after a recorded phase that wrote (unmounted now; untimed): the record's `fsck`,
        None for a phase that only reads.  Problems are logged here and make the run fail at the end."""
        if not w.writes:
            return None
        prog.status(f"{what}: consistency check")
        r = v.fsck()
        if r["clean"] is False:
            prog.log(f"{what}: e2fsck -fn FOUND PROBLEMS (rc {r['rc']}): " + " | ".join(r["output"][:5]))
        return r

    def error_record(self, s, w, msg, memory=None):
        return {"suite": self.suite.name, "system": s.name, "device": self.args.device, "workload": w.name,
                "scale": self.args.scale, "speed": self.args.speed if self.model else None, "runtime_s": None,
                "cleaning_s": None, "io_mib": None, "fsck": None, "error": msg, "commit": self.commit,
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "memory": memory}

    # ---- one phase: cold cache, fresh mount, timed work + syncfs + unmount, cleaning, I/O by class
    def phase(self, v, w, ctx, rep=0):
        w.prepare(self.work)
        v.cold_cache()
        drops0 = accounting.drop_caches_count()
        load = os.getloadavg()[0]
        kind, trace, rep0, stat0 = v.system.kind, None, None, None
        if v.on_loop:
            stat0 = accounting.loop_stat(v.loop)
            if self.model:
                rep0 = v.model_report()
            else:
                trace = accounting.BlockTrace(v.loop, v.layout)
        tracefile = None
        if kind == "ext4lazy" and self.model and not v.on_loop and self.args.traces:
            tracefile = os.path.join(self.work, f"{v.system.slug}.{w.name}.trace.csv")
        sampler = None
        # --memory: this record's memory cgroup (memcg.py), made before the mount so that the daemon starts in it
        mem = self.memory.record(v.system.slug, w.name, rep) if self.memory else None
        memory = None
        try:
            if mem:
                mem.create()
                v.spawn_prefix = mem.wrap([], "daemon")
            v.mount(tracefile, writes=w.writes)
            v.spawn_prefix = []
            if mem and (kind != "kernel" and (kind != "dbfs" or v.fuse_mounted)):
                mem.check_daemon(v.fuse_daemon_pid(), v.system.name)
            busy_dev = v.loop if v.on_loop else None
            if kind == "ext4lazy":
                sampler = accounting.Sampler(accounting.ext4lazy_live_totals(devices.live_stats_path(v.mnt)),
                                             device=busy_dev)
            else:
                sampler = accounting.Sampler(lambda: accounting.loop_stat(v.loop), device=busy_dev)
            # the FUSE daemon's CPU time over the workload and over syncfs (not the unmount: it exits in it)
            pid = v.daemon_pid()
            env = v.system.workload_env(v.binary)
            leaf = (mem.h.version, mem.leaf("workload")) if mem else None
            # with --memory the workload runs in a process of its own inside the cgroup (child.py says why),
            # which puts `env` into its programs' environment itself
            with accounting.KernelMemory(f"{v.system.slug}-{w.name}", leaf=leaf) as kmem, \
                    workload_env({} if mem else env):
                # the drive's busy time over the workload alone (work_s_at_drive_speed below)
                busy0 = v.model_report()["busy_s"] if self.model and v.on_loop else None
                cpu0 = accounting.process_cpu_s(pid)
                if mem:
                    extra, t0, t1, mem.workload_cgroup = child.run(w, v.mnt, ctx, mem.procs_file("workload"), env,
                                                                   self.suite.name, self.args, self.binary)
                else:
                    t0 = time.monotonic()
                    extra = w.run(v.mnt, ctx) or {}
                    t1 = time.monotonic()
                cpu1 = accounting.process_cpu_s(pid)
                work_busy = None if busy0 is None else v.model_report()["busy_s"] - busy0
            # the clock restarts for the syncfs: the report just asked for is the bench's, not the system's
            t1s = time.monotonic()
            syncfs(v.mnt)
            t2 = time.monotonic()
            cpu2 = accounting.process_cpu_s(pid)
            v.umount()
            t3 = time.monotonic()
        except Exception as e:
            v.spawn_prefix = []
            if trace:
                trace.stop()
            if sampler:
                sampler.stop()
            if mem:
                # the daemon must be gone before its cgroup can go; the figures say whether the limit killed it
                util.force_unmount(v.mnt)
                if v.fuse2fs is not None:
                    v.fuse2fs.kill()
                    v.fuse2fs.wait()
                    v.fuse2fs = None
                e.memory = memory = mem.close(wait=30)
                oom = memcg.oom_text(memory)
                if oom:
                    raise MemoryLimitError(f"{type(e).__name__}: {str(e)[-500:]} -- {oom}", memory) from e
            raise
        series = sampler.stop()
        if mem:
            memory = mem.close(wait=30)
            memory["loop_direct_io"] = v.loop_direct_io()
            oom = memcg.oom_text(memory)
            if oom:                           # a record the limit interfered with is no measurement
                if trace:
                    trace.stop()
                raise MemoryLimitError(oom + " (the phase itself finished)", memory)
        drops1 = accounting.drop_caches_count()
        waited, cleaning, offsets, check = 0.0, 0.0, [], {}
        extra["kernel_memory"] = kmem.result
        stepahead = dict.fromkeys(STEPAHEAD_KEYS)
        if kind == "ext4lazy":
            stats = v.ext4lazy_stats()
            stepahead = {k: stats.get(k) for k in STEPAHEAD_KEYS}
            extra["stepahead"] = {k: stats.get(k) for k in STEPAHEAD_EXTRA}
            own, model = accounting.ext4lazy_classes(stats)
            extra["requests"] = accounting.request_counts(stats["io"])
            # FUSE requests the daemon served by opcode (the phase's own mount, so the phase's requests)
            extra["fuse_requests"] = (stats.get("fuse") or {}).get("requests_by_op")
            if model is not None:
                dev = stats["device"]
                extra["model_time"] = accounting.model_time(dev)
                waited, cleaning = dev.get("wait_idle_real_s", 0.0), dev.get("cleaning_after_run_s", 0.0)
                classes, source = model, f"model report inside ext4lazy (-o device={self.model})"
                check = {"reference": "ext4lazy's own counters (-o stats: io)", "reference_by_class": own,
                         "equal_by_class": own == model}
                offsets = accounting.model_trace_offsets(tracefile, 0.0, float("inf"))
            elif self.model:
                classes, source = own, (f"ext4lazy's own counters (-o stats: io); the drive's time from the served "
                                        f"model (emu report, {self.model})")
            else:
                classes, source = own, "ext4lazy's own counters (-o stats: io)"
                check = {"reference": "none on a plain file: ext4lazy's counters are what reached the image"}
            extra["ext4lazy"] = {k: stats.get(k) for k in ("write", "journal_blocks", "journal_used_blocks",
                                                           "journal_live_blocks", "jmap_entries",
                                                           "cleaner_blocks_moved", "blocks_migrated_home")}
            if tracefile and os.path.exists(tracefile):
                os.unlink(tracefile)
        if v.on_loop:
            lost = 0
            if self.model:
                cleaning = v.wait_idle()
                rep1 = v.model_report()
                served = accounting.report_delta(rep0, rep1)
                extra["model_time"] = accounting.model_time(rep1, rep0)
                if kind == "ext4lazy":
                    extra["served_by_class"] = served     # the server's layout classes, beside ext4lazy's own
                    # the server classifies by layout alone: ext4lazy's requests carry no REQ_META flag
                    extra["model_time"]["latency_classes"] = "the server's (layout only)"
                    # requests as the drive saw them (below), as for every other row; the engine's own beside
                    extra["ext4lazy_requests"] = extra["requests"]
                else:
                    classes, source = served, f"model report (emu report, {self.model})"
                extra["requests"] = accounting.request_delta(rep0, rep1)
                offsets = accounting.model_trace_offsets(v.trace_csv, rep0["now_s"], rep1["now_s"])
            else:
                classes, lost = trace.stop()
                offsets = trace.offsets
                source = "block_rq_issue trace of the loop device, classified by layout + REQ_META"
            stat1 = accounting.loop_stat(v.loop)
            check = {"reference": f"loop device counters (/sys/block/{os.path.basename(v.loop)}/stat)",
                     "reference_total": {"read": stat1[0] - stat0[0], "write": stat1[1] - stat0[1]},
                     "lost_events": lost}
        if kind == "dbfs":
            extra["dbfs"] = v.dbfs_stats()
        check["classes_total"] = accounting.total_bytes(classes)
        raw = os.path.join(self.raw, f"{self.suite.name}.{v.system.slug}.{self.args.device}.{w.name}"
                           + (f".rep{rep}" if rep else "") + ".json")
        with open(raw, "w") as f:
            json.dump({"series": series, "series_columns": accounting.Sampler.COLUMNS, "offsets": offsets,
                       "offsets_columns": ["t_s", "offset", "len", "class", "op"]}, f)
        umount_s = max(0.0, t3 - t2 - waited)
        runtime = (t1 - t0) if w.timing == "work" else (t1 - t0) + (t2 - t1s) + umount_s
        rec = {"suite": self.suite.name, "system": v.system.name, "device": self.args.device, "workload": w.name,
               "scale": self.args.scale, "speed": self.args.speed if self.model else None,
               "runtime_s": round(runtime, 3), "cleaning_s": round(cleaning, 3), "io_mib": accounting.io_mib(classes),
               "io_source": source, "io_check": check, "timing": w.timing,
               "work_s": round(t1 - t0, 3), "syncfs_s": round(t2 - t1s, 3), "umount_s": round(umount_s, 3),
               "cleaning_wait_real_s": round(waited, 3), **stepahead,
               "params": w.params(), "extra": extra, "daemon_cpu_s": accounting.cpu_delta(cpu0, cpu1),
               "daemon_cpu_syncfs_s": accounting.cpu_delta(cpu1, cpu2),
               "loadavg_1m": load, "commit": self.commit,
               # drop_caches by other processes between this phase's own drop and its unmount: the cold walk
               # may have had to re-read what it had cached (the kernel's dentries, inodes and page cache)
               "foreign_drop_caches": accounting.drops_between(drops0, drops1), "raw": os.path.relpath(raw, self.args.out),
               "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "error": None, "memory": memory,
               "work_busy_s": None if work_busy is None else round(work_busy, 3),
               "work_s_at_drive_speed": modeltime.at_drive_speed(t1 - t0, work_busy, self.args.speed)}
        w.complete(rec)
        return rec
