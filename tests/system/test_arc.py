"""The ARC control-directory tools (issue #8) at a tiny scale: the scanner's counts and digest against the
generator's manifest on the kernel's ext4 and on dbfs-sqlite through FUSE (and its database read directly),
dbfs-sqlite against tmpfs for the operations it supports, and a pjdfstest subset on dbfs-sqlite.

These test the tools, not the adapter under test: they run once, in the default (ext4lazy) run.
Binaries: ARC_CD_BIN and DBFS_SQLITE_BIN, default beside EXT4LAZY_BIN (`cargo build --release --workspace`)."""

import errno
import json
import os
import random
import re
import shutil
import sqlite3
import stat
import subprocess
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

BIN_DIR = os.path.dirname(os.environ.get("EXT4LAZY_BIN") or os.path.join(util.REPO, "target", "release", "ext4lazy"))
ARC_CD = os.environ.get("ARC_CD_BIN") or os.path.join(BIN_DIR, "arc-cd")
DBFS = os.environ.get("DBFS_SQLITE_BIN") or os.path.join(BIN_DIR, "dbfs-sqlite")
LAYOUTS = ("flat", "arc6", "arc7")
JOBS = 150


@pytest.fixture(scope="module")
def tools(adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("tool tests run once, in the default adapter's run")
    for b in (ARC_CD, DBFS):
        if not os.access(b, os.X_OK):
            pytest.fail(f"{b} missing: cargo build --release --workspace", pytrace=False)


def arc(*args, timeout=300):
    p = subprocess.run([ARC_CD, *map(str, args)], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"arc-cd {' '.join(map(str, args))}: rc={p.returncode}\n{p.stderr[-2000:]}"
    return json.loads(p.stdout)


def check_scan(rec, manifest):
    assert (rec["listed"], rec["jobs"], rec["skipped"]) == (manifest["jobs"],) * 2 + (0,), rec
    assert rec["states"] == manifest["states"]
    assert rec["digest"] == manifest["digest"], "a job's files did not come back as written"
    assert sum(rec["per_second"]) == rec["jobs"] and rec["jobs_per_s"] > 0


class Dbfs:
    """A dbfs-sqlite mount that never outlives its test."""

    def __init__(self, db, mnt, opts="allow_other"):
        self.db, self.mnt = db, mnt
        os.makedirs(mnt, exist_ok=True)
        p = subprocess.run([DBFS, "mount", "-o", opts, db, mnt], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, f"dbfs-sqlite mount: {p.stderr}"
        assert util.in_proc_mounts(mnt)

    def umount(self):
        if util.in_proc_mounts(self.mnt):
            p = subprocess.run([DBFS, "umount", self.mnt], capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                util.force_unmount(self.mnt)
                raise AssertionError(f"dbfs-sqlite umount: {p.stderr}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.umount()
        finally:
            util.force_unmount(self.mnt)


def test_scan_matches_manifest_on_kernel_ext4(tools, workdir):
    img, mnt = os.path.join(workdir, "arc-ext4.img"), os.path.join(workdir, "mnt-arc-ext4")
    os.makedirs(mnt, exist_ok=True)
    util.run(["mkfs.ext4", "-q", "-F", img, "64M"])
    manifests = {}
    try:
        util.run(["mount", "-o", "loop", img, mnt])
        for layout in LAYOUTS:
            manifests[layout] = arc("gen", "--jobs", JOBS, "--layout", layout, os.path.join(mnt, layout))
        util.run(["umount", mnt])
        util.run(["mount", "-o", "loop", img, mnt])          # fresh mount, then drop caches: a cold scan
        for layout in LAYOUTS:
            check_scan(arc("scan", "--drop-caches", "--layout", layout, os.path.join(mnt, layout)), manifests[layout])
    finally:
        util.force_unmount(mnt)
        util.detach_loops(img)
        os.unlink(img)


def test_scan_matches_manifest_on_dbfs_sqlite(tools, workdir):
    d = os.path.join(workdir, "arc-dbfs")
    os.makedirs(d, exist_ok=True)
    db, mnt = os.path.join(d, "fs.db"), os.path.join(d, "mnt")
    manifests = {}
    with Dbfs(db, mnt) as m:
        for layout in LAYOUTS:
            manifests[layout] = arc("gen", "--jobs", JOBS, "--layout", layout, "--threads", 2, os.path.join(mnt, layout))
        m.umount()
    with Dbfs(db, mnt):                                          # a fresh daemon: nothing cached
        for layout in LAYOUTS:
            check_scan(arc("scan", "--drop-caches", "--layout", layout, os.path.join(mnt, layout)), manifests[layout])
    for layout in LAYOUTS:                                       # the database without FUSE
        rec = arc("scan", "--layout", layout, "--sqlite", db, "--base", layout)
        assert rec["source"] == "sqlite-direct"
        check_scan(rec, manifests[layout])
    shutil.rmtree(d)


# --------------------------------------------------------------------------------- dbfs-sqlite vs tmpfs
def outcome(f):
    try:
        return ("ok", f())
    except OSError as e:
        return ("err", errno.errorcode.get(e.errno, e.errno))


def tree(root):
    """Everything POSIX says about the tree: names, types, modes, sizes, link counts, contents, set times."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for n in sorted(dirs + files):
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            e = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_nlink if stat.S_ISDIR(st.st_mode) else 1)
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    e += (st.st_size, f.read())
            elif stat.S_ISLNK(st.st_mode):
                e += (os.readlink(p),)
            out[rel] = e
    return out


def random_ops(rng, n):
    """A random sequence of namespace and data operations over a small name space (so they collide)."""
    names = ["a", "b", "c", "d/e", "d/f", "g/h", "g/i/j", "d", "g", "g/i"]
    ops = []
    for _ in range(n):
        k = rng.choice(["mkdir", "write", "write", "append", "pwrite", "truncate", "chmod", "utime", "rename",
                        "unlink", "rmdir", "symlink", "read", "listdir", "stat"])
        a, b = rng.choice(names), rng.choice(names)
        ops.append((k, a, b, rng.randrange(0, 9000), rng.randbytes(rng.randrange(0, 6000)), rng.choice([0o600, 0o644, 0o755, 0o700])))
    return ops


def apply(root, op):
    k, a, b, num, data, mode = op
    pa, pb = os.path.join(root, a), os.path.join(root, b)

    def write():
        with open(pa, "wb") as f:
            f.write(data)

    def append():
        with open(pa, "ab") as f:
            f.write(data)

    def pwrite():
        fd = os.open(pa, os.O_WRONLY)
        try:
            os.pwrite(fd, data[:500], num)
        finally:
            os.close(fd)

    def read():
        with open(pa, "rb") as f:
            f.seek(num // 2)
            return f.read(700)

    acts = {
        "mkdir": lambda: os.mkdir(pa, mode),
        "write": write, "append": append, "pwrite": pwrite, "read": read,
        "truncate": lambda: os.truncate(pa, num),
        "chmod": lambda: os.chmod(pa, mode),
        "utime": lambda: (os.utime(pa, ns=(num * 10**9 + 7, num * 10**9 + 9), follow_symlinks=False),
                          os.lstat(pa).st_mtime_ns, os.lstat(pa).st_atime_ns)[1:],
        "rename": lambda: os.rename(pa, pb),
        "unlink": lambda: os.unlink(pa),
        "rmdir": lambda: os.rmdir(pa),
        "symlink": lambda: os.symlink(b, pa),
        "listdir": lambda: sorted(os.listdir(pa)),
        # A directory's size is each file system's own (tmpfs counts entries): files' only.
        "stat": lambda: (lambda st: (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                                     0 if stat.S_ISDIR(st.st_mode) else st.st_size))(os.lstat(pa)),
    }
    return outcome(acts[k])


def test_dbfs_sqlite_matches_tmpfs(tools, workdir):
    d = os.path.join(workdir, "dbfs-diff")
    tmp, mnt = os.path.join(d, "tmpfs"), os.path.join(d, "mnt")
    os.makedirs(tmp, exist_ok=True)
    util.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", tmp])
    try:
        with Dbfs(os.path.join(d, "fs.db"), mnt):
            ops = random_ops(random.Random(8), 1500)
            for i, op in enumerate(ops):
                want, got = apply(tmp, op), apply(mnt, op)
                # Times are compared only where utime set them (others are the clock's).
                assert got == want, f"op {i} {op[:4]}: tmpfs {want!r:.200} dbfs-sqlite {got!r:.200}"
            want, got = tree(tmp), tree(mnt)
            assert got == want
            assert len(want) >= 5, "the sequence should leave a tree behind"
            # A listing longer than many kernel readdir buffers (~40 such names each), with removals.
            for root in (tmp, mnt):
                big = os.path.join(root, "big")
                os.mkdir(big)
                for i in range(3000):
                    open(os.path.join(big, f"job.{i:06d}.{'x' * 54}.description"), "w").close()
                for i in range(0, 3000, 7):
                    os.unlink(os.path.join(big, f"job.{i:06d}.{'x' * 54}.description"))
            names = sorted(os.listdir(os.path.join(mnt, "big")))
            assert names == sorted(os.listdir(os.path.join(tmp, "big"))) and len(names) == 3000 - 429
    finally:
        util.force_unmount(tmp)
        shutil.rmtree(d, ignore_errors=True)


def test_dbfs_sqlite_kernel_opens_keeps_unlinked_open_files(tools, workdir):
    """With kernel_opens the kernel sends no OPEN: an unlinked file must live by the kernel's lookups, be
    readable while open, and its contents leave the database (read beside the daemon, WAL mode) once the kernel
    forgets it."""
    d = os.path.join(workdir, "dbfs-kopen")
    os.makedirs(d, exist_ok=True)
    db, stats = os.path.join(d, "fs.db"), os.path.join(d, "stats.json")

    def stored(ino):
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
            return c.execute("SELECT COUNT(*) FROM contents WHERE ino = ?", (ino,)).fetchone()[0]

    try:
        with Dbfs(db, os.path.join(d, "mnt"), opts=f"allow_other,kernel_opens,stats={stats}") as m:
            path = os.path.join(m.mnt, "held")
            with open(path, "wb") as f:
                f.write(b"z" * 70000)
            fd = os.open(path, os.O_RDONLY)
            try:
                ino = os.fstat(fd).st_ino
                os.unlink(path)
                os.fsync(fd)  # commits the database
                assert os.pread(fd, 100000, 0) == b"z" * 70000
                assert stored(ino) == 1, "freed while still open"
            finally:
                os.close(fd)
            deadline = time.monotonic() + 15
            while stored(ino):
                assert time.monotonic() < deadline, "the unlinked file's contents stayed after its last close"
                time.sleep(0.1)
            m.umount()
        with open(stats) as f:
            ops = json.load(f)["requests"]
        assert ops.get("open", {}).get("count", 0) <= 1, ops
        assert ops.get("forget", {}).get("count", 0) >= 1, ops
    finally:
        shutil.rmtree(d, ignore_errors=True)


# pjdfstest files that exercise what dbfs-sqlite supports (files, directories, symlinks: no hard links, FIFOs,
# devices or sockets, which the other files create) and each run in under 0.5 s here: 126 files, ~14 s.
PJDFSTEST_FILES = [
    "tests/mkdir/02.t", "tests/mkdir/04.t", "tests/mkdir/05.t", "tests/mkdir/06.t", "tests/mkdir/07.t",
    "tests/mkdir/08.t", "tests/mkdir/09.t", "tests/mkdir/11.t", "tests/mkdir/12.t", "tests/rmdir/02.t",
    "tests/rmdir/04.t", "tests/rmdir/05.t", "tests/rmdir/07.t", "tests/rmdir/08.t", "tests/rmdir/09.t",
    "tests/rmdir/10.t", "tests/rmdir/11.t", "tests/rmdir/12.t", "tests/rmdir/13.t", "tests/rmdir/14.t",
    "tests/rmdir/15.t", "tests/unlink/01.t", "tests/unlink/02.t", "tests/unlink/04.t", "tests/unlink/05.t",
    "tests/unlink/06.t", "tests/unlink/07.t", "tests/unlink/08.t", "tests/unlink/09.t", "tests/unlink/10.t",
    "tests/unlink/12.t", "tests/unlink/13.t", "tests/unlink/14.t", "tests/rename/03.t", "tests/rename/04.t",
    "tests/rename/06.t", "tests/rename/07.t", "tests/rename/08.t", "tests/rename/11.t", "tests/rename/15.t",
    "tests/rename/16.t", "tests/rename/17.t", "tests/rename/18.t", "tests/rename/19.t", "tests/rename/21.t",
    "tests/rename/22.t", "tests/rename/24.t", "tests/open/02.t", "tests/open/04.t", "tests/open/05.t",
    "tests/open/07.t", "tests/open/08.t", "tests/open/09.t", "tests/open/10.t", "tests/open/11.t", "tests/open/12.t",
    "tests/open/13.t", "tests/open/14.t", "tests/open/15.t", "tests/open/16.t", "tests/open/18.t", "tests/open/19.t",
    "tests/open/20.t", "tests/open/21.t", "tests/open/23.t", "tests/open/26.t", "tests/truncate/01.t",
    "tests/truncate/02.t", "tests/truncate/04.t", "tests/truncate/05.t", "tests/truncate/06.t",
    "tests/truncate/07.t", "tests/truncate/08.t", "tests/truncate/09.t", "tests/truncate/10.t",
    "tests/truncate/11.t", "tests/truncate/12.t", "tests/truncate/13.t", "tests/truncate/14.t",
    "tests/ftruncate/01.t", "tests/ftruncate/02.t", "tests/ftruncate/04.t", "tests/ftruncate/05.t",
    "tests/ftruncate/06.t", "tests/ftruncate/07.t", "tests/ftruncate/08.t", "tests/ftruncate/09.t",
    "tests/ftruncate/10.t", "tests/ftruncate/11.t", "tests/ftruncate/12.t", "tests/ftruncate/13.t",
    "tests/ftruncate/14.t", "tests/chmod/02.t", "tests/chmod/04.t", "tests/chmod/05.t", "tests/chmod/06.t",
    "tests/chmod/07.t", "tests/chmod/08.t", "tests/chmod/09.t", "tests/chmod/10.t", "tests/chmod/12.t",
    "tests/chown/02.t", "tests/chown/04.t", "tests/chown/05.t", "tests/chown/06.t", "tests/chown/08.t",
    "tests/chown/09.t", "tests/chown/10.t", "tests/utimensat/02.t", "tests/utimensat/03.t", "tests/utimensat/04.t",
    "tests/utimensat/05.t", "tests/utimensat/06.t", "tests/utimensat/07.t", "tests/utimensat/08.t",
    "tests/utimensat/09.t", "tests/symlink/01.t", "tests/symlink/02.t", "tests/symlink/04.t", "tests/symlink/05.t",
    "tests/symlink/06.t", "tests/symlink/07.t", "tests/symlink/09.t", "tests/symlink/10.t", "tests/symlink/11.t",
    "tests/symlink/12.t",
]
PJDFSTEST_MIN_SUBTESTS = 740   # 745 on 2026-11-23


def test_dbfs_sqlite_pjdfstest_subset(tools, workdir):
    script = os.path.join(util.REPO, "..", "shared", "tools", "pjdfstest.sh")
    if not os.path.exists(script):
        pytest.skip("../shared/tools (pjdfstest's source) is not beside the repository")
    if not os.access("/opt/pjdfstest/pjdfstest", os.X_OK):
        pytest.fail(f"pjdfstest is not built: bash {script} build", pytrace=False)
    d = os.path.join(workdir, "dbfs-pjd")
    os.makedirs(d, exist_ok=True)
    try:
        with Dbfs(os.path.join(d, "fs.db"), os.path.join(d, "mnt")) as m:
            p = subprocess.run(["bash", script, "run", m.mnt, *PJDFSTEST_FILES], capture_output=True, text=True,
                               timeout=600)
        r = re.search(r"^(\d+) passed, (\d+) failed$", p.stdout, re.M)
        assert r, f"pjdfstest did not report:\n{p.stdout[-3000:]}{p.stderr[-2000:]}"
        passed, failed = int(r.group(1)), int(r.group(2))
        assert failed == 0, f"pjdfstest on dbfs-sqlite: {failed} failed\n{p.stdout[-4000:]}"
        assert passed >= PJDFSTEST_MIN_SUBTESTS, f"only {passed} subtests ran"
    finally:
        shutil.rmtree(d, ignore_errors=True)
