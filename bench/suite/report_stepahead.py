"""The stepahead suite's section of report.md: StepAhead on against off per journal mode (speed-up, hit rate,
waste, knowledge base), ext4lazy against the kernel, the knowledge base against the kernel's dentry cache
(the paper's Table 3), and the goal verdicts."""

MODES = ("ordered", "lazy")
KERNEL = "kernel-ext4-stock"
MiB = 1 << 20


def _f(x, nd=2):
    return "—" if x is None else f"{x:,.{nd}f}"


def _x(v):
    return "—" if v is None else f"{v:.2f}x"


def _ok(by, name, w):
    r = by.get((name, w))
    return None if r is None or r.get("error") else r


def _ratio(a, b):
    return None if a is None or b is None or b <= 0 else a / b


def _sa(r, k):
    return ((r or {}).get("extra") or {}).get("stepahead", {}).get(k)


def _kmem(r):
    return ((r or {}).get("extra") or {}).get("kernel_memory") or {}


def pairs(by, workloads):
    """(mode, workload, record without, record with) for every pair that finished."""
    out = []
    for w in workloads:
        for m in MODES:
            a, b = _ok(by, f"ext4lazy-{m}", w), _ok(by, f"ext4lazy-{m}-stepahead", w)
            if a and b:
                out.append((m, w, a, b))
    return out


def hit_gain(a, b):
    """(points, relative, share of the misses removed) from the hit rates without (a) and with (b)."""
    ha, hb = a.get("hit_rate"), b.get("hit_rate")
    if ha is None or hb is None:
        return None, None, None
    removed = None if ha >= 1 else (hb - ha) / (1 - ha)
    return hb - ha, (hb / ha - 1) if ha > 0 else None, removed


def onoff_table(by, workloads, paper):
    L = ["### StepAhead on against off (same journal mode)", "",
         "Speed-up = runtime without / with. Hit rate = path-translation reads (inode-table and directory blocks) "
         "served from ext4lazy's buffer cache / all of them; misses = those read from the device. Wasted = "
         "prefetched blocks never used (evicted, freed, or unused at unmount). KB = the knowledge base at "
         "unmount.", "",
         "| workload | mode | without (s) | with (s) | speed-up | paper | hit rate without | with | gain (points) "
         "| gain (relative) | misses without → with | prefetched blocks | wasted | KB entries | KB bytes "
         "(B/entry) |", "|" + "---|" * 15]
    for m, w, a, b in pairs(by, workloads):
        pts, rel, _ = hit_gain(a, b)
        sp = (paper.get("sa_speedup") or {}).get(w)
        pf, waste = _sa(b, "prefetch_blocks"), b.get("prefetch_wasted_blocks")
        share = f" ({100 * waste / pf:.1f}%)" if pf and waste is not None else ""
        ke, kb = _sa(b, "kb_entries"), b.get("kb_bytes")
        per = f" ({kb / ke:.1f})" if ke and kb is not None else ""
        L.append(f"| {w} | {m} | {_f(a['runtime_s'])} | {_f(b['runtime_s'])} | "
                 f"**{_x(_ratio(a['runtime_s'], b['runtime_s']))}** | {_x(sp) if sp else '—'} | "
                 f"{_f(a.get('hit_rate'), 3)} | {_f(b.get('hit_rate'), 3)} | "
                 f"{'—' if pts is None else f'{100 * pts:+.1f}'} | {'—' if rel is None else f'{100 * rel:+.1f}%'} | "
                 f"{_f(_sa(a, 'translation_misses'), 0)} → {_f(_sa(b, 'translation_misses'), 0)} | "
                 f"{_f(pf, 0)} | {_f(waste, 0)}{share} | {_f(ke, 0)} | {_f(kb, 0)}{per} |")
    return L + [""]


