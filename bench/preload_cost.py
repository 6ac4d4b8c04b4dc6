#!/usr/bin/env python3
"""The preload library's cost when caches are warm (docs/STEPAHEAD.md, "Full-path hints"; issue #7 item 3c).

A tight loop of stat(2) calls (crates/preload/examples/statloop.rs) on one path whose attributes the kernel has
cached, with and without LD_PRELOAD=libext4lazy_preload.so: on an ext4lazy mount with -o stepahead (absolute and
relative paths: each call sends a hint and the daemon handles it), on a path elsewhere while that mount exists
(the prefix check; a relative path there also costs a getcwd), and with no ext4lazy mount at all. Configurations
interleaved round by round; the median of the rounds, in ns per call.

    python3 bench/preload_cost.py --bin target/release/ext4lazy [--calls 200000] [--rounds 5]
(the library and target/release/examples/statloop are looked for beside the binary)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def statloop(exe, lib, path, calls, cwd):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if lib:
        env["LD_PRELOAD"] = lib
    p = subprocess.run([exe, path, str(calls)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit(f"statloop failed: {p.stderr}")
    return float(p.stdout)


def measure(configs, exe, lib, calls, rounds):
    res = {name: [] for name, _, _, _ in configs}
    for _ in range(rounds):
        for name, with_lib, path, cwd in configs:
            res[name].append(statloop(exe, lib if with_lib else None, path, calls, cwd))
    return {k: (statistics.median(v), v) for k, v in res.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    d = os.path.dirname(os.path.abspath(a.bin))
    lib, exe = os.path.join(d, "libext4lazy_preload.so"), os.path.join(d, "examples", "statloop")
    for f in (lib, exe):
        if not os.path.exists(f):
            sys.exit(f"missing {f} (cargo build --release --workspace --examples)")
    work = tempfile.mkdtemp(prefix="preload-cost-", dir="/var/tmp")
    src, img, mnt = (os.path.join(work, x) for x in ("src", "img", "mnt"))
    deep = "a/b/c/d/e/f/g/h"
    os.makedirs(os.path.join(src, deep))
    os.makedirs(os.path.join(work, "other", deep))
    for base in (src, os.path.join(work, "other")):
        with open(os.path.join(base, deep, "file"), "w") as f:
            f.write("x")
    os.makedirs(mnt)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-d", src, img, "64M"], check=True)
    other = os.path.join(work, "other")
    out = {"load_before": os.getloadavg()}
    # No ext4lazy mount at all: the library's table is empty.
    out["no mount"] = measure([("elsewhere, absolute, no library", False, os.path.join(other, deep, "file"), work),
                               ("elsewhere, absolute, library", True, os.path.join(other, deep, "file"), work),
                               ("elsewhere, relative, no library", False, f"{deep}/file", other),
                               ("elsewhere, relative, library", True, f"{deep}/file", other)],
                              exe, lib, a.calls, a.rounds)
    subprocess.run([a.bin, "mount", "-o", "ro,stepahead", img, mnt], check=True)
    try:
        subprocess.run(["stat", os.path.join(mnt, deep, "file")], check=True, capture_output=True)
        out["mounted"] = measure([
            ("ext4lazy, absolute, no library", False, os.path.join(mnt, deep, "file"), work),
            ("ext4lazy, absolute, library", True, os.path.join(mnt, deep, "file"), work),
            ("ext4lazy, relative, no library", False, f"{deep}/file", mnt),
            ("ext4lazy, relative, library", True, f"{deep}/file", mnt),
            ("elsewhere, absolute, no library", False, os.path.join(other, deep, "file"), work),
            ("elsewhere, absolute, library", True, os.path.join(other, deep, "file"), work),
            ("elsewhere, relative, no library", False, f"{deep}/file", other),
            ("elsewhere, relative, library", True, f"{deep}/file", other)], exe, lib, a.calls, a.rounds)
        p = subprocess.run([a.bin, "stat", "--json", mnt], capture_output=True, text=True)
        s = json.loads(p.stdout) if p.returncode == 0 else {}
        out["daemon"] = {k: s.get(k) for k in ("path_hints", "path_hints_dropped", "path_hint_blocks")}
    finally:
        subprocess.run([a.bin, "umount", mnt])
        subprocess.run(["rm", "-rf", work])
    out["load_after"] = os.getloadavg()
    print(f"calls per run {a.calls}, rounds {a.rounds}, load {out['load_before'][0]:.1f} -> {out['load_after'][0]:.1f}")
    for part in ("no mount", "mounted"):
        print(f"\n{part}:")
        for k, (med, runs) in out[part].items():
            print(f"  {k:36s} {med:8.1f} ns/call   runs {', '.join(f'{x:.0f}' for x in runs)}")
    print(f"\ndaemon (live figures, counted up to a second late): {out.get('daemon')}")


if __name__ == "__main__":
    main()
