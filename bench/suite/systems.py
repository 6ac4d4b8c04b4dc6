"""The file systems under test: how each is made (mkfs) and mounted.

ext4lazy-<mode>[-stepahead] is parsed, not listed, so modes and the StepAhead flag added later need no change here
beyond the mount option they map to (MODE_OPTIONS, FLAG_OPTIONS).
"""
import copy
import os
import re
import shutil

from .core import MiB

# ext4lazy journal mode -> mount options; flags after the mode -> mount options
MODE_OPTIONS = {"ordered": [], "lazy": ["journal=lazy"]}
FLAG_OPTIONS = {
    "stepahead": ["stepahead"],
    # Transport ablations (the write-path benchmark's ext4lazy-dev, ext4lazy-uring-normal): /dev/fuse instead of
    # io_uring, and the io_uring queue threads at normal priority.
    "fusedev": ["transport=dev"],
    "uringnormal": ["uring_sched=normal"],
    # Ablation: file data written at once, one request per write, as before the data write-back layer.
    "directdata": ["writeback_mb=0"],
    # Ablation: the daemon's image I/O through the host's page cache (a second copy of every block it reads or
    # writes) instead of O_DIRECT, the path the kernel's file systems get from `losetup --direct-io=on`.
    "buffered": ["image_io=buffered"],
    # On a model: the model inside ext4lazy's own daemon (`-o device=MODEL`), submitting whole batches to its queue,
    # instead of the path every other system takes (a loop device over `ext4lazy emu serve`'s export). The old
    # default, kept to measure what the path itself is worth (issue #27's null test); never a comparison row.
    "inproc": [],
    # Ablation: blocks allocated at write time, no delayed allocation (the kernel's `nodelalloc`).
    "nodelalloc": ["delalloc_mb=0"],
    # Ablation: delayed data waits the kernel's 30 s (dirty_expire_centisecs) instead of ext4lazy's 5 s, to measure
    # what the shorter wait costs in data written (docs/ARCHITECTURE.md says why it is 5 s).
    "expire30": ["data_expire=30"],
    # StepAhead's full-path hints read only what the path needs (no read-ahead of a new directory).
    "exact": ["stepahead_paths=exact"],
    # Changes how the workload runs, not the mount: its programs run with LD_PRELOAD=libext4lazy_preload.so
    # (StepAhead's full-path hints, docs/STEPAHEAD.md).
    "preload": [],
    # Changes how the volume is made (MKFS_FLAGS), not the mount.
    "inline": [],
    # The kernel opens files without asking the daemon: no OPEN/RELEASE round trips (docs/ARCHITECTURE.md).
    "kernelopens": ["kernel_opens"],
    # The transport's floor, not a file system: the daemon serves an in-memory tree that drops file data
    # (crates/fuse/src/floor.rs), with ext4lazy's FUSE capabilities and transport, so the kernel sends it the same
    # requests; its time is what the FUSE round trips cost before any file system work. The image is not touched.
    "floor": ["floor"],
    # The floor with file data: the same tree in memory, each file's bytes in a slot of one sparse file beside the
    # image, written and read through the host's page cache (crates/fuse/src/floor.rs). What a FUSE server costs that
    # leaves block placement and write-back to the kernel: the floor of a workload that reads back what it wrote.
    "floordata": ["floor=data"],
}
PRELOAD_LIB = "libext4lazy_preload.so"
# flags that change how the volume is made instead (or as well): extra mkfs.ext4 arguments
# inline: small files inside large inodes (issue #8: ARC's job files; in lazy mode they sit in the journal)
INLINE_MKFS = ["-I", "2048", "-O", "inline_data"]
MKFS_FLAGS = {"inline": INLINE_MKFS}


# The kernel queues at most net.unix.max_dgram_qlen datagrams on a Unix socket (10 unless systemd raised it to
# 512): the preload library's hints sent while that many wait are dropped unseen. `-preload` runs use systemd's value
# (the runner raises it for the run, then restores it; read when the daemon binds its hint socket).
HINT_QUEUE_SYSCTL = "/proc/sys/net/unix/max_dgram_qlen"
HINT_QUEUE = 512


