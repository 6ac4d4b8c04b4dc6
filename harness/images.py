"""Image builders: mkfs an image, populate it through the kernel's ext4 (loop mount), check it with e2fsck.

Each variant is one mkfs configuration plus a list of tree "parts".  Images are built once per session (or
reused across sessions from EXT4LAZY_TEST_CACHE, keyed by a hash of the spec and of this file), and the kernel's
view of each (the oracle) is walked once and cached beside it.
"""
import errno
import hashlib
import json
import os
import random
import re
import shutil
import socket
import stat
import subprocess
import time

from . import util

GiB = 1 << 30
MiB = 1 << 20


class Variant:
    def __init__(self, name, mkfs, opts=(), size=GiB, parts=("standard",), big=False, doc="", optional=None):
        self.name, self.mkfs, self.opts, self.size, self.parts, self.big, self.doc = (
            name, mkfs, list(opts), size, list(parts), big, doc)
        # a feature outside the design's baseline: refusing it with an "unsupported" error is an xfail, not a failure
        self.optional = optional

    def key(self):
        return json.dumps([self.name, self.mkfs, self.opts, self.size, self.parts])


VARIANTS = {v.name: v for v in [
    Variant("default", "mkfs.ext4", doc="e2fsprogs 1.47 defaults (4 KiB blocks, 256-byte inodes, csum, 64bit)"),
    Variant("b1024", "mkfs.ext4", ["-b", "1024"]),
    Variant("b2048", "mkfs.ext4", ["-b", "2048"]),
    Variant("i128", "mkfs.ext4", ["-I", "128"], doc="no in-inode xattrs, no nanoseconds, no extra epoch bits"),
    Variant("i1024", "mkfs.ext4", ["-I", "1024"]),
    Variant("inline_data", "mkfs.ext4", ["-O", "inline_data"]),
    Variant("nojournal", "mkfs.ext4", ["-O", "^has_journal"]),
    Variant("no64bit", "mkfs.ext4", ["-O", "^64bit"]),
    Variant("nocsum", "mkfs.ext4", ["-O", "^metadata_csum"]),
    Variant("noextent", "mkfs.ext4", ["-O", "^extent,^64bit"], doc="ext4 features but block-mapped files"),
    Variant("ext2", "mkfs.ext2", [], doc="no journal, block maps, no flex_bg"),
    Variant("ext3", "mkfs.ext3", [], parts=("standard", "far4g"), big=True,
            doc="journal, block maps; a >4 GiB sparse file (triple indirect)"),
    Variant("ea_inode", "mkfs.ext4", ["-O", "ea_inode"], parts=("standard", "ea_inode"), optional="ea_inode"),
    Variant("large_dir", "mkfs.ext4", ["-b", "1024", "-O", "large_dir", "-N", "200000"], size=2 * GiB,
            parts=("standard", "large_dir"), big=True, doc="1 KiB blocks, 80,000 250-byte names: 3-level htree"),
    Variant("big", "mkfs.ext4", ["-N", "250000"], size=8 * GiB, parts=("standard", "huge_dir", "far4g"), big=True,
            doc="100,000-entry directory (66,000 subdirs: dir_nlink) and a 5 GiB sparse file"),
]}


# ---------------------------------------------------------------------------------------------- fs info
def fs_info(image):
    out = util.run(["dumpe2fs", "-h", image]).stdout
    info = {}
    for line in out.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    return info


def features(info):
    return set(info.get("Filesystem features", "").split())


