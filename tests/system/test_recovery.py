"""A volume whose journal needs recovery must mount read-only and show the post-replay tree, without
writing to the image.  Oracle: the kernel mounting a private copy (its ro mount replays the journal into it)."""
import os
import shutil

import pytest

from harness import adapters, compare, images, util

pytestmark = pytest.mark.recovery


@pytest.fixture(scope="module")
def recovery(workdir):
    d = os.path.join(workdir, "recovery")
    os.makedirs(d, exist_ok=True)
    # A global sync(2) from anything else on the machine (a benchmark starting a
    # timed phase) checkpoints the kernel's journal under the fixture: build again.
    for _ in range(3):
        img, info = images.build_needs_recovery(d)
        if info["transactions"] >= 2:
            break
    # oracle: kernel replays a copy (ro mount on a writable loop device replays, and keeps atimes)
    oracle_img = os.path.join(d, "oracle.img")
    util.run(["cp", "--sparse=always", img, oracle_img])
    with images.KernelMount(oracle_img, os.path.join(d, "k1"), "ro"):
        replayed = compare.walk(os.path.join(d, "k1"), os.path.join(d, "replayed.json"))
    # the same image without replay, to prove the journal matters
    noload_img = os.path.join(d, "noload.img")
    util.run(["cp", "--sparse=always", img, noload_img])
    with images.KernelMount(noload_img, os.path.join(d, "k2"), "ro,noload"):
        stale = compare.walk(os.path.join(d, "k2"), os.path.join(d, "stale.json"))
    os.unlink(noload_img)
    os.unlink(oracle_img)
    return {"image": img, "info": info, "replayed": replayed, "stale": stale, "dir": d}


def test_fixture_really_needs_recovery(recovery):
    info = recovery["info"]
    assert info["needs_recovery"], "copied image lacks needs_recovery: the fixture would test nothing"
    assert info["transactions"] >= 2, f"journal holds {info['transactions']} committed transaction(s), wanted >= 2"
    stale, replayed = recovery["stale"]["records"], recovery["replayed"]["records"]
    n = sum(len(compare.diff(replayed, stale, g)) for g in compare.GROUPS)
    assert n > 0, "kernel with noload shows the same tree as after replay: the journal does not matter here"
    assert "after/renamed_f1" in replayed and "after/renamed_f1" not in stale


@pytest.fixture(scope="module")
def recovered_walk(recovery, adapter, workdir):
    img = recovery["image"]
    if adapter.replays_in_place:        # the kernel writes its replay to the device: give it a copy
        img2 = os.path.join(recovery["dir"], "kernel-adapter.img")
        util.run(["cp", "--sparse=always", img, img2])
        img, opts = img2, ["ro"]
    else:
        opts = None
    before = util.sparse_sha256(img)
    mnt = os.path.join(recovery["dir"], "impl-mnt")
    os.makedirs(mnt, exist_ok=True)
    res = {"error": None}
    m = None
    try:
        m = adapter.mount(img, mnt, options=opts)
        res["walk"] = compare.walk(mnt, os.path.join(recovery["dir"], "impl.json"),
                                   on_timeout=lambda: util.abort_fuse(mnt))
        res["alive"] = m.alive()
        m.umount()
    except (adapters.MountFailed, compare.WalkFailed) as e:
        res["error"] = str(e)
    finally:
        if m is not None and not m.unmounted:
            adapter.cleanup(m)
        util.force_unmount(mnt)
    res["unchanged"] = util.sparse_sha256(img) == before
    res["still_needs_recovery"] = "needs_recovery" in images.features(images.fs_info(img))
    return res


@pytest.mark.parametrize("group", list(compare.GROUPS))
def test_recovered_tree_matches_kernel_replay(group, recovery, recovered_walk, adapter_id):
    if recovered_walk["error"]:
        pytest.fail(recovered_walk["error"], pytrace=False)
    diffs = compare.diff(recovery["replayed"]["records"], recovered_walk["walk"]["records"], group)
    if diffs:
        stale_diffs = compare.diff(recovery["stale"]["records"], recovered_walk["walk"]["records"], group)
        hint = " (it matches the un-replayed tree: the journal was ignored)" if not stale_diffs else ""
        pytest.fail(f"[recovery/{group}]{hint} " + compare.report(diffs, "kernel-replay", adapter_id),
                    pytrace=False)


def test_recovered_statfs_matches_kernel(recovery, recovered_walk, adapter_id):
    if recovered_walk["error"]:
        pytest.fail(recovered_walk["error"], pytrace=False)
    k, i = recovery["replayed"]["statfs"], recovered_walk["walk"]["statfs"]
    bad = [f"{f}: kernel={k.get(f)} {adapter_id}={i.get(f)}" for f in k if k.get(f) != i.get(f)]
    assert not bad, "statfs after replay differs: " + "; ".join(bad)


def test_readonly_replay_does_not_write_the_image(recovered_walk, adapter):
    if adapter.replays_in_place:
        pytest.skip("the kernel replays into the device by design (it got a private copy)")
    if recovered_walk["error"]:
        pytest.fail(recovered_walk["error"], pytrace=False)
    assert recovered_walk["alive"], "daemon died during the walk"
    assert recovered_walk["unchanged"], "read-only mount of a needs_recovery image modified the image"
    assert recovered_walk["still_needs_recovery"], "needs_recovery flag was cleared by a read-only mount"
