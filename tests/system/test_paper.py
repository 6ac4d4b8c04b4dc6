"""`ext4lazy bench paper` (issue #27 item 5): its plan is made of runs `bench run` accepts, and its report puts
each of our numbers beside the published one with the right ratio.  The report is checked on a results tree
built here, so the arithmetic is known; the runs themselves are the bench suites' (test_bench.py)."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
from bench.suite import accounting, cli, devices, paper, published, systems  # noqa: E402
from bench.suite.suites import all_suites  # noqa: E402


def test_every_experiment_is_a_run_the_bench_accepts():
    suites = all_suites()
    for e in paper.PLAN:
        args = cli.parse_run(paper.run_argv(e, "/tmp/out", 5))
        assert args.suite in suites and args.device in devices.DEVICES, e.name
        assert args.repeat == 5 and args.out == f"/tmp/out/{e.name}"
        for s in args.systems.split(","):
            systems.get(s)
    assert [e.name for e in paper.plan(["postmark-cmr", "arc-cmr"])] == ["postmark-cmr", "arc-cmr"]
    try:
        paper.plan(["nonesuch"])
        raise AssertionError("an unknown experiment was accepted")
    except ValueError:
        pass


def record(suite, device, system, workload, runtimes, scale, **fields):
    reps = [{"rep": i, "runtime_s": t} for i, t in enumerate(runtimes)]
    return {"suite": suite, "device": device, "system": system, "workload": workload, "scale": scale,
            "runtime_s": sum(runtimes) / len(runtimes), "runs": len(runtimes), "repetitions": reps, "error": None,
            **fields}


def write_results(out, name, records):
    os.makedirs(os.path.join(out, name), exist_ok=True)
    with open(os.path.join(out, name, "results.json"), "w") as f:
        json.dump(records, f)


def results_tree(out):
    micro = []
    for w in ("MakeDirs", "CreateFiles", "ListDirs", "RemoveDirs"):
        micro += [record("micro", "cmr", paper.BASELINE, w, [6.0, 6.0], 0.01,
                         io_mib={"metadata_write": 40.0, "journal_write": 50.0, "metadata_read": 1.0}),
                  record("micro", "cmr", paper.ORDERED, w, [3.0, 5.0], 0.01, io_mib={}),
                  record("micro", "cmr", paper.LAZY, w, [2.0, 2.0], 0.01, io_mib={"metadata_write": 0.0})]
    micro.append(record("micro", "cmr", paper.LAZY, "TarFiles", [1.0], 0.01, error="failed"))
    write_results(out, "micro-cmr", micro)
    for dev, tps in (("smr-seagate", (100.0, 400.0)), ("smr-wd", (200.0, 100.0))):
        write_results(out, f"postmark-{dev}", [
            record("postmark", dev, paper.BASELINE, "Postmark", [10.0], 0.02, extra={"postmark": {"tps": tps[0]}},
                   io_mib={"data_write": 20.0}),
            record("postmark", dev, paper.ORDERED, "Postmark", [8.0], 0.02, extra={"postmark": {"tps": tps[0]}}),
            record("postmark", dev, paper.LAZY, "Postmark", [4.0], 0.02, extra={"postmark": {"tps": tps[1]}})])


def with_series(out, name, rec, series):
    """A record whose median round's raw file holds `series` (rows of accounting.Sampler.COLUMNS)."""
    rec["raw"] = f"raw/{rec['system']}.json"
    os.makedirs(os.path.join(out, name, "raw"), exist_ok=True)
    with open(os.path.join(out, name, rec["raw"]), "w") as f:
        json.dump({"series": series, "series_columns": accounting.Sampler.COLUMNS}, f)
    return rec


def sampled_tree(out):
    """journal-size and compile runs with the per-second series behind Figures 6 (b) and 10."""
    js = [with_series(out, "journal-size-cmr", record("journal-size", "cmr", s, "CreateFiles", [t], 0.1), [
        [1.0, 0, 0, 10.0, 50, 5], [2.0, 0, 0, 10.0 + peak / 2, 50, 5], [3.0, 0, 0, 10.0 + peak, 50, 5],
        [4.0, 0, 0, 11.0, 50, 5]]) for s, t, peak in (("kernel-ext4-stock", 40.0, 20.0), (paper.BASELINE, 4.0, 90.0))]
    write_results(out, "journal-size-cmr", js)
    cm = [with_series(out, "compile-cmr", record("compile", "cmr", s, "CompileMix", [10.0], 0.01), [
        [1.0, 0, 0, 1.0, cpu, 10.0], [2.0, 0, 0, 1.0, cpu, None], [3.0, 0, 0, 1.0, cpu, 30.0]])
        for s, cpu in ((paper.BASELINE, 90.0), (paper.LAZY, 80.0))]
    write_results(out, "compile-cmr", cm)


def find(rows, figure, what):
    figure = f"FAST'17 {figure}"
    got = [r for r in rows if r.figure == figure and r.what.startswith(what)]
    assert len(got) == 1, (figure, what, [r.what for r in rows if r.figure == figure])
    return got[0]


