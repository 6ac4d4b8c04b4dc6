"""A volume of one system on one device, through its life: mkfs, attach (model server, loop device), mount,
unmount, cleaning, teardown.

Devices: `file` = an image file on this machine's disk; `cmr`, `smr-seagate`, `smr-wd` = the disk models.
- Kernel file systems and fuse2fs see a loop device (`losetup --direct-io=on`, so cold reads reach the device
  and no second page cache hides it) over the image file (`file`) or over the model server's DIR/disk.img
  (`ext4lazy emu serve`, which lives as long as the volume, so the drive's state carries over between phases).
- ext4lazy on `file` opens the image file itself with O_DIRECT (`-o image_io=direct`: no host page cache, as the
  loop device's `--direct-io=on`; the `-buffered` flag is the ablation). On a model it takes the kernel's path:
  the same served model and loop device, opened with O_DIRECT, so every system meets the same layers, queue
  depth and reordering (issue #27). The `-inproc` flag runs the model inside the daemon instead
  (`-o device=MODEL,speed=S`), only to measure what that path is worth.
mkfs always writes the image file directly, before any model sees it: every run starts on a clean drive.
"""
import json
import os
import re
import subprocess
import time

from harness import images, util

from .core import GiB

MODELS = ("cmr", "smr-seagate", "smr-wd")
DEVICES = ("file",) + MODELS


class SetupError(Exception):
    pass


def run(cmd, timeout=600):
    """harness.util.run, failing as a SetupError (a failed setup is a result of the run) with the stdout."""
    p = util.run(cmd, check=False, timeout=timeout)
    if p.returncode != 0:
        raise SetupError(f"{' '.join(map(str, cmd))} failed rc={p.returncode}: {(p.stderr or p.stdout).strip()[-600:]}")
    return p.stdout


def model_capacity(binary, model):
    """The modelled drive's capacity in bytes (from `emu params`)."""
    out = run([binary, "emu", "params", "--model", model, "--markdown"])
    for line in out.splitlines():
        if line.startswith("| `capacity_bytes` |"):
            return int(line.split("|")[2].strip())
    raise SetupError(f"`emu params --model {model}` did not show capacity_bytes")


_KNOWN_OPTIONS = {}


def knows_option(binary, text):
    """Whether the ext4lazy at `binary` parses the mount option `text` (builds older than it refuse it: A/B runs)."""
    key = (binary, text)
    if key not in _KNOWN_OPTIONS:
        with open(binary, "rb") as f:
            _KNOWN_OPTIONS[key] = text.encode() in f.read()
    return _KNOWN_OPTIONS[key]


def layout(binary, image):
    """Journal and static-metadata byte ranges of the volume in `image` (the image server's own classifier)."""
    return json.loads(run([binary, "emu", "layout", image]))


def live_stats_path(mnt):
    """Where an ext4lazy daemon keeps its live figures (src/cmd/mount.rs: run_file)."""
    flat = os.path.realpath(mnt).replace("/", "_").lstrip("_")
    return f"/run/ext4lazy/{flat}.stats.json"


