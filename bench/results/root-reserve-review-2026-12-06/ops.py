import os, sys, errno, mmap
d = sys.argv[1]; tag = sys.argv[2]
def r(name, f):
    try:
        f(); print(f"{tag} {name}: ok")
    except OSError as e:
        print(f"{tag} {name}: {errno.errorcode[e.errno]}")
def wr(path, flags, n=4096, off=None):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    try:
        buf = mmap.mmap(-1, n); buf.write(b'x' * n)
        if off is None: os.write(fd, buf)
        else: os.pwrite(fd, buf, off)
        os.fsync(fd)
    finally:
        os.close(fd)
r("mkdir-in-full-dir", lambda: os.mkdir(f"{d}/full/{tag}-newdir-with-a-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))
r("symlink-long", lambda: os.symlink("t" * 300, f"{d}/{tag}-sl"))
open(f"{d}/{tag}-x", "w").close()
r("xattr-block", lambda: os.setxattr(f"{d}/{tag}-x", "user.big", b"v" * 700))
def falloc():
    fd = os.open(f"{d}/{tag}-fa", os.O_WRONLY | os.O_CREAT, 0o644)
    try: os.posix_fallocate(fd, 0, 1 << 20)
    finally: os.close(fd)
r("fallocate-1M", falloc)
r("odirect-4k", lambda: wr(f"{d}/{tag}-dio", os.O_DIRECT))
r("osync-4k", lambda: wr(f"{d}/{tag}-sync", os.O_SYNC))
r("hole-write", lambda: wr(f"{d}/sparse-{tag}", 0, 4096, 8 << 20))
def trunc_write():
    p = f"{d}/{tag}-tr"; open(p, "w").close(); os.truncate(p, 1 << 20); wr(p, 0, 4096, 4096)
r("truncate-up-write", trunc_write)
r("buffered-4k", lambda: wr(f"{d}/{tag}-buf", 0))
r("buffered-64k", lambda: wr(f"{d}/{tag}-buf64", 0, 65536))
open(f"{d}/{tag}-lsrc", "w").close()
r("link-into-full-dir", lambda: os.link(f"{d}/{tag}-lsrc", f"{d}/full2/{tag}-link-with-a-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))
open(f"{d}/{tag}-rsrc", "w").close()
r("rename-into-full-dir", lambda: os.rename(f"{d}/{tag}-rsrc", f"{d}/full3/{tag}-ren-with-a-long-name-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"))
def inline_grow():
    p = f"{d}/{tag}-inl"; open(p, "w").write("a" * 50); wr(p, os.O_APPEND, 1024)
r("inline-grow", inline_grow)
r("small-file-50B", lambda: open(f"{d}/{tag}-s50", "w").write("b" * 50))
