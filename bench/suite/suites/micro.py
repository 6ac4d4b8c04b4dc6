"""micro: the paper's eight microbenchmarks (FAST'17 section 4.2.1, Figures 7 and 11, Table 2).

Two groups, each on a fresh volume: MakeDirs (800,000 directories, a breadth-first tree of depth 10, i.e. width
4, made by 8 workers), ListDirs (`ls -lR`), TarDirs (a tarball of the tree), RemoveDirs (`rm -rf`); CreateFiles
(600,000 4 KiB files, two per directory in a breadth-first tree of at most 2 subdirectories per directory, so a
depth of ~18 below the top and ~19 to the files: the Filebench shape of width 2, depth ~20), FindFiles (`find`),
TarFiles, RemoveFiles.  Every count is multiplied by --scale.
"""
from .. import workloads as w
from ..core import GiB, KiB, Group, Suite, ceil_div, scaled
from ..shapes import depth10_width


def build(scale):
    dirs = scaled(800_000, scale, least=16)
    files = scaled(600_000, scale, least=16)
    fdirs = ceil_div(files, 2)
    block = 4 * KiB
    return [
        Group("dirs", [w.MakeTree("MakeDirs", "dirs", dirs, depth10_width(dirs)), w.list_tree("ListDirs", "dirs"),
                       w.tar_tree("TarDirs", "dirs"), w.remove_tree("RemoveDirs", "dirs")],
              data_bytes=dirs * block, inodes=dirs + 16),
        Group("files", [w.MakeFiles("CreateFiles", "files", files, 4096, fdirs, 2), w.find_tree("FindFiles", "files"),
                        w.tar_tree("TarFiles", "files"), w.remove_tree("RemoveFiles", "files")],
              data_bytes=(files + fdirs) * block, inodes=files + fdirs + 16),
    ]


# The paper's figures (ext4-lazy FAST'17; REFERENCE.md section 1).  Speed-ups are baseline time / lazy time.
PAPER = {
    "speedup": {
        "cmr": {"MakeDirs": (1.5, 2), "CreateFiles": (1.5, 2), "ListDirs": (3, 5), "FindFiles": (3, 5),
                "TarDirs": (3, 5), "RemoveDirs": (3, 5), "RemoveFiles": (3, 5), "TarFiles": (1, 1)},
        "smr-seagate": {"MakeDirs": (1.5, 2.5), "CreateFiles": (1.5, 2.5), "ListDirs": (13, 13)},
    },
    "cleaning_s": {"smr-seagate": {"MakeDirs": (846, 0), "RemoveDirs": (590, 10), "RemoveFiles": (366, 20)}},
    # Table 2, MiB at full scale on the CMR disk: (metadata reads, metadata writes, journal writes)
    "table2": {("MakeDirs", "baseline"): (143.7, 4631, 4735), ("MakeDirs", "lazy"): (144, 0, 4707),
               ("RemoveDirs", "baseline"): (4066.4, 322.4, 1119), ("RemoveDirs", "lazy"): (4066.4, 0, 472)},
    "goals": "CMR: MakeDirs and CreateFiles >= 1.5-2x faster lazy than baseline; ListDirs, FindFiles, TarDirs, "
             "RemoveDirs, RemoveFiles >= 3-5x. SMR: ListDirs >= 13x; cleaning time after MakeDirs 0 s for lazy.",
}

SUITE = Suite("micro", __doc__, build, ["kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"], PAPER,
              min_size=2 * GiB)
