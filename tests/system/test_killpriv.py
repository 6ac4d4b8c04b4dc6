"""What a write, a truncation and a chown take away from a file: set-user-ID,
set-group-ID (only with group execute) and the file capability. ext4lazy
does this itself (FUSE_HANDLE_KILLPRIV_V2: the kernel no longer asks for
security.capability before every write); the kernel's ext4 is the oracle.
Each scenario runs on a fresh file on both and the resulting mode and
capability must match."""

import os
import shutil
import subprocess

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("setcap"),
                                reason="needs root, /dev/fuse and setcap")

USER = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

# name: (initial mode, owner, command run on the file, run as the owner?)
SCENARIOS = {
    "owner writes a 6755 file": (0o6755, 65534, ["sh", "-c", "echo x >> \"$0\""], True),
    "owner writes a 6745 file (sgid without group exec stays)": (0o6745, 65534, ["sh", "-c", "echo x >> \"$0\""], True),
    "root writes a 6755 file (CAP_FSETID keeps the bits)": (0o6755, 65534, ["sh", "-c", "echo x >> \"$0\""], False),
    "owner truncates a 6755 file": (0o6755, 65534, ["truncate", "-s", "1"], True),
    "root truncates a 6755 file": (0o6755, 65534, ["truncate", "-s", "1"], False),
    "root chowns a 6755 file": (0o6755, 65534, ["chown", "0:0"], False),
    "root chowns a 6745 file": (0o6745, 65534, ["chown", "0:0"], False),
    "root writes a file with a capability": (0o755, 0, ["sh", "-c", "echo x >> \"$0\""], False),
    "root truncates a file with a capability": (0o755, 0, ["truncate", "-s", "0"], False),
    "root chowns a file with a capability": (0o755, 0, ["chown", "65534"], False),
    "root chmods a file with a capability (it stays)": (0o755, 0, ["chmod", "700"], False),
}


def outcome(root, name, scenario):
    mode, owner, cmd, as_owner = scenario
    path = os.path.join(root, name.replace(" ", "_").replace("(", "").replace(")", ""))
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chown(path, owner, owner)
    os.chmod(path, mode)
    cap = "capability" in name
    if cap:
        util.run(["setcap", "cap_net_bind_service+ep", path])
    subprocess.run((USER if as_owner else []) + cmd + [path], check=True, capture_output=True)
    st = os.stat(path)
    has_cap = subprocess.run(["getcap", path], capture_output=True, text=True).stdout.strip() != ""
    return oct(st.st_mode & 0o7777), st.st_uid, has_cap


@pytest.fixture
def two_volumes(adapter_id, adapter, workdir):
    if adapter_id != "ext4lazy":
        pytest.skip("read-write runs are for ext4lazy")
    roots = {}
    os.chmod(workdir, 0o711)  # the unprivileged scenarios must reach the mounts
    for who in ("kernel", "ext4lazy"):
        img = os.path.join(workdir, f"killpriv-{who}.img")
        mnt = os.path.join(workdir, f"killpriv-{who}")
        os.makedirs(mnt, exist_ok=True)
        util.run(["truncate", "-s", "64M", img])
        util.run(["mkfs.ext4", "-F", "-q", img])
        if who == "kernel":
            util.run(["mount", "-o", "loop", img, mnt])
        else:
            util.run([adapter.bin, "mount", "-o", "rw,allow_other,default_permissions", img, mnt])
        os.chmod(mnt, 0o777)
        roots[who] = (img, mnt)
    yield roots
    util.run(["umount", roots["kernel"][1]])
    util.run([adapter.bin, "umount", roots["ext4lazy"][1]])
    p = subprocess.run(["e2fsck", "-fn", roots["ext4lazy"][0]], capture_output=True, text=True)
    assert p.returncode == 0, f"e2fsck -fn:\n{p.stdout}{p.stderr}"


def test_privileges_dropped_as_the_kernel_does(two_volumes):
    diffs = []
    for name, sc in SCENARIOS.items():
        k = outcome(two_volumes["kernel"][1], name, sc)
        e = outcome(two_volumes["ext4lazy"][1], name, sc)
        if k != e:
            diffs.append(f"{name}: kernel (mode, uid, cap) {k}, ext4lazy {e}")
    assert not diffs, "\n".join(diffs)
