"""`ext4lazy bench` (issue #6): every suite, workload and system at a tiny scale on `file` and on the CMR model at
a high speed; the reports are complete, the I/O-class accounting adds up to an independent total (the loop
device's own counters for kernel file systems and fuse2fs; for ext4lazy on a model, its own counters against
the model's report, class by class), a finished run is not re-run, and runs that cannot fit are refused.
"""
import json
import os
import subprocess

import pytest

from harness.util import bench

pytestmark = pytest.mark.bench

SYSTEMS = ["kernel-ext4-stock", "kernel-ext4-baseline", "kernel-xfs", "fuse2fs", "ext4lazy-ordered", "ext4lazy-lazy"]
WORKLOADS = {"micro": ["MakeDirs", "ListDirs", "TarDirs", "RemoveDirs", "CreateFiles", "FindFiles", "TarFiles",
                       "RemoveFiles"], "postmark": ["Postmark"], "journal-size": ["CreateFiles"]}
# tiny: a few hundred directories and files, a few Postmark files: seconds per run
SCALE = {"micro": "0.0005", "postmark": "0.002", "journal-size": "0.005"}
IO_KEYS = {"metadata_read", "metadata_write", "journal_write", "data_read", "data_write"}


# on a model: ext4lazy with the model inside its daemon too, the ablation of the shared device path (issue #27)
INPROC = "ext4lazy-lazy-inproc"


def systems_on(device):
    return SYSTEMS + ([INPROC] if device != "file" else [])


def run_suite(binary, out, suite, device, speed=None):
    args = ["run", "--suite", suite, "--device", device, "--systems", ",".join(systems_on(device)),
            "--scale", SCALE[suite], "--out", out]
    if speed:
        args += ["--speed", str(speed)]
    p = bench(binary, *args)
    assert p.returncode == 0, p.stderr[-3000:]
    return p


@pytest.fixture(scope="module", params=[("file", None), ("cmr", 100)], ids=["file", "cmr"])
def results(request, binary, workdir):
    device, speed = request.param
    out = os.path.join(workdir, f"bench-{device}")
    for suite in WORKLOADS:
        run_suite(binary, out, suite, device, speed)
    with open(os.path.join(out, "results.json")) as f:
        return device, out, json.load(f)


def mib(r, *keys):
    return sum(r["io_mib"][k] for k in keys)


def test_every_record_is_complete(results):
    device, out, recs = results
    have = {(r["suite"], r["system"], r["workload"]): r for r in recs}
    for suite, wls in WORKLOADS.items():
        for s in systems_on(device):
            for w in wls:
                r = have.get((suite, s, w))
                assert r is not None, f"no record for {suite} {s} {w}"
                assert r["error"] is None, r["error"]
                assert r["device"] == device and r["runtime_s"] > 0 and r["cleaning_s"] >= 0
                assert IO_KEYS <= set(r["io_mib"]), r["io_mib"]
    pm = have[("postmark", "ext4lazy-lazy", "Postmark")]["extra"]["postmark"]
    assert pm["transactions_done"] == have[("postmark", "ext4lazy-lazy", "Postmark")]["params"]["transactions"]
    assert pm["tps"] > 0 and pm["created"] >= pm["deleted"] and pm["bytes_written"] > 0
    # the series behind the throughput, dirty-page and utilisation figures: a row a second, every column
    for r in recs:
        with open(os.path.join(out, r["raw"])) as f:
            raw = json.load(f)
        cols = raw["series_columns"]
        assert cols[:4] == ["t_s", "read_mib_s", "write_mib_s", "dirty_mib"], cols
        for row in raw["series"]:
            assert len(row) == len(cols) and row[3] is not None and (row[4] is None or 0 <= row[4] <= 100), row
            # the device's busy share wherever there is a block device under the volume
            has_dev = not (r["system"].startswith("ext4lazy") and (device == "file" or r["system"] == INPROC))
            assert (row[5] is not None) == has_dev, (r["system"], r["workload"], row)
    report = open(os.path.join(out, "report.md")).read()
    assert "    ext4lazy bench run --suite micro --device " + device in report
    for name in ("runtime-micro-%s.png" % device, "offsets-micro-%s-MakeDirs.png" % device,
                 "throughput-postmark-%s-Postmark.png" % device):
        assert os.path.getsize(os.path.join(out, name)) > 1000, name


