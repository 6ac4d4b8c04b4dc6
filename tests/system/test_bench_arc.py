"""`ext4lazy bench`'s arc suite (issue #8) at a tiny scale on `file` and on the CMR model at speed 100: every
(system, size, workload) has a complete record with `jobs`, `layout`, `jobs_per_s` and the per-second series;
each scan found every job (the suite fails a record otherwise); ext4lazy writes the small job files inline on an
inline volume and in lazy mode reads them back from the log; dbfs-sqlite's FUSE requests are counted and its
direct scan goes around FUSE; the report has the suite's section and the plots; wrong options are refused.
"""
import json
import os

import pytest

from harness.util import bench

pytestmark = pytest.mark.bench

SYSTEMS = ["kernel-ext4-stock", "kernel-xfs", "dbfs-sqlite", "dbfs-sqlite-direct", "ext4lazy-lazy",
           "ext4lazy-lazy-inline", "kernel-ext4-inline", "ext4lazy-lazy-inline-kernelopens", "dbfs-sqlite-kernelopens"]
JOBS = (30, 60)
# files ARC's scanner reads and whose average size fits in a 2 KiB inode (.description, 2.3 KB, does not)
INLINE_KINDS = ("local", "status", "grami", "diag")


@pytest.fixture(scope="module", params=[("file", None), ("cmr", 100)], ids=["file", "cmr"])
def results(request, binary, workdir):
    device, speed = request.param
    out = os.path.join(workdir, f"bench-arc-{device}")
    args = ["run", "--suite", "arc", "--device", device, "--systems", ",".join(SYSTEMS),
            "--jobs", ",".join(map(str, JOBS)), "--out", out]
    if speed:
        args += ["--speed", str(speed), "--no-traces", "--size", "8G"]
    p = bench(binary, *args, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    with open(os.path.join(out, "results.json")) as f:
        recs = json.load(f)
    return device, out, {(r["system"], r["workload"]): r for r in recs}, recs


def test_every_record_is_complete(results):
    device, out, have, recs = results
    assert len(recs) == len(SYSTEMS) * len(JOBS) * 2
    for s in SYSTEMS:
        for n in JOBS:
            for kind in ("Generate", "Scan"):
                r = have.get((s, f"{kind}-{n}-flat"))
                assert r is not None, f"no record for {s} {kind} {n}"
                assert r["error"] is None, r["error"]
                assert (r["jobs"], r["layout"], r["device"]) == (n, "flat", device), r
                assert r["jobs_per_s"] > 0 and r["runtime_s"] > 0, r
                if kind == "Scan":
                    assert sum(r["per_second"]) == n, (s, n, r["per_second"])
                    scan = r["extra"]["scan"]
                    assert (scan["jobs"], scan["skipped"], scan["listed"]) == (n, 0, n), scan
                    assert scan.get("source") == ("sqlite-direct" if s.endswith("-direct") else None), scan
                else:
                    assert r["per_second"] is None and r["extra"]["manifest"]["files"] == 11 * n


def test_small_files_are_inline_and_lazy_reads_them_from_the_log(results):
    device, out, have, recs = results
    n = JOBS[-1]
    for s in ("ext4lazy-lazy-inline", "kernel-ext4-inline"):
        sample = have[(s, f"Generate-{n}-flat")]["extra"]["inline_sample"]
        for kind in INLINE_KINDS:
            files, inline, _ = sample[kind]
            assert inline >= files > 0 or (kind == "diag" and files == 0), (s, kind, sample)
        assert sample["proxy"][1] == 0, "3.5 KB does not fit in a 2 KiB inode"
    plain = have[("ext4lazy-lazy", f"Generate-{n}-flat")]["extra"]["inline_sample"]
    assert sum(v[1] for v in plain.values()) == 0, plain
    # Scans: without inline every scanned file is a data read; inline, the log serves most of them
    lazy = have[("ext4lazy-lazy", f"Scan-{n}-flat")]["extra"]["requests"]
    inline = have[("ext4lazy-lazy-inline", f"Scan-{n}-flat")]["extra"]["requests"]
    assert lazy["data"]["read"] >= 4 * n, lazy
    assert inline["data"]["read"] <= 2 * n and inline["journal"]["read"] > 0, inline
    assert inline["metadata"]["read"] <= lazy["metadata"]["read"] + 8, (inline, lazy)


def test_dbfs_records(results):
    device, out, have, recs = results
    n = JOBS[0]
    fuse = have[("dbfs-sqlite", f"Scan-{n}-flat")]["extra"]["dbfs"]
    assert sum(v["count"] for v in fuse["requests"].values()) >= 5 * n, fuse
    assert have[("dbfs-sqlite-direct", f"Scan-{n}-flat")]["extra"]["dbfs"] is None
    assert have[("dbfs-sqlite-direct", f"Generate-{n}-flat")]["extra"]["dbfs"]["requests"]


def test_kernel_opens_systems_send_no_opens(results):
    """The -kernelopens systems' scans reach the daemon without OPEN (at most the one refused) and with fewer
    requests per job than the same system serving opens."""
    device, out, have, recs = results
    n = JOBS[-1]
    ops = have[("ext4lazy-lazy-inline-kernelopens", f"Scan-{n}-flat")]["extra"]["fuse_requests"]
    base = have[("ext4lazy-lazy-inline", f"Scan-{n}-flat")]["extra"]["fuse_requests"]
    assert ops.get("OPEN", 0) <= 1 and base.get("OPEN", 0) >= 5 * n, (ops, base)
    assert sum(ops.values()) < sum(base.values()), (ops, base)
    db = have[("dbfs-sqlite-kernelopens", f"Scan-{n}-flat")]["extra"]["dbfs"]["requests"]
    db_base = have[("dbfs-sqlite", f"Scan-{n}-flat")]["extra"]["dbfs"]["requests"]
    assert db.get("open", {}).get("count", 0) <= 1 and db_base["open"]["count"] >= 5 * n, (db, db_base)


def test_report_and_plots(results):
    device, out, have, recs = results
    report = open(os.path.join(out, "report.md")).read()
    for text in ("### ARC scan, layout flat: jobs/s against directory size", "Goals (issue #8)",
                 "- ext4lazy-lazy-inline: >= XFS at every size", "FUSE requests per job",
                 "ext4lazy-lazy-inline: ", "### ARC generation"):
        assert text in report, text
    for name in (f"arc-jobs-per-s-{device}-flat.png", f"arc-per-second-{device}-flat-{JOBS[0]}.png"):
        assert os.path.getsize(os.path.join(out, name)) > 1000, name


@pytest.mark.parametrize("args,says", [
    (["--suite", "micro", "--device", "file", "--jobs", "100"], "options of the arc suite"),
    (["--suite", "arc", "--device", "file", "--jobs", "5K,x"], "not a number of jobs"),
    (["--suite", "arc", "--device", "file", "--jobs", "0"], "must be positive"),
])
def test_wrong_options_are_refused(binary, workdir, args, says):
    out = os.path.join(workdir, "bench-arc-refused")
    p = bench(binary, "run", *args, "--out", out, timeout=600)
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert not os.path.exists(os.path.join(out, "results.json"))