def test_the_report_puts_ours_beside_the_papers(tmp_path):
    out = str(tmp_path)
    results_tree(out)
    rows, runs = paper.rows_of(out)
    assert set(runs) == {"micro-cmr", "postmark-smr-seagate", "postmark-smr-wd"}
    for r in rows:
        published.get(r.key)        # every row cites an entry that exists

    # speed-ups: ratio of the means, the spread from the rounds, both measures of the idea
    r = find(rows, "Figure 7", "MakeDirs: ext4lazy ordered / lazy")
    assert r.ours == 2.0 and r.spread == (1.5, 2.5) and r.paper == 2
    assert paper.ratio_text(r) == "1.00"
    r = find(rows, "Figure 7", "CreateFiles: kernel ext4 baseline / ext4lazy lazy")
    assert r.ours == 3.0 and r.paper == (1.5, 2) and paper.ratio_text(r) == "1.50-2.00"
    # a failed record is not a number
    assert find(rows, "Figure 7", "TarFiles: ext4lazy ordered / lazy").ours is None

    # full-scale volumes: ours divided by our scale
    r = find(rows, "Table 2", "MakeDirs, metadata write: kernel-ext4-baseline")
    assert r.ours == 4000.0 and r.paper == 4631

    # Figure 13: the paper's value for each modelled disk; Figure 14: transactions per second across disks
    assert find(rows, "Figure 13", "Postmark: kernel ext4 baseline / ext4lazy lazy (ST8000AS0002").paper == 5.4
    assert find(rows, "Figure 13", "Postmark: ext4lazy ordered / lazy (WD40NMZW").ours == 2.0
    assert find(rows, "Figure 14", f"transactions/s, {paper.BASELINE}").ours == 2.0
    assert find(rows, "Figure 14", f"transactions/s, {paper.LAZY}").ours == 4.0

    # scale-dependent seconds carry no ratio
    r = find(rows, "Figure 12", "Postmark: runtime")
    assert r.ours == 4.0 and not r.ratio and paper.ratio_text(r) == "—"

    text = open(paper.write(out)).read()
    assert "| MakeDirs: ext4lazy ordered / lazy | 2.00 | 2.00 (1.50-2.50) | x | 1.00 |" in text
    assert "| micro-cmr | micro | cmr | 0.01 | 2 | Figure 7, Table 2 |" in text
    assert "| stepahead-cmr | stepahead | cmr | — | not run |" in text


def test_the_series_figures_come_from_the_samples(tmp_path):
    out = str(tmp_path)
    sampled_tree(out)
    rows, _ = paper.rows_of(out)
    # Figure 6 (a): stock / baseline; (b): the peak above the first sample, at full scale, and when
    assert find(rows, "Figure 6 (a)", "CreateFiles: kernel ext4 stock / baseline").ours == 10.0
    r = find(rows, "Figure 6 (b)", f"CreateFiles: most page cache dirtied, {paper.BASELINE}")
    assert r.ours == 900.0 and r.paper == 1024
    assert find(rows, "Figure 6 (b)", f"CreateFiles: seconds until then, {paper.BASELINE}").ours == 3.0
    assert find(rows, "Figure 6 (b)", "CreateFiles: most page cache dirtied, kernel-ext4-stock").paper is None
    # Figure 10: means over the samples that have the column
    assert find(rows, "Figure 10", f"CompileMix: mean CPU utilisation, {paper.LAZY}").ours == 80.0
    assert find(rows, "Figure 10", f"CompileMix: mean disk utilisation, {paper.BASELINE}").ours == 20.0


def test_the_sampler_records_every_column():
    s = accounting.Sampler(lambda: (0, 0), every=0.05, device=None)
    time.sleep(0.2)
    series = s.stop()
    assert len(series) >= 2
    for row in series:
        assert len(row) == len(accounting.Sampler.COLUMNS)
        t, r, w, dirty, cpu, disk = row
        assert dirty is not None and dirty >= 0 and (cpu is None or 0 <= cpu <= 100) and disk is None


def test_the_journal_size_suite_gives_stock_ext4_the_papers_journal():
    """Figure 6 compares the paper's 128 MiB journal with its 10 GiB one; mkfs.ext4 1.47 gives a large partition
    1 GiB by default, so the suite asks for the paper's size for the stock system and for it alone."""
    from bench.suite.suites import journal_size
    group = journal_size.build(1.0)[0]
    assert group.stock_journal_mib == 128
    stock = systems.get("kernel-ext4-stock").mkfs_cmd("/img", 10240, group.stock_journal_mib)
    baseline = systems.get("kernel-ext4-baseline").mkfs_cmd("/img", 10240, group.stock_journal_mib)
    assert stock[stock.index("-J") + 1] == "size=128" and baseline[baseline.index("-J") + 1] == "size=10240"
    assert "-J" not in systems.get("kernel-ext4-stock").mkfs_cmd("/img", 10240)      # other suites: mkfs's own
