"""A write(2) and a store through a shared mapping of the same page, at the
same time from two threads, must both land, as on the kernel's ext4. They
did not while write handles were direct (FOPEN_DIRECT_IO): the kernel drops
the page before a direct write, the store faults it back in with the old
bytes, and that page's write-back then overwrites the write (214 of 2,000
files lost the written half). Every handle now goes through the page cache
(`HANDLE_FLAGS`, crates/fuse/src/serve.rs)."""

import mmap
import os
import threading

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

FILES = 1000
WANT = b"\x22" * 2048 + b"\xab" * 2048


def race(path, writer_flags):
    """Bytes 2048.. by pwrite through a handle opened with `writer_flags`,
    while bytes ..2048 are stored through a shared mapping, then once more."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    os.ftruncate(fd, 4096)
    wfd = os.open(path, writer_flags) if writer_flags is not None else fd
    m = mmap.mmap(fd, 4096, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    done = threading.Event()

    def writer():
        os.pwrite(wfd, b"\xab" * 2048, 2048)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    while not done.is_set():
        m[0:2048] = b"\x11" * 2048
    m[0:2048] = b"\x22" * 2048
    t.join()
    m.close()
    if wfd != fd:
        os.close(wfd)
    os.close(fd)


@pytest.mark.parametrize("writer", ["write-only handle", "the mapped handle"])
def test_a_write_racing_a_store_to_the_same_page_keeps_both(adapter, scratch_volume, writer):
    img, mnt = scratch_volume
    flags = os.O_WRONLY if writer == "write-only handle" else None
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    try:
        for k in range(FILES):
            race(os.path.join(mnt, f"f{k}"), flags)
        lost = [k for k in range(FILES) if open(os.path.join(mnt, f"f{k}"), "rb").read() != WANT]
        assert not lost, f"{len(lost)} of {FILES} files lost bytes while mounted"
    finally:
        util.run([adapter.bin, "umount", mnt])
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    try:
        lost = [k for k in range(FILES) if open(os.path.join(mnt, f"f{k}"), "rb").read() != WANT]
        assert not lost, f"{len(lost)} of {FILES} files lost bytes across a remount"
    finally:
        util.run([adapter.bin, "umount", mnt])
