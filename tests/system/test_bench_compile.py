"""`ext4lazy bench`'s compile suite (CompileMix, the kernel-compile-like write mix) and repeated runs (`--repeat`),
at a tiny scale on `file` and on the CMR model at speed 100: one record per (system, workload) with the mean and
every repetition; the build did exactly what its plan says (objects, temporaries made and deleted, bytes written,
vmlinux) and what it left reached the device; lazy writes no metadata home; a lost repetition, and repetitions
added by a larger --repeat, run alone while the others are kept.  Plus the aggregation rules without a volume.
"""
import json
import os
import subprocess

import pytest

from bench.suite import repeats

SYSTEMS = ["kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"]
SCALE = "0.001"                 # 20 sources, ~13 MiB written: well under a second per phase on `file`
MiB = 1 << 20


def run(binary, out, device, speed, repeat, plots=True):
    args = [binary, "bench", "run", "--suite", "compile", "--device", device, "--systems", ",".join(SYSTEMS),
            "--scale", SCALE, "--repeat", str(repeat), "--out", out]
    if speed:
        args += ["--speed", str(speed), "--no-traces"]
    if not plots:
        args.append("--no-plots")
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        return p, json.load(f)


@pytest.fixture(scope="module", params=[("file", None), ("cmr", 100)], ids=["file", "cmr"])
def results(request, binary, workdir):
    device, speed = request.param
    out = os.path.join(workdir, f"bench-compile-{device}")
    _, recs = run(binary, out, device, speed, 2, plots=device == "file")
    return device, speed, out, recs


@pytest.mark.bench
def test_one_record_per_system_with_every_repetition(results):
    device, _, out, recs = results
    assert sorted(r["system"] for r in recs) == sorted(SYSTEMS)
    for r in recs:
        assert r["suite"] == "compile" and r["workload"] == "CompileMix" and r["device"] == device
        assert r["error"] is None and r["runs"] == 2 and r["repeat"] == 2 and r["errors"] == 0
        assert sorted(x["rep"] for x in r["repetitions"]) == [0, 1]
        times = [x["runtime_s"] for x in sorted(r["repetitions"], key=lambda x: x["rep"])]
        assert r["runtime_s_all"] == times and all(t > 0 for t in times)
        assert r["runtime_s"] == pytest.approx(sum(times) / 2, abs=1e-3)
        assert r["runtime_s_min"] == min(times) and r["runtime_s_max"] == max(times)
        assert r["runtime_s_sd"] == pytest.approx(abs(times[0] - times[1]) / 2 ** 0.5, abs=1e-3)
        for k in r["io_mib"]:
            assert r["io_mib"][k] == pytest.approx(sum(x["io_mib"][k] for x in r["repetitions"]) / 2, abs=1e-3)
        assert os.path.exists(os.path.join(out, r["raw"]))
    report = open(os.path.join(out, "report.md")).read()
    assert "--repeat 2" in report and " ± " in report and "CompileMix: what was written" in report
    if device == "file":
        for png in ("runtime-compile-file.png", "ratios-compile-file.png"):
            assert os.path.getsize(os.path.join(out, png)) > 1000, png


