"""open(O_TRUNC) of an existing file: the truncation reaches the daemon as a
SETATTR after the kernel's own checks. The same opens run on the kernel's ext4
and on ext4lazy, with and without `kernel_opens`, and must end the same way.

ext4lazy does not ask for FUSE_ATOMIC_O_TRUNC (docs/ARCHITECTURE.md,
Decisions): with it the daemon truncates inside OPEN, before the kernel checks
for a running executable (ETXTBSY) or a Landlock truncate restriction, so the
open failed and the file was emptied anyway. The running-executable case is
kept here."""

import errno
import json
import os
import subprocess
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

CASES = [
    ("write-only", os.O_WRONLY | os.O_TRUNC),
    ("read-write", os.O_RDWR | os.O_TRUNC),
    ("read-only", os.O_RDONLY | os.O_TRUNC),
    ("append", os.O_WRONLY | os.O_APPEND | os.O_TRUNC),
]


def scenario(mnt):
    """Every case on a cached file of 10,000 bytes, a plain file, an
    append-only one and an immutable one: (size after, bytes read, mtime moved
    or the errno) per case and file."""
    out = {}
    for attr in ["", "+a", "+i"]:
        for name, flags in CASES:
            path = os.path.join(mnt, f"{name}{attr.replace('+', '_')}")
            with open(path, "wb") as f:
                f.write(b"z" * 10000)
            with open(path, "rb") as f:
                f.read()  # in the page cache
            if attr:
                subprocess.run(["chattr", attr, path], check=True)
            before = os.stat(path).st_mtime_ns
            time.sleep(0.01)
            try:
                fd = os.open(path, flags)
                os.close(fd)
                st = os.stat(path)
                with open(path, "rb") as f:
                    got = f.read()
                out[f"{name}{attr}"] = (st.st_size, len(got), st.st_mtime_ns != before)
            except OSError as e:
                out[f"{name}{attr}"] = errno.errorcode[e.errno]
            if attr:
                subprocess.run(["chattr", attr.replace("+", "-"), path], check=True)
    return out


def fresh(path):
    util.run(["truncate", "-s", "64M", path])
    util.run(["mkfs.ext4", "-F", "-q", path])


def test_truncating_opens_end_as_on_the_kernels_ext4(adapter, scratch_volume, workdir):
    img, mnt = scratch_volume
    kimg = os.path.join(workdir, "kernel.img")
    fresh(kimg)
    util.run(["mount", "-o", "loop", kimg, mnt])
    try:
        want = scenario(mnt)
    finally:
        util.run(["umount", mnt])
    assert want["write-only"] == (0, 0, True) and want["append+a"] == "EPERM", want
    stats = os.path.join(workdir, "trunc.stats.json")
    for opts in ["rw", "rw,kernel_opens"]:
        fresh(img)
        util.run([adapter.bin, "mount", "-o", f"{opts},stats={stats}", img, mnt])
        try:
            got = scenario(mnt)
        finally:
            util.run([adapter.bin, "umount", mnt])
        assert got == want, f"{opts}: ext4lazy {got}, the kernel's ext4 {want}"
        ops = json.load(open(stats))["fuse"]["requests_by_op"]
        assert ops.get("SETATTR", 0) >= 4, f"{opts}: the truncations come as SETATTRs: {ops}"
        p = util.run(["e2fsck", "-fn", img], check=False)
        assert p.returncode == 0, p.stdout


def test_a_truncating_open_of_a_running_program_leaves_it_whole(adapter, scratch_volume):
    """ETXTBSY for open(O_RDONLY|O_TRUNC) and open(O_WRONLY|O_TRUNC) of a
    program that runs, and the program untouched, as on the kernel's ext4."""
    img, mnt = scratch_volume
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    try:
        prog = os.path.join(mnt, "sleeper")
        with open("/bin/sleep", "rb") as src, open(prog, "wb") as dst:
            dst.write(src.read())
        os.chmod(prog, 0o755)
        size = os.stat(prog).st_size
        running = subprocess.Popen([prog, "2"])
        try:
            time.sleep(0.3)
            for flags in [os.O_RDONLY | os.O_TRUNC, os.O_WRONLY | os.O_TRUNC]:
                with pytest.raises(OSError) as refused:
                    os.close(os.open(prog, flags))
                assert refused.value.errno == errno.ETXTBSY
                assert os.stat(prog).st_size == size, "the refused open emptied the program"
        finally:
            assert running.wait(timeout=30) == 0, "the program died while it ran"
    finally:
        util.run([adapter.bin, "umount", mnt])
