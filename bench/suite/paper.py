"""`ext4lazy bench paper`: every figure and table of the papers that the bench reproduces, from one command,
each of our numbers beside the published one (bench/suite/published.py).

PLAN names the runs (suite, device, systems, scale); `ext4lazy bench paper --out DIR` makes each of them in
DIR/<experiment> with `ext4lazy bench run` (so an interrupted command resumes), then writes DIR/paper.md and
DIR/paper-*.png.  `--report` only rewrites those two from the runs already in DIR.

How ours is compared with the paper's (docs/BENCH.md, "bench paper"):
- Speed-ups are ratios of mean runtimes.  Two are given for every published speed-up: ext4lazy ordered / ext4lazy
  lazy (the same code with and without lazy journaling: the fair measure of the idea) and kernel ext4 / ext4lazy
  lazy (what the paper measured: stock ext4 against ext4-lazy).  Brackets hold the lowest and highest ratio of the
  two systems within one round.
- Volumes the paper gives at its full scale (Tables 2-4) are ours divided by our scale, marked "÷ scale".
- Quantities that do not scale linearly (runtimes, cleaning seconds) are shown as measured, without a ratio.
- Every number of ours comes from one run directory: no figure mixes two runs or two binaries.
"""
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import accounting, published, repeats

MiB = 1 << 20
BASELINE, ORDERED, LAZY = "kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"
TRIO = (BASELINE, ORDERED, LAZY)


@dataclass(frozen=True)
class Experiment:
    name: str
    suite: str
    device: str
    systems: Tuple[str, ...]
    scale: float
    figures: Tuple[str, ...]
    options: Tuple[str, ...] = ()


# The runs behind the figures.  Scales: what about five hours of this 2-CPU machine allows at --repeat 5
# (docs/BENCH.md gives the measured times); --scale-factor multiplies them.
PLAN = (
    Experiment("micro-cmr", "micro", "cmr", TRIO, 0.01, ("Figure 7", "Table 2")),
    Experiment("micro-smr-seagate", "micro", "smr-seagate", TRIO, 0.01, ("Figure 11",)),
    # the paper's own size: 100,000 files take seconds
    Experiment("journal-size-cmr", "journal-size", "cmr", ("kernel-ext4-stock",) + TRIO, 1.0,
               ("Figure 6 (a)", "Figure 6 (b)")),
    Experiment("postmark-cmr", "postmark", "cmr", TRIO, 0.02, ("Table 3", "Figure 9")),
    Experiment("postmark-smr-seagate", "postmark", "smr-seagate", TRIO, 0.02,
               ("Table 4", "Figure 12", "Figure 13", "Figure 14")),
    Experiment("postmark-smr-wd", "postmark", "smr-wd", TRIO, 0.02, ("Figure 13", "Figure 14")),
    Experiment("compile-cmr", "compile", "cmr", TRIO, 0.01, ("Figure 10",)),
    Experiment("stepahead-cmr", "stepahead", "cmr",
               ("kernel-ext4-stock", ORDERED, "ext4lazy-ordered-stepahead", LAZY, "ext4lazy-lazy-stepahead"), 0.1,
               ("Figure 4", "Figure 5", "Table 1", "Table 3"), ("--no-traces",)),
    Experiment("arc-cmr", "arc", "cmr", ("kernel-ext4-stock", "kernel-xfs", "dbfs-sqlite", ORDERED, LAZY), 1.0,
               ("Figure 4.1",), ("--jobs", "5000", "--no-traces")),
)


def plan(only: Optional[List[str]] = None) -> List[Experiment]:
    names = [e.name for e in PLAN]
    unknown = [n for n in (only or []) if n not in names]
    if unknown:
        raise ValueError(f"unknown experiment(s) {', '.join(unknown)}; the plan has {', '.join(names)}")
    return [e for e in PLAN if not only or e.name in only]


