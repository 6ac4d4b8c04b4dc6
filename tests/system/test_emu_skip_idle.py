"""`ext4lazy emu wait-idle --skip`: a served SMR model finishes the cleaning it owes in model time, at once, after
the kernel's ext4 has written to it through a loop device and let go; the model seconds are what a wait in real
time gives (crates/diskmodel/tests/invariants.rs compares the two on one request sequence)."""
import json
import os
import subprocess
import time

import pytest

from harness import util


@pytest.fixture
def served(binary, workdir):
    d = os.path.join(workdir, "skip-idle")
    srv, mnt = os.path.join(d, "srv"), os.path.join(d, "mnt")
    os.makedirs(srv)
    os.makedirs(mnt)
    util.run([binary, "emu", "serve", "--model", "smr-seagate", "--size", "1G", "--backing",
              os.path.join(d, "back.img"), srv])
    loop = None
    try:
        loop = util.run(["losetup", "-f", "--show", "--direct-io=on", os.path.join(srv, "disk.img")]).stdout.strip()
        yield srv, mnt, loop
    finally:
        if util.in_proc_mounts(mnt):
            util.force_unmount(mnt)
        if loop:
            subprocess.run(["losetup", "-d", loop], capture_output=True)
        subprocess.run(["fusermount3", "-u", srv], capture_output=True)


def stats(srv):
    with open(os.path.join(srv, "stats.json")) as f:
        return json.load(f)


def test_the_cleaning_after_the_host_let_go_takes_no_real_time(binary, served):
    srv, mnt, loop = served
    util.run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", loop])
    util.run(["mount", loop, mnt])
    for i in range(200):                      # scattered small writes: many bands in the persistent cache
        with open(os.path.join(mnt, f"f{i}"), "wb") as f:
            f.write(os.urandom(4096))
    util.run(["umount", mnt])
    util.run(["losetup", "-d", loop])
    before = stats(srv)
    assert before["state"]["cache_used_bytes"] > 0, before["state"]
    t0 = time.monotonic()
    out = util.run([binary, "emu", "wait-idle", "--skip", srv], timeout=120).stdout.splitlines()
    real = time.monotonic() - t0
    cleaning = float(out[-1])
    after = stats(srv)
    assert after["state"]["cache_used_bytes"] == 0 and not after["state"]["cleaning_pending"], after["state"]
    # each band cleaned costs the drive at least a read and a rewrite of the band: seconds of model time
    bands = after["state"]["bands_cleaned"] - before["state"]["bands_cleaned"]
    assert bands > 0 and cleaning > 0.1 * bands, (bands, cleaning)
    assert after["now_s"] - before["now_s"] >= cleaning - 1e-6, (before["now_s"], after["now_s"], cleaning)
    assert real < max(5.0, cleaning / 4), (real, cleaning)
