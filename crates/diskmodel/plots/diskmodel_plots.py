#!/usr/bin/python3
"""Plots of the disk models, from the JSON/CSV the Rust code writes.

Uses Debian's matplotlib (python3-matplotlib); run with /usr/bin/python3.

  diskmodel_plots.py fig1 OUT.png RESULT.json...        throughput over time (emu randwrite --out)
  diskmodel_plots.py throughput OUT.png SERIES.json...  throughput over time (DIR/series.json of emu serve)
  diskmodel_plots.py offsets OUT.png TRACE.csv [--writes-only] [--title T]
                                                         request offsets over time coloured by class
  diskmodel_plots.py stream OUT.png STREAM.json          streaming threshold (emu stream-test --json)
"""

import csv
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"journal": "tab:blue", "metadata": "tab:red", "data": "tab:green"}


def fig1(out, paths):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        xs = [pt["t_s"] for pt in r["series"]]
        ys = [max(pt["mib_s"], 1e-3) for pt in r["series"]]
        ax.plot(xs, ys, label=r["model"], linewidth=1.5)
    ax.set_yscale("log")
    ax.set_xlabel("time (model seconds)")
    ax.set_ylabel("throughput (MiB/s, log scale)")
    ax.set_title("4 KiB random writes, queue depth 1 (cf. paper Fig 1)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def throughput(out, paths):
    fig, ax = plt.subplots(figsize=(8, 4))
    for p in paths:
        with open(p) as f:
            r = json.load(f)
        w = r["bucket_s"]
        label = r.get("label", r["model"])
        xs = [b["t_s"] for b in r["buckets"]]
        for i, cls in enumerate(["journal", "metadata", "data"]):
            ys = [(b["read_bytes"][i] + b["write_bytes"][i]) / 2**20 / w for b in r["buckets"]]
            if any(ys):
                ax.plot(xs, ys, label=f"{label} {cls}", color=COLOURS[cls], linewidth=1)
        tot = [pt["mib_s"] for pt in r["series"]]
        ax.plot(xs, tot, label=f"{label} total", color="black", linewidth=1.2)
        fill = [b["cache_used_bytes"] / 2**20 for b in r["buckets"]]
        if any(fill):
            ax2 = ax.twinx()
            ax2.plot(xs, fill, color="tab:orange", linestyle="--", linewidth=1, label=f"{label} cache fill")
            ax2.set_ylabel("persistent cache used (MiB)", color="tab:orange")
            ax2.set_ylim(bottom=0)
    ax.set_xlabel("time (model seconds)")
    ax.set_ylabel("MiB/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper center")
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def offsets(out, path, writes_only=False, title=None):
    pts = {c: ([], []) for c in COLOURS}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["op"] == "flush" or (writes_only and row["op"] != "write"):
                continue
            xs, ys = pts[row["class"]]
            xs.append(float(row["start_s"]))
            ys.append(int(row["offset"]) / 2**30)
    fig, ax = plt.subplots(figsize=(8, 4))
    for c in ["data", "metadata", "journal"]:
        xs, ys = pts[c]
        if xs:
            ax.scatter(xs, ys, s=2, color=COLOURS[c], label=f"{c} ({len(xs)})")
    ax.set_xlabel("time (model seconds)")
    ax.set_ylabel("offset (GiB)")
    ax.set_title(title or ("write offsets by class" if writes_only else "request offsets by class"))
    ax.grid(True, alpha=0.3)
    ax.legend(markerscale=4)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def stream(out, path):
    with open(path) as f:
        rows = json.load(f)
    rows = [r for r in rows if r["writes"] > 1]
    sizes = [r["write_bytes"] / 2**20 for r in rows]
    cached = [100.0 * r["cached_mib"] / (r["write_bytes"] * r["writes"] / 2**20) for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar([str(int(s)) for s in sizes], cached, color="tab:orange")
    ax.set_xlabel("size of each sequential write (MiB)")
    ax.set_ylabel("% landing in the persistent cache")
    ax.set_title("streaming threshold (smr-seagate)")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=90)


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    cmd, out, rest = argv[0], argv[1], argv[2:]
    if cmd == "fig1":
        fig1(out, rest)
    elif cmd == "throughput":
        throughput(out, rest)
    elif cmd == "offsets":
        title = None
        if "--title" in rest:
            i = rest.index("--title")
            title = rest[i + 1]
            rest = rest[:i] + rest[i + 2:]
        offsets(out, rest[0], writes_only="--writes-only" in rest, title=title)
    elif cmd == "stream":
        stream(out, rest[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