def kernel_table(by, systems, workloads):
    names = [n for n in systems if n.startswith("ext4lazy-")]
    if not any(_ok(by, KERNEL, w) for w in workloads) or not names:
        return []
    L = [f"### ext4lazy against the kernel ({KERNEL} runtime / system runtime; > 1: ext4lazy is faster)", "",
         "| workload | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for w in workloads:
        k = _ok(by, KERNEL, w)
        if not k:
            continue
        L.append(f"| {w} | " + " | ".join(_x(_ratio(k["runtime_s"], (_ok(by, n, w) or {}).get("runtime_s")))
                                         for n in names) + " |")
    return L + [""]


def dcache_table(by, systems, workloads, paper):
    rows = []
    for w in workloads:
        k = _ok(by, KERNEL, w)
        km = _kmem(k)
        params = (k or {}).get("params") or {}
        names = params.get("names")
        if not k or km.get("kmem_bytes") is None or params.get("kernel_dentries") != "every name" or not names:
            continue
        for n in systems:
            if not n.endswith("-stepahead"):
                continue
            r = _ok(by, n, w)
            ke, kb = _sa(r, "kb_entries"), (r or {}).get("kb_bytes")
            if not ke or not kb:
                continue
            fuse = _kmem(r).get("kmem_bytes")
            drops = km.get("drop_caches_during")
            rows.append(f"| {w} | {names:,} | {km['kmem_bytes'] / MiB:,.2f} | {km['kmem_bytes'] / names:,.0f} | "
                        f"{'?' if drops is None else drops} | {n} | {ke:,} | {kb / MiB:,.2f} | {kb / ke:.1f} | "
                        f"**{_x(_ratio(km['kmem_bytes'], kb))}** | {'—' if fuse is None else f'{fuse / MiB:,.2f}'} |")
    if not rows:
        return []
    t3 = paper.get("table3") or []
    L = ["### Knowledge base against the kernel's dentry cache (the paper's Table 3)", "",
         f"Kernel: each walk on {KERNEL} runs in a child memory cgroup (`accounting.KernelMemory`); kmem = the "
         "peak kernel memory charged to it: the dentries and ext4 inodes it made the kernel keep (both caches are "
         "memcg-accounted and allocated by the walking process), plus a few pages of the walk's own processes "
         "(page tables, task structs). A drop_caches by another process during the walk frees its unused "
         "dentries and inodes: such rows (drops > 0) undercount and are set aside. A dentry (192 B) plus an ext4 "
         "inode (1,128 B) make 1,320 B a name on this kernel. Only walks that make the kernel hold every name of their tree (du, "
         "stat, touch, grep, readdir) are compared; find never looks files up (d_type), so the kernel holds "
         "its directories only. KB = ext4lazy's knowledge base after the same walk (bytes by capacity: tables, "
         "block lists, per-directory overhead; entries include each directory's \".\" and \"..\"). On a FUSE "
         "mount the kernel still keeps its own dentries and fuse inodes: the last column is that memory, "
         "measured the same way under the ext4lazy mount.", "",
         "| workload | names in the tree | kernel kmem (MiB) | kernel B/name | drops | system | KB entries "
         "| KB (MiB) | KB B/entry | kernel / KB | kernel kmem under this ext4lazy mount (MiB) |",
         "|" + "---|" * 11] + rows
    if t3:
        L += ["", "Paper, Table 3 (files and directories: dentry cache MB / KB MB): " + "; ".join(
            f"{e:,}: {d} / {kk} ({d / kk:.0f}x)" for e, d, kk in t3)]
    return L + [""]


def goals(by, workloads, device, paper):
    L = [f"Goals (issue #7): {paper.get('sa_goals', '')}", ""]
    two_x = device == "cmr"
    for m, w, a, b in pairs(by, workloads):
        s = _ratio(a["runtime_s"], b["runtime_s"])
        sp = (paper.get("sa_speedup") or {}).get(w)
        parts = []
        if sp and sp > 1:
            parts.append(f"paper +{100 * (sp - 1):.0f}%: {'met' if s >= sp else 'not met'}")
        if two_x and w in ("find", "du"):
            parts.append(f"2x aim: {'met' if s >= 2 else 'not met'}")
        gain = (paper.get("sa_hit_gain") or {}).get(w)
        pts, rel, removed = hit_gain(a, b)
        if gain and pts is not None:
            ha = a["hit_rate"]
            reach = "" if rel is not None and rel >= gain else (
                f" (the baseline already hits {ha:.3f}, so at most +{100 * (1 - ha):.1f} points or "
                f"{'+%.1f%%' % (100 * (1 / ha - 1)) if ha else '—'} are possible)" if 1 - ha < gain else "")
            parts.append(f"hit rate +{100 * gain:.0f}% (paper): {100 * pts:+.1f} points / "
                         f"{'—' if rel is None else f'{100 * rel:+.1f}%'} relative: "
                         f"{'met' if rel is not None and rel >= gain else 'not met'}{reach}; "
                         f"misses removed: {'—' if removed is None else f'{100 * removed:.0f}%'}")
        if parts:
            L.append(f"- {w}, {m}: speed-up {_x(s)}; " + "; ".join(parts))
    return L + [""]


def disturbed(by, systems, workloads):
    """A line naming the records during which another process dropped the caches."""
    hit = [f"{w} on {n} ({r['foreign_drop_caches']})" for w in workloads for n in systems
           for r in [_ok(by, n, w)] if r and r.get("foreign_drop_caches")]
    if not hit:
        return []
    return [f"Disturbed: another process dropped the caches during {len(hit)} of these runs (count in brackets): "
            + ", ".join(hit) + ". A drop in a cold walk costs it the re-reading of what it had cached so far (the "
            "kernel's page cache; under FUSE only the kernel's dentries: ext4lazy's cache is its own).", ""]


PRELOAD_VARIANTS = ("stepahead-preload", "stepahead-exact-preload")


def preload_table(by, workloads):
    """StepAhead with the preload library's full-path hints against StepAhead alone (and against no StepAhead),
    when the run has such systems."""
    rows = []
    for w in workloads:
        for m in MODES:
            base, sa = _ok(by, f"ext4lazy-{m}", w), _ok(by, f"ext4lazy-{m}-stepahead", w)
            for v in PRELOAD_VARIANTS:
                r = _ok(by, f"ext4lazy-{m}-{v}", w)
                if r is None:
                    continue
                rt = r["runtime_s"]
                rows.append(f"| {w} | {m} | {v.replace('stepahead-', '')} | {_f(base and base['runtime_s'])} | "
                            f"{_f(sa and sa['runtime_s'])} | {_f(rt)} | "
                            f"**{_x(_ratio(sa and sa['runtime_s'], rt))}** | {_x(_ratio(base and base['runtime_s'], rt))} | "
                            f"{_f(_sa(sa, 'translation_misses'), 0)} → {_f(_sa(r, 'translation_misses'), 0)} | "
                            f"{_f(_sa(r, 'path_hints'), 0)} | {_f(_sa(r, 'path_hints_dropped'), 0)} | "
                            f"{_f(_sa(r, 'path_hint_blocks'), 0)} | {_f(r.get('prefetch_wasted_blocks'), 0)} |")
    if not rows:
        return []
    return ["### Full-path hints (the preload library) on top of StepAhead", "",
            "`-preload`: the workload's programs run with LD_PRELOAD=libext4lazy_preload.so, which sends every path "
            "they translate to the daemon before the call (docs/STEPAHEAD.md). `exact`: the daemon reads only what "
            "each path needs (`-o stepahead_paths=exact`); otherwise a path entering a directory the KB did not know "
            "also reads that directory's parent ahead as a listing would. Path hints = hints received (dropped: "
            "queue full); hint blocks = blocks they prefetched.", "",
            "| workload | mode | hints | without StepAhead (s) | StepAhead (s) | + path hints (s) | speed-up vs "
            "StepAhead | vs without | misses StepAhead → + hints | path hints | dropped | hint blocks | wasted |",
            "|" + "---|" * 13] + rows + [""]


def section(by, systems, workloads, device, scale, paper):
    """Markdown lines for the report (report.py calls it after the runtime table)."""
    L = onoff_table(by, workloads, paper)
    L += preload_table(by, workloads)
    L += disturbed(by, systems, workloads)
    L += goals(by, workloads, device, paper)
    L += kernel_table(by, systems, workloads)
    L += dcache_table(by, systems, workloads, paper)
    return L
