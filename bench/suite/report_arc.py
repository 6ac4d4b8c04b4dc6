"""The arc suite's section of report.md: jobs/s against directory size per system (the thesis's Figures 4.1 and
4.2 as a table), the ratios and goal verdicts of issue #8, the generation rate, where each scan's reads went
(requests by class: for ext4lazy in lazy mode the journal's share is what the log served), dbfs-sqlite's FUSE
requests and time in SQLite, and whether small files were stored inline."""

REFERENCE = "kernel-xfs"            # the goal: at least XFS at every size on the HDD model
PEER = "dbfs-sqlite"                # the goal: at least 4x the database peer
PEER_FACTOR = 4.0
SLOWDOWN_TOLERANCE = 0.9            # "no slowdown": every larger size >= 90% of the smallest size's jobs/s


def fmt(x, nd=0):
    return "—" if x is None else f"{x:,.{nd}f}"


def xr(v):
    return "—" if v is None else f"{v:.2f}x"


def ok_records(by, kind):
    """{(system, layout, jobs): record} of the finished records of one kind (Scan, Generate)."""
    out = {}
    for (system, wl), r in by.items():
        if wl.startswith(kind + "-") and not r.get("error") and r.get("jobs"):
            out[(system, r["layout"], r["jobs"])] = r
    return out


def jobs_per_s(recs, system, layout, n):
    r = recs.get((system, layout, n))
    return None if r is None else r.get("jobs_per_s")


def rate_table(title, recs, systems, layout, sizes, note, key="jobs_per_s"):
    L = [title, "", note, "", "| system | " + " | ".join(f"{n:,} jobs" for n in sizes) + " |",
         "|---|" + "---|" * len(sizes)]
    for s in systems:
        cells = []
        for n in sizes:
            r = recs.get((s, layout, n))
            v = None if r is None else r.get(key)
            cells.append("—" if r is None else f"{fmt(v, 1 if v is not None and v < 100 else 0)} "
                         f"(load {fmt(r.get('loadavg_1m'), 1)})")
        if any(c != "—" for c in cells):
            L.append(f"| {s} | " + " | ".join(cells) + " |")
    return L + [""]


def trend(recs, s, layout, sizes):
    """jobs/s at each size over jobs/s at the smallest size (None where missing)."""
    base = jobs_per_s(recs, s, layout, sizes[0])
    return [None if base is None or jobs_per_s(recs, s, layout, n) is None else jobs_per_s(recs, s, layout, n) / base
            for n in sizes]


def ratio_rows(recs, systems, layout, sizes):
    L = ["| system | " + " | ".join(f"{n:,}: vs XFS / vs dbfs-sqlite / vs smallest size" for n in sizes) + " |",
         "|---|" + "---|" * len(sizes)]
    for s in systems:
        if s in (REFERENCE, PEER):
            continue
        cells = []
        tr = trend(recs, s, layout, sizes)
        for n, t in zip(sizes, tr):
            v = jobs_per_s(recs, s, layout, n)
            vx, vp = jobs_per_s(recs, REFERENCE, layout, n), jobs_per_s(recs, PEER, layout, n)
            cells.append(" / ".join(xr(None if v is None or not b else v / b) for b in (vx, vp)) + f" / {xr(t)}")
        L.append(f"| {s} | " + " | ".join(cells) + " |")
    return L + [""]


def verdicts(recs, systems, layout, sizes, device):
    """Issue #8's three goals for every ext4lazy system."""
    L = []
    for s in systems:
        if not s.startswith("ext4lazy"):
            continue
        have = [n for n in sizes if jobs_per_s(recs, s, layout, n) is not None]
        if not have:
            continue
        vs_xfs = [(n, jobs_per_s(recs, s, layout, n) / jobs_per_s(recs, REFERENCE, layout, n)) for n in have
                  if jobs_per_s(recs, REFERENCE, layout, n)]
        vs_peer = [(n, jobs_per_s(recs, s, layout, n) / jobs_per_s(recs, PEER, layout, n)) for n in have
                   if jobs_per_s(recs, PEER, layout, n)]
        tr = [(n, t) for n, t in zip(sizes, trend(recs, s, layout, sizes)) if t is not None]

        def verdict(pairs, good):
            if not pairs:
                return "not measured"
            bad = [f"{n:,} ({v:.2f}x)" for n, v in pairs if not good(v)]
            return "met" if not bad else "not met at " + ", ".join(bad)
        hdd = " (the goal is for the HDD model; this is " + device + ")" if device != "cmr" else ""
        L.append(f"- {s}: >= XFS at every size{hdd}: {verdict(vs_xfs, lambda v: v >= 1.0)}; "
                 f">= {PEER_FACTOR:g}x dbfs-sqlite: {verdict(vs_peer, lambda v: v >= PEER_FACTOR)}; "
                 f"no slowdown as the directory grows (each size >= {SLOWDOWN_TOLERANCE:.0%} of the smallest's "
                 f"jobs/s): " + (verdict(tr[1:], lambda v: v >= SLOWDOWN_TOLERANCE) if len(tr) > 1
                                 else "one size only"))
    return L + [""] if L else []


