"""PNG plots beside DIR/results.json, in the style of the ext4-lazy paper's figures.  Run with Debian's python3
(matplotlib) from the repository root: `/usr/bin/python3 -m bench.suite.plots DIR` (`ext4lazy bench report DIR`
runs it so); prints the names of the files it wrote.

- runtime-SUITE-DEVICE.png: runtime per workload and system (Figure 7); on SMR devices with the cleaning time
  after the run stacked on top (Figure 11).  With repeated runs (--repeat): the bar is the mean, the whisker spans
  the lowest to the highest run and a dot marks each run.
- ratios-SUITE-DEVICE.png (repeated runs): baseline / lazy, ordered / lazy and baseline / ordered per workload,
  the ratio of the mean runtimes with whiskers from the lowest to the highest ratio within a round.
- offsets-SUITE-DEVICE-WORKLOAD.png: device offsets of requests over time by class (Figure 8), for MakeDirs,
  RemoveDirs and Postmark, one panel per system (a sample of at most 20,000 requests per run).
- throughput-SUITE-DEVICE-WORKLOAD.png: device throughput over time per system (Figures 9 and 12), for the
  write-heavy workloads (one point per second of real time).
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from . import systems  # noqa: E402
from .accounting import load_raw, series_points  # noqa: E402

COLORS = {"journal": "tab:green", "metadata": "tab:red", "data": "tab:blue"}



def save(fig, out, name):
    """Write `fig` as OUT/NAME (PNG) and free it; returns NAME."""
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name

def order(names):
    return systems.display_order(names)


def runtime_plot(out, suite, device, rs):
    wls = []
    for r in rs:
        if r["workload"] not in wls:
            wls.append(r["workload"])
    names = order({r["system"] for r in rs})
    by = {(r["system"], r["workload"]): r for r in rs if not r.get("error")}
    smr = device.startswith("smr")
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(wls) * max(1, len(names)) / 2), 4))
    width = 0.8 / max(1, len(names))
    for i, n in enumerate(names):
        xs = [j + i * width for j in range(len(wls))]
        run = [by[(n, w)]["runtime_s"] if (n, w) in by else 0 for w in wls]
        ax.bar(xs, run, width, label=n)
        spread = [(x, by[(n, w)]) for x, w in zip(xs, wls) if (by.get((n, w)) or {}).get("runs", 1) > 1]
        if spread:
            ax.errorbar([x for x, _ in spread], [r["runtime_s"] for _, r in spread],
                        yerr=[[r["runtime_s"] - r["runtime_s_min"] for _, r in spread],
                              [r["runtime_s_max"] - r["runtime_s"] for _, r in spread]],
                        fmt="none", ecolor="black", elinewidth=1, capsize=3)
            for x, r in spread:
                ax.scatter([x] * len(r["runtime_s_all"]), r["runtime_s_all"], s=6, c="black", zorder=3)
        if smr:
            cl = [by[(n, w)]["cleaning_s"] if (n, w) in by else 0 for w in wls]
            ax.bar(xs, cl, width, bottom=run, color="none", edgecolor="black", hatch="//",
                   label="cleaning after the run" if i == 0 else None)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(wls))])
    ax.set_xticklabels(wls, rotation=20)
    ax.set_ylabel("seconds" + (" (runtime + cleaning)" if smr else ""))
    scale = rs[0].get("scale")
    runs = max(r.get("runs", 1) for r in by.values()) if by else 1
    ax.set_title(f"{suite} on {device}, scale {scale}" + (f", speed {rs[0]['speed']}" if rs[0].get("speed") else "")
                 + (f"; mean of {runs} runs, whiskers min-max" if runs > 1 else ""))
    ax.legend(fontsize=7)
    return save(fig, out, f"runtime-{suite}-{device}.png")


RATIO_PAIRS = [("kernel-ext4-baseline", "ext4lazy-lazy"), ("ext4lazy-ordered", "ext4lazy-lazy"),
               ("kernel-ext4-baseline", "ext4lazy-ordered")]


def rep_times(r):
    return {x["rep"]: x["runtime_s"] for x in r.get("repetitions", []) if not x.get("error") and x.get("runtime_s")}


def ratio_plot(out, suite, device, rs):
    """ratios-SUITE-DEVICE.png (repeated runs only): runtime ratios per workload, bar = ratio of the means,
    whiskers = lowest to highest ratio of two runs of the same round."""
    by = {(r["system"], r["workload"]): r for r in rs if not r.get("error")}
    if max((r.get("runs", 1) for r in by.values()), default=1) < 2:
        return None
    pairs = [(a, b) for a, b in RATIO_PAIRS if any(k[0] == a for k in by) and any(k[0] == b for k in by)]
    wls = []
    for r in rs:
        if r["workload"] not in wls:
            wls.append(r["workload"])
    if not pairs:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(wls) * len(pairs) / 1.5), 3.6))
    width = 0.8 / len(pairs)
    for i, (a, b) in enumerate(pairs):
        xs, ys, lo, hi = [], [], [], []
        for j, w in enumerate(wls):
            ra, rb = by.get((a, w)), by.get((b, w))
            if not ra or not rb or not rb["runtime_s"]:
                continue
            ta, tb = rep_times(ra), rep_times(rb)
            within = [ta[k] / tb[k] for k in set(ta) & set(tb) if tb[k] > 0]
            y = ra["runtime_s"] / rb["runtime_s"]
            xs.append(j + i * width)
            ys.append(y)
            lo.append(y - min(within + [y]))
            hi.append(max(within + [y]) - y)
        ax.bar(xs, ys, width, label=f"{a} / {b}")
        ax.errorbar(xs, ys, yerr=[lo, hi], fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(wls))])
    ax.set_xticklabels(wls, rotation=20)
    ax.set_ylabel("runtime ratio (x faster)")
    ax.set_title(f"{suite} on {device}: ratios of the mean runtimes, whiskers min-max within a round", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, out, f"ratios-{suite}-{device}.png")


def offsets_plot(out, suite, device, workload, rs):
    panels = [(r, load_raw(out, r)) for r in rs]
    panels = [(r, raw) for r, raw in panels if raw and raw.get("offsets")]
    if not panels:
        return None
    rank = {n: i for i, n in enumerate(order([r["system"] for r, _ in panels]))}
    panels.sort(key=lambda p: rank[p[0]["system"]])
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.4 * len(panels)), squeeze=False)
    for ax, (r, raw) in zip(axes[:, 0], panels):
        for cls, col in COLORS.items():
            pts = [o for o in raw["offsets"] if o[3] == cls]
            if pts:
                ax.scatter([o[0] for o in pts], [o[1] / 2**30 for o in pts],
                           s=[max(1, min(30, o[2] / 65536)) for o in pts], c=col, alpha=0.5, linewidths=0,
                           label=f"{cls} {'/'.join(sorted({'read' if o[4] == 'r' else 'write' for o in pts}))}")
        ax.set_title(f"{r['system']}: {workload} ({r['runtime_s']:.1f} s)", fontsize=9)
        ax.set_ylabel("offset (GiB)")
        ax.legend(fontsize=6, markerscale=3, loc="upper right")
    axes[-1, 0].set_xlabel("time (s; model seconds on a model, real seconds on file)")
    return save(fig, out, f"offsets-{suite}-{device}-{workload}.png")


def throughput_plot(out, suite, device, workload, rs):
    lines = [(r, load_raw(out, r)) for r in rs]
    lines = [(r, raw) for r, raw in lines if raw and raw.get("series")]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for r, raw in sorted(lines, key=lambda x: x[0]["system"]):
        s = raw["series"]
        ax.plot([p[0] for p in s], [p[1] + p[2] for p in s], label=r["system"], lw=1)
    ax.set_xlabel("time (real s)")
    ax.set_ylabel("device MiB/s (read + write)")
    ax.set_title(f"{workload} on {device}: throughput over time", fontsize=10)
    ax.legend(fontsize=7)
    return save(fig, out, f"throughput-{suite}-{device}-{workload}.png")


def dirty_plot(out, suite, device, workload, rs):
    """The paper's Figure 6 (b): dirty page cache over time, one line per system."""
    lines = [(r, pts) for r in rs if (pts := series_points(load_raw(out, r), "dirty_mib"))]
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = order([r["system"] for r, _ in lines])
    for r, pts in sorted(lines, key=lambda x: names.index(x[0]["system"])):
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=r["system"], lw=1)
    ax.set_xlabel("time (real s, from the mount to the end of the unmount)")
    ax.set_ylabel("Dirty in /proc/meminfo (MiB)")
    ax.set_title(f"{workload} on {device}: dirty pages over time (the paper's Figure 6 (b))", fontsize=9)
    ax.legend(fontsize=7)
    return save(fig, out, f"dirty-{suite}-{device}-{workload}.png")


