"""micro: the paper's eight microbenchmarks (FAST'17 section 4.2.1, Figures 7 and 11, Table 2).

Two groups, each on a fresh volume: MakeDirs (800,000 directories, a breadth-first tree of depth 10, i.e. width
4, made by 8 workers), ListDirs (`ls -lR`), TarDirs (a tarball of the tree), RemoveDirs (`rm -rf`); CreateFiles
(600,000 4 KiB files, two per directory in a breadth-first tree of at most 2 subdirectories per directory, so a
depth of ~18 below the top and ~19 to the files: the Filebench shape of width 2, depth ~20), FindFiles (`find`),
TarFiles, RemoveFiles.  Every count is multiplied by --scale.
"""
from .. import published
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


# The paper's figures (bench/suite/published.py).  Speed-ups are baseline time / lazy time, as (low, high).
CREATE, TRAVERSAL = published.span("fast17.fig7.speedup_create"), published.span("fast17.fig7.speedup_traversal")


def _pair(key):
    """(ext4-baseline, ext4-lazy) of a per-system entry."""
    v = published.value(key)
    return v["ext4-baseline"], v["ext4-lazy"]


PAPER = {
    "speedup": {
        # TarFiles: no number, "putting the metadata at the center wins slightly" (section 4.4) read as 1x
        "cmr": {"MakeDirs": CREATE, "CreateFiles": CREATE, "TarFiles": (1, 1),
                **{w: TRAVERSAL for w in ("ListDirs", "FindFiles", "TarDirs", "RemoveDirs", "RemoveFiles")}},
        "smr-seagate": {w: published.span("fast17.fig11.speedup_create") for w in ("MakeDirs", "CreateFiles")}
        | {"ListDirs": published.span("fast17.fig11.speedup_listdirs")},
    },
    "cleaning_s": {"smr-seagate": {w: _pair(f"fast17.fig11.cleaning_{w.lower()}")
                                   for w in ("MakeDirs", "RemoveDirs", "RemoveFiles")}},
    # Table 2, MiB at full scale on the CMR disk
    "table2": {(w, m): v for w, stem in (("MakeDirs", "makedirs"), ("RemoveDirs", "removedirs"))
               for m, v in published.rows([f"fast17.table2.{stem}.{k}" for k in
                                           ("metadata_reads", "metadata_writes", "journal_writes")]).items()},
    "goals": "CMR: MakeDirs and CreateFiles >= 1.5-2x faster lazy than baseline; ListDirs, FindFiles, TarDirs, "
             "RemoveDirs, RemoveFiles >= 3-5x. SMR: ListDirs >= 13x; cleaning time after MakeDirs 0 s for lazy.",
}

SUITE = Suite("micro", __doc__, build, ["kernel-ext4-baseline", "ext4lazy-ordered", "ext4lazy-lazy"], PAPER,
              min_size=2 * GiB)
