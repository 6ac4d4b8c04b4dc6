"""`ext4lazy bench run --memory MiB` (issue #26 item 4, issue #27): every record in a memory cgroup of its own with
the limit, holding the workload's process and the file-system daemon from its start, removed afterwards; the
record carries the limit, the peak and the events; an OOM kill fails the record and the run.  First the parts
(mountinfo, the refusal, the report), then tiny Postmark runs on `file` (bench/suite/memcg.py, docs/BENCH.md).
"""
import json
import os

import pytest

from bench.suite import cli, memcg, report, repeats
from harness.util import bench

MiB = 1 << 20
SYSTEMS = ["kernel-ext4-baseline", "ext4lazy-lazy"]
LIMIT = 256


# ---- the parts

HYBRID = """31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {v2} rw,relatime - cgroup2 cgroup2 rw
"""


def test_the_hierarchies_are_read_from_mountinfo(tmp_path):
    mi = tmp_path / "mountinfo"
    mi.write_text(HYBRID.format(v2="/sys/fs/cgroup/unified"))
    assert memcg.cgroup_mounts(str(mi)) == ("/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory")
    mi.write_text("25 1 0:22 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n")
    assert memcg.cgroup_mounts(str(mi)) == ("/sys/fs/cgroup", None)
    mi.write_text("22 1 0:21 / /proc rw - proc proc rw\n")
    assert memcg.cgroup_mounts(str(mi)) == (None, None)
    with pytest.raises(memcg.Unavailable, match="no cgroup2 mount; no v1 memory hierarchy either"):
        memcg.find(str(mi))


def test_v2_is_used_only_where_it_has_the_memory_controller(tmp_path):
    v2 = tmp_path / "unified"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io hugetlb\n")
    mi = tmp_path / "mountinfo"
    mi.write_text(f"41 31 0:38 / {v2} rw,relatime - cgroup2 cgroup2 rw\n")
    with pytest.raises(memcg.Unavailable, match="memory controller is not available there"):
        memcg.find(str(mi))
    (v2 / "cgroup.controllers").write_text("cpu io memory pids\n")
    h = memcg.find(str(mi))
    assert (h.version, h.mount, h.base) == ("v2", str(v2), str(v2))
    assert h.rel(str(v2 / "e4lbench-mem-1" / "r001")) == "/e4lbench-mem-1/r001"


def test_this_machine_has_a_usable_hierarchy():
    # the end-to-end tests below need one; which one is recorded in every record
    h = memcg.find()
    assert h.version in ("v1", "v2") and os.path.isdir(h.base), vars(h)


def test_a_run_is_refused_when_no_memory_cgroup_can_be_made(monkeypatch, capsys, workdir, binary):
    def none(*_):
        raise memcg.Unavailable("no memory cgroup can be made on this machine: (test)")
    monkeypatch.setattr(memcg, "find", none)
    monkeypatch.setenv("EXT4LAZY_BIN", binary)
    out = os.path.join(workdir, "bench-memory-refused")
    rc = cli.cmd_run(["--suite", "postmark", "--device", "file", "--scale", "0.002", "--memory", "256",
                      "--out", out])
    err = capsys.readouterr().err
    assert rc == 2 and "refused: --memory: no memory cgroup can be made" in err, err
    assert not os.path.exists(os.path.join(out, "results.json"))


@pytest.mark.parametrize("bad", ["0", "-5", "lots"])
def test_a_limit_that_is_not_one_is_an_error(bad):
    with pytest.raises(SystemExit):
        cli.parse_run(["--suite", "postmark", "--device", "file", "--out", "x", "--memory", bad])
    assert cli.parse_run(["--suite", "s", "--device", "file", "--out", "x", "--memory", "max"]).memory == "max"
    assert cli.parse_run(["--suite", "s", "--device", "file", "--out", "x", "--memory", "512"]).memory == 512


def test_repetitions_keep_the_largest_peak_and_sum_the_events():
    def rep(k, peak, kills):
        return {"suite": "s", "system": "x", "device": "file", "workload": "W", "rep": k, "error": None,
                "runtime_s": 1.0 + k, "cleaning_s": 0.0,
                "memory": {"limit_mib": 64, "peak_bytes": peak, "daemon_peak_bytes": peak // 2,
                           "workload_peak_bytes": None, "events": {"oom_kill": kills, "oom": None}}}
    agg = repeats.aggregate([rep(0, 10 * MiB, 0), rep(1, 30 * MiB, 0), rep(2, 20 * MiB, 0)], 3)
    m = agg["memory"]
    assert m["peak_bytes"] == 30 * MiB and m["peak_bytes_all"] == [10 * MiB, 30 * MiB, 20 * MiB]
    assert m["daemon_peak_bytes"] == 15 * MiB and m["workload_peak_bytes"] is None
    assert m["events"] == {"oom_kill": 0, "oom": None} and m["limit_mib"] == 64


