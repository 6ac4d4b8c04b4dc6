"""`ext4lazy bench merge OUT IN1 IN2 ...`: the results directories of runs made side by side (e.g. two sizes of
the arc suite on their own models at once) as one, for one report (`ext4lazy bench report OUT`).

Records are keyed as the runner keys them (suite, system, device, workload); a key found in two inputs is an
error, not a silent choice.  meta.json keeps every input's runs (their command lines head the report); raw/
series are copied, the inputs' PNGs are not (the report draws its own again)."""
import json
import os
import shutil

from .runner import key


class MergeError(Exception):
    pass


def merge(out, inputs):
    """Write OUT/results.json and OUT/meta.json from the inputs; returns the number of records."""
    records, runs, seen = [], [], {}
    for d in inputs:
        with open(os.path.join(d, "results.json")) as f:
            for r in json.load(f):
                k = key(r)
                if k in seen:
                    raise MergeError(f"{k} is in both {seen[k]} and {d}")
                seen[k] = d
                records.append(r)
        meta = os.path.join(d, "meta.json")
        if os.path.exists(meta):
            with open(meta) as f:
                runs += json.load(f)["runs"]
        raw = os.path.join(d, "raw")
        if os.path.isdir(raw):
            os.makedirs(os.path.join(out, "raw"), exist_ok=True)
            for name in os.listdir(raw):
                shutil.copy(os.path.join(raw, name), os.path.join(out, "raw", name))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(records, f, indent=1)
    with open(os.path.join(out, "meta.json"), "w") as f:
        json.dump({"runs": runs}, f, indent=1)
    return len(records)
