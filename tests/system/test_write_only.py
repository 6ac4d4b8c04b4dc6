"""Write-only handles bypass the kernel's page cache (FOPEN_DIRECT_IO, see
crates/fuse/src/serve.rs): what they write must still be what every other
handle reads at once, through read(2) and through a shared mapping, and the
data must reach the image (the kernel's ext4 reads it back, e2fsck -fn clean)."""

import mmap
import os

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")


@pytest.fixture
def mounted(adapter, scratch_volume):
    img, mnt = scratch_volume
    util.run([adapter.bin, "mount", "-o", "rw", img, mnt])
    try:
        yield img, mnt, adapter
    finally:
        util.run([adapter.bin, "umount", mnt], check=False)  # the test may have unmounted


def test_other_handles_see_write_only_writes_at_once(mounted):
    img, mnt, adapter = mounted
    path = os.path.join(mnt, "f")
    with open(path, "wb") as f:
        f.write(b"A" * 16384)
    rw = os.open(path, os.O_RDWR)
    try:
        assert os.pread(rw, 16384, 0) == b"A" * 16384  # now in the page cache
        m = mmap.mmap(rw, 16384)
        assert m[5000:5004] == b"AAAA"
        wo = os.open(path, os.O_WRONLY)
        try:
            # A write-only handle cannot be mapped (unchanged: mmap needs read access).
            with pytest.raises(PermissionError):
                mmap.mmap(wo, 4096)
            assert os.pwrite(wo, b"B" * 100, 4050) == 100  # across a page boundary
        finally:
            os.close(wo)
        want = b"A" * 4050 + b"B" * 100 + b"A" * (16384 - 4150)
        assert os.pread(rw, 16384, 0) == want, "read(2) on another handle"
        assert m[:] == want, "a shared mapping made before the write"
        with open(path, "rb") as f:
            assert f.read() == want, "a new handle"
        # Appends through a write-only handle land at the end another handle made.
        os.pwrite(rw, b"C" * 10, 16384)
        ap = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(ap, b"D" * 5)
        finally:
            os.close(ap)
        want += b"C" * 10 + b"D" * 5
        assert os.pread(rw, 20000, 0) == want
        assert os.fstat(rw).st_size == len(want)
        m.close()
    finally:
        os.close(rw)
    # O_CREAT | O_WRONLY | O_TRUNC, as cp and tar open files, over a cached file.
    with open(path, "rb") as f:
        f.read()
    with open(path, "wb") as f:
        f.write(b"new")
    with open(path, "rb") as f:
        assert f.read() == b"new"
    with open(os.path.join(mnt, "g"), "wb") as f:  # write-only from the start
        f.write(b"x" * 5000 + b"y" * 5000)
    util.run([adapter.bin, "umount", mnt])
    util.run(["mount", "-o", "loop,ro", img, mnt])
    try:
        assert open(path, "rb").read() == b"new"
        assert open(os.path.join(mnt, "g"), "rb").read() == b"x" * 5000 + b"y" * 5000
    finally:
        util.run(["umount", mnt])
