"""Directory-tree shapes and the parallel workers that make them, and the untar suites' tarball (shared by the
suites)."""
import ctypes
import hashlib
import os
import random
import subprocess

_libc = ctypes.CDLL(None, use_errno=True)


def depth10_width(n, depth=10):
    """The smallest width w >= 2 for which a tree of `depth` levels below the root holds n directories."""
    w = 2
    while sum(w ** k for k in range(1, depth + 1)) < n:
        w += 1
    return w


def bfs_tree(n, width):
    """Relative paths of n directories made breadth-first, at most `width` children each, parents first."""
    paths = ["."]
    for i in range(1, n + 1):
        parent = paths[(i - 1) // width]
        paths.append("d%d" % i if parent == "." else parent + "/d%d" % i)
    return paths[1:]


def tree_depth(n, width):
    depth, level, total = 0, 1, 0
    while total < n:
        level *= width
        total += level
        depth += 1
    return depth


def split_tree(n, width, workers):
    """The breadth-first tree of n directories as a serial prefix (the top levels, down to the first level with
    at least 4 x workers directories, made by the parent) and one list of whole subtrees per worker."""
    paths = bfs_tree(n, width)
    if workers <= 1 or n == 0:
        return paths, []
    level_end, size = 0, 1          # directory i (1-based) has parent (i-1)//width
    while level_end < n:
        size *= width
        level_end = min(n, level_end + size)
        if size >= 4 * workers:
            break
    group, lists = {}, [[] for _ in range(workers)]
    for i in range(level_end + 1, n + 1):
        p = (i - 1) // width
        group[i] = p if p <= level_end else group[p]
        lists[group[i] % workers].append(paths[i - 1])
    return paths[:level_end], [x for x in lists if x]


def mkdirs(args):
    """Worker: make the directories `rel` (parents first) under `root`."""
    root, rel = args
    for r in rel:
        os.mkdir(os.path.join(root, r))


def create_files(args):
    """Worker: create the files `rel_files` under `root`, each `size` bytes of seeded random data."""
    root, rel_files, size, seed = args
    data = random.Random(seed).randbytes(size)
    for r in rel_files:
        fd = os.open(os.path.join(root, r), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            if data:
                os.write(fd, data)
        finally:
            os.close(fd)


def make_tree(root, dirs, width, pool, workers, timeout):
    """Make the breadth-first tree of `dirs` directories under root, the subtrees spread over the pool."""
    serial, lists = split_tree(dirs, width, workers)
    mkdirs((root, serial))
    if lists:
        if pool is None:
            for x in lists:
                mkdirs((root, x))
        else:
            pool.map_async(mkdirs, [(root, x) for x in lists], chunksize=1).get(timeout)


def make_files(root, dirs, width, files, file_size, pool, workers, timeout):
    """Files f0..f(files-1) round-robin over the breadth-first tree's directories, split over the workers."""
    tree = bfs_tree(dirs, width)
    names = [f"{tree[j % len(tree)]}/f{j}" if tree else f"f{j}" for j in range(files)]
    parts = [(root, names[w::workers], file_size, 100 + w) for w in range(max(1, workers))]
    if pool is None:
        for p in parts:
            create_files(p)
    else:
        pool.map_async(create_files, parts, chunksize=1).get(timeout)


def syncfs(path):
    """Make the file system under `path` durable: syncfs(2), then fsync(2) of the directory.  On a FUSE mount
    syncfs never reaches the daemon (the kernel sends FUSE_SYNCFS to virtiofs only) while fsync does, and
    ext4lazy makes the whole volume durable on any fsync; without it, the paper's Postmark "sync after creating
    the working set" made ext4lazy write nothing and spared it the files the transactions then delete.  On a
    kernel file system the fsync finds nothing left to write."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _libc.syncfs(fd) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"syncfs({path}): {os.strerror(e)}")
        os.fsync(fd)
    finally:
        os.close(fd)


def tarball(src, scale, work):
    """A deterministic tarball of the first `scale` x of `src`'s entries (directories before what they hold,
    names sorted; all of them at scale >= 1), cached under `work` and keyed by what those entries are now; its
    description (JSON-able)."""
    entries = []
    base = os.path.basename(src.rstrip("/"))
    for top, dnames, fnames in os.walk(src):
        dnames.sort()
        rel = os.path.relpath(top, os.path.dirname(src.rstrip("/")))
        entries.append(rel)
        # symbolic links to directories are listed by os.walk as directories but not entered: keep them as names
        entries += [os.path.join(rel, f) for f in sorted(fnames + [d for d in dnames
                                                                    if os.path.islink(os.path.join(top, d))])]
    keep = entries if scale >= 1 else entries[:max(16, int(round(len(entries) * scale)))]
    h = hashlib.sha256()
    parent = os.path.dirname(src.rstrip("/"))
    for e in keep:
        st = os.lstat(os.path.join(parent, e))
        h.update(f"{e}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    tar = os.path.join(work, f"untar-{base}-{len(keep)}-{h.hexdigest()[:10]}.tar")
    if not os.path.exists(tar):
        lst = tar + ".list"
        with open(lst, "w") as f:
            f.write("\n".join(keep) + "\n")
        p = subprocess.run(["tar", "--no-recursion", "--numeric-owner", "--owner=0", "--group=0", "-cf",
                            tar + ".tmp", "-C", parent, "-T", lst], capture_output=True, text=True, timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"tar of {src} failed rc={p.returncode}: {p.stderr.strip()[-400:]}")
        os.replace(tar + ".tmp", tar)
        os.unlink(lst)
    return {"source": src, "tarball": tar, "entries": len(keep), "entries_in_source": len(entries),
            "tar_bytes": os.path.getsize(tar)}