def test_the_report_says_how_memory_was_limited(workdir):
    out = os.path.join(workdir, "memory-report")
    os.makedirs(out, exist_ok=True)
    mem = {"limit_mib": 64, "limit_bytes": 64 * MiB, "cgroup_version": "v1", "peak_bytes": 60 * MiB,
           "peak_source": "memory.max_usage_in_bytes", "daemon_peak_bytes": 40 * MiB,
           "workload_peak_bytes": 20 * MiB, "events_source": "memory.oom_control",
           "events": {"oom": None, "oom_kill": 0, "max": None, "high": None}}
    base = {"suite": "postmark", "device": "file", "workload": "Postmark", "scale": 0.002, "speed": None,
            "cleaning_s": 0.0, "io_mib": {}, "io_check": {}, "io_source": "test"}
    recs = [dict(base, system="ext4lazy-lazy", runtime_s=1.0, error=None, memory=mem),
            dict(base, system="kernel-ext4-baseline", runtime_s=None, error="MemoryLimitError: OOM KILL ...",
                 memory=dict(mem, events=dict(mem["events"], oom_kill=1)))]
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(recs, f)
    how = "each record in a memory cgroup (cgroup v1) of 64 MiB holding the workload's processes"
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"runs": [{"command": "ext4lazy bench run ...", "started": "t", "commit": "c",
                             "binary_sha256": "0" * 64, "kernel": "k", "cpus": 2,
                             "memory": {"limit_mib": 64, "how": how}}]}, f)
    text = open(report.write(out, [])).read()
    assert f"Memory: {how}." in text.split("## postmark")[0], text
    assert "| Postmark | ext4lazy-lazy | 64 | 60.0 | 40.0 | 20.0 | 0 | — | — | — |" in text, text
    assert "| Postmark | kernel-ext4-baseline (FAILED) | 64 | 60.0 | 40.0 | 20.0 | 1 | — | — | — |" in text, text
    assert report.memory_sentence([{"ram_bytes": 24 << 30}]) == [
        "Memory: not limited (no `--memory`): every system could use the machine's whole page cache (24 GiB of "
        "RAM)."]


# ---- end to end: tiny Postmark runs on `file` (a few seconds each)

def gone(rel):
    return not os.path.exists(memcg.find().mount + rel)


@pytest.fixture(scope="module")
def limited(binary, workdir):
    out = os.path.join(workdir, "bench-memory")
    p = bench(binary, "run", "--suite", "postmark", "--device", "file", "--systems", ",".join(SYSTEMS),
              "--scale", "0.002", "--memory", str(LIMIT), "--no-plots", "--out", out, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, {r["system"]: r for r in json.load(open(os.path.join(out, "results.json")))}


@pytest.mark.bench
def test_every_record_ran_under_the_limit_in_its_own_cgroup(limited):
    out, recs = limited
    seen = set()
    for s in SYSTEMS:
        r = recs[s]
        assert r["error"] is None, r["error"]
        m = r["memory"]
        assert m["limit_mib"] == LIMIT and m["limit_bytes"] == LIMIT * MiB, m
        assert m["cgroup_version"] == memcg.find().version
        assert m["swap"], m                          # no swap beyond the limit either (v1 memsw / v2 swap.max)
        # the peak of the whole cgroup, at or below the limit; the workload's process was charged in it
        assert 0 < m["peak_bytes"] <= m["limit_bytes"], m
        assert 0 < m["workload_peak_bytes"] <= m["peak_bytes"], m
        assert m["events"]["oom_kill"] == 0, m["events"]
        # the workload's process read its own cgroup: the record's workload leaf
        assert m["workload_cgroup"] == m["cgroup"] + "/workload", m
        assert m["cgroup"] not in seen
        seen.add(m["cgroup"])
        assert m["removed"] is True and gone(m["cgroup"]), m["cgroup"]
    # the daemon: in the record's daemon leaf, as /proc/PID/cgroup said right after the mount; charged there
    d = recs["ext4lazy-lazy"]["memory"]
    assert d["daemon"]["pid"] > 0 and d["daemon"]["cgroup"] == d["cgroup"] + "/daemon", d["daemon"]
    assert d["daemon_peak_bytes"] > 0, d
    # no daemon for the kernel's ext4; its loop device does direct I/O, so no page cache of the image anywhere
    k = recs["kernel-ext4-baseline"]["memory"]
    assert k["daemon"] is None and k["loop_direct_io"] is True, k
    meta = json.load(open(os.path.join(out, "meta.json")))
    parent = meta["runs"][-1]["memory"]["parent"]
    assert parent and not os.path.exists(parent), parent
    text = open(os.path.join(out, "report.md")).read()
    assert f"Memory: each record in a memory cgroup (cgroup {d['cgroup_version']}) of {LIMIT} MiB" in text
    assert "### Memory (`--memory`)" in text


@pytest.mark.bench
def test_resuming_under_another_limit_is_refused(binary, limited):
    out, _ = limited
    p = bench(binary, "run", "--suite", "postmark", "--device", "file", "--systems", ",".join(SYSTEMS),
              "--scale", "0.002", "--no-plots", "--out", out)
    assert p.returncode == 2 and f"made with --memory {LIMIT}" in p.stderr, p.stderr[-2000:]


@pytest.mark.bench
def test_an_oom_kill_fails_the_record_and_the_run(binary, workdir):
    # 8 MiB: less than the workload's Python process needs (it survives 24 MiB, its page cache being reclaimable),
    # so the kernel kills it
    out = os.path.join(workdir, "bench-memory-oom")
    p = bench(binary, "run", "--suite", "postmark", "--device", "file", "--systems", "kernel-ext4-baseline",
              "--scale", "0.002", "--memory", "8", "--no-plots", "--out", out, timeout=300)
    assert p.returncode == 1, p.stderr[-3000:]
    r = json.load(open(os.path.join(out, "results.json")))[0]
    assert r["runtime_s"] is None and "OOM KILL" in r["error"], r["error"]
    m = r["repetitions"][0]["memory"] if "repetitions" in r else r["memory"]
    assert m["events"]["oom_kill"] >= 1 and m["oom_kill_by"]["workload"] >= 1, m
    assert gone(m["cgroup"]), m["cgroup"]
    assert "FAILED" in open(os.path.join(out, "report.md")).read()
