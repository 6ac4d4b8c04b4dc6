"""readpath: cold-cache traversals of a tree of directories and small files (what bench/readpath.py measured).

One group on a fresh volume per system: an unrecorded setup phase makes `tree/` (50,000 directories breadth-first,
at most 5 subdirectories each, and 10,000 files of 0-8 KiB of seeded random bytes spread over them, made in one
process so that every system holds the same tree), then, each on a cold cache (drop_caches, fresh mount): ls-lR
(`ls -lR`), find (`find`), du (`du -s`), tar (`tar cf - tree | wc -c`: GNU tar skips reading file data when the
archive is /dev/null itself).  Counts x --scale; `--repeat N` for the script's best-of-N runs (the report shows
the lowest, the mean and every run).
"""
import os
import random

from .. import workloads as w
from ..core import GiB, KiB, Group, Suite, Workload, scaled

WIDTH = 5


class MakeReadTree(Workload):
    """Setup: `dirs` directories breadth-first (at most WIDTH subdirectories each), `files` files of 0-8 KiB."""
    recorded = False

    def __init__(self, dirs, files):
        self.name, self.dirs, self.files, self.cost = "MakeTree", dirs, files, 2.0

    def params(self):
        return {"dirs": self.dirs, "files": self.files, "width": WIDTH}

    def run(self, root, ctx):
        rnd = random.Random(42)
        paths = [os.path.join(root, "tree")]
        os.mkdir(paths[0])
        for i in range(1, self.dirs + 1):
            paths.append(os.path.join(paths[(i - 1) // WIDTH], f"d{i}"))
            os.mkdir(paths[-1])
        for j in range(self.files):
            # a prime stride spreads the files over the whole tree, not the first directories
            with open(os.path.join(paths[1 + (j * 7919) % self.dirs], f"f{j}"), "wb") as f:
                f.write(rnd.randbytes(rnd.randrange(0, 8193)))
            ctx.progress(j / self.files)


def build(scale):
    dirs, files = scaled(50_000, scale, least=16), scaled(10_000, scale, least=16)
    return [Group("tree", [MakeReadTree(dirs, files), w.Command("ls-lR", "ls -lR tree > /dev/null"),
                           w.Command("find", "find tree > /dev/null"), w.Command("du", "du -s tree > /dev/null"),
                           w.Command("tar", "tar cf - tree | wc -c > /dev/null", cost=1.5)],
                  data_bytes=dirs * 4 * KiB + files * 8 * KiB, inodes=dirs + files + 16)]


SUITE = Suite("readpath", __doc__, build, ["kernel-ext4-stock", "fuse2fs", "ext4lazy-ordered"],
              {"goals": "none from a paper: the read path of ext4lazy against the kernel and fuse2fs"},
              min_size=2 * GiB, partitions={})
