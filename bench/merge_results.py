#!/usr/bin/env python3
"""Merge the results directories of `ext4lazy bench run`s made side by side (e.g. two sizes of the arc suite on
their own models at once) into one, for one report:

    python3 bench/merge_results.py OUT IN1 IN2 ...
    ext4lazy bench report OUT

Records are keyed as the runner keys them (suite, system, device, workload); a key found in two inputs is an
error, not a silent choice.  meta.json keeps every input's runs (their command lines head the report); raw/
series and the inputs' PNGs are copied (the report draws its own again)."""
import json
import os
import shutil
import sys


def main(out, inputs):
    records, runs, seen = [], [], {}
    for d in inputs:
        with open(os.path.join(d, "results.json")) as f:
            for r in json.load(f):
                k = (r["suite"], r["system"], r["device"], r["workload"])
                if k in seen:
                    sys.exit(f"{k} is in both {seen[k]} and {d}")
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
    print(f"{len(records)} records from {len(inputs)} directories in {out}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
