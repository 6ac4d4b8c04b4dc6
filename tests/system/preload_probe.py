"""Run by test_preload.py, with and without LD_PRELOAD=libext4lazy_preload.so, in the mount's root: every
path-taking call the library wraps that Python reaches, on every path given (NUL-separated on stdin), from the
main thread, from threads, from a forked child and from an exec'd `stat`; prints what each call returned (values
or errno names) as JSON on stdout. Nothing here may differ with the library loaded."""
import errno
import json
import os
import subprocess
import sys
import threading


def res(f):
    try:
        return f()
    except OSError as e:
        return "!" + errno.errorcode.get(e.errno, str(e.errno))


def st(s):
    return [s.st_mode, s.st_size, s.st_nlink, s.st_mtime_ns, s.st_uid, s.st_gid]


def opened(p, flags):
    fd = os.open(p, flags)
    os.close(fd)
    return "ok"


def probe(p, full):
    """One path through every call. `full`: also the calls that cost more (listing, reading)."""
    r = {"lstat": res(lambda: st(os.lstat(p))), "stat": res(lambda: st(os.stat(p))),
         "access": os.access(p, os.R_OK), "open": res(lambda: opened(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)),  # a fifo must not block
         "creat": res(lambda: opened(p + b".new", os.O_WRONLY | os.O_CREAT | os.O_EXCL))}
    if full:
        r["listdir"] = res(lambda: len(os.listdir(p)))
        r["readlink"] = res(lambda: os.readlink(p).hex())
        head, _, tail = p.rpartition(b"/")
        def at():
            d = os.open(head or b".", os.O_RDONLY | os.O_DIRECTORY)
            try:
                return st(os.stat(tail, dir_fd=d, follow_symlinks=False))
            finally:
                os.close(d)
        r["fstatat"] = res(at)
    return r


def main():
    paths = [p for p in sys.stdin.buffer.read().split(b"\0") if p]
    out = {"main": [probe(p, True) for p in paths]}
    # Threads: the same calls at once (the library keeps no lock; each thread its own hints).
    sample = paths[::3]
    got = [None] * 4
    def worker(k):
        got[k] = [probe(p, False) for p in sample[k::4]]
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["threads"] = got
    # fork: the child inherits the library's socket and tables.
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.write(w, json.dumps([probe(p, False) for p in paths[::7]]).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.waitpid(pid, 0)
    out["fork"] = json.loads(data)
    # exec: a C program (coreutils stat) with the library inherited through the environment.
    p = subprocess.run(["stat", "--format=%n %f %s %h %Y"] + [x.decode("utf-8", "surrogateescape") for x in paths[::11]],
                       capture_output=True, text=True, errors="surrogateescape")
    out["exec"] = [p.returncode, p.stdout, p.stderr]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
