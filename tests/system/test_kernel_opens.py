"""`-o kernel_opens`: the kernel opens files without asking the daemon (FUSE_NO_OPEN_SUPPORT), so the only
sign that an unlinked file is still in use is the kernel's lookup count (crates/fuse/src/lib.rs). An unlinked
file must stay readable while a handle holds it, be freed once the kernel forgets it, and leave nothing behind
at unmount; the daemon must see at most the one OPEN it refuses (its per-opcode counters); writes to an immutable file still
fail. e2fsck -fn checks the image after each test (scratch_volume), free counts included."""

import fcntl
import json
import os
import struct
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


@pytest.fixture
def mounted(adapter, scratch_volume, workdir):
    img, mnt = scratch_volume
    stats = os.path.join(workdir, "kernel-opens-stats.json")
    util.run([adapter.bin, "mount", "-o", f"rw,kernel_opens,stats={stats}", img, mnt])
    try:
        yield img, mnt, adapter, stats
    finally:
        util.run([adapter.bin, "umount", mnt], check=False)  # the test may have unmounted


def free_blocks(mnt):
    return os.statvfs(mnt).f_bfree


def wait_for(pred, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_unlinked_file_lives_until_the_kernel_forgets_it(mounted):
    img, mnt, adapter, stats = mounted
    os.sync()
    before = free_blocks(mnt)
    data = os.urandom(64 * 4096)
    path = os.path.join(mnt, "held")
    with open(path, "wb") as f:
        f.write(data)
    os.sync()
    assert free_blocks(mnt) <= before - 64
    fd = os.open(path, os.O_RDONLY)
    try:
        os.unlink(path)
        assert not os.path.exists(path)
        # The blocks must not be reused while the handle reads them: write as much again.
        with open(os.path.join(mnt, "filler"), "wb") as f:
            f.write(os.urandom(64 * 4096))
        os.sync()
        assert os.pread(fd, len(data), 0) == data, "an unlinked, open file keeps its data"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    os.unlink(os.path.join(mnt, "filler"))
    # FORGET arrives once the kernel evicts the inode; then both files' blocks are free again.
    wait_for(lambda: (os.sync(), free_blocks(mnt))[1] >= before, "the unlinked files' blocks to be freed")
    # Rename over a file that is open: the old target stays readable.
    a, b = os.path.join(mnt, "a"), os.path.join(mnt, "b")
    with open(a, "wb") as f:
        f.write(b"new contents")
    with open(b, "wb") as f:
        f.write(b"old contents")
    fd = os.open(b, os.O_RDONLY)
    try:
        os.rename(a, b)
        assert os.pread(fd, 100, 0) == b"old contents"
        assert open(b, "rb").read() == b"new contents"
    finally:
        os.close(fd)
    util.run([adapter.bin, "umount", mnt])
    fuse = json.load(open(stats))["fuse"]
    ops = fuse["requests_by_op"]
    # Serving time by opcode: for the same opcodes, none negative, some time in all.
    busy = fuse["busy_s_by_op"]
    assert set(busy) == set(ops) and all(t >= 0 for t in busy.values()), (busy, ops)
    assert sum(busy.values()) > 0, busy
    # The first OPEN is answered ENOSYS, which tells the kernel to send no more.
    assert ops.get("OPEN", 0) <= 1, f"the kernel still sent OPEN: {ops}"
    assert ops.get("FORGET", 0) + ops.get("BATCH_FORGET", 0) > 0, ops


def test_files_unlinked_just_before_unmount_are_freed(mounted):
    img, mnt, adapter, _ = mounted
    for i in range(50):
        with open(os.path.join(mnt, f"f{i}"), "wb") as f:
            f.write(b"x" * 10000)
    for i in range(50):
        os.unlink(os.path.join(mnt, f"f{i}"))
    util.run([adapter.bin, "umount", mnt])
    # scratch_volume's e2fsck -fn checks the free counts and that no orphan is left; so does the kernel.
    util.run(["mount", "-o", "loop,ro", img, mnt])
    try:
        assert os.listdir(mnt) == ["lost+found"]
    finally:
        util.run(["umount", mnt])


def test_writes_to_an_immutable_file_still_fail(mounted):
    img, mnt, adapter, _ = mounted
    path = os.path.join(mnt, "frozen")
    with open(path, "wb") as f:
        f.write(b"keep")
    fd = os.open(path, os.O_RDONLY)
    try:
        flags = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, struct.pack("l", 0)))[0]
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags | FS_IMMUTABLE_FL))
    finally:
        os.close(fd)
    # Without OPEN the daemon cannot refuse open(2) itself (documented); the write is refused.
    try:
        wfd = os.open(path, os.O_WRONLY)
    except PermissionError:
        wfd = None
    if wfd is not None:
        try:
            with pytest.raises(PermissionError):
                os.write(wfd, b"lost")
        finally:
            os.close(wfd)
    with pytest.raises(PermissionError):
        os.truncate(path, 0)
    assert open(path, "rb").read() == b"keep"
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("l", flags))
    finally:
        os.close(fd)
