#!/usr/bin/python3
"""PNG plots beside DIR/results.json, in the style of the ext4-lazy paper's figures.  Run with Debian's python3
(matplotlib): `/usr/bin/python3 plots.py DIR`; prints the names of the files it wrote.

- runtime-SUITE-DEVICE.png: runtime per workload and system (Figure 7); on SMR devices with the cleaning time
  after the run stacked on top (Figure 11).
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

COLORS = {"journal": "tab:green", "metadata": "tab:red", "data": "tab:blue"}
ORDER = ["kernel-ext4-stock", "kernel-ext4-baseline", "kernel-xfs", "fuse2fs", "ext4lazy-ordered",
         "ext4lazy-ordered-stepahead", "ext4lazy-lazy", "ext4lazy-lazy-stepahead"]



def save(fig, out, name):
    """Write `fig` as OUT/NAME (PNG) and free it; returns NAME."""
    fig.tight_layout()
    fig.savefig(os.path.join(out, name), dpi=110)
    plt.close(fig)
    return name

def order(names):
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


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
        if smr:
            cl = [by[(n, w)]["cleaning_s"] if (n, w) in by else 0 for w in wls]
            ax.bar(xs, cl, width, bottom=run, color="none", edgecolor="black", hatch="//",
                   label="cleaning after the run" if i == 0 else None)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(wls))])
    ax.set_xticklabels(wls, rotation=20)
    ax.set_ylabel("seconds" + (" (runtime + cleaning)" if smr else ""))
    scale = rs[0].get("scale")
    ax.set_title(f"{suite} on {device}, scale {scale}" + (f", speed {rs[0]['speed']}" if rs[0].get("speed") else ""))
    ax.legend(fontsize=7)
    return save(fig, out, f"runtime-{suite}-{device}.png")


def load_raw(out, r):
    p = os.path.join(out, r.get("raw") or "")
    if not r.get("raw") or not os.path.exists(p):
        return None
    with open(p) as f:
        return json.load(f)


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
        made.append(runtime_plot(out, suite, device, good))
        for w in ("MakeDirs", "RemoveDirs", "Postmark"):
            made.append(offsets_plot(out, suite, device, w, [r for r in good if r["workload"] == w]))
        for w in ("MakeDirs", "CreateFiles", "Postmark"):
            made.append(throughput_plot(out, suite, device, w, [r for r in good if r["workload"] == w]))
    for m in made:
        if m:
            print(m)


if __name__ == "__main__":
    main(sys.argv[1])
