"""What every benchmark script shares: progress lines and writing results."""
import json
import sys
import time


def logger(name):
    """A function printing timestamped progress lines for benchmark `name` to stderr."""
    def log(msg):
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
    return log


def save(out, md, results, log):
    """Write the Markdown table to OUT.md and every run to OUT.json, and show the table."""
    with open(out + ".md", "w") as f:
        f.write(md)
    with open(out + ".json", "w") as f:
        json.dump(results, f, indent=1)
    print(md)
    log(f"wrote {out}.md and {out}.json")