def reads_table(scans, systems, layout, sizes):
    """Where each scan's reads went: device requests by class and MiB read."""
    L = ["| system | jobs | read requests: journal / metadata / data | MiB read: journal / metadata / data | "
         "requests per job | model s: drive busy; read latency journal / metadata / data; write latency |",
         "|---|---|---|---|---|---|"]
    for s in systems:
        for n in sizes:
            r = scans.get((s, layout, n))
            req = (r or {}).get("extra", {}).get("requests")
            if not r or not req:
                continue
            rd = [req[c]["read"] for c in ("journal", "metadata", "data")]
            mib = [r["io_mib"][f"{c}_read"] for c in ("journal", "metadata", "data")]
            mt = r["extra"].get("model_time")
            when = "—" if not mt else (f"{mt['busy_s']:,.1f}; " + " / ".join(
                f"{mt['latency_s'][c]['read']:,.1f}" for c in ("journal", "metadata", "data"))
                + f"; {sum(mt['latency_s'][c]['write'] for c in mt['latency_s']):,.1f}")
            L.append(f"| {s} | {n:,} | " + " / ".join(f"{x:,}" for x in rd) + " | "
                     + " / ".join(fmt(x, 1) for x in mib) + f" | {sum(rd) / n:.2f} | {when} |")
    return L + [""] if len(L) > 2 else []


def fuse_rows(scans, systems, layout, sizes):
    """FUSE requests per job of ext4lazy's scans, by opcode (its -o stats counters)."""
    L = []
    for s in systems:
        for n in sizes:
            ops = ((scans.get((s, layout, n)) or {}).get("extra") or {}).get("fuse_requests")
            if not ops:
                continue
            top = ", ".join(f"{op} {c / n:.1f}" for op, c in sorted(ops.items(), key=lambda kv: -kv[1])[:6])
            L.append(f"- {s} at {n:,} jobs: {sum(ops.values()) / n:.1f} FUSE requests per job ({top})")
    return L + [""] if L else []


def dbfs_rows(scans, systems, layout, sizes):
    L = []
    for s in systems:
        for n in sizes:
            r = scans.get((s, layout, n))
            st = ((r or {}).get("extra") or {}).get("dbfs")
            if not st:
                continue
            reqs = st["requests"]
            count = sum(v["count"] for v in reqs.values())
            db_s = sum(v["db_s"] for v in reqs.values())
            L.append(f"- {s} at {n:,} jobs: {count / n:.1f} FUSE requests per job, {db_s:.1f} s in SQLite of a "
                     f"{r['runtime_s']:.1f} s scan ({db_s / r['runtime_s']:.0%})")
    return L + [""] if L else []


def inline_rows(gens, systems, layout, sizes):
    L = []
    for s in systems:
        for n in sizes[-1:]:
            r = gens.get((s, layout, n))
            sample = ((r or {}).get("extra") or {}).get("inline_sample")
            if not sample:
                continue
            files = sum(v[0] for v in sample.values())
            inline = sum(v[1] for v in sample.values())
            kinds = ", ".join(f"{k} {v[1]}/{v[0]}" for k, v in sorted(sample.items()))
            L.append(f"- {s}: {inline} of {files} sampled files inline ({kinds})")
    return (["Inline data (FS_IOC_GETFLAGS of up to 5 files of each kind in the largest directory, after Generate):", ""]
            + L + [""]) if L else []


def section(by, systems, workloads, device, scale, paper):
    scans, gens = ok_records(by, "Scan"), ok_records(by, "Generate")
    L = []
    for layout in sorted({k[1] for k in list(scans) + list(gens)}):
        sizes = sorted({k[2] for k in list(scans) + list(gens) if k[1] == layout})
        fig = "4.1 (HDD)" if device == "cmr" else "4.2 (SSD)" if device == "file" else "4.1"
        L += rate_table(f"### ARC scan, layout {layout}: jobs/s against directory size (thesis Figure {fig})",
                        scans, systems, layout, sizes,
                        "Cold cache, fresh mount; jobs/s from the scanner's own clock (listing included); the "
                        "machine's 1-minute load average at the phase's start.")
        if any(r.get("jobs_per_s_at_drive_speed") for r in scans.values()):
            L += rate_table(f"### ARC scan, layout {layout}: jobs/s brought back to the drive's speed",
                            scans, systems, layout, sizes,
                            "The model ran faster than the drive (--speed); each scan's time plus its drive busy "
                            "time x (1 - 1/speed): exact when the host never works while the drive does, an upper "
                            "bound on the time otherwise (bench/suite/modeltime.py).", key="jobs_per_s_at_drive_speed")
        L += ["Ratios (jobs/s over kernel-xfs's, over dbfs-sqlite's, and over the same system's at the smallest "
              "size):", ""] + ratio_rows(scans, systems, layout, sizes)
        L += [f"Goals (issue #8): {paper.get('arc_goals', '')}", ""] + verdicts(scans, systems, layout, sizes, device)
        L += [f"Thesis: {paper.get('thesis', '')}", ""]
        L += rate_table(f"### ARC generation, layout {layout}: jobs/s (jobs / runtime, syncfs and unmount included)",
                        gens, systems, layout, sizes, f"arc-cd gen with {2} writer threads.")
        reads = reads_table(scans, systems, layout, sizes)
        if reads:
            L += ["Where each scan's reads went (device requests by class; for ext4lazy in lazy mode, journal = "
                  "served from the log; kernel systems on `file` have no request counts):", ""] + reads
        L += dbfs_rows(scans, systems, layout, sizes)
        L += fuse_rows(scans, systems, layout, sizes)
        L += inline_rows(gens, systems, layout, sizes)
    return L
