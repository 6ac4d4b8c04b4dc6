"""preload-cost: the preload library's cost when caches are warm (docs/STEPAHEAD.md, "Full-path hints"; issue #7
item 3c; what bench/preload_cost.py measured).

A tight loop of stat(2) calls (crates/preload/examples/statloop.rs, beside the binary after `cargo build --release
--workspace --examples`) on one path whose attributes the kernel has cached, without and with
LD_PRELOAD=libext4lazy_preload.so, by an absolute path and by a path relative to the working directory, on the
volume (`vol-`) and on a path elsewhere on this machine (`else-`, under the run's work directory).  On an ext4lazy
`stepahead` mount every call on the volume sends a hint the daemon handles, and a call elsewhere costs the
library's prefix check (a relative one also a getcwd); on the kernel's ext4 no ext4lazy mount exists, the
library's table is empty.  200,000 calls x --scale per workload; `extra.ns_per_call` as statloop prints it; the
runtime is the loop.  `--repeat N` for the script's rounds (the systems alternate in each).
"""
import os
import subprocess

from ..core import GiB, Group, Suite, Workload, WorkloadError, scaled
from ..systems import preload_library

DEEP = "a/b/c/d/e/f/g/h"
TOOLS = {}                      # configure(): the statloop example and the library, beside the binary


def configure(args, binary):
    if args.jobs is not None or args.layout is not None:
        raise ValueError("--jobs and --layout are options of the arc suite, not of preload-cost")
    TOOLS["statloop"] = os.path.join(os.path.dirname(binary), "examples", "statloop")
    TOOLS["lib"] = preload_library(binary)
    for f in TOOLS.values():
        if not os.path.exists(f):
            raise ValueError(f"{f} is missing (cargo build --release --workspace --examples)")


class MakeDeep(Workload):
    recorded = False
    name, cost = "MakeDeep", 0.1

    def run(self, root, ctx):
        os.makedirs(os.path.join(root, DEEP))
        with open(os.path.join(root, DEEP, "file"), "w") as f:
            f.write("x")


class StatLoop(Workload):
    writes, timing = False, "work"

    def __init__(self, where, relative, lib, calls):
        self.where, self.relative, self.lib, self.calls = where, relative, lib, calls
        self.name = f"{where}-{'rel' if relative else 'abs'}-{'lib' if lib else 'nolib'}"
        self.elsewhere = None

    def params(self):
        return {"where": self.where, "relative": self.relative, "library": self.lib, "calls": self.calls}

    def prepare(self, work):
        self.elsewhere = os.path.join(work, "preload-elsewhere")
        os.makedirs(os.path.join(self.elsewhere, DEEP), exist_ok=True)
        with open(os.path.join(self.elsewhere, DEEP, "file"), "w") as f:
            f.write("x")

    def run(self, root, ctx):
        base = root if self.where == "vol" else self.elsewhere
        path = f"{DEEP}/file" if self.relative else os.path.join(base, DEEP, "file")
        os.stat(os.path.join(base, DEEP, "file"))          # the attributes cached before the loop
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        if self.lib:
            env["LD_PRELOAD"] = TOOLS["lib"]
        p = subprocess.run([TOOLS["statloop"], path, str(self.calls)], cwd=base, env=env, capture_output=True,
                           text=True, timeout=ctx.timeout)
        if p.returncode != 0:
            raise WorkloadError(f"statloop failed rc={p.returncode}: {p.stderr.strip()[-400:]}")
        return {"ns_per_call": float(p.stdout)}


def build(scale):
    calls = scaled(200_000, scale, least=1000)
    return [Group("preload", [MakeDeep()] + [StatLoop(where, rel, lib, calls) for where in ("vol", "else")
                                             for rel in (False, True) for lib in (False, True)],
                  data_bytes=1 << 20, inodes=64)]


def section(by, systems, workloads, device, scale, paper):
    L = ["### stat(2) with and without the preload library (ns a call)", "",
         "| workload | " + " | ".join(systems) + " |", "|---|" + "---|" * len(systems)]
    for w in workloads:
        cells = []
        for n in systems:
            r = by.get((n, w))
            cells.append(f"{(r.get('extra') or {}).get('ns_per_call', '—')}" if r and not r.get("error") else "—")
        L.append(f"| {w} | " + " | ".join(cells) + " |")
    return L + [""]


SUITE = Suite("preload-cost", __doc__, build, ["kernel-ext4-stock", "ext4lazy-ordered-stepahead"],
              {"goals": "none: the library's cost per call, on an ext4lazy stepahead mount and elsewhere"},
              min_size=2 * GiB, partitions={}, report=section, configure=configure)
