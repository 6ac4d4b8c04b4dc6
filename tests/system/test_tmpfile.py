"""O_TMPFILE (FUSE_TMPFILE): an open file with no name, which linkat(2)
may name later and which is freed at its last close, or, after a crash,
at the next mount (it waits on the orphan list). The kernel's ext4 reads the
volume afterwards and e2fsck -fn must be clean."""

import ctypes
import os
import signal
import subprocess
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000


def link_fd(fd, path):
    if libc.linkat(fd, b"", AT_FDCWD, path.encode(), AT_EMPTY_PATH) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), path)


def used_inodes(mnt):
    s = os.statvfs(mnt)
    return s.f_files - s.f_ffree


@pytest.fixture
def volume(scratch_volume):
    return scratch_volume


def kernel_reads(img, mnt):
    """Mount in the kernel (replays the journal, frees orphans), list and read."""
    util.run(["mount", "-o", "loop", img, mnt])
    try:
        return {n: open(os.path.join(mnt, n), "rb").read() for n in os.listdir(mnt) if n != "lost+found"}, used_inodes(mnt)
    finally:
        util.run(["umount", mnt])


def test_tmpfile_linked_and_unlinked(adapter, volume):
    img, mnt = volume
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    try:
        before = used_inodes(mnt)
        fd = os.open(mnt, os.O_TMPFILE | os.O_RDWR, 0o640)
        os.write(fd, b"named later\n")
        assert os.fstat(fd).st_nlink == 0 and used_inodes(mnt) == before + 1
        link_fd(fd, os.path.join(mnt, "linked"))
        assert os.fstat(fd).st_nlink == 1
        os.close(fd)
        fd = os.open(mnt, os.O_TMPFILE | os.O_WRONLY, 0o600)
        os.write(fd, b"x" * 300_000)
        assert used_inodes(mnt) == before + 2
        os.close(fd)
        # Released asynchronously by the kernel: give the last close a moment.
        for _ in range(50):
            if used_inodes(mnt) == before + 1:
                break
            time.sleep(0.1)
        assert used_inodes(mnt) == before + 1, "the unnamed file was not freed at its last close"
        excl = os.open(mnt, os.O_TMPFILE | os.O_WRONLY | os.O_EXCL, 0o600)
        with pytest.raises(OSError):
            link_fd(excl, os.path.join(mnt, "never"))  # O_EXCL: may never be named
        os.close(excl)
    finally:
        util.run([adapter.bin, "umount", mnt])
    files, _ = kernel_reads(img, mnt)
    assert files == {"linked": b"named later\n"}


def test_tmpfile_open_at_a_crash_is_freed(adapter, volume):
    img, mnt = volume
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    holder = subprocess.Popen(["python3", "-c", (
        "import os, sys, time\n"
        f"fd = os.open({mnt!r}, os.O_TMPFILE | os.O_RDWR, 0o600)\n"
        "os.write(fd, b'y' * 200000); os.fsync(fd)\n"
        "print('ready', flush=True); time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        pid = int(util.run(["pgrep", "-f", f"ext4lazy.*{os.path.basename(img)}"]).stdout.split()[0])
        os.kill(pid, signal.SIGKILL)
    finally:
        holder.kill()
        holder.wait()
        subprocess.run(["umount", "-l", mnt], capture_output=True)
    # ext4lazy's own mount frees the orphan, then the kernel finds only the root's entries.
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    util.run([adapter.bin, "umount", mnt])
    files, used = kernel_reads(img, mnt)
    assert files == {} and used == 11, (files, used)