def test_io_classes_add_up_to_the_device_totals(results):
    device, out, recs = results
    for r in recs:
        c = r["io_check"]
        got = c["classes_total"]
        assert abs(sum(got.values()) / 2**20 - sum(r["io_mib"].values())) < 0.01 * len(r["io_mib"]), r
        if "reference_total" in c:        # kernel file systems and fuse2fs: the loop device's counters
            ref = c["reference_total"]
            assert c["lost_events"] == 0, r
            for d in ("read", "write"):
                assert abs(got[d] - ref[d]) <= max(64 << 10, ref[d] // 100), (r["system"], r["workload"], d, got, ref)
        elif device != "file":            # ext4lazy -inproc on a model: its counters = what the drive served
            assert r["system"] == INPROC and c["equal_by_class"], (r["system"], r["workload"], c)


def test_every_system_on_a_model_takes_the_same_device_path(results):
    """Issue #27: on a model, ext4lazy reaches the drive through the served model and the loop device, as the
    kernel's file systems do; only the -inproc ablation runs the model inside its daemon."""
    device, out, recs = results
    for r in recs:
        c = r["io_check"]
        if device == "file" and r["system"].startswith("ext4lazy"):   # it opens the image itself (O_DIRECT)
            assert "reference_total" not in c and r["extra"].get("model_time") is None, (r["system"], c)
            continue
        if r["system"] == INPROC:
            assert "reference_total" not in c and "model report inside ext4lazy" in r["io_source"], r["io_source"]
            assert r["work_busy_s"] is None and r["work_s_at_drive_speed"] is None
            continue
        assert c["reference"].startswith("loop device counters"), (r["system"], c)
        if device == "file":
            continue
        assert r["extra"]["model_time"]["busy_s"] > 0, (r["system"], r["workload"], r["extra"]["model_time"])
        # the drive's busy time over the workload alone, and the workload brought back to the drive's speed
        busy, speed = r["work_busy_s"], r["speed"]
        assert 0 <= busy <= r["extra"]["model_time"]["busy_s"] + 1e-3, (r["system"], r["workload"], busy)
        assert speed == 100 and r["work_s_at_drive_speed"] >= r["work_s"], r
        assert abs(r["work_s_at_drive_speed"] - (r["work_s"] + busy * (1 - 1 / speed))) < 0.01, r
        if r["system"].startswith("ext4lazy"):
            served = r["extra"]["served_by_class"]      # what the server saw = what ext4lazy counted, in total
            for d in ("read", "write"):
                got, ref = sum(served[k][d] for k in served), c["reference_total"][d]
                assert abs(got - ref) <= max(64 << 10, ref // 100), (r["system"], r["workload"], d, got, ref)


def test_classes_tell_the_journal_modes_apart(results):
    device, out, recs = results
    have = {(r["suite"], r["system"], r["workload"]): r for r in recs}
    ordered, lazy = have[("micro", "ext4lazy-ordered", "MakeDirs")], have[("micro", "ext4lazy-lazy", "MakeDirs")]
    kernel = have[("micro", "kernel-ext4-baseline", "MakeDirs")]
    for r in (ordered, lazy, kernel):
        assert mib(r, "journal_write") > 0.5, r["io_mib"]
    assert mib(ordered, "metadata_write") > 0.5 and mib(kernel, "metadata_write") > 0.5
    assert mib(lazy, "metadata_write") < 0.05, lazy["io_mib"]          # lazy writes metadata only to the journal
    listing = have[("micro", "ext4lazy-lazy", "ListDirs")]
    # lazy reads the tree from the journal; what it reads from home is the group descriptors and bitmaps
    assert listing["io_mib"]["journal_read"] > 2 * listing["io_mib"]["metadata_read"], listing["io_mib"]


def test_a_finished_run_is_not_run_again(binary, results):
    device, out, recs = results
    if device != "file":
        pytest.skip("once is enough")
    victim = ("micro", "ext4lazy-lazy", "ListDirs")
    kept = [r for r in recs if (r["suite"], r["system"], r["workload"]) != victim]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(kept, f)
    p = bench(binary, "run", "--suite", "micro", "--device", "file", "--systems", "ext4lazy-lazy,ext4lazy-ordered",
              "--scale", SCALE["micro"], "--out", out)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "finished record(s) are kept, not re-run" in p.stderr
    after = json.load(open(os.path.join(out, "results.json")))
    before = {(r["suite"], r["system"], r["workload"]): r["finished"] for r in kept}
    for r in after:
        k = (r["suite"], r["system"], r["workload"])
        if k != victim:
            assert r["finished"] == before[k], f"{k} was run again"
    assert [r for r in after if (r["suite"], r["system"], r["workload"]) == victim][0]["error"] is None
    assert len(after) == len(recs)
    meta = json.load(open(os.path.join(out, "meta.json")))
    report = open(os.path.join(out, "report.md")).read()
    assert all(run["command"] in report for run in meta["runs"])


@pytest.mark.parametrize("args,says", [
    (["--suite", "micro", "--device", "cmr", "--size", "600G"], "does not fit on cmr"),
    (["--suite", "micro", "--device", "file", "--scale", "1", "--size", "4G"], "do not fit"),
    (["--suite", "micro", "--device", "file", "--systems", "ext5"], "unknown system 'ext5'"),
    (["--suite", "nope", "--device", "file"], "unknown suite 'nope'"),
    (["--suite", "micro", "--device", "floppy"], "unknown device 'floppy'"),
])
def test_runs_that_cannot_be_done_are_refused(binary, workdir, args, says):
    out = os.path.join(workdir, "bench-refused")
    p = bench(binary, "run", *args, "--out", out)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(out, "results.json"))


def test_list_and_missing_scripts(binary):
    p = bench(binary, "list")
    assert p.returncode == 0
    for word in WORKLOADS:
        assert word in p.stdout
    for s in SYSTEMS + ["ext4lazy-lazy-stepahead", "smr-seagate", "smr-wd"]:
        assert s in p.stdout
    p = subprocess.run([binary, "bench", "list"], capture_output=True, text=True,
                       env=dict(os.environ, EXT4LAZY_BENCH_DIR="/nonexistent"))
    assert p.returncode != 0 and "benchmark scripts are missing" in p.stderr
