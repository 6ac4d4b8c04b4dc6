"""journal-size: the journal bottleneck (FAST'17 section 4.1, Figure 6).

CreateFiles with 100,000 files of 4 KiB in 60,000 directories (a breadth-first tree of depth 10) on ext4 with
the stock journal (mkfs's default) and with the large one (the paper's 10 GiB, scaled).  As in the paper the
time is the creation alone (the files fit in memory; syncfs and unmount are recorded apart, not in runtime_s).
Counts are multiplied by --scale.
"""
from .. import published
from .. import workloads as w
from ..core import GiB, KiB, Group, Suite, scaled
from ..shapes import depth10_width


def build(scale):
    files = scaled(100_000, scale, least=16)
    dirs = max(2, int(files * 0.6))
    # the paper's ext4-stock journal, 128 MiB: mkfs.ext4 1.47 gives a large partition 1 GiB, which no
    # 100,000-file run fills (measured: stock 13.9 s against the 10 GiB journal's 15.2 s)
    return [Group("journal", [w.MakeFiles("CreateFiles", "files", files, 4096, dirs, depth10_width(dirs),
                                          timing="work")],
                  data_bytes=(files + dirs) * 4 * KiB, inodes=files + dirs + 16,
                  stock_journal_mib=published.value("fast17.fig6.journal_sizes")["ext4-stock"])]


PAPER = {"fig6_s": published.per_system("fast17.fig6a.time"),
         "goals": "Paper (CMR, 100,000 files): 128 MiB journal ~460 s vs 10 GiB journal ~10 s (46x)."}

SUITE = Suite("journal-size", __doc__, build,
              ["kernel-ext4-stock", "kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"], PAPER, min_size=2 * GiB)