class Volume:
    def __init__(self, system, device, speed, workdir, tag, size, journal_mib, binary, log):
        self.system, self.device, self.speed, self.binary, self.log = system, device, speed, binary, log
        self.size, self.journal_mib = size, journal_mib
        base = os.path.join(workdir, f"{system.slug}-{tag}")
        self.image, self.mnt, self.srv = base + ".img", base + ".mnt", base + ".srv"
        self.stats = base + ".stats.json"
        self.host = base + ".host"          # dbfs-sqlite: the kernel ext4 holding its database
        self.fuse_mounted = False           # dbfs-sqlite: whether this phase went through FUSE
        self.extra_options = []             # ext4lazy: the group's own mount options (Group.ext4lazy_options)
        self.stock_journal_mib = None       # the group's stock journal, when not mkfs's default
        # `bench run --memory`: what the file-system daemon is started through (memcg.Record.wrap), so that it
        # is in the record's memory cgroup from its start; [] otherwise
        self.spawn_prefix = []
        self.loop = self.serving = self.fuse2fs = None
        self.layout = None
        self.trace_csv = None
        self.traces = False

    @property
    def model(self):
        return None if self.device == "file" else self.device

    @property
    def on_loop(self):
        """Whether this volume sits behind a loop device (over the image, or over the served model): every
        system but ext4lazy on `file` and ext4lazy `-inproc` on a model."""
        if self.system.kind != "ext4lazy":
            return True
        return bool(self.model) and not self.system.inproc

    @property
    def source(self):
        """What an ext4lazy daemon opens: the loop device on a loop device, else the image file."""
        return self.loop if self.on_loop else self.image

    def snapshot_path(self):
        """Where ext4lazy keeps a lazy volume's jmap snapshot (src/cmd/mount.rs: jmap_snapshot_path): beside an
        image file, under /var/lib/ext4lazy for a device."""
        if not self.on_loop:
            return self.image + ".jmap"
        if not self.loop:
            return None
        return os.path.join("/var/lib/ext4lazy", self.loop.replace("/", "_").lstrip("_") + ".jmap")

    # ---- life cycle
    def create(self):
        with open(self.image, "wb") as f:
            f.truncate(self.size)
        run(self.system.mkfs_cmd(self.image, self.journal_mib, self.stock_journal_mib), timeout=1800)
        self.layout = layout(self.binary, self.image)

    def attach(self, traces=False):
        os.makedirs(self.mnt, exist_ok=True)
        self.traces = traces
        if not self.on_loop:
            return
        target = self.image
        if self.model:
            os.makedirs(self.srv, exist_ok=True)
            cmd = [self.binary, "emu", "serve", "--model", self.model, "--size", str(self.size), "--backing",
                   self.image, "--speed", str(self.speed), "--log", self.srv + ".log"]
            if traces:
                self.trace_csv = self.srv + ".trace.csv"
                cmd += ["--trace", self.trace_csv]
            run(cmd + [self.srv], timeout=120)
            self.serving = True
            target = os.path.join(self.srv, "disk.img")
        self.loop = run(["losetup", "-f", "--show", "--direct-io=on", target]).strip()

    def mount(self, traces_file=None, writes=True):
        """`writes` False: a phase that only reads (dbfs-sqlite-direct then mounts no FUSE)."""
        s = self.system
        if s.kind == "kernel":
            run(["mount", "-t", s.fstype, self.loop, self.mnt])
        elif s.kind == "dbfs":
            self.mount_dbfs(fuse=writes or not s.direct)
        elif s.kind == "fuse2fs":
            logf = open(self.image + ".fuse2fs.log", "a")
            self.fuse2fs = subprocess.Popen(self.spawn_prefix + ["fuse2fs", self.loop, self.mnt, "-o", "rw,fakeroot",
                                                                 "-f"],
                                            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            logf.close()
            t = time.time() + 60
            while not util.in_proc_mounts(self.mnt):
                if self.fuse2fs.poll() is not None or time.time() > t:
                    raise SetupError(f"fuse2fs did not mount {self.loop} (see {self.image}.fuse2fs.log)")
                time.sleep(0.02)
        else:
            if os.path.exists(self.stats):
                os.unlink(self.stats)
            opts = ["rw", f"stats={self.stats}"]
            inproc = self.model and not self.on_loop
            if not inproc and knows_option(self.binary, "image_io="):
                opts.append("image_io=direct")    # before the system's options: its `-buffered` flag wins
            opts += s.options + self.extra_options
            if inproc:
                opts += [f"device={self.model}", f"speed={self.speed}"]
                if traces_file:
                    opts.append(f"trace={traces_file}")
            run(self.spawn_prefix + [self.binary, "mount", "-o", ",".join(opts), self.source, self.mnt], timeout=600)

    def mount_dbfs(self, fuse):
        """dbfs-sqlite: the kernel ext4 at HOST and the database HOST/fs.db through FUSE at the mount point;
        without `fuse` (dbfs-sqlite-direct's reads) the kernel ext4 alone at the mount point."""
        if not fuse:
            run(["mount", "-t", "ext4", self.loop, self.mnt])
            self.fuse_mounted = False
            return
        os.makedirs(self.host, exist_ok=True)
        run(["mount", "-t", "ext4", self.loop, self.host])
        if os.path.exists(self.stats):
            os.unlink(self.stats)
        try:
            opts = [f"stats={self.stats}"] + self.system.options
            run(self.spawn_prefix + [dbfs_binary(self.binary), "mount", "-o", ",".join(opts), dbfs_db(self.host),
                                     self.mnt])
        except Exception:
            util.force_unmount(self.host)
            raise
        self.fuse_mounted = True

    def umount_dbfs(self):
        if self.fuse_mounted:
            # returns once the daemon has committed, checkpointed and exited
            run_until_not_busy([dbfs_binary(self.binary), "umount", self.mnt])
            run_until_not_busy(["umount", self.host])
        else:
            run_until_not_busy(["umount", self.mnt])

    def dbfs_stats(self):
        """dbfs-sqlite's request counters of the phase (None when it went around FUSE)."""
        if not self.fuse_mounted or not os.path.exists(self.stats):
            return None
        with open(self.stats) as f:
            return json.load(f)

    def umount(self):
        s = self.system
        if s.kind == "kernel":
            run(["umount", self.mnt], timeout=3600)
        elif s.kind == "dbfs":
            self.umount_dbfs()
        elif s.kind == "fuse2fs":
            run(["fusermount3", "-u", self.mnt])
            self.fuse2fs.wait(timeout=3600)        # it writes back and closes the device before exiting
            if self.fuse2fs.returncode != 0:
                raise SetupError(f"fuse2fs exited rc={self.fuse2fs.returncode}")
            self.fuse2fs = None
        else:
            # returns once the daemon has written everything (and, -inproc on a model, waited for the drive's
            # cleaning; on the served model the runner waits for it as for the kernel)
            run([self.binary, "umount", self.mnt], timeout=24 * 3600)
            if util.in_proc_mounts(self.mnt):
                raise SetupError(f"ext4lazy umount left {self.mnt} mounted")

    def copy_from(self, other):
        """Make this (ext4lazy, unmounted) volume a copy of `other`'s, sparse, with a lazy volume's jmap
        snapshot beside it (IMAGE.jmap)."""
        if self.system.kind != "ext4lazy" or other.system.kind != "ext4lazy":
            raise SetupError("only ext4lazy volumes are copied (kernel ones are not read through a copy)")
        # A served volume's model and loop device start afresh on the copy, as after any phase (each ends with
        # the drive's cleaning waited for), and nothing of them caches the image's old contents. The snapshot
        # is named after the loop device, which may change.
        self.drop_snapshot()
        self.detach()
        try:
            run(["cp", "--sparse=always", other.image, self.image], timeout=3600)
        finally:
            if self.on_loop:
                self.attach(self.traces)
        theirs, ours = other.snapshot_path(), self.snapshot_path()
        if theirs and os.path.exists(theirs):
            run(["cp", theirs, ours])
        elif ours and os.path.exists(ours):
            os.unlink(ours)
        self.layout = layout(self.binary, self.image)

    def daemon_pid(self):
        """The FUSE daemon serving this mounted volume (its CPU time is recorded), or None.  `ext4lazy mount`
        hands back no PID (it spawns the daemon detached and exits), so the daemon is found as what the
        harness finds it as: the one process holding its image file or loop device open, which it does,
        flocked, for its whole life (no other process opens them during a phase).  fuse2fs is the runner's
        own child."""
        if self.system.kind == "fuse2fs" and self.fuse2fs is not None:
            return self.fuse2fs.pid
        if self.system.kind != "ext4lazy":
            return None
        holders = [p for p in util.pids_holding(self.source) if p != os.getpid()]
        return holders[0] if len(holders) == 1 else None

    def fuse_daemon_pid(self):
        """The FUSE daemon of this mounted volume, for the memory cgroup check (`--memory`): daemon_pid(), and
        for dbfs-sqlite the one process holding its database open (None when it went around FUSE)."""
        if self.system.kind == "dbfs":
            if not self.fuse_mounted:
                return None
            holders = [p for p in util.pids_holding(dbfs_db(self.host)) if p != os.getpid()]
            return holders[0] if len(set(holders)) == 1 else None
        return self.daemon_pid()

    def loop_direct_io(self):
        """Whether the loop device does direct I/O to its backing file (/sys/block/loopN/loop/dio): with it, no
        page cache of the image (or of the model server's disk.img) is charged to anyone; None without a loop."""
        if not self.loop:
            return None
        try:
            with open(f"/sys/block/{os.path.basename(self.loop)}/loop/dio") as f:
                return f.read().strip() == "1"
        except OSError:
            return None

    def fsck(self):
        """After a phase that wrote, with the volume unmounted: `e2fsck -fn` on the image (what
        bench/writepath.py did).  Never raises: {"clean": True/False, "rc", "seconds", "output" (first lines
        when not clean), "needs_recovery"} or {"clean": None, "skipped": why}.  A lazy volume needs recovery
        after a clean unmount by design (its metadata lives in the journal), so its check runs on a sparse
        copy whose journal e2fsck replays first: the volume itself stays as ext4lazy left it for the group's
        next phase.  Any other volume that still needs recovery after its unmount is not clean."""
        s = self.system
        if s.fstype != "ext4":
            return {"clean": None, "skipped": f"{s.fstype}, not ext4"}
        if s.kind == "dbfs":
            return {"clean": None, "skipped": "dbfs-sqlite keeps its files in a SQLite database, not in ext4"}
        t = time.monotonic()
        copy = self.image + ".fsck" if s.leaves_journal else None
        try:
            if copy:
                run(["cp", "--sparse=always", self.image, copy], timeout=3600)
            out = e2fsck(copy or self.image, replay=bool(copy))
        except Exception as e:                      # noqa: BLE001 - a check that cannot run is not clean
            out = {"clean": False, "rc": None, "output": [f"{type(e).__name__}: {str(e)[-600:]}"]}
        finally:
            if copy and os.path.exists(copy):
                os.unlink(copy)
        out["seconds"] = round(time.monotonic() - t, 2)
        return out

    def cold_cache(self):
        """Before a phase: this volume's image clean on the host's disk, then every cache dropped.  fsync of
        the image, not a global sync: the volume is unmounted here, so its image file is the only thing of
        this run that can have dirty pages (ext4lazy and the model server write it through the host's page
        cache), and on a shared machine a global sync waits for everyone else's writes (seconds a phase)."""
        fd = os.open(self.image, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")

    def ext4lazy_stats(self):
        with open(self.stats) as f:
            return json.load(f)

    def model_report(self):
        return json.loads(run([self.binary, "emu", "report", "--json", self.srv]))

    def wait_idle(self, timeout=24 * 3600):
        """Systems on a served model, after the unmount: the model seconds of the drive's cleaning after the run.
        Nothing reaches the drive any more, so its cleaning runs at once in model time (`wait-idle --skip`: the
        same seconds as a wait in real time, crates/diskmodel/tests/invariants.rs) where the binary has it."""
        cmd = [self.binary, "emu", "wait-idle", self.srv]
        if knows_option(self.binary, "skip-idle"):
            cmd.append("--skip")
        out = run(cmd, timeout=timeout + 60)
        return float(out.strip().splitlines()[-1].split()[0])

    def drop_snapshot(self):
        """A lazy volume's jmap snapshot on a loop device is named after the device (snapshot_path): it goes
        with the volume's loop device, so that the next volume on that device never sees it."""
        if self.system.kind == "ext4lazy" and self.on_loop and self.loop:
            snap = self.snapshot_path()
            if snap and os.path.exists(snap):
                os.unlink(snap)

    def detach(self):
        """Never raises: the loop devices over the image or the served model, and the model server, go (the
        image stays). Also what an interrupted run left behind: loop devices found by their backing file, and
        a server still mounted on this volume's directory."""
        loops = {self.loop} if self.loop else set()
        for backing in (self.image, os.path.join(self.srv, "disk.img")):
            if os.path.exists(backing):
                p = subprocess.run(["losetup", "-j", backing], capture_output=True, text=True)
                loops |= {line.split(":", 1)[0] for line in p.stdout.splitlines() if line.startswith("/dev/loop")}
        for loop in loops:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        self.loop = None
        if self.serving or util.in_proc_mounts(self.srv):
            subprocess.run(["fusermount3", "-u", self.srv], capture_output=True)
            if util.in_proc_mounts(self.srv):
                util.force_unmount(self.srv)
        self.serving = None

    def teardown(self, remove=True):
        """Never raises: unmount, detach, stop the server, and (remove) delete the image."""
        try:
            if util.in_proc_mounts(self.mnt):
                if self.system.kind == "ext4lazy":
                    subprocess.run([self.binary, "umount", self.mnt], capture_output=True, timeout=600)
                util.force_unmount(self.mnt)
        except Exception:
            util.force_unmount(self.mnt)
        if util.in_proc_mounts(self.host):
            util.force_unmount(self.host)
        if self.fuse2fs is not None:
            self.fuse2fs.kill()
            self.fuse2fs.wait()
            self.fuse2fs = None
        self.drop_snapshot()
        self.detach()
        if remove:
            for p in (self.image, self.image + ".jmap", self.image + ".fsck", self.stats, self.image + ".fuse2fs.log",
                      self.srv + ".log", self.srv + ".trace.csv"):
                if os.path.exists(p):
                    os.unlink(p)
            for d in (self.mnt, self.srv, self.host):
                try:
                    os.rmdir(d)
                except OSError:
                    pass


FSCK_LINES = 20


def e2fsck(image, replay=False):
    """`e2fsck -fn IMAGE`; with `replay`, first `e2fsck -y -E journal_only` (replays the journal, nothing else:
    no -f, whose repairs the -fn after it would not see).  The result as Volume.fsck describes it."""
    out = {"needs_recovery": "needs_recovery" in images.features(images.fs_info(image))}
    if replay:
        p = util.run(["e2fsck", "-y", "-E", "journal_only", image], check=False, timeout=3600)
        out["replay_rc"] = p.returncode
        if p.returncode not in (0, 1):                # 1: the journal was replayed
            return dict(out, clean=False, rc=p.returncode,
                        output=[f"e2fsck -y -E journal_only failed rc={p.returncode}:"] + first_lines(p))
    elif out["needs_recovery"]:
        return dict(out, clean=False, rc=None, output=["the volume needs journal recovery after its clean unmount"])
    p = util.run(["e2fsck", "-fn", image], check=False, timeout=3600)
    return dict(out, clean=p.returncode == 0, rc=p.returncode, output=None if p.returncode == 0 else first_lines(p))


def first_lines(p, n=FSCK_LINES):
    """The first `n` lines of a check's output, without e2fsck's banner and "Pass N:" headers (every run prints
    them, and the problems are what matters)."""
    lines = [x for x in (p.stdout + p.stderr).splitlines() if x.strip() and not re.match(r"Pass \d|e2fsck \d", x)]
    return lines[:n]


def dbfs_binary(binary):
    from .systems import dbfs_binary as find
    return find(binary)


def dbfs_db(host):
    """Where dbfs-sqlite's database lives on its kernel ext4."""
    return os.path.join(host, "fs.db")


def run_until_not_busy(cmd, tries=40):
    """An unmount, retried while the kernel still holds files the workload just closed (a FUSE release in
    flight right after the workload's processes exit gives EBUSY)."""
    for i in range(tries):
        try:
            return run(cmd, timeout=3600)
        except SetupError as e:
            if "busy" not in str(e).lower() or i == tries - 1:
                raise
            time.sleep(0.5)


def host_free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def round_up_gib(n):
    return -(-n // GiB) * GiB
