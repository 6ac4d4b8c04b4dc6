"""The arc suite's plots (run by plots.py under Debian's python3 with matplotlib), like the thesis's figures:
- arc-jobs-per-s-DEVICE-LAYOUT.png: scan jobs/s against directory size, one line per system (Figures 4.1, 4.2);
- arc-per-second-DEVICE-LAYOUT-N.png: jobs scanned in each second of the run at N jobs, one line per system
  (Figures 4.3, 4.4: 5K and 20K jobs where they were run, else the smallest and largest sizes)."""
import matplotlib.pyplot as plt


def scans(rs):
    return [r for r in rs if r["workload"].startswith("Scan-") and r.get("jobs") and r.get("jobs_per_s")]


def rate_plot(out, device, layout, rs, order, save):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in order({r["system"] for r in rs}):
        pts = sorted((r["jobs"], r["jobs_per_s"]) for r in rs if r["system"] == s)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
    ax.set_xscale("log")
    sizes = sorted({r["jobs"] for r in rs})
    ax.set_xticks(sizes)
    ax.set_xticklabels([f"{n // 1000}K" if n >= 1000 and n % 1000 == 0 else str(n) for n in sizes])
    ax.minorticks_off()
    ax.set_xlabel("jobs in the control directory")
    ax.set_ylabel("jobs/s (cold scan)")
    ax.set_ylim(bottom=0)
    what = "HDD model (cmr)" if device == "cmr" else "SSD case (file)" if device == "file" else device
    ax.set_title(f"ARC collect() scan, {layout} layout, {what}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, f"arc-jobs-per-s-{device}-{layout}.png")


def per_second_plot(out, device, layout, n, rs, order, save):
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for s in order({r["system"] for r in rs}):
        r = [x for x in rs if x["system"] == s][0]
        ps = r.get("per_second") or []
        ax.plot(range(len(ps)), ps, lw=1, label=f"{s} ({r['jobs_per_s']:,.0f} jobs/s)")
    ax.set_xlabel("seconds into the scan")
    ax.set_ylabel("jobs scanned in that second")
    ax.set_title(f"ARC scan, {n:,} jobs, {layout} layout, {device}", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save(fig, out, f"arc-per-second-{device}-{layout}-{n}.png")


def plots(out, device, rs, order, save):
    made = []
    good = scans(rs)
    for layout in sorted({r["layout"] for r in good}):
        lr = [r for r in good if r["layout"] == layout]
        made.append(rate_plot(out, device, layout, lr, order, save))
        sizes = sorted({r["jobs"] for r in lr})
        picks = [n for n in (5000, 20000) if n in sizes] or sorted({sizes[0], sizes[-1]})
        for n in picks:
            made.append(per_second_plot(out, device, layout, n, [r for r in lr if r["jobs"] == n], order, save))
    return made
