"""untar: writepath's Untar alone, for A/B runs of two builds (what bench/untar_ab.sh did).

One group: `tar -xf` of a tarball of /usr/include (workloads.Untar) on a fresh volume per system; with
`--repeat N` the systems alternate within every repetition, so a change smaller than the machine's run-to-run
spread shows in the mean and the per-round ratios.  Two builds: name each as a system with its binary,
`--systems ext4lazy-ordered@/path/a,ext4lazy-ordered@/path/b` (or kernel-ext4-stock against one).
"""
from ..core import GiB, Suite
from .writepath import untar_group

SUITE = Suite("untar", __doc__, lambda scale: [untar_group(scale)], ["kernel-ext4-stock", "ext4lazy-ordered"],
              {"goals": "issue #4: at most 2x the kernel's time"}, min_size=2 * GiB, partitions={})
