"""DIR/report.md from DIR/results.json and DIR/meta.json: the command lines first, then per suite and device
the runtimes with the paper's figures and the ratios, the I/O by class (the paper's Tables 2-4), Postmark's
transactions per second, the checks of the accounting, and the plots."""
import json
import os

from . import repeats, systems
from .suites import all_suites



def f2(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"


def ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def xr(v):
    return "—" if v is None else f"{v:.2f}x"


def runtime_cell(r):
    """Mean runtime, with the sample standard deviation over the repetitions when there are several."""
    text = f2(r["runtime_s"])
    if (r.get("runs") or 1) > 1 and r.get("runtime_s_sd") is not None:
        text += f" ± {f2(r['runtime_s_sd'])}"
    if (r.get("repeat") or 1) > (r.get("runs") or 1):
        text += f" ({r.get('runs', 0)} of {r['repeat']} runs)"
    return text


def ratio_cell(a, b):
    """Ratio of the mean runtimes, with the range of the ratios within a round when there are two or more."""
    r, lo, hi, n = repeats.ratio_spread(a, b)
    if r is None:
        return "—"
    return xr(r) + (f" ({lo:.2f}-{hi:.2f})" if n > 1 else "")


def io_cell(r, k):
    v = f2(r["io_mib"].get(k), 1)
    s = (r.get("io_mib_sd") or {}).get(k)
    return v + (f" ± {s:.1f}" if s is not None and s >= 0.05 else "")


def foreign_drops(r):
    """drop_caches made by other processes during the run(s): each may have cost re-reads (docs/BENCH.md)."""
    drops = [x.get("foreign_drop_caches") for x in r.get("repetitions") or [r] if not x.get("error")]
    if not any(drops):
        return ""
    return "; drop_caches by other processes: " + ", ".join("?" if d is None else str(d) for d in drops)


def sys_order(names):
    return systems.display_order(names)


def journal_text(name, rec):
    plan = (rec or {}).get("plan") or {}
    try:
        kind = systems.get(name).journal
    except ValueError:
        return "?"
    if kind == "large":
        return f"{plan.get('journal_mib', '?')} MiB"
    if kind == "stock" and plan.get("stock_journal_mib"):
        return f"{plan['stock_journal_mib']} MiB (the suite's)"
    if kind == "stock" and plan.get("partition_bytes"):
        return f"{systems.default_journal_mib(plan['partition_bytes'])} MiB (mkfs default)"
    return "none of ext4's (XFS's own log)" if name == "kernel-xfs" else "mkfs default"


def check_line(r):
    """Does the accounting add up?  (text, ok)"""
    c = r.get("io_check") or {}
    tot = c.get("classes_total")
    if "reference_total" in c and tot:
        ref = c["reference_total"]
        diff = max(abs(tot[d] - ref[d]) for d in ("read", "write"))
        ok = diff <= max(1 << 20, 0.02 * max(ref["read"] + ref["write"], 1))
        lost = c.get("lost_events") or 0
        return (f"classes {sum(tot.values()) / 2**20:.1f} MiB vs {c['reference']} "
                f"{sum(ref.values()) / 2**20:.1f} MiB" + (f", {lost} trace events lost" if lost else ""),
                ok and not lost)
    if "equal_by_class" in c:
        return ("model report = ext4lazy's counters, class by class" if c["equal_by_class"]
                else "model report and ext4lazy's counters DIFFER", bool(c["equal_by_class"]))
    return (c.get("reference", "—"), True)


def fsck_bad(r):
    """The record's e2fsck result when it found problems (runner.Runner.check), else None."""
    f = r.get("fsck") or {}
    return f if f.get("clean") is False else None


def fsck_text(r):
    """The checks line's e2fsck part: empty for a phase that only reads (not checked)."""
    f = r.get("fsck")
    if not f:
        return ""
    if f.get("clean") is None:
        return f"; e2fsck: not run ({f.get('skipped')})"
    if f["clean"]:
        return f"; e2fsck -fn clean ({f2(f.get('seconds'), 1)} s" + (", journal replayed on a copy first)"
                                                                    if "replay_rc" in f else ")")
    return f"; **e2fsck -fn FOUND PROBLEMS** (rc {f.get('rc')})"


def daemon_cpu_rows(by, names, wls):
    """The FUSE daemons' CPU seconds beside the runtime (ext4lazy, fuse2fs; runner.Runner.phase)."""
    rows = []
    for w in wls:
        for n in names:
            r = by.get((n, w))
            if r and not r.get("error") and r.get("daemon_cpu_s") is not None:
                share = ratio(r["daemon_cpu_s"], r.get("work_s"))
                rows.append(f"| {w} | {n} | {runtime_cell(r)} | {f2(r['daemon_cpu_s'])} | "
                            f"{f2(r.get('daemon_cpu_syncfs_s'))} | {xr(share)} |")
    if not rows:
        return []
    return ["### FUSE daemon CPU time", "", "User + system seconds of the daemon process (all its threads, from "
            "/proc/PID/stat) during the workload and during its syncfs (the unmount's share is not seen: the daemon "
            "exits in it); with several runs, means. Last column: daemon CPU seconds per second of workload.", "",
            "| workload | system | runtime (s) | daemon CPU, workload (s) | daemon CPU, syncfs (s) | CPU / work time |",
            "|---|---|---|---|---|---|"] + rows + [""]


def mib_cell(b):
    return "—" if b is None else f"{b / 2**20:,.1f}"


def memory_sentence(runs):
    """The header's sentence on how memory was limited (`--memory`, memcg.py), one per distinct way."""
    ways = []
    for run in runs:
        m = run.get("memory")
        if m:
            text = f"Memory: {m['how']}."
        else:
            ram = run.get("ram_bytes")
            text = ("Memory: not limited (no `--memory`): every system could use the machine's whole page cache"
                    + (f" ({ram / 2**30:.0f} GiB of RAM)." if ram else "."))
        if text not in ways:
            ways.append(text)
    return ways


def memory_rows(by, names, wls):
    """Each record's memory cgroup figures (`--memory`): limit, peaks, events; failed records too."""
    rows = []
    for w in wls:
        for n in names:
            r = by.get((n, w))
            m = (r or {}).get("memory")
            if not m:
                continue
            ev = m.get("events") or {}
            lim = "none" if m.get("limit_mib") is None else f"{m['limit_mib']:g}"
            runs = m.get("peak_bytes_all")
            peak = mib_cell(m.get("peak_bytes")) + (" (largest of " + ", ".join(mib_cell(x) for x in runs) + ")"
                                                    if runs and len(runs) > 1 else "")
            rows.append(f"| {w} | {n}{' (FAILED)' if r.get('error') else ''} | {lim} | {peak} | "
                        f"{mib_cell(m.get('daemon_peak_bytes'))} | {mib_cell(m.get('workload_peak_bytes'))} | "
                        + " | ".join("—" if ev.get(k) is None else str(ev[k]) for k in ("oom_kill", "oom", "max",
                                                                                        "high")) + " |")
    if not rows:
        return []
    src = next((by[k]["memory"] for k in by if (by[k] or {}).get("memory")), {})
    return ["### Memory (`--memory`)", "", f"Per record, its memory cgroup (cgroup {src.get('cgroup_version')}): the "
            f"limit, the peak charge ({src.get('peak_source')}) of the whole cgroup and of its two parts (the "
            f"file-system daemon, the workload's processes), the events ({src.get('events_source')}; — where this "
            "cgroup version has no such count). Any OOM kill fails the record.", "",
            "| workload | system | limit (MiB) | peak (MiB) | daemon peak (MiB) | workload peak (MiB) | oom_kill | "
            "oom | max | high |", "|---|---|---|---|---|---|---|---|---|---|"] + rows + [""]


def write(out, pngs):
    with open(os.path.join(out, "results.json")) as f:
        records = json.load(f)
    meta_path = os.path.join(out, "meta.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {"runs": []}
    suites = all_suites()
    L = ["# ext4lazy bench report", "", "Reproduce with:", ""]
    for run in meta["runs"]:
        L.append(f"    {run['command']}")
    L += [""]
    for run in meta["runs"]:
        la0 = run.get("loadavg_start") or [None]
        la1 = run.get("loadavg_end") or [None]
        L.append(f"- {run['started']} → {run.get('finished', 'interrupted')}: commit {run['commit']}, binary "
                 f"sha256 {run['binary_sha256'][:12]}, kernel {run['kernel']}, {run['cpus']} CPUs, load average "
                 f"(1 min) {f2(la0[0])} at start, {f2(la1[0])} at end")
    L += [""] + memory_sentence(meta["runs"])
    L += ["", "Each record: a fresh mount after `drop_caches` (cold cache), then the workload; runtime = workload "
          "+ syncfs + unmount (which returns once everything is on the device) unless said otherwise; cleaning = "
          "model seconds the drive kept cleaning after the run; I/O by class from the source named in the checks "
          "table (docs/BENCH.md says how each is obtained).", ""]
    groups = {}
    for r in records:
        groups.setdefault((r["suite"], r["device"]), []).append(r)
    for (suite, device), rs in sorted(groups.items()):
        s = suites.get(suite)
        paper = s.paper if s else {}
        scale = rs[0].get("scale")
        speed = rs[0].get("speed")
        names = sys_order({r["system"] for r in rs})
        wls = []
        for r in rs:
            if r["workload"] not in wls:
                wls.append(r["workload"])
        by = {(r["system"], r["workload"]): r for r in rs}
        L += [f"## {suite} on `{device}` (scale {scale}" + (f", speed {speed}" if speed else "") + ")", ""]
        if s:
            L += [s.doc.strip().splitlines()[0], ""]
        bad = [(w, n, fsck_bad(by[(n, w)])) for w in wls for n in names if fsck_bad(by.get((n, w)) or {})]
        if bad:
            L += ["**e2fsck -fn FOUND PROBLEMS on the volume after: " + ", ".join(
                f"{w} on {n} (rc {f.get('rc')})" for w, n, f in bad) + "** (the run exited non-zero; the first "
                "lines of e2fsck's output are in the checks below)", ""]
        smr = device.startswith("smr")
        head = ["workload"] + [f"{n} (s)" for n in names]
        ratios = []
        if "ext4lazy-lazy" in names and "ext4lazy-ordered" in names:
            ratios.append(("ordered / lazy", "ext4lazy-ordered", "ext4lazy-lazy"))
        if "ext4lazy-lazy" in names and "kernel-ext4-baseline" in names:
            ratios.append(("kernel baseline / ext4lazy lazy", "kernel-ext4-baseline", "ext4lazy-lazy"))
        if "ext4lazy-ordered" in names and "kernel-ext4-baseline" in names:
            ratios.append(("kernel baseline / ext4lazy ordered", "kernel-ext4-baseline", "ext4lazy-ordered"))
        head += [h for h, _, _ in ratios]
        sp = (paper.get("speedup") or {}).get("smr-seagate" if smr else "cmr", {})
        if sp:
            head.append("paper: baseline / lazy")
        L += ["### Runtime" + (" and cleaning after the run" if smr else ""), "",
              "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

        def rt(n, w):
            r = by.get((n, w))
            return None if r is None or r.get("error") else r["runtime_s"]
        for w in wls:
            row = [w]
            for n in names:
                r = by.get((n, w))
                if r is None:
                    row.append("—")
                elif r.get("error"):
                    row.append("FAILED")
                else:
                    row.append(runtime_cell(r) + (f" + {f2(r['cleaning_s'], 1)} cleaning" if smr else ""))
            row += [ratio_cell(by.get((a, w)), by.get((b, w))) for _, a, b in ratios]
            if sp:
                lo_hi = sp.get(w)
                row.append("—" if not lo_hi else (f"{lo_hi[0]:g}x" if lo_hi[0] == lo_hi[1]
                                                   else f"{lo_hi[0]:g}-{lo_hi[1]:g}x"))
            L.append("| " + " | ".join(row) + " |")
        nruns = sorted({r.get("runs") or 1 for r in rs if not r.get("error")})
        if nruns and nruns[-1] > 1:
            L += ["", f"Runs per cell: {', '.join(map(str, nruns))} (each on a fresh volume, the systems interleaved "
                  "phase by phase). Cells: mean ± sample standard deviation; ratios: ratio of the means, in brackets "
                  "the lowest and highest ratio of two runs of the same round."]
        L.append("")
        if paper.get("goals"):
            L += [f"Goals (issue #6, the paper's figures): {paper['goals']}", ""]
            goal_rows = []
            for w in wls:
                lo_hi = sp.get(w)
                if not lo_hi or lo_hi[0] <= 1:
                    continue
                got = [(label, ratio(rt(a, w), rt(b, w))) for label, a, b in ratios if b == "ext4lazy-lazy"]
                got = [(label, v) for label, v in got if v is not None]
                if got:
                    verdict = "met" if all(v >= lo_hi[0] for _, v in got) else \
                        "partly met" if any(v >= lo_hi[0] for _, v in got) else "not met"
                    goal_rows.append(f"- {w} (paper >= {lo_hi[0]:g}x): " + ", ".join(f"{label} {xr(v)}"
                                                                                  for label, v in got)
                                     + f": {verdict}")
            if smr:
                for w, (pb, pl) in (paper.get("cleaning_s") or {}).get("smr-seagate", {}).items():
                    r = by.get(("ext4lazy-lazy", w))
                    if r and not r.get("error"):
                        goal_rows.append(f"- cleaning after {w}, ext4lazy-lazy: {f2(r['cleaning_s'], 1)} s "
                                         f"(paper at full scale: baseline {pb} s, lazy {pl} s)")
            L += goal_rows + ([""] if goal_rows else [])
        L += daemon_cpu_rows(by, names, wls)
        L += memory_rows(by, names, wls)
        if s and s.report:
            L += s.report(by, names, wls, device, scale, paper)
        # I/O by class
        L += ["### I/O by class (MiB; the paper's Tables 2-4)", "",
              "| workload | system | metadata read | metadata write | journal read | journal write | data read "
              "| data write |", "|---|---|---|---|---|---|---|---|"]
        for w in wls:
            for n in names:
                r = by.get((n, w))
                if not r or r.get("error"):
                    continue
                L.append(f"| {w} | {n} | " + " | ".join(io_cell(r, k) for k in (
                    "metadata_read", "metadata_write", "journal_read", "journal_write", "data_read",
                    "data_write")) + " |")
        t2 = paper.get("table2")
        if t2:
            L += ["", f"Paper, Table 2 (CMR, full scale; x{scale} for this scale in brackets): "
                  + "; ".join(f"{w} {m}: metadata reads {a:,} [{a * scale:,.1f}], metadata writes {b:,} "
                              f"[{b * scale:,.1f}], journal writes {c:,} [{c * scale:,.1f}]"
                              for (w, m), (a, b, c) in t2.items())]
        for tk, label in (("table3_cmr", "Table 3 (CMR)"), ("table4_smr", "Table 4 (ST8000AS0002, 400 GB)")):
            t = paper.get(tk)
            if t:
                L += ["", f"Paper, {label}, MiB written during Postmark (data, metadata, journal): "
                      + "; ".join(f"{m}: {a:,} / {b:,} / {c:,}" for m, (a, b, c) in t.items())]
        pm = [(n, by.get((n, "Postmark"))) for n in names]
        pm = [(n, r) for n, r in pm if r and not r.get("error") and (r.get("extra") or {}).get("postmark")]
        if pm:
            L += ["", "### Postmark", "", "| system | runtime (s) | transactions/s | transaction phase (s) | "
                  "created | deleted | read | appended | MiB written | MiB read |", "|---|---|---|---|---|---|---|---|---|---|"]
            for n, r in pm:
                p = r["extra"]["postmark"]
                L.append(f"| {n} | {f2(r['runtime_s'])} | {f2(p.get('tps'), 1)} | {f2(p['transactions_s'])} | "
                         f"{p['created']:,} | {p['deleted']:,} | {p['read']:,} | {p['appended']:,} | "
                         f"{p['bytes_written'] / 2**20:,.1f} | {p['bytes_read'] / 2**20:,.1f} |")
        fig6 = paper.get("fig6_s")
        if fig6:
            L += ["", "Paper, Figure 6 (CMR, 100,000 files, full scale): " + ", ".join(
                f"{k} {v} s" for k, v in fig6.items()) + ". Runtime here = the creation alone, as in the paper. "
                "Journals: " + ", ".join(f"{n}: {journal_text(n, by.get((n, wls[0])))}" for n in names)]
        # checks and notes
        L += ["", "### Accounting checks and notes", ""]
        for w in wls:
            for n in names:
                r = by.get((n, w))
                if not r:
                    continue
                if r.get("error"):
                    L.append(f"- {w} / {n}: FAILED: {r['error'][:500]}")
                    continue
                text, ok = check_line(r)
                runs = r.get("runs") or 1
                L.append(f"- {w} / {n}: {'ok' if ok else 'MISMATCH'}: {text}" + (" (means over the runs)" if runs > 1
                                                                                  else "")
                         + f"; source: {r['io_source']}; load {f2(r.get('loadavg_1m'), 1)}"
                         + (f"; runtimes {', '.join(f2(x) for x in r['runtime_s_all'])} s" if runs > 1 else "")
                         + foreign_drops(r) + fsck_text(r))
                if fsck_bad(r):
                    L += ["", "      " + "\n      ".join(fsck_bad(r).get("output") or ["(no output)"]), ""]
                for bad in [x for x in r.get("repetitions", []) if x.get("error")]:
                    L.append(f"  - run {bad['rep'] + 1} FAILED: {bad['error'][:300]}")
        L.append("")
    if pngs:
        L += ["## Plots", ""] + [f"![{p}]({p})" for p in pngs] + [""]
    path = os.path.join(out, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")
    return path
