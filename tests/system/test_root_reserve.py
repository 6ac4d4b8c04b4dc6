"""The blocks mkfs reserves for root (`-m`, s_r_blocks_count) go only to the
reserve's user, to its group, and to holders of CAP_SYS_RESOURCE, as on the
kernel's ext4 (`ext4_has_free_clusters`). Until 2026-12-06 ext4lazy let any
user fill them: a user's `dd` took the volume to its last block, and root
was left nothing to repair it with.

Each case fills a fresh 64 MiB volume with 10% reserved, first as the writer
of the case and then as the reserve's user, on the kernel's ext4 and on ext4lazy; what
each accepted must agree, survive the unmount, and leave e2fsck clean."""

import os
import shutil
import subprocess

import pytest

from harness import util

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse") or not shutil.which("setpriv"),
                                reason="needs root, /dev/fuse and setpriv")

NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
RESGID = 4242


def holds_cap_sys_resource():
    with open("/proc/self/status") as f:
        caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    return bool(caps & (1 << 24))


CASES = {
    # name: (command prefix of the first writer, may it take the reserve?, tune2fs options, kernel mount options)
    "nobody": (NOBODY, False, [], ""),
    # The kernel here (6.18) takes s_resgid from s_def_resuid at mount
    # (/proc/mounts shows resgid=65534 for resuid 65534, resgid 4242), so
    # its mount is told the superblock's group.
    "nobody in the reserve's group": (
        ["setpriv", "--reuid=65534", "--regid=65534", f"--groups={RESGID}"], True, ["-g", str(RESGID)],
        f",resgid={RESGID}"),
    "the reserve's user": (NOBODY, True, ["-u", "65534"], ""),
    # Root that is not the reserve's user may take it only with
    # CAP_SYS_RESOURCE, which some machines' root lacks (this one's does).
    "root, not the reserve's user": ([], holds_cap_sys_resource(), ["-u", "65534"], ""),
    # Inside a user namespace of its own any user holds every capability;
    # the kernel asks for CAP_SYS_RESOURCE in the initial one (found by a
    # review: ext4lazy trusted /proc's CapEff and gave nobody the reserve).
    "nobody in a user namespace of its own": (NOBODY + ["unshare", "-Ur"], False, [], ""),
    "root without CAP_SYS_RESOURCE, not the reserve's user": (
        ["setpriv", "--inh-caps=-sys_resource", "--bounding-set=-sys_resource"], False, ["-u", "65534"], ""),
}
FILL = 'dd if=/dev/zero of="$0" bs=64k status=none; dd if=/dev/zero of="$0" bs=4k oflag=append conv=notrunc status=none; exit 0'


def fill(prefix, path):
    """Write to `path` until ENOSPC (64 KiB writes, then 4 KiB), synced; the bytes it holds."""
    p = subprocess.run(prefix + ["sh", "-c", FILL, path], capture_output=True, text=True)
    assert "No space left on device" in p.stderr, f"{prefix}: the fill did not end at ENOSPC: {p.stderr}"
    subprocess.run(["sync", "-f", path], check=True)
    return os.path.getsize(path)


def run_case(adapter, workdir, who, prefix, tune, kernel_opts):
    img = os.path.join(workdir, f"{who}.img")
    mnt = os.path.join(workdir, f"{who}-mnt")
    os.makedirs(mnt, exist_ok=True)
    util.run(["truncate", "-s", "64M", img])
    util.run(["mkfs.ext4", "-F", "-q", "-m", "10", img])
    if tune:
        util.run(["tune2fs"] + tune + [img])
    if who == "kernel":
        util.run(["mount", "-o", "loop" + kernel_opts, img, mnt])
    else:
        util.run([adapter.bin, "mount", "-o", "rw,allow_other,default_permissions", img, mnt])
    try:
        os.chmod(mnt, 0o777)
        avail = subprocess.run(prefix + ["df", "-B1", "--output=avail", mnt], capture_output=True, text=True,
                               check=True).stdout.split()[-1]
        first = fill(prefix, os.path.join(mnt, "first"))
        # Then the reserve's own user.
        root = fill(NOBODY if "-u" in tune else [], os.path.join(mnt, "root"))
    finally:
        util.run(["umount", mnt] if who == "kernel" else [adapter.bin, "umount", mnt])
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert p.returncode == 0, f"{who}: e2fsck -fn:\n{p.stdout}{p.stderr}"
    # What was accepted is there after the unmount.
    util.run(["mount", "-o", "loop,ro", img, mnt])
    try:
        sizes = (os.path.getsize(os.path.join(mnt, "first")), os.path.getsize(os.path.join(mnt, "root")))
        with open(os.path.join(mnt, "first"), "rb") as f:
            f.seek(max(0, sizes[0] - (1 << 20)))
            assert f.read().count(0) == min(sizes[0], 1 << 20), f"{who}: the first file's last MiB is not its zeros"
    finally:
        util.run(["umount", mnt])
    assert sizes == (first, root), f"{who}: sizes after the unmount {sizes}, before {(first, root)}"
    return int(avail), first, root


@pytest.mark.parametrize("case", list(CASES))
def test_roots_reserve_as_the_kernel_keeps_it(adapter_id, adapter, workdir, case):
    if adapter_id != "ext4lazy":
        pytest.skip("read-write runs are for ext4lazy")
    prefix, privileged, tune, kernel_opts = CASES[case]
    if "unshare" in prefix and subprocess.run(prefix + ["true"], capture_output=True).returncode != 0:
        pytest.skip("unprivileged user namespaces are not allowed here")
    os.chmod(workdir, 0o711)  # the unprivileged writers must reach the mounts
    kernel = run_case(adapter, workdir, "kernel", prefix, tune, kernel_opts)
    ours = run_case(adapter, workdir, "ext4lazy", prefix, tune, "")
    reserve = 64 * 1024 * 1024 // 10
    slack = 64 * 4096  # what placing tree blocks may change
    for who, (avail, first, owner) in (("kernel", kernel), ("ext4lazy", ours)):
        if privileged:
            assert first > avail + reserve * 9 // 10 and owner < reserve // 4, \
                f"{who}: this writer should take the reserve: it got {first} with {avail} available, its owner {owner}"
        else:
            assert first <= avail + slack and owner > reserve * 9 // 10, \
                f"{who}: this writer should leave the reserve: it got {first} with {avail} available, its owner {owner}"
    assert ours[0] == kernel[0], f"df's avail for the writer: ext4lazy {ours[0]}, kernel {kernel[0]}"
    assert abs(ours[1] - kernel[1]) <= slack, f"first writer: ext4lazy {ours[1]} bytes, kernel {kernel[1]}"
    assert abs(ours[2] - kernel[2]) <= slack, f"the reserve's owner after it: ext4lazy {ours[2]}, kernel {kernel[2]}"
