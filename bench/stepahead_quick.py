#!/usr/bin/env python3
"""StepAhead, a first measurement: cold `find` and `du` with and without `-o stepahead`, on a disk model.

    python3 bench/stepahead_quick.py [--dirs 40000] [--files 10000] [--runs 3] [--model cmr] [--speed 10]
                                     [--journal ordered] [--ops find,du] [--out bench/results/stepahead-quick-DATE]

The tree is bench/readpath.py's (DIRS directories breadth-first, up to --width subdirectories each, FILES small
files spread over them; made once with the kernel on an 8 GiB sparse image and reused).  Every run: umount,
`sync; echo 3 > /proc/sys/vm/drop_caches`, a fresh read-only ext4lazy mount on the model
(`-o ro,device=MODEL,speed=S,stats=FILE[,stepahead]`), the timed operation, umount; then the stats file gives
the hit rate of path-translation reads, the prefetched and wasted blocks and the knowledge base's size.  Runs
are interleaved (run 1 of every system and operation, then run 2, ...) and the load average is recorded with
each, so both systems see the same machine.  The issue's `stepahead` bench suite will replace this script.
Needs root and a release build (EXT4LAZY_BIN or target/release/ext4lazy).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "system"))
sys.path.insert(0, HERE)
from harness import adapters, util  # noqa: E402

import benchlib  # noqa: E402
import readpath  # noqa: E402  (its tree and image cache)

OPS = {"find": "find . > /dev/null", "du": "du -s . > /dev/null"}
SYSTEMS = {"ext4lazy-{j}": [], "ext4lazy-{j}-stepahead": ["stepahead"]}

log = benchlib.logger("stepahead-quick")


def one_run(a, img, mnt, opts, op, stats_path, timeout):
    util.force_unmount(mnt)
    util.drop_caches()
    if os.path.exists(stats_path):
        os.unlink(stats_path)
    load = os.getloadavg()[0]
    m = a.mount(img, mnt, options=opts)
    try:
        t = time.perf_counter()
        p = subprocess.run(["sh", "-c", OPS[op]], cwd=os.path.join(mnt, "tree"), capture_output=True, text=True,
                           timeout=timeout)
        dt = time.perf_counter() - t
        err = None if p.returncode == 0 else f"rc={p.returncode}: {p.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        dt, err = None, f"timeout after {timeout} s"
        util.abort_fuse(mnt)
    finally:
        try:
            m.umount()
        except Exception:
            a.cleanup(m)
    stats = {}
    if os.path.exists(stats_path):
        with open(stats_path) as f:
            stats = json.load(f)
    keep = ["hit_rate", "translation_hits", "translation_misses", "prefetch_blocks", "prefetch_used_blocks",
            "prefetch_wasted_blocks", "prefetch_batches", "prefetch_backoffs", "kb_entries", "kb_dirs", "kb_bytes"]
    return {"seconds": dt, "error": err, "load": load, **{k: stats.get(k) for k in keep}}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=40000)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--width", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="cmr")
    ap.add_argument("--speed", default="10")
    ap.add_argument("--journal", default="ordered", choices=["ordered", "lazy"])
    ap.add_argument("--ops", default="find,du")
    ap.add_argument("--out", default=None)
    ap.add_argument("--image-dir", default="/var/tmp/ext4lazy-bench")
    ap.add_argument("--timeout", type=int, default=1800)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("stepahead_quick.py: needs root")
    ops = [o for o in args.ops.split(",") if o]
    for o in ops:
        if o not in OPS:
            sys.exit(f"stepahead_quick.py: unknown op {o!r} (choose from {', '.join(OPS)})")
    a = adapters.get("ext4lazy")
    ok, why = a.available()
    if not ok:
        sys.exit("stepahead_quick.py: " + why)
    out = args.out or os.path.join(HERE, "results", "stepahead-quick-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    img = readpath.get_image(args)
    mnt = os.path.join(args.image_dir, "mnt")
    os.makedirs(mnt, exist_ok=True)
    stats_path = os.path.join(args.image_dir, "stepahead-stats.json")
    # A read-only mount never writes the journal, so journal=lazy only changes how a journal would be read.
    base = ["ro", f"device={args.model}", f"speed={args.speed}", f"stats={stats_path}", f"journal={args.journal}"]
    systems = {name.format(j=args.journal): base + extra for name, extra in SYSTEMS.items()}
    results = {"params": vars(args) | {"image": img, "binary": a.bin, "systems": systems},
               "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
               "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "runs": []}
    try:
        for r in range(args.runs):
            for op in ops:
                for name, opts in systems.items():
                    rec = one_run(a, img, mnt, opts, op, stats_path, args.timeout)
                    rec |= {"system": name, "op": op, "run": r + 1}
                    results["runs"].append(rec)
                    log(f"run {r + 1} {op:5} {name:28} {rec['seconds'] or 0:7.2f} s  hit rate "
                        f"{rec['hit_rate'] or 0:.3f}  prefetched {rec['prefetch_blocks']}  wasted "
                        f"{rec['prefetch_wasted_blocks']}  load {rec['load']:.2f}" + (f"  ERROR {rec['error']}" if rec["error"] else ""))
    finally:
        util.force_unmount(mnt)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    names = list(systems)
    lines = [f"StepAhead quick: cold cache, `{args.model}` model at speed {args.speed}, journal={args.journal}, "
             f"{args.dirs} dirs + {args.files} files; median of {args.runs} interleaved runs; kernel "
             f"{platform.release()}, {os.cpu_count()} CPUs; {results['started']}", "",
             "| operation | " + " | ".join(f"{n} (s)" for n in names) + " | speed-up | hit rate | hit rate "
             "with StepAhead | prefetched blocks | wasted | KB entries | KB bytes | load avg |",
             "|" + "---|" * (len(names) + 8)]
    for op in ops:
        recs = {n: [x for x in results["runs"] if x["system"] == n and x["op"] == op and not x["error"]] for n in names}

        def med(n, key):
            v = [x[key] for x in recs[n] if x.get(key) is not None]
            return statistics.median(v) if v else None
        t0, t1 = med(names[0], "seconds"), med(names[1], "seconds")
        cells = [f"{t:.2f}" if t is not None else "—" for t in (t0, t1)]
        speedup = f"{t0 / t1:.2f}x" if t0 and t1 else "—"
        h0, h1 = med(names[0], "hit_rate"), med(names[1], "hit_rate")
        pf, wa = med(names[1], "prefetch_blocks"), med(names[1], "prefetch_wasted_blocks")
        ke, kb = med(names[1], "kb_entries"), med(names[1], "kb_bytes")
        loads = [x["load"] for n in names for x in recs[n]]
        lines.append(f"| `{op}` | " + " | ".join(cells) + f" | {speedup} | {h0 or 0:.3f} | {h1 or 0:.3f} | "
                     f"{pf:.0f} | {wa:.0f} | {ke:.0f} | {kb:.0f} | {min(loads):.2f}-{max(loads):.2f} |"
                     if pf is not None and ke is not None and loads else f"| `{op}` | " + " | ".join(cells) + " | — |")
    errors = [f"- {x['system']} `{x['op']}` run {x['run']}: {x['error']}" for x in results["runs"] if x["error"]]
    md = "\n".join(lines + ([""] + errors if errors else [])) + "\n"
    benchlib.save(out, md, results, log)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