def utilisation_plot(out, suite, device, workload, rs):
    """The paper's Figure 10: CPU and disk utilisation over time, a panel per system."""
    panels = [(r, raw) for r in rs if series_points(raw := load_raw(out, r), "cpu_busy_pct")]
    if not panels:
        return None
    names = order([r["system"] for r, _ in panels])
    panels.sort(key=lambda x: names.index(x[0]["system"]))
    fig, axes = plt.subplots(len(panels), 1, figsize=(7, 2.2 * len(panels)), squeeze=False)
    for ax, (r, raw) in zip(axes[:, 0], panels):
        for name, label in (("cpu_busy_pct", "CPU (all CPUs)"), ("device_busy_pct", "disk (device busy)")):
            pts = series_points(raw, name)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, lw=1)
        ax.set_ylim(0, 105)
        ax.set_ylabel("%")
        ax.set_title(f"{r['system']}: {workload} ({r['runtime_s']:.1f} s)", fontsize=9)
        ax.legend(fontsize=6, loc="upper right")
    axes[-1, 0].set_xlabel("time (real s)")
    return save(fig, out, f"utilisation-{suite}-{device}-{workload}.png")


def main(out):
    with open(os.path.join(out, "results.json")) as f:
        records = json.load(f)
    groups = {}
    for r in records:
        groups.setdefault((r["suite"], r["device"]), []).append(r)
    made = []
    for (suite, device), rs in sorted(groups.items()):
        good = [r for r in rs if not r.get("error")]
        if not good:
            continue
        if suite == "arc":                  # sizes, not workloads: its own figures (plots_arc.py)
            from . import plots_arc
            made += plots_arc.plots(out, device, good, order, save)
            continue
        made.append(runtime_plot(out, suite, device, good))
        made.append(ratio_plot(out, suite, device, good))
        for w in ("MakeDirs", "RemoveDirs", "Postmark"):
            made.append(offsets_plot(out, suite, device, w, [r for r in good if r["workload"] == w]))
        for w in ("MakeDirs", "CreateFiles", "Postmark", "CompileMix"):
            made.append(throughput_plot(out, suite, device, w, [r for r in good if r["workload"] == w]))
        if suite == "journal-size":
            made.append(dirty_plot(out, suite, device, "CreateFiles",
                                   [r for r in good if r["workload"] == "CreateFiles"]))
        made.append(utilisation_plot(out, suite, device, "CompileMix",
                                     [r for r in good if r["workload"] == "CompileMix"]))
    for m in made:
        if m:
            print(m)


if __name__ == "__main__":
    main(sys.argv[1])
