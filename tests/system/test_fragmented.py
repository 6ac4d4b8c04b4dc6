"""A fragmented file written through the FUSE mount, as a new user would (issue #23).

Every other 4 KiB block of a 24 MB span, written in order on a fresh 8 GiB volume: 3,000 extents, so the
extent tree must grow to depth 2 (the root holds 4 entries, a leaf 340). The writer must finish (it runs in a
child process with a deadline, so a hung daemon fails the test instead of hanging it), the kernel must read
back the same bytes, `e2fsck -fn` must be clean and debugfs must see a depth-2 tree. Both journal modes.
"""
import hashlib
import os
import re
import subprocess
import sys

import pytest

from harness import images, util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")

BLOCK = 4096
SPAN = 6000          # blocks; every other one is written
WRITER = r"""
import sys
with open(sys.argv[1], 'wb') as f:
    for blk in range(0, int(sys.argv[2]), 2):
        f.seek(blk * 4096)
        f.write(blk.to_bytes(4, 'little') * 1024)
"""


def expected_digest():
    h = hashlib.sha256()
    hole = bytes(BLOCK)
    for blk in range(SPAN - 1):       # the file ends with the last block written (SPAN - 2)
        h.update(blk.to_bytes(4, "little") * 1024 if blk % 2 == 0 else hole)
    return h.hexdigest()


def file_digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                return h.hexdigest()
            h.update(b)


def extent_depth(img, path):
    out = util.run(["debugfs", "-R", f"ex {path}", img]).stdout
    m = re.search(r"Level Entries.*?\n\s*(\d+)/\s*(\d+)", out, re.S)
    assert m, f"debugfs ex {path}: no extent tree listed:\n{out[:2000]}"
    return int(m.group(2))


@pytest.mark.parametrize("mode", ["ordered", "lazy"])
def test_fragmented_file_through_fuse(adapter_id, adapter, workdir, mode):
    if adapter_id != "ext4lazy":
        pytest.skip("read-write tests are for ext4lazy")
    img = os.path.join(workdir, f"frag-{mode}.img")
    util.run(["truncate", "-s", "8G", img])
    util.run(["mkfs.ext4", "-F", "-q", img])
    mnt = os.path.join(workdir, f"frag-{mode}")
    os.makedirs(mnt, exist_ok=True)
    opts = "rw" if mode == "ordered" else "rw,journal=lazy"
    util.run([adapter.bin, "mount", "-o", opts, img, mnt])
    try:
        target = os.path.join(mnt, "fragmented")
        try:
            p = subprocess.run([sys.executable, "-c", WRITER, target, str(SPAN)], capture_output=True, text=True,
                               timeout=120)
        except subprocess.TimeoutExpired:
            util.force_unmount(mnt)
            pytest.fail("the writer did not finish within 120 s: the daemon left a request unanswered")
        assert p.returncode == 0, f"writer failed: {p.stderr}"
        assert file_digest(target) == expected_digest(), "ext4lazy reads back other bytes"
    finally:
        util.run([adapter.bin, "umount", mnt])
    if mode == "lazy":
        # The journal holds the metadata: e2fsck replays it, then checks.
        subprocess.run(["e2fsck", "-y", "-E", "journal_only", img], capture_output=True)
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert p.returncode == 0, f"e2fsck -fn:\n{p.stdout}{p.stderr}"
    assert extent_depth(img, "/fragmented") == 2
    with images.KernelMount(img, os.path.join(workdir, f"frag-{mode}-k"), opts="ro") as kmnt:
        assert file_digest(os.path.join(kmnt, "fragmented")) == expected_digest(), "the kernel reads other bytes"
