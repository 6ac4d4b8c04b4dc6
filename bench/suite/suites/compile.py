"""compile: CompileMix, a kernel-compile-like write mix (FAST'17 section 4.2.2, Figures 3 and 10).

One group on a fresh volume: an unrecorded setup phase writes a source tree (20,000 .c files in 2,000
directories, 16,000 headers; the untar before a build), then CompileMix builds it on a cold cache with 8 workers
(make -j8): per source a read of it and its headers, an object written as a temporary and renamed, a dependency
file written, read and deleted, a .cmd file; modules (.mod.c, .mod.o, .ko) for 3 objects in 4; built-in.o per
directory, deepest first; a final link writing vmlinux.  ~12 GiB written at scale 1 (the paper's kernel build);
every count x --scale.  bench/suite/compilemix.py has the shape and why.
"""
from .. import published
from ..compilemix import CompileMix, MakeSources, Plan
from ..core import GiB, KiB, Group, Suite


def build(scale):
    plan = Plan(scale)
    t = plan.totals()
    files = t["source_files"] + t["output_files"] + 2 * plan.shared_dirs + plan.ndirs
    # every file rounded up to blocks, plus the directories' blocks
    data = t["source_bytes"] + t["output_bytes"] + files * 4 * KiB + (plan.ndirs + plan.shared_dirs) * 4 * KiB
    return [Group("compile", [MakeSources(plan), CompileMix(plan)], data_bytes=data, inodes=files + 16)]


PAPER = {
    # Linux 4.6 with all modules on ext4-baseline (section 4.2.2, Figure 3): MiB written
    "kernel_compile_mib": published.value("fast17.fig3.kernel_build_writes"),
    "notes": ["The paper's kernel build wrote 12 GiB of data, 185 MiB of journal and 98 MiB of metadata "
              "(0.77% of the writes) and was CPU-bound (Figure 10): ext4-lazy did not change its runtime. "
              "CompileMix runs no compiler, so it is I/O-bound where the paper's build was not."],
    "goals": "none in the paper beyond 'no improvement' for a metadata-light build; lazy should not be slower "
             "and should write no metadata home.",
}

def section(by, systems, workloads, device, scale, paper):
    """Where the writes went, beside the paper's kernel build (Figure 3): the metadata share of all writes."""
    p = paper["kernel_compile_mib"]
    total = p["data"] + p["journal"] + p["metadata"]
    L = ["### CompileMix: what was written (the paper's kernel build: "
         f"{p['data'] / 1024:g} GiB data, {p['journal']} MiB journal, {p['metadata']} MiB metadata home = "
         f"{100 * p['metadata'] / total:.2f}% of the writes)", "",
         "| system | data write (MiB) | journal write (MiB) | metadata write (MiB) | metadata home, % of writes "
         "| journal, % of writes | objects | temporaries made and deleted |", "|---|---|---|---|---|---|---|---|"]
    for n in systems:
        r = by.get((n, "CompileMix"))
        if not r or r.get("error"):
            continue
        m, c = r["io_mib"], (r.get("extra") or {}).get("compile", {})
        writes = m["data_write"] + m["journal_write"] + m["metadata_write"]
        share = (lambda x: f"{100 * x / writes:.2f}%") if writes > 0 else (lambda x: "—")
        L.append(f"| {n} | {m['data_write']:,.1f} | {m['journal_write']:,.1f} | {m['metadata_write']:,.1f} | "
                 f"{share(m['metadata_write'])} | {share(m['journal_write'])} | "
                 f"{(r.get('params') or {}).get('objects', '—')} | "
                 f"{c.get('temporaries_created', '—')} / {c.get('temporaries_deleted', '—')} |")
    return L + [""]


SUITE = Suite("compile", __doc__, build, ["kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"], PAPER,
              min_size=2 * GiB, report=section)
