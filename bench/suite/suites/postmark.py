"""postmark: the file-server macrobenchmark (FAST'17 sections 4.2.2 and 4.3.2, Tables 3 and 4, Figures 9, 12, 14).

The paper's configuration: 10,000 files of 512 B to 1 MiB in 25,000 subdirectories, 100,000 transactions, read
and write blocks of 1 MiB, unbuffered I/O; with its changes: sync after creating the working set, sync instead
of deleting it at the end.  --scale multiplies the files, subdirectories and transactions (the sizes stay).
Implementation: bench/suite/postmark.py (why not Debian's binary: see there).  Reported: runtime (create + sync +
transactions + sync + unmount), transactions per second of the transaction phase, volumes by class.
"""
import os

from .. import published
from ..core import GiB, MiB, Group, Suite, Workload, scaled
from ..postmark import Postmark as Engine
from ..shapes import syncfs


class PostmarkWorkload(Workload):
    name = "Postmark"
    cost = 4.0

    def __init__(self, number, subdirs, transactions):
        self.number, self.subdirs, self.transactions = number, subdirs, transactions

    def params(self):
        return {"number": self.number, "subdirectories": self.subdirs, "size": [512, MiB], "read": MiB,
                "write": MiB, "transactions": self.transactions, "buffering": False, "seed": 42}

    def run(self, root, ctx):
        top = os.path.join(root, "postmark")
        os.mkdir(top)
        pm = Engine(top, self.number, self.subdirs, 512, MiB, MiB, MiB, self.transactions)
        out = pm.run(lambda: syncfs(root), progress=ctx.progress)
        out["tps"] = out["transactions_done"] / out["transactions_s"] if out["transactions_s"] > 0 else None
        return {"postmark": out}


def build(scale):
    n = scaled(10_000, scale, least=4)
    return [Group("postmark", [PostmarkWorkload(n, scaled(25_000, scale, least=2), scaled(100_000, scale, least=20))],
                  data_bytes=2 * n * MiB + scaled(25_000, scale) * 4096, inodes=2 * n + scaled(25_000, scale) + 16)]


def _writes(table):
    """{system: (data, metadata, journal)} MiB written during the run (the paper's Tables 3 and 4)."""
    return published.rows([f"fast17.{table}.{k}" for k in ("data_writes", "metadata_writes", "journal_writes")])


PAPER = {
    "table3_cmr": _writes("table3"),
    "table4_smr": _writes("table4"),
    "goals": "CMR: throughput 24.24 -> 25.47 MiB/s (+5%). DM-SMR (400 GB partition): lazy >2x faster (461 s).",
}

# The paper: the whole CMR disk (section 4.2.2), a 400 GB partition of the ST8000AS0002 (Table 4), whole drives
# for the other DM-SMR disks (Figure 13).
SUITE = Suite("postmark", __doc__, build, ["kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"], PAPER,
              min_size=4 * GiB, partitions={"cmr": "drive", "smr-seagate": 400 * 10**9, "smr-wd": "drive"})