@pytest.mark.bench
def test_the_build_follows_its_plan_and_reaches_the_device(results):
    device, _, _, recs = results
    for r in recs:
        plan = r["params"]
        for x in r["repetitions"]:
            c = x["extra"]["compile"]
            assert c["temporaries_created"] == c["temporaries_deleted"] == c["renamed"] == plan["objects"] > 0
            assert c["bytes_written"] == plan["output_bytes"] and c["vmlinux_bytes"] == plan["vmlinux_bytes"]
            m = x["io_mib"]
            # everything the build left was synced: its data reached the device (deleted .d files need not)
            assert m["data_write"] >= 0.97 * plan["output_bytes"] / MiB, (r["system"], m, plan["output_bytes"])
            assert m["data_write"] <= 1.2 * (plan["output_bytes"] + plan["temporary_bytes"]) / MiB + 1, m
            # a metadata-light mix, as the paper's kernel build (0.77% metadata)
            assert m["metadata_write"] < 0.05 * m["data_write"], m
            assert m["journal_write"] > 0, m
        chk = r["io_check"]
        if "reference_total" in chk:           # kernel: the means still add up to the loop device's
            for d in ("read", "write"):
                assert abs(chk["classes_total"][d] - chk["reference_total"][d]) <= max(
                    64 << 10, chk["reference_total"][d] // 100), (r["system"], chk)
            assert chk["lost_events"] == 0
        elif device != "file":
            assert chk["equal_by_class"], chk
    lazy = next(r for r in recs if r["system"] == "ext4lazy-lazy")
    ordered = next(r for r in recs if r["system"] == "ext4lazy-ordered")
    assert lazy["io_mib"]["metadata_write"] < 0.05 <= ordered["io_mib"]["metadata_write"], (lazy["io_mib"],
                                                                                          ordered["io_mib"])


@pytest.mark.bench
def test_repetitions_resume_one_by_one(binary, results):
    device, speed, out, recs = results
    if device != "file":
        pytest.skip("once is enough")
    with open(os.path.join(out, "results.json")) as f:
        recs = json.load(f)
    victim = next(r for r in recs if r["system"] == "ext4lazy-lazy")
    victim["repetitions"] = [x for x in victim["repetitions"] if x["rep"] != 1]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(recs, f)
    kept = {(r["system"], x["rep"]): x["finished"] for r in recs for x in r["repetitions"]}
    # a lost repetition (1 of ext4lazy-lazy) and a third for everyone: four phases run, four are kept
    p, after = run(binary, out, device, speed, 3, plots=False)
    assert "finished record(s) are kept, not re-run" in p.stderr
    assert len(after) == len(SYSTEMS)
    for r in after:
        assert r["runs"] == 3 and r["repeat"] == 3 and sorted(x["rep"] for x in r["repetitions"]) == [0, 1, 2]
        for x in r["repetitions"]:
            if (r["system"], x["rep"]) in kept:
                assert x["finished"] == kept[(r["system"], x["rep"])], f"{r['system']} run {x['rep']} ran again"


# ---- the aggregation rules, no volume needed

def phase(rep, runtime, data=10.0, error=None):
    return {"suite": "s", "system": "x", "device": "file", "workload": "W", "rep": rep, "error": error,
            "runtime_s": None if error else runtime, "cleaning_s": None if error else 0.0,
            "io_mib": None if error else {"data_write": data, "metadata_write": 1.0},
            "io_check": None if error else {"classes_total": {"read": 0, "write": data * 2**20},
                                            "reference_total": {"read": 0, "write": data * 2**20},
                                            "lost_events": 0},
            "finished": f"t{rep}", "extra": {"which": rep}}


def test_aggregate_is_the_mean_of_the_good_runs_and_keeps_every_run():
    agg = repeats.aggregate([phase(2, 3.0, 30.0), phase(0, 1.0, 10.0), phase(1, 0, error="boom")], 3)
    assert agg["runtime_s"] == 2.0 and agg["runs"] == 2 and agg["errors"] == 1 and agg["error"] is None
    assert agg["runtime_s_all"] == [1.0, 3.0] and agg["runtime_s_min"] == 1.0 and agg["runtime_s_max"] == 3.0
    assert agg["runtime_s_sd"] == pytest.approx(2 ** 0.5)
    assert agg["io_mib"] == {"data_write": 20.0, "metadata_write": 1.0}
    assert agg["io_check"]["classes_total"]["write"] == agg["io_check"]["reference_total"]["write"] == 20 * 2**20
    assert [x["rep"] for x in agg["repetitions"]] == [0, 1, 2] and "rep" not in agg
    assert agg["extra"] == {"which": agg["raw_repetition"]}          # the median run's own figures
    assert repeats.done_reps(agg) == {0, 2}


def test_a_record_without_repetitions_is_run_zero_and_all_failed_is_an_error():
    old = {k: v for k, v in phase(0, 5.0).items() if k != "rep"}
    assert repeats.done_reps(old) == {0}
    bad = repeats.aggregate([phase(0, 0, error="boom")], 1)
    assert bad["error"] == "boom" and bad["runs"] == 0 and bad["runtime_s"] is None
    assert repeats.done_reps(bad) == set()


def test_ratio_spread_pairs_runs_of_the_same_round():
    a = repeats.aggregate([phase(0, 4.0), phase(1, 6.0), phase(2, 8.0)], 3)
    b = repeats.aggregate([phase(0, 2.0), phase(1, 2.0), phase(2, 2.0, error="x")], 3)
    r, lo, hi, n = repeats.ratio_spread(a, b)
    assert r == pytest.approx(3.0) and (lo, hi, n) == (2.0, 3.0, 2)


def test_one_run_keeps_its_own_values_and_types():
    one = {**phase(0, 2.5), "prefetch_wasted_blocks": 7, "kb_bytes": 0}
    agg = repeats.aggregate([one], 1)
    assert agg["prefetch_wasted_blocks"] == 7 and isinstance(agg["prefetch_wasted_blocks"], int)
    assert agg["runtime_s"] == 2.5 and agg["runs"] == 1 and agg["runtime_s_sd"] is None
    assert agg["io_mib"] == one["io_mib"] and agg["io_check"] == one["io_check"]
