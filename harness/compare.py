"""Compare two walker outputs (kernel = oracle, impl = implementation under test) field by field."""
import json
import os
import subprocess
import sys

GROUPS = {
    "tree": ["lstat", "type", "listdir", "entries"],
    "attrs": ["mode", "uid", "gid", "size", "nlink", "rdev"],
    "blocks": ["blocks"],
    "times": ["atime", "mtime", "ctime"],
    "symlinks": ["target"],
    "content": ["content", "preads"],
    "xattrs": ["xattrs"],
    "hardlinks": ["links"],
}
FIELDS = [f for fs in GROUPS.values() for f in fs]
WALKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "walker.py")
MISSING = "<absent>"


class WalkFailed(Exception):
    pass


def walk(root, out_json, timeout=900, content=True, on_timeout=None):
    """Walk `root` in a subprocess; returns records.  On timeout calls on_timeout() (e.g. abort FUSE)."""
    cmd = [sys.executable, WALKER, root, out_json] + ([] if content else ["--no-content"])
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, errs = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        if on_timeout:
            on_timeout()
        p.kill()
        out, errs = p.communicate()
        raise WalkFailed(f"walking {root} did not finish within {timeout}s (hung daemon?)")
    if p.returncode != 0:
        raise WalkFailed(f"walker failed on {root} (rc={p.returncode}): {errs[-3000:]}")
    with open(out_json) as f:
        return json.load(f)   # {"statfs": ..., "records": ...}


def _short(v, n=140):
    s = json.dumps(v, ensure_ascii=True) if not isinstance(v, str) else v
    return s if len(s) <= n else s[:n] + f"...({len(s)} chars)"


def diff(kernel, impl, group):
    """List of (path, field, kernel_value, impl_value) for one field group."""
    out = []
    if group == "tree":
        for p in sorted(set(kernel) - set(impl)):
            out.append((p, "path", "present", MISSING))
        for p in sorted(set(impl) - set(kernel)):
            out.append((p, "path", MISSING, "present"))
    fields = GROUPS[group]
    for p in sorted(set(kernel) & set(impl)):
        k, i = kernel[p], impl[p]
        for f in fields:
            kv, iv = k.get(f, MISSING), i.get(f, MISSING)
            if f == "xattrs" and isinstance(kv, dict) and isinstance(iv, dict):
                for n in sorted(set(kv) | set(iv)):
                    if kv.get(n, MISSING) != iv.get(n, MISSING):
                        out.append((p, f"xattr[{n}]", kv.get(n, MISSING), iv.get(n, MISSING)))
                continue
            if kv != iv:
                out.append((p, f, kv, iv))
    return out


def report(diffs, label_k="kernel", label_i="impl", per_field=6):
    """Counts per field, then the first few differing paths of each field with both values."""
    by_field = {}
    for d in diffs:
        by_field.setdefault(d[1].split("[")[0], []).append(d)
    lines = [f"{len(diffs)} difference(s): " + ", ".join(f"{f}={len(v)}" for f, v in sorted(by_field.items()))]
    for f, ds in sorted(by_field.items()):
        for p, fld, kv, iv in ds[:per_field]:
            lines.append(f"  {_short(repr(p), 160)} {fld}: {label_k}={_short(kv)} {label_i}={_short(iv)}")
        if len(ds) > per_field:
            lines.append(f"  ... {len(ds) - per_field} more {f} difference(s)")
    return "\n".join(lines)


def summary_json(diffs):
    return [{"path": p, "field": f, "kernel": kv, "impl": iv} for p, f, kv, iv in diffs]