def run_argv(e: Experiment, out: str, repeat: int, scale_factor: float = 1.0, speed: float = 1.0) -> List[str]:
    """The `ext4lazy bench run` arguments of one experiment."""
    return ["--suite", e.suite, "--device", e.device, "--systems", ",".join(e.systems),
            "--scale", f"{e.scale * scale_factor:g}", "--speed", f"{speed:g}", "--repeat", str(repeat),
            "--out", os.path.join(out, e.name), *e.options]


# ------------------------------------------------------------------------------------------------ comparison rows

@dataclass
class Row:
    """One published number and ours.  `paper`: a number, a (low, high) range, or None (not in the text).
    `ours`: a number or None (not measured); `spread`: (low, high) of ours over the rounds; `ratio`: whether
    ours / paper means something (False where the quantity does not scale with the run's size)."""
    figure: str
    what: str
    paper: Any
    ours: Optional[float]
    unit: str
    key: str
    spread: Optional[Tuple[float, float]] = None
    ratio: bool = True
    note: str = ""

    def __post_init__(self):
        # two papers have a Figure 4 and a Table 3: the title names the paper
        self.figure = f"{PAPER_NAMES[self.key.split('.')[0]]} {self.figure}"


PAPER_NAMES = {"fast17": "FAST'17", "login17": ";login:'17", "apsys16": "APSys'16", "thesis17": "Thesis'17"}


@dataclass
class Run:
    """One experiment's results: records by (system, workload), errors left out."""
    exp: Experiment
    out: str
    by: Dict[Tuple[str, str], dict] = field(default_factory=dict)
    scale: Optional[float] = None
    repeat: Optional[int] = None

    def rec(self, system, workload):
        return self.by.get((system, workload))

    @property
    def scale_note(self):
        """The note of a row whose seconds do not scale: ours at our scale, the paper's at its full one."""
        return f"at scale {self.scale} (the paper's at full scale)"

    def runtime(self, system, workload):
        r = self.rec(system, workload)
        return None if r is None else r.get("runtime_s")


