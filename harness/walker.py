"""Canonical per-path records of a mounted tree (run as a subprocess so a hung FUSE daemon cannot hang pytest).

    python3 walker.py ROOT OUT.json [--no-content]      -> {"statfs": {...}, "records": {path: record}}

One record per path (relative to ROOT, "." for the root), with: type, mode, uid, gid, size, nlink, blocks,
atime/mtime/ctime in nanoseconds, rdev (major:minor) of device nodes, symlink target, sha256 of regular-file
content, every xattr (name -> value, hex when short, else length + sha256), and the set of hard-link
siblings.  Any OSError is recorded as the field's value ("!EIO ..."), never raised, so a damaged or
misbehaving file system yields a diff, not a crash.  Paths are bytes decoded with surrogateescape.
"""
import errno
import hashlib
import json
import os
import stat
import sys

TYPES = {stat.S_IFDIR: "dir", stat.S_IFREG: "reg", stat.S_IFLNK: "lnk", stat.S_IFCHR: "chr",
         stat.S_IFBLK: "blk", stat.S_IFIFO: "fifo", stat.S_IFSOCK: "sock"}


def err(e):
    return "!" + (errno.errorcode.get(e.errno, str(e.errno)) if isinstance(e, OSError) and e.errno else repr(e))


def xval(v):
    if len(v) <= 48:
        return "hex:" + v.hex()
    return f"len={len(v)} sha256:{hashlib.sha256(v).hexdigest()}"


def file_hash(p, bufsize=1 << 20):
    h = hashlib.sha256()
    n = 0
    with open(p, "rb", buffering=0) as f:
        while True:
            b = f.read(bufsize)
            if not b:
                break
            n += len(b)
            h.update(b)
    return f"{n}:{h.hexdigest()}"


def pread_sig(p, size):
    """sha256 of 12 reads at pseudo-random (offset, length) pairs, some unaligned, some across EOF: catches
    offset bugs that sequential reads miss.  Deterministic per (path basename, size)."""
    import random
    rnd = random.Random(hashlib.sha256(os.path.basename(p) + str(size).encode()).digest())
    h = hashlib.sha256()
    with open(p, "rb", buffering=0) as f:
        fd = f.fileno()
        for i in range(12):
            if size == 0 or i == 11:
                off = size + rnd.randrange(0, 5000)        # at or past EOF: must return b""
            elif i % 3 == 0:
                off = rnd.randrange(0, size) & ~4095        # block aligned
            else:
                off = rnd.randrange(0, size)
            n = rnd.choice([1, 17, 511, 4096, 4097, 65536 + 3, 300000])
            b = os.pread(fd, n, off)
            h.update(b"%d:%d:%d;" % (off, n, len(b)))
            h.update(b)
    return h.hexdigest()[:32]


def record(p, content=True):
    r = {}
    try:
        st = os.lstat(p)
    except OSError as e:
        return {"lstat": err(e)}, None
    t = TYPES.get(stat.S_IFMT(st.st_mode), "unknown")
    r["type"] = t
    r["mode"] = oct(st.st_mode)
    r["uid"] = st.st_uid
    r["gid"] = st.st_gid
    r["size"] = st.st_size
    r["nlink"] = st.st_nlink
    r["blocks"] = st.st_blocks
    r["atime"] = st.st_atime_ns
    r["mtime"] = st.st_mtime_ns
    r["ctime"] = st.st_ctime_ns
    if t in ("chr", "blk"):
        r["rdev"] = f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    if t == "lnk":
        try:
            r["target"] = os.fsdecode(os.readlink(p))
        except OSError as e:
            r["target"] = err(e)
    if t == "reg" and content:
        try:
            r["content"] = file_hash(p)
        except OSError as e:
            r["content"] = err(e)
        try:
            r["preads"] = pread_sig(p, st.st_size)
        except OSError as e:
            r["preads"] = err(e)
    try:
        names = sorted(os.listxattr(p, follow_symlinks=False))
        xa = {}
        for n in names:
            try:
                xa[n] = xval(os.getxattr(p, n, follow_symlinks=False))
            except OSError as e:
                xa[n] = err(e)
        r["xattrs"] = xa
    except OSError as e:
        r["xattrs"] = err(e)
    return r, st


def walk(root, content=True):
    root = os.fsencode(root)
    recs = {}
    inos = {}
    stack = [b"."]
    while stack:
        rel = stack.pop()
        p = root if rel == b"." else os.path.join(root, rel)
        r, st = record(p, content)
        key = os.fsdecode(rel)
        recs[key] = r
        if st is None:
            continue
        if r["type"] != "dir":
            if st.st_nlink > 1:
                inos.setdefault(st.st_ino, []).append(key)
            continue
        try:
            names = os.listdir(p)
        except OSError as e:
            r["listdir"] = err(e)
            continue
        r["entries"] = len(names)
        for n in names:
            stack.append(n if rel == b"." else os.path.join(rel, n))
    for paths in inos.values():
        paths.sort()
        for k in paths:
            recs[k]["links"] = paths
    return recs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    content = "--no-content" not in sys.argv
    try:
        sv = os.statvfs(args[0])
        statfs = {k: getattr(sv, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                             "f_ffree", "f_namemax")}
    except OSError as e:
        statfs = {"error": err(e)}
    recs = walk(args[0], content)
    with open(args[1], "w") as f:
        json.dump({"statfs": statfs, "records": recs}, f, sort_keys=True)
    print(len(recs))


if __name__ == "__main__":
    main()
