"""The paper's microbenchmark workloads (ext4-lazy FAST'17 section 4.2.1), shared by the suites."""
import os
import shlex

from . import shapes
from .core import Workload, shell


class MakeTree(Workload):
    """MakeDirs: `dirs` directories in a breadth-first tree of depth <= 10 under `sub`, made by the workers."""

    def __init__(self, name, sub, dirs, width):
        self.name, self.sub, self.dirs, self.width = name, sub, dirs, width
        self.cost = 2.0

    def params(self):
        return {"dirs": self.dirs, "width": self.width, "depth": shapes.tree_depth(self.dirs, self.width)}

    def run(self, root, ctx):
        top = os.path.join(root, self.sub)
        os.mkdir(top)
        shapes.make_tree(top, self.dirs, self.width, ctx.pool, ctx.workers, ctx.timeout)


class MakeFiles(Workload):
    """CreateFiles: `files` files of `size` bytes round-robin over a breadth-first tree of `dirs` directories
    (at most `width` subdirectories each), the tree and the files made by the workers."""

    def __init__(self, name, sub, files, size, dirs, width, timing="total"):
        self.name, self.sub, self.files, self.size, self.dirs, self.width = name, sub, files, size, dirs, width
        self.timing, self.cost = timing, 3.0

    def params(self):
        return {"files": self.files, "file_size": self.size, "dirs": self.dirs, "width": self.width,
                "depth": shapes.tree_depth(self.dirs, self.width)}

    def run(self, root, ctx):
        top = os.path.join(root, self.sub)
        os.mkdir(top)
        shapes.make_tree(top, self.dirs, self.width, ctx.pool, ctx.workers, ctx.timeout)
        shapes.make_files(top, self.dirs, self.width, self.files, self.size, ctx.pool, ctx.workers, ctx.timeout)


class Command(Workload):
    """A traversal or removal as a shell command run in the mount point (cold cache: a fresh mount)."""

    def __init__(self, name, cmd, writes=False, cost=1.0):
        self.name, self.cmd, self.writes, self.cost = name, cmd, writes, cost

    def params(self):
        return {"command": self.cmd}

    def run(self, root, ctx):
        shell(self.cmd, root, ctx.timeout)


# GNU tar special-cases an archive on /dev/null (it skips reading file data), so the tarball goes through a pipe.
def list_tree(name, sub):
    return Command(name, f"ls -lR {sub} > /dev/null")


def find_tree(name, sub):
    return Command(name, f"find {sub} > /dev/null")


def tar_tree(name, sub):
    return Command(name, f"tar cf - {sub} | cat > /dev/null", cost=1.5)


def remove_tree(name, sub):
    return Command(name, f"rm -rf {sub}", writes=True, cost=1.5)


class Untar(Workload):
    """untar: `tar -xf` of a deterministic tarball of `src` (default /usr/include): the first `scale` x of its
    entries in sorted walk order (all of them at scale 1), made once under the run's work directory and keyed by
    what they hold, read into the page cache before the clock starts (the source is not measured)."""

    def __init__(self, name, src, scale):
        self.name, self.src, self.scale, self.cost = name, os.path.abspath(src), scale, 2.0
        self.info = None

    def params(self):
        return dict(self.info or {"source": self.src})

    def prepare(self, work):
        if self.info is None:
            self.info = shapes.tarball(self.src, self.scale, work)
        with open(self.info["tarball"], "rb") as f:
            while f.read(8 << 20):
                pass

    def run(self, root, ctx):
        shell(f"tar -xf {shlex.quote(self.info['tarball'])}", root, ctx.timeout)
