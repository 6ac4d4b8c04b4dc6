"""Issue #24, local users: the files the daemon (root) writes are not
redirected by symlinks planted where they go, and an inode number the kernel
still holds is not given to a new file.

- Log, live stats and `stats=` file: a symlink planted at each path is
  replaced, never followed (its target stays as it was); the files are 0600.
- Inode numbers (default mode, the kernel opens nothing itself): a file held
  only by an O_PATH descriptor (no OPEN reaches the daemon, so it is freed at
  its unlink) keeps its number until the kernel forgets it. New files in the
  only group never get it, even when it is the last free one, and reopening
  the descriptor through /proc never reaches a new file.
"""

import errno
import os
import stat
import time

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")


def run_file(mnt, ext):
    name = os.path.realpath(mnt).replace("/", "_").lstrip("_")
    return f"/run/ext4lazy/{name}.{ext}"


def test_log_and_stats_do_not_follow_symlinks(adapter_id, binary, scratch_volume, workdir):
    img, mnt = scratch_volume
    victim = os.path.join(workdir, "victim")
    with open(victim, "w") as f:
        f.write("precious\n")
    os.chmod(victim, 0o644)
    os.makedirs("/run/ext4lazy", exist_ok=True)
    log, live = run_file(mnt, "log"), run_file(mnt, "stats.json")
    final = os.path.join(workdir, "final-stats.json")
    planted = [log, live, final]
    for p in planted:
        if os.path.lexists(p):
            os.unlink(p)
        os.symlink(victim, p)
    try:
        util.run([binary, "mount", "-o", f"rw,stats={final}", img, mnt])
        try:
            with open(os.path.join(mnt, "f"), "w") as f:
                f.write("x")
            for p in (log, live):
                st = os.lstat(p)
                assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, (p, oct(st.st_mode))
        finally:
            util.run([binary, "umount", mnt])
        st = os.lstat(final)
        assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600, oct(st.st_mode)
        assert open(victim).read() == "precious\n"
    finally:
        for p in planted:
            if os.path.lexists(p):
                os.unlink(p)


def test_a_held_inode_number_is_not_reused(adapter_id, workdir):
    if adapter_id != "ext4lazy":
        pytest.skip("read-write runs are for ext4lazy")
    from harness import adapters
    bin_ = adapters.Ext4lazy().bin
    img = os.path.join(workdir, "few-inodes.img")
    mnt = os.path.join(workdir, "few-inodes-mnt")
    os.makedirs(mnt, exist_ok=True)
    util.run(["truncate", "-s", "16M", img])
    # One group of 64 inodes: reuse, if it happens, happens within the test.
    util.run(["mkfs.ext4", "-F", "-q", "-b", "4096", "-N", "64", img])
    util.run([bin_, "mount", "-o", "rw", img, mnt])
    try:
        victim = os.path.join(mnt, "victim")
        with open(victim, "w") as f:
            f.write("old file\n")
        held = os.open(victim, os.O_PATH)
        old_ino = os.fstat(held).st_ino
        os.unlink(victim)
        made, full = [], False
        for i in range(200):
            p = os.path.join(mnt, f"new{i}")
            try:
                with open(p, "w") as f:
                    f.write(f"new file {i}\n")
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                full = True
                break
            made.append((p, os.stat(p).st_ino))
        assert full, "the group never filled"
        assert old_ino not in [ino for _, ino in made], "a new file got the number the kernel still holds"
        # Reopening the held descriptor reaches no new file, nor the freed inode.
        with pytest.raises(OSError) as e:
            os.close(os.open(f"/proc/self/fd/{held}", os.O_WRONLY | os.O_APPEND))
        assert e.value.errno == errno.ENOENT, e.value
        for i, (p, _) in enumerate(made):
            assert open(p).read() == f"new file {i}\n", p
        # Once the kernel forgets the old inode, its number is free again.
        os.close(held)
        last = os.path.join(mnt, "after-forget")
        for _ in range(50):
            try:
                open(last, "w").close()
                break
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                time.sleep(0.1)
        assert os.stat(last).st_ino == old_ino
    finally:
        util.run([bin_, "umount", mnt])
    p = util.run(["e2fsck", "-fn", img], check=False)
    assert p.returncode == 0, f"e2fsck -fn:\n{p.stdout}{p.stderr}"
