"""What `ext4lazy bench` checks and measures beside the runtime (restored from bench/writepath.py and
bench/untar_ab.sh): `e2fsck -fn` of the volume after every recorded phase that writes (a lazy volume's journal
replayed on a copy first; problems recorded, in the report, and a non-zero exit), and the FUSE daemon's CPU time
from /proc/PID/stat.  The parts first on small images and on this process, then an untar run end to end.
"""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from bench.suite import accounting, devices, report, repeats, systems
from harness import util


# ---- the daemon's CPU time

def burn(seconds):
    t = time.process_time() + seconds
    while time.process_time() < t:
        pass


def test_cpu_seconds_of_a_process_from_proc():
    before = accounting.process_cpu_s(os.getpid())
    burn(0.3)
    after = accounting.process_cpu_s(os.getpid())
    assert 0.2 <= after - before <= 1.0, (before, after)
    assert accounting.process_cpu_s(None) is None
    assert accounting.cpu_delta(before, None) is None and accounting.cpu_delta(1.0, 1.25) == 0.25


def test_cpu_seconds_of_a_process_whose_name_has_brackets_and_spaces():
    # /proc/PID/stat's second field is the name in brackets: it may hold ") (" and spaces itself
    code = ("import time\nopen('/proc/self/comm', 'w').write('a) (b c)')\nt = time.process_time() + 0.3\n"
            "while time.process_time() < t: pass\nprint('done', flush=True)\ntime.sleep(30)")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "done"
        assert open(f"/proc/{p.pid}/comm").read().strip() == "a) (b c)"
        assert 0.2 <= accounting.process_cpu_s(p.pid) <= 5.0
    finally:
        p.kill()
        p.wait()
    assert accounting.process_cpu_s(p.pid) is None                  # gone


# ---- the consistency check on small images

@pytest.fixture
def clean_image(workdir):
    img = os.path.join(workdir, "checks-clean.img")
    util.run(["truncate", "-s", "32M", img])
    util.run(["mkfs.ext4", "-F", "-q", img])
    yield img
    os.unlink(img)


def volume(system, workdir, image):
    """A bench Volume of `system` whose image is a copy of `image` (nothing mounted)."""
    v = devices.Volume(systems.get(system), "file", 1.0, workdir, "checks", 32 << 20, 16, None, print)
    shutil.copy(image, v.image)
    return v


def test_a_clean_volume_is_clean(clean_image, workdir):
    for s in ("kernel-ext4-stock", "fuse2fs", "ext4lazy-ordered"):
        f = volume(s, workdir, clean_image).fsck()
        assert f["clean"] is True and f["rc"] == 0 and f["output"] is None and f["seconds"] >= 0, (s, f)


def test_a_damaged_volume_is_not_clean_and_says_why(clean_image, workdir):
    util.run(["debugfs", "-w", "-R", "freeb 1000", clean_image])     # a block bitmap that fails its checksum
    f = volume("ext4lazy-ordered", workdir, clean_image).fsck()
    assert f["clean"] is False and f["rc"] == 4, f
    assert any("bitmap" in line for line in f["output"]), f["output"]
    assert not any(line.startswith("Pass ") for line in f["output"]), f["output"]


def test_needing_recovery_after_the_unmount_is_not_clean_unless_lazy(clean_image, workdir):
    util.run(["debugfs", "-w", "-R", "feature needs_recovery", clean_image])
    f = volume("kernel-ext4-stock", workdir, clean_image).fsck()
    # e2fsck -fn itself exits 0 here (it skips the recovery): the flag is what fails it
    assert f["clean"] is False and f["needs_recovery"] and "recovery" in f["output"][0], f
    # a lazy volume needs recovery by design: its journal is replayed on a copy, the volume itself is untouched
    v = volume("ext4lazy-lazy", workdir, clean_image)
    before = util.sparse_sha256(v.image)
    f = v.fsck()
    assert f["clean"] is True and f["replay_rc"] in (0, 1), f
    assert util.sparse_sha256(v.image) == before and not os.path.exists(v.image + ".fsck")


