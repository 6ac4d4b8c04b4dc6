"""writepath: the write path (issue #4; what bench/writepath.py measured): MakeDirs, CreateFiles and untar.

Three groups, each on a fresh volume per system: MakeDirs (20,000 directories, a breadth-first tree of depth 10,
made by the workers), CreateFiles (20,000 files of 4 KiB, 100 per directory, the directories and files made by
the workers), Untar (`tar -xf` of a tarball of /usr/include, see workloads.Untar).  The runtime is the
workload, syncfs and the unmount (everything on the image).  Counts x --scale (untar: its share of
/usr/include's entries).  The journal-size experiment the script also ran is the journal-size suite.
"""
from .. import workloads as w
from ..core import GiB, KiB, Group, Suite, ceil_div, scaled
from ..shapes import depth10_width

PER_DIR = 100
UNTAR_SRC = "/usr/include"


def build(scale):
    dirs, files = scaled(20_000, scale, least=16), scaled(20_000, scale, least=16)
    fdirs = ceil_div(files, PER_DIR)
    return [
        Group("makedirs", [w.MakeTree("MakeDirs", "dirs", dirs, depth10_width(dirs))], data_bytes=dirs * 4 * KiB,
              inodes=dirs + 16),
        Group("createfiles", [w.MakeFiles("CreateFiles", "files", files, 4096, fdirs, PER_DIR)],
              data_bytes=(files + fdirs) * 4 * KiB, inodes=files + fdirs + 16),
        untar_group(scale),
    ]


def untar_group(scale):
    # at most all of the source: 1 GiB of data and 100,000 inodes cover a Debian /usr/include
    return Group("untar", [w.Untar("Untar", UNTAR_SRC, scale)], data_bytes=int(GiB * min(1, scale)) + (64 << 20),
                 inodes=scaled(100_000, min(1, scale), least=1000))


SUITE = Suite("writepath", __doc__, build, ["kernel-ext4-stock", "fuse2fs", "ext4lazy-ordered", "ext4lazy-lazy"],
              {"goals": "issue #4: ext4lazy at least 3x faster than fuse2fs and at most 2x slower than the kernel"},
              min_size=2 * GiB, partitions={})