def load(out: str, e: Experiment) -> Optional[Run]:
    path = os.path.join(out, e.name, "results.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        records = json.load(f)
    run = Run(e, os.path.join(out, e.name))
    for r in records:
        if r.get("error") or r.get("suite") != e.suite or r.get("device") != e.device:
            continue
        run.by[(r["system"], r["workload"])] = r
        run.scale, run.repeat = r.get("scale"), r.get("runs") or 1
    return run


def speedup(run: Run, a: str, b: str, w: str):
    """Mean runtime of a / that of b, with the spread within rounds (None where either is missing)."""
    r, lo, hi, n = repeats.ratio_spread(run.rec(a, w), run.rec(b, w))
    return r, ((lo, hi) if r is not None and n > 1 else None)


def speedup_rows(run, figure, key, workloads, what="", paper=None):
    """The two speed-ups of ext4lazy lazy for each workload against one published number (the entry's value,
    or `paper` where the entry holds several)."""
    pv = published.value(key) if paper is None else paper
    rows = []
    for w in workloads:
        for label, a in (("ext4lazy ordered / lazy", ORDERED), ("kernel ext4 baseline / ext4lazy lazy", BASELINE)):
            v, spread = speedup(run, a, LAZY, w)
            rows.append(Row(figure, f"{w}: {label}{what}", pv, v, "x", key, spread))
    return rows


def io_rows(run, figure, keys, workload, klass, systems=(("ext4-baseline", BASELINE), ("ext4-lazy", LAZY))):
    """Published MiB at full scale against ours divided by our scale."""
    rows = []
    for paper_name, ours in systems:
        r = run.rec(ours, workload)
        v = None if r is None or not run.scale else (r.get("io_mib") or {}).get(klass)
        v = None if v is None else v / run.scale
        rows.append(Row(figure, f"{workload}, {klass.replace('_', ' ')}: {ours} (÷ scale)",
                        (published.value(keys) or {}).get(paper_name), v, "MiB", keys))
    return rows


def micro_cmr(run):
    trav = ("FindFiles", "TarDirs", "RemoveDirs", "RemoveFiles")
    rows = (speedup_rows(run, "Figure 7", "fast17.fig7.speedup_makedirs", ["MakeDirs"])
            + speedup_rows(run, "Figure 7", "fast17.fig7.speedup_create", ["CreateFiles"])
            + speedup_rows(run, "Figure 7", "fast17.fig7.speedup_listdirs", ["ListDirs"])
            + speedup_rows(run, "Figure 7", "fast17.fig7.speedup_traversal", trav)
            + speedup_rows(run, "Figure 7", "fast17.fig7.speedup_tarfiles", ["TarFiles"]))
    for w, stem in (("MakeDirs", "makedirs"), ("RemoveDirs", "removedirs")):
        for klass, k in (("metadata_read", "metadata_reads"), ("metadata_write", "metadata_writes"),
                         ("journal_write", "journal_writes")):
            rows += io_rows(run, "Table 2", f"fast17.table2.{stem}.{k}", w, klass)
    return rows


def micro_smr(run):
    rows = (speedup_rows(run, "Figure 11", "fast17.fig11.speedup_create", ["MakeDirs", "CreateFiles"])
            + speedup_rows(run, "Figure 11", "fast17.fig11.speedup_listdirs", ["ListDirs"])
            + speedup_rows(run, "Figure 11", "fast17.fig11.speedup_other",
                           ["FindFiles", "TarDirs", "TarFiles", "RemoveDirs", "RemoveFiles"]))
    for w, key in (("MakeDirs", "fast17.fig11.cleaning_makedirs"), ("RemoveDirs", "fast17.fig11.cleaning_removedirs"),
                   ("RemoveFiles", "fast17.fig11.cleaning_removefiles"),
                   ("CreateFiles", "fast17.fig11.cleaning_createfiles")):
        for paper_name, ours in (("ext4-baseline", BASELINE), ("ext4-lazy", LAZY)):
            r = run.rec(ours, w)
            pv = published.value(key)
            rows.append(Row("Figure 11", f"cleaning after {w}: {ours}", pv.get(paper_name) if pv else None,
                            None if r is None else r.get("cleaning_s"), "s", key, ratio=False,
                            note=run.scale_note))
    return rows


def journal_size(run):
    w = "CreateFiles"
    times = published.value("fast17.fig6a.time")
    rows = [Row("Figure 6 (a)", f"{w}: {s}", times.get(p), run.runtime(s, w), "s", "fast17.fig6a.time", ratio=False,
                note=f"creation alone, at scale {run.scale}")
            for p, s in (("ext4-stock", "kernel-ext4-stock"), ("ext4-baseline", BASELINE))]
    v, spread = speedup(run, "kernel-ext4-stock", BASELINE, w)
    rows.append(Row("Figure 6 (a)", f"{w}: kernel ext4 stock / baseline journal", published.value("fast17.fig6a.speedup"),
                    v, "x", "fast17.fig6a.speedup", spread))
    dirtied = published.value("fast17.fig6b.baseline_dirty")
    for s in ("kernel-ext4-stock", BASELINE, ORDERED, LAZY):
        peak = dirty_peak(run, s, w)
        is_base = s == BASELINE
        rows.append(Row("Figure 6 (b)", f"{w}: most page cache dirtied, {s} (÷ scale)",
                        dirtied["GiB"] * 1024 if is_base else None,
                        None if peak is None or not run.scale else peak[0] / run.scale, "MiB",
                        "fast17.fig6b.baseline_dirty", note=DIRTY_NOTE))
        rows.append(Row("Figure 6 (b)", f"{w}: seconds until then, {s}", dirtied["s"] if is_base else None,
                        None if peak is None else peak[1], "s", "fast17.fig6b.baseline_dirty", ratio=False,
                        note=run.scale_note))
    return rows


DIRTY_NOTE = ("the highest Dirty of /proc/meminfo sampled each second of the median round, less the first sample; "
              "for ext4lazy only what the kernel holds for the FUSE mount, not the daemon's delayed blocks")


def dirty_peak(run, system, workload):
    """(MiB dirtied at the peak above the first sample, seconds from the mount to the peak)."""
    pts = accounting.series_points(accounting.load_raw(run.out, run.rec(system, workload)), "dirty_mib")
    if not pts:
        return None
    t, d = max(pts, key=lambda p: p[1])
    return d - pts[0][1], t


def postmark_tput(r):
    """Mean disk throughput over the run, MiB/s (the paper's Figure 9): every byte the device read and wrote,
    all classes, over the runtime; not the bytes Postmark moved, which the page cache serves in part."""
    io = (r or {}).get("io_mib") or {}
    return sum(io.values()) / r["runtime_s"] if r and r.get("runtime_s") and io else None


def postmark_tps(r):
    return (((r or {}).get("extra") or {}).get("postmark") or {}).get("tps")


def postmark_writes(run, table):
    """Tables 3 and 4: the writes of one Postmark run by class."""
    rows = []
    for klass, k in (("data_write", "data_writes"), ("metadata_write", "metadata_writes"),
                     ("journal_write", "journal_writes")):
        rows += io_rows(run, f"Table {table}", f"fast17.table{table}.{k}", "Postmark", klass)
    return rows


def postmark_cmr(run):
    w = "Postmark"
    rows = postmark_writes(run, 3)
    tput = published.value("fast17.fig9.throughput")
    for p, s in (("ext4-baseline", BASELINE), ("ext4-lazy", LAZY), (None, ORDERED)):
        rows.append(Row("Figure 9", f"mean throughput: {s}", tput.get(p) if p else None, postmark_tput(run.rec(s, w)),
                        "MiB/s", "fast17.fig9.throughput"))
    for label, a in (("ext4lazy lazy / ordered", ORDERED), ("ext4lazy lazy / kernel ext4 baseline", BASELINE)):
        ta, tl = postmark_tput(run.rec(a, w)), postmark_tput(run.rec(LAZY, w))
        gain = None if not ta or tl is None else 100 * (tl / ta - 1)
        rows.append(Row("Figure 9", f"throughput gain, {label}", published.value("fast17.fig9.throughput_gain"), gain,
                        "%", "fast17.fig9.throughput_gain"))
    return rows


def postmark_smr(run):
    w = "Postmark"
    rows = postmark_writes(run, 4)
    rows += speedup_rows(run, "Figure 12", "fast17.fig12.speedup", [w])
    rows.append(Row("Figure 12", f"{w}: runtime, {LAZY}", published.value("fast17.fig12.lazy_time"),
                    run.runtime(LAZY, w), "s", "fast17.fig12.lazy_time", ratio=False,
                    note=run.scale_note))
    return rows


def figure13(runs):
    """Figure 13 and 14: Postmark on every modelled DM-SMR disk."""
    rows = []
    per_disk = published.value("fast17.fig13.speedup")
    for disk, dev in published.DISKS.items():
        if dev is None or not dev.startswith("smr"):
            continue
        run = runs.get(f"postmark-{dev}")
        if run is None:
            continue
        rows += speedup_rows(run, "Figure 13", "fast17.fig13.speedup", ["Postmark"], f" ({disk} model)",
                             per_disk.get(disk))
    st, wd = runs.get("postmark-smr-seagate"), runs.get("postmark-smr-wd")
    if st and wd:
        def tps_ratio(system, a, b):
            ta, tb = postmark_tps(a.rec(system, "Postmark")), postmark_tps(b.rec(system, "Postmark"))
            return None if ta is None or not tb else ta / tb
        rows.append(Row("Figure 14", f"transactions/s, {BASELINE}: WD40NMZW model / ST8000AS0002 model",
                        published.value("fast17.fig14.wd_vs_st8000_baseline"), tps_ratio(BASELINE, wd, st), "x",
                        "fast17.fig14.wd_vs_st8000_baseline"))
        rows.append(Row("Figure 14", f"transactions/s, {LAZY}: ST8000AS0002 model / WD40NMZW model",
                        published.value("fast17.fig14.st8000_vs_wd_lazy"), tps_ratio(LAZY, st, wd), "x",
                        "fast17.fig14.st8000_vs_wd_lazy"))
    return rows


def compile_cmr(run):
    w = "CompileMix"
    rows = [Row("Figure 10", f"{w}: {label}", 1.0, v, "x", "fast17.fig10.utilisation", spread,
                note="the paper: a CPU-bound build, no gain expected (1x is our reading of its words)")
            for label, (v, spread) in (("ext4lazy ordered / lazy", speedup(run, ORDERED, LAZY, w)),
                                       ("kernel ext4 baseline / ext4lazy lazy", speedup(run, BASELINE, LAZY, w)))]
    for s in TRIO:
        raw = accounting.load_raw(run.out, run.rec(s, w))
        for name, label in (("cpu_busy_pct", "CPU"), ("device_busy_pct", "disk")):
            pts = accounting.series_points(raw, name)
            rows.append(Row("Figure 10", f"{w}: mean {label} utilisation, {s}", None,
                            sum(p[1] for p in pts) / len(pts) if pts else None, "%", "fast17.fig10.utilisation",
                            note="the paper: a CPU-bound build (its utilisation is a plot only); ours: the median "
                                 "round's per-second samples, CPU over both CPUs, disk = the device busy"))
    r = run.rec(BASELINE, w)
    io = (r or {}).get("io_mib") or {}
    writes = sum(io.get(k) or 0 for k in ("data_write", "metadata_write", "journal_write"))
    share = 100 * (io.get("metadata_write") or 0) / writes if writes else None
    rows.append(Row("Figure 10", f"{w}: metadata share of all writes, {BASELINE}",
                    published.value("fast17.fig3.metadata_share"), share, "%", "fast17.fig3.metadata_share"))
    return rows


def stepahead(run):
    rows = []
    gains = published.value("apsys16.fig4.speedup")
    hits = published.value("apsys16.fig5.hit_gain")
    for w in ("find", "readdir", "du", "grep", "stat", "touch"):
        for mode in ("ordered", "lazy"):
            a, b = f"ext4lazy-{mode}", f"ext4lazy-{mode}-stepahead"
            v, spread = speedup(run, a, b, w)
            rows.append(Row("Figure 4", f"{w}: speed-up of StepAhead, ext4lazy {mode}", gains.get(w),
                            None if v is None else 100 * (v - 1), "%", "apsys16.fig4.speedup",
                            None if spread is None else (100 * (spread[0] - 1), 100 * (spread[1] - 1))))
            ra, rb = run.rec(a, w), run.rec(b, w)
            la, lb = lookup_hit_rate(ra), lookup_hit_rate(rb)
            rows.append(Row("Figure 5", f"{w}: hit-rate gain of StepAhead per translation, ext4lazy {mode} (points)",
                            hits.get(w), None if la is None or lb is None else 100 * (lb - la), "%",
                            "apsys16.fig5.hit_gain", note=LOOKUP_NOTE))
            rows.append(Row("Figure 5", f"{w}: hit-rate gain of StepAhead per translation, ext4lazy {mode} (relative)",
                            hits.get(w), None if not la or lb is None else 100 * (lb / la - 1), "%",
                            "apsys16.fig5.hit_gain", note=LOOKUP_NOTE))
            ha, hb = (ra or {}).get("hit_rate"), (rb or {}).get("hit_rate")
            rows.append(Row("Figure 5", f"{w}: hit-rate gain of StepAhead per block read, ext4lazy {mode} (points)",
                            hits.get(w), None if ha is None or hb is None else 100 * (hb - ha), "%",
                            "apsys16.fig5.hit_gain",
                            note="per translation block read (directory and inode-table blocks) served from the "
                                 "cache: not the paper's unit, kept beside it"))
    t3 = published.value("apsys16.table3.kb_mb")
    per_entry = [mb * 1e6 / n for n, mb in t3.items()]
    for w in ("du", "stat", "readdir", "grep", "touch"):
        k = run.rec("kernel-ext4-stock", w)
        km = ((k or {}).get("extra") or {}).get("kernel_memory") or {}
        # only a walk that made the kernel hold every name, undisturbed by another drop_caches (report_stepahead)
        whole = ((k or {}).get("params") or {}).get("kernel_dentries") == "every name" and \
            km.get("drop_caches_during") == 0
        kmem = km.get("kmem_bytes") if whole else None
        for mode in ("ordered", "lazy"):
            r = run.rec(f"ext4lazy-{mode}-stepahead", w)
            kb = (r or {}).get("kb_bytes")
            ke = (((r or {}).get("extra") or {}).get("stepahead") or {}).get("kb_entries")
            rows.append(Row("Table 3", f"{w}: knowledge base bytes per entry, ext4lazy {mode}",
                            (min(per_entry), max(per_entry)), kb / ke if kb and ke else None, "B",
                            "apsys16.table3.kb_mb", note="the paper's KB MB / (files + directories), MB as 10^6 B"))
            rows.append(Row("Table 3", f"{w}: kernel dentry and inode caches / knowledge base, ext4lazy {mode}",
                            published.value("apsys16.s4_2.ratio"), kmem / kb if kmem and kb and ke else None, "x",
                            "apsys16.s4_2.ratio", note="kernel: the peak kernel memory of the same walk on "
                                                       "kernel-ext4-stock (docs/BENCH.md)"))
    for key, what in (("apsys16.table1.failed", "failed dentry lookups"),
                      ("apsys16.table1.unused", "statically prefetched inodes never used")):
        for w, v in published.value(key).items():
            rows.append(Row("Table 1", f"{w}: {what}", v, None, "%", key, note="not measured yet (issue #27 item 4)"))
    return rows


LOOKUP_NOTE = ("the paper counts translations and does not say whether its gain is in points or relative: both "
               "are given; ours: the names the daemon translated (LOOKUPs, and the entries readdirplus lists) "
               "without a device read / all of them: what the kernel's dentry cache did not answer itself")


def lookup_hit_rate(r):
    return (((r or {}).get("extra") or {}).get("stepahead") or {}).get("lookup_hit_rate")


def arc(run):
    rows = []
    sizes = sorted({r.get("jobs") for (s, w), r in run.by.items() if w.startswith("Scan-") and r.get("jobs")})
    for n in sizes:
        scan = f"Scan-{n}-flat"

        def jps(system):
            r = run.rec(system, scan)
            return None if r is None else r.get("jobs_per_s")
        rows.append(Row("Figure 4.1", f"{scan}: jobs/s, dbfs-sqlite (the thesis's DBFS)",
                        published.value("thesis17.fig4_1.dbfs_hdd"), jps("dbfs-sqlite"), "jobs/s",
                        "thesis17.fig4_1.dbfs_hdd"))
        x, d = jps("kernel-xfs"), jps("dbfs-sqlite")
        rows.append(Row("Figure 4.1", f"{scan}: kernel-xfs / dbfs-sqlite", published.value("thesis17.s5_5.xfs_vs_dbfs"),
                        None if x is None or not d else x / d, "x", "thesis17.s5_5.xfs_vs_dbfs"))
        for s in ("kernel-ext4-stock", "kernel-xfs", ORDERED, LAZY):
            rows.append(Row("Figure 4.1", f"{scan}: jobs/s, {s}", None, jps(s), "jobs/s", "thesis17.fig4_1.per_size",
                            note="the thesis gives these only as a plot"))
    return rows


COMPARE = {"micro-cmr": micro_cmr, "micro-smr-seagate": micro_smr, "journal-size-cmr": journal_size,
           "postmark-cmr": postmark_cmr, "postmark-smr-seagate": postmark_smr, "compile-cmr": compile_cmr,
           "stepahead-cmr": stepahead, "arc-cmr": arc}


def rows_of(out: str) -> Tuple[List[Row], Dict[str, Run]]:
    runs = {e.name: r for e in PLAN if (r := load(out, e)) is not None}
    rows = []
    for name, run in runs.items():
        if name in COMPARE:
            rows += COMPARE[name](run)
    return rows + figure13(runs), runs


# ------------------------------------------------------------------------------------------------------ the report

def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, tuple):
        return f"{fmt(v[0])}-{fmt(v[1])}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {fmt(x)}" for k, x in v.items())
    a = abs(v)
    return f"{v:,.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def ratio_text(row: Row) -> str:
    if not row.ratio or row.ours is None or row.paper is None:
        return "—"
    if isinstance(row.paper, tuple):
        lo, hi = row.paper
        if not lo or not hi:
            return "—"
        return f"{row.ours / hi:.2f}-{row.ours / lo:.2f}"
    return "—" if not row.paper else f"{row.ours / row.paper:.2f}"