def test_volumes_that_are_not_ext4_are_skipped_with_the_reason(clean_image, workdir):
    for s, says in (("kernel-xfs", "xfs"), ("dbfs-sqlite", "SQLite")):
        f = volume(s, workdir, clean_image).fsck()
        assert f["clean"] is None and says in f["skipped"], (s, f)


def test_an_unclean_repetition_stays_visible_in_the_record():
    def rep(k, clean):
        return {"suite": "s", "system": "x", "device": "file", "workload": "W", "rep": k, "error": None,
                "runtime_s": 1.0 + k, "cleaning_s": 0.0, "daemon_cpu_s": 0.5 * (k + 1),
                "fsck": {"clean": clean, "rc": 0 if clean else 4, "output": None if clean else ["bad"]}}
    agg = repeats.aggregate([rep(0, True), rep(1, False), rep(2, True)], 3)
    assert agg["fsck"]["clean"] is False and agg["fsck"]["output"] == ["bad"]
    assert agg["daemon_cpu_s"] == pytest.approx(1.0)                 # the mean over the runs
    assert repeats.aggregate([rep(0, True), rep(1, True)], 2)["fsck"]["clean"] is True


def test_the_report_shows_problems_loudly_and_the_daemon_cpu(workdir):
    out = os.path.join(workdir, "checks-report")
    os.makedirs(out, exist_ok=True)
    base = {"suite": "untar", "device": "file", "workload": "Untar", "scale": 0.01, "speed": None, "error": None,
            "cleaning_s": 0.0, "work_s": 1.0, "io_mib": {}, "io_check": {}, "io_source": "test"}
    recs = [dict(base, system="kernel-ext4-stock", runtime_s=1.0, daemon_cpu_s=None,
                 fsck={"clean": True, "rc": 0, "output": None, "seconds": 0.1}),
            dict(base, system="ext4lazy-ordered", runtime_s=2.0, daemon_cpu_s=0.75, daemon_cpu_syncfs_s=0.01,
                 fsck={"clean": False, "rc": 4, "output": ["Inode 12 has a bad extent", "IGNORED."]})]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(recs, f)
    text = open(report.write(out, [])).read()
    assert "**e2fsck -fn FOUND PROBLEMS on the volume after: Untar on ext4lazy-ordered (rc 4)**" in text, text
    assert "Inode 12 has a bad extent" in text and "e2fsck -fn clean (0.1 s)" in text
    assert "| Untar | ext4lazy-ordered | 2.00 | 0.75 | 0.01 | 0.75x |" in text, text
    assert "| Untar | kernel-ext4-stock |" not in text.split("### FUSE daemon CPU time")[1].split("###")[0]


# ---- end to end: an untar run

@pytest.mark.bench
def test_an_untar_run_records_the_check_and_the_daemon_cpu(binary, workdir):
    names = ["kernel-ext4-stock", "kernel-xfs", "fuse2fs", "ext4lazy-ordered", "ext4lazy-lazy"]
    out = os.path.join(workdir, "bench-checks-untar")
    p = util.bench(binary, "run", "--suite", "untar", "--device", "file", "--systems", ",".join(names),
                   "--scale", "0.05", "--no-plots", "--out", out)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = {r["system"]: r for r in json.load(open(os.path.join(out, "results.json")))}
    for s in names:
        r = recs[s]
        assert r["error"] is None, r["error"]
        if s == "kernel-xfs":
            assert r["fsck"]["clean"] is None and r["fsck"]["skipped"], r["fsck"]
        else:
            assert r["fsck"]["clean"] is True, (s, r["fsck"])
        if s.startswith("kernel"):
            assert r["daemon_cpu_s"] is None, (s, r["daemon_cpu_s"])
        else:
            # a tar of hundreds of files through FUSE: the daemon works, at most all CPUs for the whole workload
            assert 0 < r["daemon_cpu_s"] <= os.cpu_count() * r["work_s"] + 0.05, (s, r["daemon_cpu_s"], r["work_s"])
    assert recs["ext4lazy-lazy"]["fsck"]["needs_recovery"] and "replay_rc" in recs["ext4lazy-lazy"]["fsck"]
    text = open(os.path.join(out, "report.md")).read()
    assert "### FUSE daemon CPU time" in text and "e2fsck -fn clean" in text and "FOUND PROBLEMS" not in text