# ---------------------------------------------------------------------------------------------- tree parts
def _write(path, data, mode=0o644):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def part_standard(root, ctx):
    rnd = random.Random(1234)
    bs, feats, isize = ctx["bs"], ctx["features"], ctx["isize"]
    J = os.path.join

    # deep trees: 60 levels of short names, and 14 levels of 250-byte names (path ~3.5 KiB)
    p = J(root, "deep")
    for i in range(60):
        p = J(p, "d%d" % i)
    os.makedirs(p)
    _write(J(p, "bottom"), b"bottom of a 60-deep tree\n")
    p = J(root, "deeplong")
    for i in range(14):
        p = J(p, ("L%02d_" % i).ljust(250, "z"))
    os.makedirs(p)
    _write(J(p, "f"), b"long path\n")

    # names of every length 1..255 bytes, UTF-8 names, non-UTF-8 bytes
    d = J(root, "names")
    os.mkdir(d)
    for n in range(1, 256):
        _write(J(d, ("n%d_" % n).ljust(n, "x")[:n]), b"%d" % n)
    for s in ["é", "日本語のファイル名", "emoji_😀🎉", "Ω" * 127, "日" * 85, "a\u0301 combining", "space in name",
              "new\nline", "back\\slash", "tab\tname", ".hidden", "...", "-dash", "quote'\"", "percent%s%n"]:
        _write(J(d, s), s.encode())
    for b in [b"\xff\xfe-invalid-utf8", b"latin1-\xe9t\xe9", b"\x01\x02ctl"]:
        _write(os.path.join(os.fsencode(d), b), b)

    # hard links: one file with 5 names in 5 dirs, one with 300 names in one dir, a hard-linked fifo
    d = J(root, "links")
    os.mkdir(d)
    _write(J(d, "a"), b"hard linked\n")
    for i in range(5):
        os.mkdir(J(d, "sub%d" % i))
        os.link(J(d, "a"), J(d, "sub%d" % i, "a%d" % i))
    os.mkdir(J(d, "many"))
    _write(J(d, "many", "m0"), b"many links\n")
    for i in range(1, 300):
        os.link(J(d, "many", "m0"), J(d, "many", "m%d" % i))
    os.mkfifo(J(d, "fifo"))
    os.link(J(d, "fifo"), J(d, "fifo2"))

    # symlinks of every length 1..min(4000, bs-1): fast (< 60 bytes, in i_block) and slow (a block)
    d = J(root, "symlinks")
    os.mkdir(d)
    maxlen = min(4000, bs - 1)
    pat = "../abcdefghij/KLMNOPQRST/0123456789/" * 120
    for n in range(1, maxlen + 1):
        t = (("%d:" % n) + pat)[:n]
        os.symlink(t, J(d, "s%04d" % n))
    os.symlink("../small/f10", J(d, "to_file"))
    os.symlink("../names", J(d, "to_dir"))
    os.symlink("/nonexistent/absolute", J(d, "dangling_abs"))
    os.symlink("日本/ü", J(d, "utf8_target"))

    # small files 0..130 bytes (inline candidates) and a few around block boundaries
    d = J(root, "small")
    os.mkdir(d)
    for n in list(range(0, 131)) + [bs - 1, bs, bs + 1, 3 * bs + 5, 65536, MiB + 3]:
        _write(J(d, "f%d" % n), rnd.randbytes(n))
    _write(J(d, "text"), b"hello, world\n" * 3)

    # sparse files, fallocated (unwritten) extents over stale data, and a file with > 1360 extents
    d = J(root, "sparse")
    os.mkdir(d)
    junk = J(root, "junk")
    _write(junk, rnd.randbytes(8 * MiB))
    os.sync()
    os.unlink(junk)
    os.sync()
    fd = os.open(J(d, "hole_start"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, rnd.randbytes(4096), MiB)
    os.close(fd)
    fd = os.open(J(d, "hole_end"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, rnd.randbytes(4096), 0)
    os.ftruncate(fd, 10 * MiB)
    os.close(fd)
    fd = os.open(J(d, "all_hole"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.ftruncate(fd, 100 * MiB)
    os.close(fd)
    fd = os.open(J(d, "odd"), os.O_WRONLY | os.O_CREAT, 0o644)
    for off in (12345, MiB + 7, 3 * MiB - 1, 5 * MiB + 4095):
        os.pwrite(fd, rnd.randbytes(777), off)
    os.close(fd)
    fd = os.open(J(d, "stride2"), os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(2000):
        os.pwrite(fd, rnd.randbytes(bs), 2 * i * bs)
    os.close(fd)
    # far data: 1 KiB blocks -> triple-indirect region starts at ~64.3 MiB, 2 KiB at ~513 MiB
    far = {1024: 70 * MiB, 2048: 600 * MiB}.get(bs, GiB + 12345)
    fd = os.open(J(d, "far"), os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, rnd.randbytes(5000), far)
    os.close(fd)
    if "extent" in feats:
        fd = os.open(J(d, "falloc"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.posix_fallocate(fd, 0, 4 * MiB)               # unwritten extents over freed random data
        os.pwrite(fd, rnd.randbytes(5000), MiB + 100)    # splits an unwritten extent
        os.close(fd)
        fd = os.open(J(d, "falloc_keep"), os.O_WRONLY | os.O_CREAT, 0o644)
        os.pwrite(fd, rnd.randbytes(100), 0)
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        FALLOC_FL_KEEP_SIZE = 1
        if libc.fallocate(fd, FALLOC_FL_KEEP_SIZE, ctypes.c_long(0), ctypes.c_long(2 * MiB)) != 0:
            raise OSError(ctypes.get_errno(), "fallocate KEEP_SIZE")
        os.close(fd)

    # physically fragmented, logically contiguous: two files written block by block with fsync in between
    d = J(root, "frag")
    os.mkdir(d)
    fa = os.open(J(d, "a"), os.O_WRONLY | os.O_CREAT, 0o644)
    fb = os.open(J(d, "b"), os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(200):
        os.pwrite(fa, rnd.randbytes(bs), i * bs)
        os.fsync(fa)
        os.pwrite(fb, rnd.randbytes(bs), i * bs)
        os.fsync(fb)
    os.close(fa)
    os.close(fb)

    # special files
    d = J(root, "special")
    os.mkdir(d)
    os.mkfifo(J(d, "fifo"), 0o640)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(J(d, "sock"))
    s.close()
    for name, kind, maj, mnr in [("null", stat.S_IFCHR, 1, 3), ("tty", stat.S_IFCHR, 4, 64),
                                 ("whiteout", stat.S_IFCHR, 0, 0), ("bigchr", stat.S_IFCHR, 4095, 1048575),
                                 ("loop0", stat.S_IFBLK, 7, 0), ("sda1", stat.S_IFBLK, 8, 1),
                                 ("bigblk", stat.S_IFBLK, 300, 70000), ("mid", stat.S_IFBLK, 255, 255),
                                 ("mid2", stat.S_IFCHR, 256, 256)]:
        os.mknod(J(d, name), kind | 0o660, os.makedev(maj, mnr))

    # xattrs: small (in-inode when there is room), many (spill to the external block), one big value,
    # shared blocks (identical sets on two files), on dirs / symlinks / fifos, and POSIX ACLs
    d = J(root, "xattr")
    os.mkdir(d)
    _write(J(d, "small"), b"x")
    os.setxattr(J(d, "small"), "user.a", b"1")
    os.setxattr(J(d, "small"), "trusted.t", b"trusted value")
    os.setxattr(J(d, "small"), "security.s", b"sec")
    os.setxattr(J(d, "small"), "user.empty", b"")
    for f in ("spill", "spill_twin"):
        _write(J(d, f), b"spill")
        for i in range(8):
            os.setxattr(J(d, f), "user.k%02d" % i, bytes([65 + i]) * 40)
        os.setxattr(J(d, f), "trusted.k", b"T" * 30)
    _write(J(d, "bigval"), b"big")
    os.setxattr(J(d, "bigval"), "user.big", bytes(rnd.randbytes(bs // 2)))
    os.mkdir(J(d, "dir"))
    os.setxattr(J(d, "dir"), "user.on_dir", b"dir value")
    os.symlink("target", J(d, "link"))
    os.setxattr(J(d, "link"), "trusted.on_link", b"link value", follow_symlinks=False)
    os.mkfifo(J(d, "fifo"))
    os.setxattr(J(d, "fifo"), "trusted.on_fifo", b"fifo value")
    _write(J(d, "acl"), b"acl")
    util.run(["setfacl", "-m", "u:1000:rwx,g:2000:r-x,m::rwx", J(d, "acl")])
    os.mkdir(J(d, "acl_dir"))
    util.run(["setfacl", "-d", "-m", "u:1001:rwx", J(d, "acl_dir")])
    util.run(["setfacl", "-m", "u:1002:r", J(d, "acl_dir")])
    _write(J(d, "utf8_name"), b"u")
    os.setxattr(J(d, "utf8_name"), "user.日本語", "値".encode())
    os.setxattr(J(d, "utf8_name"), "user." + "n" * 250, b"long name")

    # timestamps: nanoseconds, pre-1970, around 2038, beyond (extra epoch bits), on dirs and symlinks
    d = J(root, "times")
    os.mkdir(d)
    ts = [(0, 0), (1, 999_999_999), (123_456_789_123_456_789 // 100, 1_000_000_000_123_456_789),
          (-1_000_000_000, -123_456_789_000), (-(2 ** 31) * 10 ** 9, 2 ** 31 * 10 ** 9 - 1),
          ((2 ** 31 - 1) * 10 ** 9 + 5, (2 ** 31) * 10 ** 9 + 7), (2 ** 33 * 10 ** 9 + 11, 2 ** 32 * 10 ** 9 + 3),
          (1_700_000_000_000_000_001, 1_700_000_000_999_999_999)]
    for i, (a, m) in enumerate(ts):
        _write(J(d, "t%d" % i), b"t")
        os.utime(J(d, "t%d" % i), ns=(a, m))
    os.mkdir(J(d, "dir"))
    os.symlink("x", J(d, "link"))
    os.utime(J(d, "link"), ns=(1_500_000_000_000_000_042, 1_400_000_000_000_000_042), follow_symlinks=False)

    # modes and owners
    d = J(root, "perm")
    os.mkdir(d)
    modes = sorted({0, 0o7777, 0o4755, 0o2755, 0o1777, 0o644, 0o600, 0o111, 0o6711} | {1 << i for i in range(12)})
    for m in modes:
        _write(J(d, "m%04o" % m), b"m")
        os.chmod(J(d, "m%04o" % m), m)
        os.mkdir(J(d, "d%04o" % m))
        os.chmod(J(d, "d%04o" % m), m)
    for uid, gid in [(0, 0), (1000, 1000), (65535, 65534), (65536, 65537), (100000, 200000),
                     (2 ** 32 - 2, 2 ** 31), (12345, 0)]:
        f = J(d, "u%d_g%d" % (uid, gid))
        _write(f, b"o")
        os.chown(f, uid, gid)
    os.symlink("t", J(d, "lnk_owned"))
    os.chown(J(d, "lnk_owned"), 4242, 4343, follow_symlinks=False)

    # empty things and a directory with many subdirectories (nlink) and a 3,000-entry htree directory
    d = J(root, "empty")
    os.makedirs(J(d, "dir"))
    os.makedirs(J(d, "nested", "a", "b", "c"))
    _write(J(d, "file"), b"")
    d = J(root, "subdirs")
    os.mkdir(d)
    for i in range(100):
        os.mkdir(J(d, "s%d" % i))
    d = J(root, "dir3000")
    os.mkdir(d)
    for i in range(3000):
        _write(J(d, "entry_%05d_%s" % (i, "q" * (i % 40))), b"" if i % 3 else b"%d" % i)
    # a directory that grew then shrank (empty blocks, deleted entries in the middle of blocks)
    d = J(root, "shrunk")
    os.mkdir(d)
    for i in range(500):
        _write(J(d, "e%04d" % i), b"")
    for i in range(500):
        if i % 7:
            os.unlink(J(d, "e%04d" % i))
    os.utime(root, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))


def part_far4g(root, ctx):
    """A file of size 5 GiB + 17 with a few data blocks, some above 4 GiB."""
    rnd = random.Random(99)
    fd = os.open(os.path.join(root, "sparse5g"), os.O_WRONLY | os.O_CREAT, 0o644)
    for off in (0, 4 * GiB - 4096, 4 * GiB + 123, 5 * GiB + 17 - 1000):
        os.pwrite(fd, rnd.randbytes(1000), off)
    os.close(fd)


def part_ea_inode(root, ctx):
    f = os.path.join(root, "ea_inode_file")
    _write(f, b"x")
    os.setxattr(f, "user.huge", random.Random(5).randbytes(60000))
    os.setxattr(f, "user.huge2", b"H" * 20000)


def part_large_dir(root, ctx):
    d = os.path.join(root, "large")
    os.mkdir(d)
    for i in range(80000):
        fd = os.open(os.path.join(d, ("%06d_" % i).ljust(250, "w")), os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)


def part_huge_dir(root, ctx):
    d = os.path.join(root, "huge")
    os.mkdir(d)
    for i in range(66000):
        os.mkdir(os.path.join(d, "d%06d" % i))
    for i in range(34000):
        fd = os.open(os.path.join(d, "f%06d_%s" % (i, "k" * (i % 50))), os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)


PARTS = {"standard": part_standard, "far4g": part_far4g, "ea_inode": part_ea_inode,
         "large_dir": part_large_dir, "huge_dir": part_huge_dir}


# ---------------------------------------------------------------------------------------------- checks
def extent_depth(image, path):
    out = util.run(["debugfs", "-R", f"ex {path}", image]).stdout
    m = re.search(r"^\s*\d+/\s*(\d+)", out, re.M)
    return int(m.group(1)) if m else 0


def htree_levels(image, path):
    out = util.run(["debugfs", "-R", f"htree {path}", image]).stdout
    m = re.search(r"Indirect levels: (\d+)", out)
    return int(m.group(1)) if m else -1


def self_check(variant, image, ctx):
    """Assert the image really contains what the variant promises (else the tests prove nothing)."""
    problems = []
    feats = ctx["features"]
    if "extent" in feats and extent_depth(image, "/sparse/stride2") < 2:
        problems.append("/sparse/stride2 extent tree depth < 2")
    if "dir_index" in feats and htree_levels(image, "/dir3000") < 0:
        problems.append("/dir3000 is not an htree")
    if "large_dir" in variant.parts and htree_levels(image, "/large") < 2:
        problems.append(f"/large htree has {htree_levels(image, '/large')} indirect levels, wanted 2 (3 levels)")
    if "inline_data" in feats:
        out = util.run(["debugfs", "-R", "stat /small/f10", image]).stdout
        if "Size of inline data" not in out:
            problems.append("/small/f10 is not inline")
    p = subprocess.run(["e2fsck", "-fn", image], capture_output=True, text=True)
    if p.returncode != 0:
        problems.append("e2fsck -fn: rc=%d %s" % (p.returncode, p.stdout[-1500:]))
    if problems:
        raise AssertionError(f"image {variant.name} failed its self-check: " + "; ".join(problems))


# ---------------------------------------------------------------------------------------------- build
def mkfs(variant_or_cmd, image, size, opts=()):
    if os.path.exists(image):
        os.unlink(image)
    with open(image, "wb") as f:
        f.truncate(size)
    util.run([variant_or_cmd, "-F", "-q"] + list(opts) + [image])


class KernelMount:
    """Context manager: mount `image` with the kernel through a (writable) loop device; always unmount + detach.

    The loop device is writable even for "ro" mounts, so a ro mount of a needs_recovery image replays the journal
    (as it would on a disk); use "ro,noload" to keep the image untouched."""

    def __init__(self, image, mnt, opts="rw"):
        self.image, self.mnt, self.opts, self.dev = image, mnt, opts, None

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        self.dev = util.run(["losetup", "-f", "--show", self.image]).stdout.strip()
        try:
            util.run(["mount", "-t", "ext4", "-o", self.opts, self.dev, self.mnt])
        except Exception:
            subprocess.run(["losetup", "-d", self.dev], capture_output=True)
            raise
        return self.mnt

    def __exit__(self, *exc):
        p = subprocess.run(["umount", self.mnt], capture_output=True, text=True)
        if p.returncode != 0:
            util.force_unmount(self.mnt)
        subprocess.run(["losetup", "-d", self.dev], capture_output=True)
        util.detach_loops(self.image)


def build(variant, image, workdir):
    t0 = time.time()
    mkfs(variant.mkfs, image, variant.size, variant.opts)
    info = fs_info(image)
    ctx = {"bs": int(info["Block size"]), "isize": int(info.get("Inode size", "128")), "features": features(info)}
    mnt = os.path.join(workdir, "build-mnt")
    with KernelMount(image, mnt) as root:
        for part in variant.parts:
            PARTS[part](root, ctx)
    self_check(variant, image, ctx)
    return time.time() - t0


# Bump when what the builders put into images changes (the image cache is keyed by variant spec + this).
BUILDER_VERSION = 1
_WALKER_HASH = None


def walker_hash():
    """Kernel walks are cached per walker version."""
    global _WALKER_HASH
    if _WALKER_HASH is None:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "walker.py"), "rb") as fh:
            _WALKER_HASH = hashlib.sha256(fh.read()).hexdigest()[:8]
    return _WALKER_HASH


class ImageStore:
    """Builds images once and caches the kernel's walk of each."""

    def __init__(self, root, persistent=False):
        self.root, self.persistent = root, persistent
        os.makedirs(root, exist_ok=True)
        self.timings = {}
        self._kernel = {}     # in memory: the oracle must describe the very image the implementation reads

    def _base(self, variant):
        k = hashlib.sha256((variant.key() + str(BUILDER_VERSION)).encode()).hexdigest()[:10]
        return os.path.join(self.root, f"{variant.name}-{k}")

    def image(self, variant):
        base = self._base(variant)
        img = base + ".img"
        done = base + ".built"
        if not os.path.exists(done):
            self.timings[variant.name] = build(variant, img, self.root)
            open(done, "w").close()
        return img

    def kernel_walk(self, variant):
        """The kernel's view of the image: {"statfs": ..., "records": ...} (walked once, cached)."""
        from . import compare
        if variant.name in self._kernel:
            return self._kernel[variant.name]
        img = self.image(variant)
        out = self._base(variant) + f".kernel-{walker_hash()}.json"
        if not os.path.exists(out):
            mnt = os.path.join(self.root, "kernel-mnt")
            with KernelMount(img, mnt, "ro,noload"):
                compare.walk(mnt, out + ".tmp")
            os.rename(out + ".tmp", out)
        with open(out) as f:
            self._kernel[variant.name] = json.load(f)
        return self._kernel[variant.name]

    def cleanup(self):
        if not self.persistent:
            shutil.rmtree(self.root, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- recovery
def build_needs_recovery(workdir):
    """An image whose journal must be replayed: copied (cp --sparse=always) while a kernel mount is live.

    Returns (image, info) where info says what the journal holds.  The tree is changed in several synced
    steps (creates, a delete of a whole directory so its blocks get revoked, renames, xattrs, truncates,
    a rewrite), so replay matters for directories, inodes, bitmaps and extent trees.
    """
    src = os.path.join(workdir, "recovery-src.img")
    img = os.path.join(workdir, "recovery.img")
    mkfs("mkfs.ext4", src, GiB)
    mnt = os.path.join(workdir, "recovery-build-mnt")
    rnd = random.Random(7)
    km = KernelMount(src, mnt, "rw,commit=600")   # no timer commits: only our syncs commit
    root = km.__enter__()
    try:
        J = os.path.join
        def commit():
            # fsync commits the running jbd2 transaction to the journal only; sync(2)/syncfs(2) would also write
            # the metadata home (they flush the block device), making replay a no-op
            fd = os.open(root, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)

        os.makedirs(J(root, "base", "sub"))
        for i in range(50):
            _write(J(root, "base", "f%d" % i), rnd.randbytes(100 * i))
        os.sync()                                   # the base tree is home
        # T1: a directory full of entries; T2: it is deleted (its blocks are freed and revoked)
        os.mkdir(J(root, "doomed"))
        for i in range(400):
            _write(J(root, "doomed", "x%03d" % i), b"")
        commit()
        shutil.rmtree(J(root, "doomed"))
        commit()
        # T3: the freed blocks get reused; renames, xattrs, truncation, links, symlinks, deletes
        os.mkdir(J(root, "after"))
        for i in range(300):
            _write(J(root, "after", "g%03d" % i), rnd.randbytes(3000))
        os.rename(J(root, "base", "f1"), J(root, "after", "renamed_f1"))
        os.setxattr(J(root, "base", "f2"), "user.rec", b"recovered xattr")
        os.truncate(J(root, "base", "f49"), 10)
        os.link(J(root, "base", "f3"), J(root, "after", "link_f3"))
        os.symlink("x" * 200, J(root, "after", "slowlink"))
        os.utime(J(root, "base", "f4"), ns=(1_234_567_890_123_456_789, 1_234_567_890_987_654_321))
        for i in range(0, 50, 5):
            os.unlink(J(root, "base", "f%d" % i))
        for f in os.listdir(J(root, "after")):     # data of the new files, then the commit
            if not os.path.isfile(J(root, "after", f)) or os.path.islink(J(root, "after", f)):
                continue
            fd = os.open(J(root, "after", f), os.O_RDONLY)
            os.fdatasync(fd)
            os.close(fd)
        commit()
        util.run(["cp", "--sparse=always", src, img])
    finally:
        km.__exit__(None, None, None)
    feats = features(fs_info(img))
    logdump = util.run(["debugfs", "-R", "logdump", img], check=False).stdout
    info = {"needs_recovery": "needs_recovery" in feats,
            "transactions": len(re.findall(r"Found expected sequence \d+, type 2 \(commit block\)", logdump)),
            "revokes": len(re.findall(r"revoke table", logdump))}
    os.unlink(src)
    return img, info


# ---------------------------------------------------------------------------------------------- small images
def build_small(image, workdir, opts=(), size=256 * MiB):
    """A small image for CLI and corruption tests: a directory, an inode with siblings in the same
    inode-table block, a file with an extent tree of depth 1, and an `other/` tree that must stay readable."""
    mkfs("mkfs.ext4", image, size, opts)
    rnd = random.Random(3)
    mnt = os.path.join(workdir, "small-build-mnt")
    with KernelMount(image, mnt) as root:
        J = os.path.join
        os.mkdir(J(root, "other"))
        for i in range(20):
            _write(J(root, "other", "o%d" % i), rnd.randbytes(1000 * i + 1))
        os.mkdir(J(root, "victimdir"))
        for i in range(60):
            _write(J(root, "victimdir", "entry%02d" % i), b"v%d" % i)
        os.mkdir(J(root, "hdir"))
        for i in range(3000):
            _write(J(root, "hdir", "h%05d_%s" % (i, "p" * (i % 30))), b"")
        _write(J(root, "victimfile"), b"victim content\n")
        for i in range(15):
            _write(J(root, "sib%02d" % i), b"sibling %d\n" % i)
        fd = os.open(J(root, "extfile"), os.O_WRONLY | os.O_CREAT, 0o644)
        for i in range(600):
            os.pwrite(fd, rnd.randbytes(4096), 2 * i * 4096)
        os.close(fd)
    return image


def block_size(image):
    return int(fs_info(image)["Block size"])


def first_block(image, path):
    out = util.run(["debugfs", "-R", f"blocks {path}", image]).stdout.split()
    return int(out[0])


def inode_location(image, path):
    """(byte offset of the inode in the image, inode size)."""
    out = util.run(["debugfs", "-R", f"imap {path}", image]).stdout
    m = re.search(r"located at block (\d+), offset (0x[0-9a-f]+)", out)
    return int(m.group(1)) * block_size(image) + int(m.group(2), 16), int(fs_info(image)["Inode size"])


def extent_blocks(image, path):
    out = util.run(["debugfs", "-R", f"stat {path}", image]).stdout
    return [int(b) for b in re.findall(r"\(ETB\d+\):(\d+)", out)]


def xor_bytes(image, offset, length, mask=0xFF):
    with open(image, "r+b") as f:
        f.seek(offset)
        b = bytearray(f.read(length))
        for i in range(len(b)):
            b[i] ^= mask
        f.seek(offset)
        f.write(b)
        f.flush()
        os.fsync(f.fileno())


def copy_image(src, dst):
    util.run(["cp", "--sparse=always", src, dst])
    return dst
