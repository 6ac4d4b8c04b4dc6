#!/usr/bin/env python3
"""usage: concurrent_fill.py {ext4lazy|kernel} SIZE_MB BS [mount opts]
4 processes each fill their own file (64 KiB pwrites), 2 write disjoint 4 KiB stripes of one shared
file, 1 appends (O_APPEND, 3000-byte records), 1 does MAP_SHARED stores into a preallocated-by-ftruncate
sparse file; all until ENOSPC/SIGBUS. Then unmount, remount by the kernel and verify everything acknowledged."""
import os, sys, subprocess, time, mmap, signal, json
MODE, SZ, BS = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); XO = sys.argv[4] if len(sys.argv) > 4 else ""
D = f"/var/tmp/review32/cf-{MODE}-{os.getpid()}"; MNT = f"{D}/mnt"; IMG = f"{D}/img"
BIN = "/work/main/target/release/ext4lazy"
def run(*a, check=True):
    p = subprocess.run(a, capture_output=True, text=True)
    if check and p.returncode: raise SystemExit(f"{a} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p
os.makedirs(MNT, exist_ok=True)
run("truncate", "-s", f"{SZ}M", IMG); run("mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(BS), IMG)
if MODE == "kernel": run("mount", "-t", "ext4", "-o", "loop", IMG, MNT)
else: run(BIN, "mount", "-o", "rw,data_expire=3600,delalloc_mb=2048" + XO, IMG, MNT)
def tag(name, off, n): return (f"{name}@{off};".encode() * (n // 4 + 2))[:n]
def own(k):
    fd = os.open(f"{MNT}/own{k}", os.O_CREAT | os.O_WRONLY); off = 0; done = []
    while True:
        try: n = os.pwrite(fd, tag(f"own{k}", off, 65536), off)
        except OSError: break
        done.append([off, n]); off += n
        if n < 65536: break
    return {"own%d" % k: done}
def stripe(k):
    fd = os.open(f"{MNT}/shared", os.O_CREAT | os.O_WRONLY); done = []; i = 0
    while True:
        off = (2 * i + k) * 4096
        try: n = os.pwrite(fd, tag("shared", off, 4096), off)
        except OSError: break
        done.append([off, n]); i += 1
        if n < 4096: break
    return {"shared%d" % k: done}
def app():
    fd = os.open(f"{MNT}/app", os.O_CREAT | os.O_WRONLY | os.O_APPEND); done = []
    while True:
        pos = os.lseek(fd, 0, os.SEEK_END)
        try: n = os.write(fd, tag("app", pos, 3000))
        except OSError: break
        done.append([pos, n])
        if n < 3000: break
    return {"app": done}
def mm():
    fd = os.open(f"{MNT}/mm", os.O_CREAT | os.O_RDWR); L = 16 << 20; os.ftruncate(fd, L)
    m = mmap.mmap(fd, L, mmap.MAP_SHARED); done = 0
    # a store that finds no room is SIGBUS: run in a grandchild, acknowledged = up to the last msync
    prog = f"{D}/mmprog"; open(prog, "w").write("0")
    pid = os.fork()
    if pid == 0:
        try:
            for off in range(0, L, 4096):
                m[off:off + 4096] = tag("mm", off, 4096)
                if (off + 4096) % (1 << 20) == 0:
                    m.flush(0, off + 4096); open(prog, "w").write(str(off + 4096))
        except Exception: pass
        os._exit(0)
    _, st = os.waitpid(pid, 0)
    done = int(open(prog).read())
    return {"mm": [[o, 4096] for o in range(0, done, 4096)], "mmerr": str(st)}
jobs = [lambda k=k: own(k) for k in range(4)] + [lambda: stripe(0), lambda: stripe(1), app, mm]
t = time.time(); pids = []
for j in jobs:
    r, w = os.pipe(); pid = os.fork()
    if pid == 0:
        os.close(r); res = j(); os.write(w, json.dumps(res).encode()); os._exit(0)
    os.close(w); pids.append((pid, r))
res = {}
for pid, r in pids:
    out = b""
    while True:
        c = os.read(r, 1 << 20)
        if not c: break
        out += c
    os.waitpid(pid, 0); res.update(json.loads(out))
print("fill secs %.1f" % (time.time() - t), {k: (sum(n for _, n in v) if isinstance(v, list) and v and isinstance(v[0], list) and len(v) > 1 else v) for k, v in res.items()})
t = time.time()
r = run(BIN, "umount", MNT, check=False) if MODE != "kernel" else run("umount", MNT, check=False)
print("umount rc", r.returncode, "secs %.1f" % (time.time() - t), r.stderr.strip()[-300:])
run("mount", "-t", "ext4", "-o", "loop", IMG, MNT)
bad = 0
for key, v in res.items():
    if key == "mmerr": continue
    name = "shared" if key.startswith("shared") else key
    data = open(f"{MNT}/{name}", "rb").read()
    for off, n in v:
        if data[off:off + n] != tag(name, off, n): bad += n
print("bad bytes:", bad)
run("umount", MNT)
p = run("e2fsck", "-fn", IMG, check=False); print("e2fsck rc", p.returncode, p.stdout.splitlines()[-1])
run("rm", "-rf", D)