def ours_text(row: Row) -> str:
    if row.ours is None:
        return "not measured"
    return fmt(row.ours) + (f" ({fmt(row.spread[0])}-{fmt(row.spread[1])})" if row.spread else "")


def figure_key(title):
    """Paper order, then figures before tables, by number: "FAST'17 Figure 6 (b)" -> (0, 0, [6], "(b)")."""
    paper, kind, rest = (title.split(" ", 2) + ["", ""])[:3]
    number, _, part = rest.partition(" ")
    names = list(PAPER_NAMES.values())
    return (names.index(paper) if paper in names else len(names), 0 if kind == "Figure" else 1,
            [int(x) if x.isdigit() else 0 for x in number.split(".")], part)


def figure_order(rows):
    return sorted({r.figure for r in rows}, key=figure_key)


# The series figures `bench run` draws, shown under the paper's figure they reproduce: (experiment, PNG).
SERIES_PLOTS = {
    "FAST'17 Figure 6 (b)": [("journal-size-cmr", "dirty-journal-size-cmr-CreateFiles.png")],
    "FAST'17 Figure 7": [("micro-cmr", "runtime-micro-cmr.png")],
    "FAST'17 Figure 8": [("micro-cmr", "offsets-micro-cmr-MakeDirs.png"),
                         ("micro-cmr", "offsets-micro-cmr-RemoveDirs.png")],
    "FAST'17 Figure 9": [("postmark-cmr", "throughput-postmark-cmr-Postmark.png"),
                         ("postmark-cmr", "offsets-postmark-cmr-Postmark.png")],
    "FAST'17 Figure 10": [("compile-cmr", "utilisation-compile-cmr-CompileMix.png")],
    "FAST'17 Figure 11": [("micro-smr-seagate", "runtime-micro-smr-seagate.png")],
    "FAST'17 Figure 12": [("postmark-smr-seagate", "throughput-postmark-smr-seagate-Postmark.png"),
                          ("postmark-smr-seagate", "offsets-postmark-smr-seagate-Postmark.png")],
    "FAST'17 Figure 13": [("postmark-smr-wd", "throughput-postmark-smr-wd-Postmark.png")],
    "Thesis'17 Figure 4.1": [("arc-cmr", "arc-jobs-per-s-cmr-flat.png")],
}