class System:
    def __init__(self, name, kind, fstype="ext4", journal=None, options=(), doc="", preload=False, mkfs_extra=(),
                 inproc=False):
        self.name, self.kind, self.fstype, self.journal, self.options, self.doc = (
            name, kind, fstype, journal, list(options), doc)
        # ext4lazy `-inproc`: on a model, the model runs inside the daemon instead of behind the served loop device
        self.inproc = inproc
        self.preload = preload
        self.mkfs_extra = list(mkfs_extra)
        # kind "dbfs": dbfs-sqlite's database on a kernel ext4 of the volume; direct: a read-only phase reads
        # that database through SQLite alone (the kernel ext4 mounted, no FUSE; docs/ARC.md)
        self.direct = name.endswith("-direct")
        # `ext4lazy-...@PATH`: this system runs the ext4lazy at PATH, not the one under test (A/B runs of two builds)
        self.binary = None

    @property
    def slug(self):
        """The name as a file name (a binary's path has slashes)."""
        return re.sub(r"[^A-Za-z0-9._-]+", "_", self.name)

    def workload_env(self, binary):
        """Environment changes for the workload's programs: the preload library for `-preload` systems."""
        return {"LD_PRELOAD": preload_library(binary)} if self.preload else {}

    @property
    def leaves_journal(self):
        """True when a clean unmount leaves the volume needing recovery by design (lazy: metadata in the log)."""
        return "journal=lazy" in self.options

    def mkfs_cmd(self, image, journal_mib, stock_journal_mib=None):
        if self.fstype == "xfs":
            return ["mkfs.xfs", "-f", "-q", image]
        # Inode tables and journal written now, so no kernel lazyinit thread writes during the measurements.
        cmd = ["mkfs.ext4", "-F", "-q", "-E", "lazy_itable_init=0,lazy_journal_init=0"]
        if self.journal == "large":
            cmd += ["-J", f"size={journal_mib}"]
        elif self.journal == "stock" and stock_journal_mib:
            cmd += ["-J", f"size={stock_journal_mib}"]
        return cmd + self.mkfs_extra + [image]

    def available(self, binary):
        binary = self.binary or binary
        if self.binary and not os.access(self.binary, os.X_OK):
            return False, f"{self.binary} is not an executable"
        need = {"kernel": ["mount", "losetup"], "fuse2fs": ["fuse2fs", "fusermount3", "losetup"], "ext4lazy": [],
                "dbfs": ["mount", "losetup"]}
        for tool in need[self.kind] + ["mkfs.xfs" if self.fstype == "xfs" else "mkfs.ext4"]:
            if not shutil.which(tool):
                return False, f"{tool} is not installed (scripts/setup.sh installs it)"
        if self.kind == "ext4lazy" and not binary:
            return False, "no ext4lazy binary (run through `ext4lazy bench` or set EXT4LAZY_BIN)"
        if self.preload and not os.path.isfile(preload_library(binary)):
            return False, (f"no preload library at {preload_library(binary)} (cargo build --release builds it "
                           f"beside the binary; or set EXT4LAZY_PRELOAD)")
        if self.kind == "dbfs" and not os.access(dbfs_binary(binary), os.X_OK):
            return False, f"{dbfs_binary(binary)} is missing (cargo build --release --workspace)"
        return True, ""


def dbfs_binary(binary):
    """dbfs-sqlite, built beside ext4lazy by `cargo build --workspace` (DBFS_SQLITE_BIN overrides)."""
    return os.environ.get("DBFS_SQLITE_BIN") or os.path.join(os.path.dirname(binary or ""), "dbfs-sqlite")


FIXED = {
    "kernel-ext4-stock": System("kernel-ext4-stock", "kernel", journal="stock",
                                doc="the kernel's ext4, mkfs.ext4's default journal (the paper's ext4-stock)"),
    "kernel-ext4-baseline": System("kernel-ext4-baseline", "kernel", journal="large",
                                   doc="the kernel's ext4 with the large journal (the paper's ext4-baseline: 10 GiB, "
                                       "scaled)"),
    "kernel-xfs": System("kernel-xfs", "kernel", fstype="xfs", doc="the kernel's XFS, mkfs.xfs defaults"),
    "fuse2fs": System("fuse2fs", "fuse2fs", journal="stock", doc="e2fsprogs' fuse2fs (no journaling of its own)"),
    "kernel-ext4-inline": System("kernel-ext4-inline", "kernel", journal="stock", mkfs_extra=INLINE_MKFS,
                                 doc="the kernel's ext4, mkfs's default journal, small files inline in 2 KiB "
                                     "inodes (" + " ".join(INLINE_MKFS) + ")"),
    "dbfs-sqlite": System("dbfs-sqlite", "dbfs", journal="stock",
                          doc="files as BLOBs in SQLite through FUSE (crates/dbfs), the database on a kernel ext4"),
    "dbfs-sqlite-kernelopens": System("dbfs-sqlite-kernelopens", "dbfs", journal="stock", options=["kernel_opens"],
                                      doc="dbfs-sqlite mounted with kernel_opens (no OPEN/RELEASE round trips, as "
                                          "ext4lazy's option of that name)"),
    "dbfs-sqlite-direct": System("dbfs-sqlite-direct", "dbfs", journal="stock",
                                 doc="dbfs-sqlite, written through FUSE; read phases query its database directly "
                                     "(no FUSE)"),
}


