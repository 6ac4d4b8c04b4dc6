#!/usr/bin/python3
"""Per-second jobs/s of ARC scans, as the thesis's Figures 4.3-4.4: one line per system, its median run.

    /usr/bin/python3 bench/arc_plot.py RESULTS.json JOBS OUT.png

RESULTS.json is what bench/arc.py wrote; JOBS picks the control-directory size. Debian's python3 (matplotlib).
"""
import json
import statistics
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    path, jobs, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(path) as f:
        data = json.load(f)
    runs = [r for r in data["runs"] if r["jobs_expected"] == jobs]
    if not runs:
        sys.exit(f"no runs with {jobs} jobs in {path}")
    layout = runs[0]["layout"]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for system in dict.fromkeys(r["system"] for r in runs):
        rs = sorted((r for r in runs if r["system"] == system), key=lambda r: r["jobs_per_s"])
        med = rs[len(rs) // 2]
        ax.plot(range(len(med["per_second"])), med["per_second"],
                label=f"{system} (median run: {med['jobs_per_s']:.0f} jobs/s)")
    ax.set_xlabel("seconds into the scan")
    ax.set_ylabel("jobs scanned in that second")
    ax.set_title(f"ARC collect() scan, {jobs} jobs, {layout} layout, cold cache, file device")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out} ({statistics.mean(len(r['per_second']) for r in runs):.0f} s per run on average)")


if __name__ == "__main__":
    main()