def series_plots(out, figure):
    return [f"{e}/{png}" for e, png in SERIES_PLOTS.get(figure, []) if os.path.exists(os.path.join(out, e, png))]


def write(out: str) -> str:
    """OUT/paper.md, linking the plots `plot` left in OUT."""
    rows, runs = rows_of(out)
    L = ["# The papers' figures and tables, ours beside the published numbers", "",
         "Written by `ext4lazy bench paper`; how each number is obtained: bench/suite/paper.py and docs/BENCH.md. "
         "Paper: the published number (bench/suite/published.py, with the quote it comes from). Ours: the mean over "
         "the rounds; brackets hold the lowest and highest ratio of the two systems within one round. "
         "Ours / paper: against a published range, against its high and low end.", ""]
    L += ["| experiment | suite | device | scale | rounds | figures |", "|---|---|---|---|---|---|"]
    for e in PLAN:
        run = runs.get(e.name)
        L.append(f"| {e.name} | {e.suite} | {e.device} | {fmt(run.scale) if run else '—'} | "
                 f"{run.repeat if run else 'not run'} | {', '.join(e.figures)} |")
    L.append("")
    figures = sorted(set(figure_order(rows)) | {f for f in SERIES_PLOTS if series_plots(out, f)}, key=figure_key)
    for fig in figures:
        notes = []
        L += [f"## {fig}", "", "| what | paper | ours | unit | ours / paper |", "|---|---|---|---|---|"]
        for r in (x for x in rows if x.figure == fig):
            mark = ""
            if r.note:
                if r.note not in notes:
                    notes.append(r.note)
                mark = f" [{notes.index(r.note) + 1}]"
            L.append(f"| {r.what}{mark} | {fmt(r.paper) if r.paper is not None else 'not in the text'} | "
                     f"{ours_text(r)} | {r.unit} | {ratio_text(r)} |")
        L += [""] + [f"[{i}] {n}  " for i, n in enumerate(notes, 1)] + ([""] if notes else [])
        png = png_name(fig)
        if os.path.exists(os.path.join(out, png)):
            L += [f"![{fig}: ours beside the paper's]({png})", ""]
        L += [f"![{fig}: {p.split('/')[-1][:-4]}]({p})" for p in series_plots(out, fig)]
        L += [""] if series_plots(out, fig) else []
    path = os.path.join(out, "paper.md")
    with open(path, "w") as f:
        f.write("\n".join(L))
    return path