def get(name):
    if "@" in name:
        base, path = name.split("@", 1)
        s = copy.copy(get(base))
        if s.kind != "ext4lazy" or not path:
            raise ValueError(f"{name!r}: only an ext4lazy system takes @BINARY (a path to an ext4lazy binary)")
        s.name, s.binary, s.doc = name, os.path.abspath(path), s.doc + f", binary {path}"
        return s
    if name in FIXED:
        return FIXED[name]
    m = re.fullmatch(r"ext4lazy-([a-z]+)((?:-[a-z0-9]+)*)", name)
    if m and m.group(1) in MODE_OPTIONS:
        flags = [f for f in m.group(2).split("-") if f]
        if all(f in FLAG_OPTIONS for f in flags):
            opts = list(MODE_OPTIONS[m.group(1)])
            mkfs = []
            for f in flags:
                opts += FLAG_OPTIONS[f]
                mkfs += MKFS_FLAGS.get(f, [])
            return System(name, "ext4lazy", journal="large", options=opts, mkfs_extra=mkfs,
                          doc=f"ext4lazy, journal={m.group(1)}" + "".join(f", {f}" for f in flags)
                              + (" (" + " ".join(mkfs) + ")" if mkfs else "") + " (large journal, as the baseline)",
                          preload="preload" in flags, inproc="inproc" in flags)
    raise ValueError(f"unknown system {name!r}; systems: {', '.join(names())}")


# Flags that change only how a volume is read, never what is on it: a system with them may walk a copy of the
# volume its base system (the same name without them) made in a setup phase.
READ_ONLY_FLAGS = {"stepahead", "exact", "preload"}


def volume_base(name):
    """`ext4lazy-<mode>` for `ext4lazy-<mode>-<flags>` when every flag is a read-side one, else None."""
    m = re.fullmatch(r"(ext4lazy-[a-z]+)((?:-[a-z]+)+)", name)
    if not m or m.group(1) not in (f"ext4lazy-{x}" for x in MODE_OPTIONS):
        return None
    flags = [f for f in m.group(2).split("-") if f]
    return m.group(1) if flags and all(f in READ_ONLY_FLAGS for f in flags) else None


# The order systems appear in in tables and plots; others follow by name.
DISPLAY_ORDER = ["kernel-ext4-stock", "kernel-ext4-baseline", "kernel-xfs", "fuse2fs", "ext4lazy-ordered",
                 "ext4lazy-ordered-stepahead", "ext4lazy-lazy", "ext4lazy-lazy-stepahead",
                 "kernel-ext4-inline", "dbfs-sqlite", "dbfs-sqlite-kernelopens", "dbfs-sqlite-direct",
                 "ext4lazy-ordered-inline", "ext4lazy-lazy-inline", "ext4lazy-ordered-kernelopens",
                 "ext4lazy-lazy-inline-kernelopens"]


def display_order(names):
    """`names` sorted as DISPLAY_ORDER says."""
    return sorted(names, key=lambda n: (DISPLAY_ORDER.index(n) if n in DISPLAY_ORDER else len(DISPLAY_ORDER), n))


def names():
    return list(FIXED) + [f"ext4lazy-{m}" for m in MODE_OPTIONS] + [
        f"ext4lazy-{m}-{f}" for m in MODE_OPTIONS for f in
        ("stepahead", "directdata", "stepahead-preload", "stepahead-exact-preload", "inline", "kernelopens",
         "inline-kernelopens", "fusedev", "uringnormal", "inproc")]


def preload_library(binary):
    """$EXT4LAZY_PRELOAD, else the library built beside the ext4lazy binary (same cargo target directory)."""
    return os.environ.get("EXT4LAZY_PRELOAD") or os.path.join(os.path.dirname(binary or ""), PRELOAD_LIB)


def default_journal_mib(size):
    """mkfs.ext4's own journal size for a partition of `size` bytes with 4 KiB blocks (e2fsprogs 1.47,
    ext2fs_default_journal_size)."""
    blocks = size // 4096
    for limit, mib in ((32768, 4), (256 * 1024, 16), (512 * 1024, 32), (4096 * 1024, 64), (8192 * 1024, 128),
                       (16384 * 1024, 256), (32768 * 1024, 512)):
        if blocks < limit:
            return mib
    return 1024


def baseline_journal_mib(scale, size):
    """The paper's 10 GiB journal scaled, but never below mkfs's default for the partition (the baseline's
    journal is the large one), nor below 256 MiB; at most a quarter of the partition."""
    want = max(256, default_journal_mib(size), round(10240 * scale))
    return int(min(10240, want, max(16, size // MiB // 4)))
