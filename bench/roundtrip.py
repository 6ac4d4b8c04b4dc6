#!/usr/bin/env python3
"""The cost of one request that does almost nothing, on a mount and off it.

    python3 bench/roundtrip.py PATH [PATH ...] [--calls 100000]

For each PATH (an existing file), calls getxattr(PATH, "user.ext4lazy-roundtrip") --calls times and prints the
mean time a call. The attribute does not exist, so every call fails with ENODATA: on a FUSE mount each call is
one GETXATTR round trip to the daemon (the kernel does not cache xattrs for FUSE), on the kernel's ext4 it is a
syscall and an in-inode lookup. The difference between a file on an ext4lazy mount and one on a kernel ext4
volume is what the transport adds to every request a workload sends (docs/RESULTS.md, session 9).
"""

import argparse
import errno
import os
import time

NAME = "user.ext4lazy-roundtrip"


def per_call_us(path: str, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        try:
            os.getxattr(path, NAME)
        except OSError as e:
            if e.errno not in (errno.ENODATA, errno.ENOTSUP):
                raise
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+")
    ap.add_argument("--calls", type=int, default=100_000)
    a = ap.parse_args()
    for p in a.paths:
        if not os.path.exists(p):
            raise SystemExit(f"roundtrip: {p}: no such file")
    per_call_us(a.paths[0], 1000)  # warm the caches and the code path
    for p in a.paths:
        print(f"{p}: {per_call_us(p, a.calls):.2f} us a getxattr ({a.calls} calls)")


if __name__ == "__main__":
    main()
