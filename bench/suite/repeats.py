"""Repeated runs (`--repeat N`): every repetition of a (system, workload) is kept, and the record external checks
read (one per suite, system, device, workload) carries the mean over the good repetitions, as the paper reports
("the average and standard deviation of the runtime", FAST'17 section 4), plus the spread.

Record fields added: `repeat` (repetitions asked for), `runs` (good ones), `runtime_s_all` (in repetition order),
`runtime_s_sd` (sample standard deviation, None below 2 runs), `runtime_s_min`, `runtime_s_max`, the same
`cleaning_s_*`, `io_mib_sd`, `repetitions` (every repetition's own record with its index `rep`, failed ones too),
`raw_repetition` (which repetition's series and offsets `raw` holds: the one with the median runtime; its
`extra`, `params` and `plan` are the record's).  `runtime_s`, `cleaning_s`, `work_s`, `syncfs_s`, `umount_s`,
`io_mib`, the StepAhead figures and the daemon's CPU seconds are means; `fsck` is the first repetition's whose
e2fsck found problems, if any did (so the record shows it), else the median one's.  `io_check` holds the means of
both sides of the check (so the check still compares like with like), lost trace events summed, and
`equal_by_class` only if every repetition's was.  `memory` (`--memory`): the largest peaks over the runs (all of
them in `memory.peak_bytes_all`) and the event counts summed.
"""
import math

MEAN_KEYS = ("runtime_s", "cleaning_s", "work_s", "syncfs_s", "umount_s", "cleaning_wait_real_s", "loadavg_1m",
             "hit_rate", "prefetch_wasted_blocks", "kb_bytes", "daemon_cpu_s", "daemon_cpu_syncfs_s", "work_busy_s",
             "work_s_at_drive_speed")
AGGREGATE_ONLY = ("repetitions", "runs", "repeat", "runtime_s_all", "runtime_s_sd", "runtime_s_min", "runtime_s_max",
                  "cleaning_s_all", "cleaning_s_sd", "io_mib_sd", "raw_repetition", "errors")


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def sd(xs):
    """Sample standard deviation (n - 1), None below two values."""
    xs = [x for x in xs if x is not None]
    if len(xs) < 2:
        return None
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def repetitions_of(rec):
    """The repetitions a stored record holds; a record written before --repeat existed is repetition 0."""
    if rec is None:
        return []
    if "repetitions" in rec:
        return list(rec["repetitions"])
    return [{**rec, "rep": 0}]


def done_reps(rec):
    """Indices of the repetitions of a stored record that finished without error."""
    return {r["rep"] for r in repetitions_of(rec) if not r.get("error")}


def _num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _mean_dicts(dicts):
    keys = [k for k in dicts[0] if all(_num(d.get(k)) for d in dicts)]
    return {k: mean([d[k] for d in dicts]) for k in keys}


def _check(checks):
    """io_check over repetitions: both sides averaged, lost events summed, equality only if always equal."""
    out = dict(checks[-1])
    for k in ("classes_total", "reference_total", "reference_by_class"):
        if all(isinstance(c.get(k), dict) for c in checks):
            out[k] = _mean_dicts([c[k] for c in checks])
    if all("lost_events" in c for c in checks):
        out["lost_events"] = sum(c["lost_events"] or 0 for c in checks)
    if all("equal_by_class" in c for c in checks):
        out["equal_by_class"] = all(c["equal_by_class"] for c in checks)
    return out


def _memory(mems, base):
    """`memory` over repetitions (`--memory`): the peaks are the largest of the runs (every run's beside), the
    event counts summed; the rest (limit, cgroup version) is the median run's."""
    out = dict(base)
    for k in ("peak_bytes", "peak_sampled_bytes", "daemon_peak_bytes", "workload_peak_bytes"):
        vals = [m.get(k) for m in mems if m.get(k) is not None]
        out[k] = max(vals) if vals else None
    out["peak_bytes_all"] = [m.get("peak_bytes") for m in mems]
    events = {}
    for m in mems:
        for k, v in (m.get("events") or {}).items():
            events[k] = None if v is None or events.get(k, 0) is None else events.get(k, 0) + v
    out["events"] = events
    return out


def aggregate(reps, repeat):
    """The record for one (suite, system, device, workload) from its repetitions (each a full phase record with
    `rep`)."""
    reps = sorted(reps, key=lambda r: r["rep"])
    good = [r for r in reps if not r.get("error")]
    subs = [{k: v for k, v in r.items() if k not in AGGREGATE_ONLY} for r in reps]
    if not good:
        out = {k: v for k, v in subs[-1].items() if k != "rep"}
        out.update(repetitions=subs, runs=0, repeat=repeat, errors=len(reps), runtime_s_all=[], runtime_s_sd=None)
        return out
    times = [r["runtime_s"] for r in good]
    median = sorted(good, key=lambda r: r["runtime_s"])[(len(good) - 1) // 2]
    out = {k: v for k, v in median.items() if k not in AGGREGATE_ONLY and k != "rep"}
    for k in MEAN_KEYS if len(good) > 1 else ():          # one run: its own values, types and all
        if any(k in r for r in good):
            m = mean([r.get(k) for r in good])
            out[k] = None if m is None else round(m, 6)
    ios = [r["io_mib"] for r in good if isinstance(r.get("io_mib"), dict)]
    if len(ios) > 1:
        out["io_mib"] = {k: round(v, 4) for k, v in _mean_dicts(ios).items()}
        out["io_mib_sd"] = {k: (None if sd([d[k] for d in ios]) is None else round(sd([d[k] for d in ios]), 4))
                            for k in out["io_mib"]}
    bad = [r["fsck"] for r in good if (r.get("fsck") or {}).get("clean") is False]
    if bad:
        out["fsck"] = bad[0]
    checks = [r["io_check"] for r in good if isinstance(r.get("io_check"), dict)]
    if len(checks) > 1:
        out["io_check"] = _check(checks)
    mems = [r["memory"] for r in good if isinstance(r.get("memory"), dict)]
    if len(mems) > 1:
        out["memory"] = _memory(mems, out.get("memory") or mems[-1])
    cleaning = [r.get("cleaning_s") for r in good]
    s = sd(times)
    out.update(runs=len(good), repeat=repeat, errors=len(reps) - len(good), runtime_s_all=times,
               runtime_s_sd=None if s is None else round(s, 6), runtime_s_min=min(times), runtime_s_max=max(times),
               cleaning_s_all=cleaning, cleaning_s_sd=sd(cleaning), raw_repetition=median["rep"],
               finished=max(r.get("finished") or "" for r in reps), error=None, repetitions=subs)
    return out


def runtimes_by_rep(rec):
    """{repetition index: runtime} of the good repetitions."""
    return {r["rep"]: r["runtime_s"] for r in repetitions_of(rec) if not r.get("error") and r.get("runtime_s")}


def ratio_spread(a, b):
    """Runtime ratio a / b of two records: (ratio of the means, min and max of the ratios of the repetitions run in
    the same round, n of such pairs).  The rounds are paired because a round interleaves the systems phase by
    phase, so load from elsewhere falls on both sides of a pair alike."""
    if not a or not b or a.get("error") or b.get("error") or not b.get("runtime_s"):
        return None, None, None, 0
    ra, rb = runtimes_by_rep(a), runtimes_by_rep(b)
    pairs = [ra[k] / rb[k] for k in sorted(set(ra) & set(rb)) if rb[k] > 0]
    r = a["runtime_s"] / b["runtime_s"]
    return r, (min(pairs) if pairs else None), (max(pairs) if pairs else None), len(pairs)