def png_name(figure: str) -> str:
    slug = "".join(c if c.isalnum() else "-" for c in figure.lower().replace("'", ""))
    return "paper-" + "-".join(filter(None, slug.split("-"))) + ".png"


def plot(out: str) -> List[str]:
    """One bar chart per figure, of the rows whose paper and ours are both numbers of one unit: ours as bars (the
    spread over the rounds as an error bar), the paper's as hatched bars (a range as its error bar).  Run in the
    interpreter that has matplotlib (bench.suite.cli.run_plotter)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    for old in os.listdir(out):
        if old.startswith("paper-") and old.endswith(".png"):
            os.remove(os.path.join(out, old))
    rows, _ = rows_of(out)
    written = []
    for fig in figure_order(rows):
        rs = [r for r in rows if r.figure == fig and r.ours is not None and r.ratio
              and isinstance(r.paper, (int, float, tuple))]
        if not rs:
            continue
        units = [r.unit for r in rs]
        unit = max(set(units), key=units.count)
        rs = [r for r in rs if r.unit == unit]
        f, ax = plt.subplots(figsize=(9, max(2.5, 0.45 * len(rs) + 1.2)))
        ys = list(range(len(rs)))
        ours = [r.ours for r in rs]
        err = [[max(0, r.ours - r.spread[0]) if r.spread else 0 for r in rs],
               [max(0, r.spread[1] - r.ours) if r.spread else 0 for r in rs]]
        mid = [sum(r.paper) / 2 if isinstance(r.paper, tuple) else r.paper for r in rs]
        perr = [[m - r.paper[0] if isinstance(r.paper, tuple) else 0 for m, r in zip(mid, rs)],
                [r.paper[1] - m if isinstance(r.paper, tuple) else 0 for m, r in zip(mid, rs)]]
        ax.barh([y - 0.2 for y in ys], ours, 0.4, xerr=err, color="#4477aa",
                label="ours (mean; error bar: lowest and highest round)")
        ax.barh([y + 0.2 for y in ys], mid, 0.4, xerr=perr, color="white", edgecolor="#cc6677", hatch="//",
                label="the paper's published value (error bar: its range)")
        ax.set_yticks(ys)
        ax.set_yticklabels([r.what for r in rs], fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(unit)
        vals = [v for v in ours + mid if v and v > 0]
        if vals and min(v for v in ours + mid) > 0 and max(vals) / min(vals) > 30:
            ax.set_xscale("log")
        ax.set_title(f"{fig}: ours beside the paper's", fontsize=9)
        ax.legend(fontsize=7, loc="best")
        f.tight_layout()
        name = png_name(fig)
        f.savefig(os.path.join(out, name), dpi=110)
        plt.close(f)
        written.append(os.path.join(out, name))
    return written


if __name__ == "__main__":
    import sys
    for path in plot(sys.argv[1]):
        print(path)
