"""The null test of issue #27: the same ext4lazy binary and journal mode, the same workload, on the served
model (the kernel's path: loop device over `emu serve`) and with the model in its daemon (`-inproc`).
Prints, per workload, mean ± sd of the runtime and of the drive's busy time for each system, and the
served / in-process ratio of the means with the range of the per-repetition ratios.

    python3 pairs.py RESULTS.json [MODE ...]
"""
import json
import statistics as st
import sys


def main():
    # a repeated record keeps every run under "repetitions"
    recs = [x for r in json.load(open(sys.argv[1])) for x in (r.get("repetitions") or [r]) if not x.get("error")]
    modes = sys.argv[2:] or ["ordered", "lazy"]
    reps = {}
    for r in recs:
        reps.setdefault((r["workload"], r["system"]), []).append(r)
    workloads = list(dict.fromkeys(r["workload"] for r in recs))

    def cell(v):
        return f"{st.mean(v):.2f} ± {st.stdev(v):.2f}" if len(v) > 1 else f"{v[0]:.2f}"

    print("| workload | mode | what | served (s) | in-process (s) | served / in-process (range) |")
    print("|---|---|---|---|---|---|")
    for w in workloads:
        for m in modes:
            a, b = reps.get((w, f"ext4lazy-{m}"), []), reps.get((w, f"ext4lazy-{m}-inproc"), [])
            if not a or not b:
                continue
            for what, key in (("runtime", lambda r: r["runtime_s"]),
                              ("drive busy", lambda r: r["extra"]["model_time"]["busy_s"])):
                x, y = [key(r) for r in a], [key(r) for r in b]
                ratios = [p / q for p, q in zip(x, y) if q > 0]
                rng = f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 else ""
                print(f"| {w} | {m} | {what} | {cell(x)} | {cell(y)} | {st.mean(x) / st.mean(y):.2f}{rng} |")


if __name__ == "__main__":
    main()
