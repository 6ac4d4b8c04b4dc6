#!/usr/bin/env python3
"""Read-path benchmark: cold-cache traversals of a kernel-built tree on kernel ext4, fuse2fs and ext4lazy.

    python3 bench/readpath.py [--dirs 50000] [--files 10000] [--runs 3] [--systems kernel,fuse2fs,ext4lazy]
                              [--out bench/results/readpath-DATE] [--image-dir /var/tmp/ext4lazy-bench]

The tree (DIRS directories in breadth-first order, each with up to --width subdirectories, FILES small files of
0..8 KiB spread over them) is made once with the kernel on an 8 GiB sparse image (mkfs.ext4 defaults) and reused
while its parameters stay the same.  For every system, operation and run: umount, `sync; echo 3 >
/proc/sys/vm/drop_caches`, a fresh read-only mount, then the operation is timed (wall clock).  Best of --runs.
Operations: `ls -lR`, `find`, `du -s`, and `tar cf - . | wc -c` (tar writing to /dev/null itself would skip
reading file data: GNU tar special-cases /dev/null).  Results: Markdown table (stdout and OUT.md) and JSON
(OUT.json) with every run.  Needs root.  Systems that are not available are reported as such.
"""
import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)  # run as a script: the repository root, where `harness` lives
from harness import adapters, images, util  # noqa: E402

import benchlib  # noqa: E402  (beside this script)

OPS = {
    "ls -lR": "ls -lR . > /dev/null",
    "find": "find . > /dev/null",
    "du -s": "du -s . > /dev/null",
    "tar": "tar cf - . | wc -c > /dev/null",
}


log = benchlib.logger("readpath")


