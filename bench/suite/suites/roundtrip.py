"""roundtrip: the cost of one request that does almost nothing (what bench/roundtrip.py measured).

One group: an unrecorded setup phase writes a file; then, on a cold cache and a fresh mount, Getxattr calls
getxattr(FILE, "user.ext4lazy-roundtrip") 100,000 x --scale times after 1,000 to warm up.  The attribute does not
exist, so every call fails with ENODATA: on a FUSE mount each call is one GETXATTR round trip to the daemon (the
kernel does not cache xattrs for FUSE), on the kernel's ext4 a system call and an in-inode lookup.  The runtime
is the calls alone; `extra.us_per_call` the mean time a call; the report sets the systems side by side.
"""
import errno
import os
import time

from ..core import GiB, Group, Suite, Workload, scaled

NAME = "user.ext4lazy-roundtrip"


class MakeFile(Workload):
    recorded = False
    name, cost = "MakeFile", 0.1

    def run(self, root, ctx):
        with open(os.path.join(root, "f"), "w") as f:
            f.write("x")


class Getxattr(Workload):
    name, writes, timing = "Getxattr", False, "work"

    def __init__(self, calls):
        self.calls = calls

    def params(self):
        return {"calls": self.calls, "attribute": NAME}

    def run(self, root, ctx):
        path = os.path.join(root, "f")
        self.loop(path, 1000)           # the lookup, the daemon's caches and this code path, before the clock
        t = time.perf_counter()
        self.loop(path, self.calls)
        return {"us_per_call": round((time.perf_counter() - t) / self.calls * 1e6, 3)}

    @staticmethod
    def loop(path, n):
        for _ in range(n):
            try:
                os.getxattr(path, NAME)
            except OSError as e:
                if e.errno not in (errno.ENODATA, errno.ENOTSUP):
                    raise


def build(scale):
    return [Group("roundtrip", [MakeFile(), Getxattr(scaled(100_000, scale, least=1000))], data_bytes=1 << 20,
                  inodes=32)]


def section(by, systems, workloads, device, scale, paper):
    L = ["### Round trip: getxattr of a missing attribute", "", "| system | µs a call | calls |", "|---|---|---|"]
    for n in systems:
        r = by.get((n, "Getxattr"))
        if r and not r.get("error"):
            L.append(f"| {n} | {(r.get('extra') or {}).get('us_per_call', '—')} | {r['params']['calls']:,} |")
    return L + [""]


SUITE = Suite("roundtrip", __doc__, build, ["kernel-ext4-stock", "ext4lazy-ordered"],
              {"goals": "none: what the FUSE transport adds to every request"}, min_size=2 * GiB, partitions={},
              report=section)
