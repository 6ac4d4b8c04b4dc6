"""StepAhead through FUSE (issue 7): a cold walk of a mount with `-o stepahead` shows exactly the kernel's tree,
and the mount's figures (live `ext4lazy stat --json MNT`, `-o stats=FILE` at unmount) are there and sane.

ext4lazy only.  Variants: the default layout (with a 3,000-entry htree directory), inline directories, block-mapped
directories, and (big) the 3-level htree with interior index nodes.
"""
import json
import os
import shutil
import subprocess

import pytest

from harness import compare, images, util

KEYS = ("hit_rate", "prefetch_blocks", "prefetch_wasted_blocks", "kb_bytes", "kb_entries")


@pytest.fixture(autouse=True)
def only_ext4lazy(adapter_id):
    if adapter_id != "ext4lazy":
        pytest.skip("StepAhead is an ext4lazy mount option")


def live_stats(adapter, mnt, until=lambda s: True):
    """The live figures: wait up to 5 s for `until`."""
    return util.live_stats(adapter.bin, mnt, until)


@pytest.mark.parametrize("variant", ["default", "inline_data", "noextent",
                                     pytest.param("large_dir", marks=pytest.mark.big)])
def test_cold_walk_with_stepahead_matches_kernel(variant, store, adapter, mounts, workdir):
    v = images.VARIANTS[variant]
    kernel = store.kernel_walk(v)["records"]
    img = store.image(v)
    stats_file = os.path.join(workdir, f"stepahead-{variant}.json")
    if os.path.exists(stats_file):
        os.unlink(stats_file)
    util.drop_caches()
    m = mounts.mount(adapter, img, options=["ro", "stepahead", f"stats={stats_file}"], label=f"sa-{variant}")
    out = os.path.join(workdir, f"stepahead-{variant}.walk.json")
    walk = compare.walk(m.mnt, out, timeout=900 if v.big else 300, on_timeout=lambda: util.abort_fuse(m.mnt))
    for group in compare.GROUPS:
        diffs = compare.diff(kernel, walk["records"], group)
        assert not diffs, f"[{variant}/{group}] " + compare.report(diffs, "kernel", "ext4lazy -o stepahead")
    live = live_stats(adapter, m.mnt, until=lambda s: s.get("kb_entries", 0) >= len(kernel))
    m.umount()
    with open(stats_file) as f:
        final = json.load(f)
    for s in (live, final):
        missing = [k for k in KEYS if k not in s]
        assert not missing, f"stats lack {missing}: {sorted(s)}"
        assert s["stepahead"] is True
        assert 0.0 <= s["hit_rate"] <= 1.0
    dirs = sum(1 for r in kernel.values() if r.get("type") == "dir") if isinstance(kernel, dict) else None
    # The walk listed every directory: the KB learnt them all, and it is compact.
    assert final["kb_entries"] >= len(kernel), (final["kb_entries"], len(kernel))
    assert final["kb_bytes"] < 200 * final["kb_entries"], final
    assert final["prefetch_blocks"] > 0 and final["prefetch_batches"] > 0, final
    # Final figures: every prefetched block was used or wasted, and most were used.
    assert final["prefetch_used_blocks"] + final["prefetch_wasted_blocks"] == final["prefetch_blocks"], final
    assert final["prefetch_wasted_blocks"] <= final["prefetch_blocks"] // 2, final
    assert final["hit_rate"] > 0.5, final
    # The live figures are a snapshot taken during or after the walk: never ahead of the final ones.
    assert live["kb_entries"] <= final["kb_entries"], (live["kb_entries"], final["kb_entries"])
    print(f"[{variant}] dirs={dirs} hit_rate={final['hit_rate']:.3f} prefetched={final['prefetch_blocks']} "
          f"wasted={final['prefetch_wasted_blocks']} kb={final['kb_entries']} entries / {final['kb_bytes']} bytes")


def test_changes_through_a_stepahead_mount(store, adapter, mounts, workdir):
    """Read-write with StepAhead: a tree changed through the mount (KB updated in-band) lists as expected on a
    remount, the kernel sees the same tree, and e2fsck is clean."""
    src = store.image(images.VARIANTS["default"])
    img = os.path.join(workdir, "stepahead-rw.img")
    subprocess.run(["cp", "--sparse=always", src, img], check=True)
    m = mounts.mount(adapter, img, options=["rw", "stepahead"], ro=False, label="sa-rw")
    J = os.path.join
    before = sorted(os.listdir(m.mnt))
    os.makedirs(J(m.mnt, "sa/a/b"))
    for i in range(600):  # grows sa/a into an htree
        with open(J(m.mnt, "sa/a", f"file-{i:04d}-" + "x" * 40), "w") as f:
            f.write(str(i))
    os.rename(J(m.mnt, "sa/a/b"), J(m.mnt, "sa/b-moved"))
    for i in range(0, 600, 2):
        os.unlink(J(m.mnt, "sa/a", f"file-{i:04d}-" + "x" * 40))
    os.rename(J(m.mnt, "sa/a", "file-0001-" + "x" * 40), J(m.mnt, "sa/b-moved", "one"))
    expect = {root[len(m.mnt):]: sorted(dirs + files) for root, dirs, files in os.walk(J(m.mnt, "sa"))}
    live = live_stats(adapter, m.mnt, until=lambda s: s.get("kb_entries", 0) >= 600)
    assert live["kb_entries"] >= 600 // 2, live  # sa/ and its subdirectories, learnt at mkdir
    m.umount()
    util.drop_caches()
    m = mounts.mount(adapter, img, options=["ro", "stepahead"], label="sa-rw-again")
    got = {root[len(m.mnt):]: sorted(dirs + files) for root, dirs, files in os.walk(J(m.mnt, "sa"))}
    assert sorted(os.listdir(m.mnt)) == sorted(before + ["sa"])
    m.umount()
    assert got == expect
    kmnt = mounts.mountpoint("sa-kernel")
    with images.KernelMount(img, kmnt, opts="ro") as root:
        kernel = {r[len(root):]: sorted(d + f) for r, d, f in os.walk(J(root, "sa"))}
    assert kernel == expect
    p = subprocess.run(["e2fsck", "-fn", img], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    os.unlink(img)
    shutil.rmtree(kmnt, ignore_errors=True)