def build_tree(root, ndirs, nfiles, width, seed=42):
    rnd = random.Random(seed)
    paths = [root]
    t = time.time()
    for i in range(1, ndirs + 1):
        parent = paths[(i - 1) // width]
        p = os.path.join(parent, "d%d" % i)
        os.mkdir(p)
        paths.append(p)
        if i % 10000 == 0:
            log(f"  {i}/{ndirs} dirs ({time.time() - t:.1f} s)")
    for j in range(nfiles):
        d = paths[1 + (j * 7919) % ndirs] if ndirs else root
        with open(os.path.join(d, "f%d" % j), "wb") as f:
            f.write(rnd.randbytes(rnd.randrange(0, 8193)))
    log(f"  {ndirs} dirs + {nfiles} files in {time.time() - t:.1f} s")


def get_image(args):
    os.makedirs(args.image_dir, exist_ok=True)
    img = os.path.join(args.image_dir, f"readpath-d{args.dirs}-f{args.files}-w{args.width}.img")
    done = img + ".done"
    if os.path.exists(done):
        log(f"reusing image {img}")
        return img
    log(f"building image {img} (8 GiB sparse, mkfs.ext4 defaults) with the kernel")
    images.mkfs("mkfs.ext4", img, 8 * images.GiB)
    with images.KernelMount(img, os.path.join(args.image_dir, "build-mnt")) as root:
        os.mkdir(os.path.join(root, "tree"))
        build_tree(os.path.join(root, "tree"), args.dirs, args.files, args.width)
    open(done, "w").close()
    return img


def time_op(adapter, img, mnt, op, timeout):
    util.force_unmount(mnt)
    util.drop_caches()
    m = adapter.mount(img, mnt, options=(["ro"] if adapter.name == "kernel" else None))
    try:
        t = time.perf_counter()
        p = subprocess.run(["sh", "-c", OPS[op]], cwd=os.path.join(mnt, "tree"), capture_output=True, text=True,
                           timeout=timeout)
        dt = time.perf_counter() - t
        ok = p.returncode == 0
        err = None if ok else f"rc={p.returncode}: {p.stderr.strip()[-300:]}"
    except subprocess.TimeoutExpired:
        dt, ok, err = None, False, f"timeout after {timeout} s"
        util.abort_fuse(mnt)
    finally:
        try:
            m.umount()
        except Exception:
            adapter.cleanup(m)
    return dt, err


def fmt(x):
    return "—" if x is None else f"{x:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dirs", type=int, default=50000)
    ap.add_argument("--files", type=int, default=10000)
    ap.add_argument("--width", type=int, default=5, help="max subdirectories per directory (default 5)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--systems", default="kernel,fuse2fs,ext4lazy")
    ap.add_argument("--ops", default=",".join(OPS), help="comma list of: " + ", ".join(OPS))
    ap.add_argument("--out", default=None, help="output prefix (default bench/results/readpath-<date>)")
    ap.add_argument("--image-dir", default="/var/tmp/ext4lazy-bench")
    ap.add_argument("--timeout", type=int, default=1800, help="per operation (s)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("readpath.py: needs root (loop devices, mounts, drop_caches)")
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    for s in systems:
        if s not in adapters.ALL:
            sys.exit(f"readpath.py: unknown system {s!r} (choose from {', '.join(adapters.ALL)})")
    for o in ops:
        if o not in OPS:
            sys.exit(f"readpath.py: unknown op {o!r}")
    out = args.out or os.path.join(HERE, "results", "readpath-" + time.strftime("%Y%m%d-%H%M%S"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    img = get_image(args)
    mnt = os.path.join(args.image_dir, "mnt")
    os.makedirs(mnt, exist_ok=True)
    results = {"params": vars(args) | {"ops": ops, "systems": systems, "image": img},
               "host": {"kernel": platform.release(), "cpus": os.cpu_count()},
               "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "systems": {}}
    for s in systems:
        a = adapters.get(s)
        ok, why = a.available()
        entry = {"available": ok, "reason": why, "ops": {}}
        results["systems"][s] = entry
        if not ok:
            log(f"{s}: NOT AVAILABLE: {why}")
            continue
        if s == "ext4lazy":
            entry["binary"] = a.bin
        try:
            for op in ops:
                runs, errors = [], []
                for r in range(args.runs):
                    log(f"{s}: {op} run {r + 1}/{args.runs} (cold cache, fresh mount)")
                    dt, err = time_op(a, img, mnt, op, args.timeout)
                    runs.append(dt)
                    if err:
                        errors.append(err)
                        log(f"{s}: {op} FAILED: {err}")
                    else:
                        log(f"{s}: {op} {dt:.2f} s")
                good = [x for x in runs if x is not None]
                entry["ops"][op] = {"runs": runs, "best": min(good) if good and not errors else None,
                                    "errors": errors}
        except adapters.MountFailed as e:
            entry["available"] = False
            entry["reason"] = "mount failed: " + str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:3])
            log(f"{s}: {entry['reason']}")
        finally:
            util.force_unmount(mnt)
    results["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")

    # ---- table
    def best(s, op):
        e = results["systems"].get(s)
        return e["ops"].get(op, {}).get("best") if e and e["available"] else None

    head = ["operation"] + [f"{s} (s)" for s in systems]
    ratio_cols = []
    if "ext4lazy" in systems and "fuse2fs" in systems:
        ratio_cols.append(("ext4lazy speed-up vs fuse2fs", lambda op: (best("fuse2fs", op), best("ext4lazy", op))))
    if "ext4lazy" in systems and "kernel" in systems:
        ratio_cols.append(("ext4lazy / kernel", lambda op: (best("ext4lazy", op), best("kernel", op))))
    if "fuse2fs" in systems and "kernel" in systems:
        ratio_cols.append(("fuse2fs / kernel", lambda op: (best("fuse2fs", op), best("kernel", op))))
    head += [c for c, _ in ratio_cols]
    lines = [f"Read path, cold cache, best of {args.runs} (each run: drop_caches + fresh mount); "
             f"{args.dirs} dirs + {args.files} files, 8 GiB image; kernel {platform.release()}, "
             f"{os.cpu_count()} CPUs; {results['started']}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for op in ops:
        row = [f"`{op}`"] + [fmt(best(s, op)) for s in systems]
        for _, f in ratio_cols:
            a, b = f(op)
            row.append("—" if a is None or b is None or b == 0 else f"{a / b:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    notes = []
    for s in systems:
        e = results["systems"][s]
        if not e["available"]:
            notes.append(f"- {s}: not available: {e['reason']}")
        for op, o in e["ops"].items():
            for err in o["errors"][:1]:
                notes.append(f"- {s} `{op}` failed: {err}")
    if notes:
        lines += [""] + notes
    md = "\n".join(lines) + "\n"
    benchlib.save(out, md, results, log)
    unavailable = [s for s in systems if not results["systems"][s]["available"]]
    return 1 if unavailable and len(unavailable) == len(systems) else 0


if __name__ == "__main__":
    sys.exit(main())
