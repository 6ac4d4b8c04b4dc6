#!/usr/bin/env python3
"""Delayed data whose write-back inserts extents *before* an existing far extent:
leaves split in half (not at the right edge), so write-back needs one leaf per
~42 waiting blocks (1 KiB blocks), more than the 1-per-file + 2% reserve.
usage: repro_midtree.py SIZE_MB {ext4lazy|kernel} [journal]"""
import os, subprocess, sys
SIZE = int(sys.argv[1]); MODE = sys.argv[2]; JOURNAL = sys.argv[3] if len(sys.argv) > 3 else "ordered"
D = "/var/tmp/review31b"; IMG = f"{D}/mid-{MODE}.img"; MNT = f"{D}/mnt-{MODE}"
BIN = "/work/main/target/release/ext4lazy"; BS = 1024
def run(*a, check=True):
    p = subprocess.run(a, capture_output=True, text=True)
    if check and p.returncode: raise SystemExit(f"{a} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p
def mount(opts):
    if MODE == "kernel": run("mount", "-t", "ext4", "-o", "loop", IMG, MNT)
    else: run(BIN, "mount", "-o", opts, IMG, MNT)
def umount():
    if MODE == "kernel": return run("umount", MNT, check=False)
    return run(BIN, "umount", MNT, check=False)
def blk(i): return (i.to_bytes(4, "little") * (BS // 4))
os.makedirs(MNT, exist_ok=True)
run("truncate", "-s", "0", IMG); run("truncate", "-s", f"{SIZE}M", IMG)
run("mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(BS), IMG)
FAR = 4_000_000
mount("rw")
with open(f"{MNT}/f", "wb") as f:          # the far extent, on disk
    f.seek(FAR * BS); f.write(blk(FAR)); f.flush(); os.fsync(f.fileno())
r = umount(); print("umount1", r.returncode, r.stderr.strip())
mount(f"rw,journal={JOURNAL},data_expire=3600,delalloc_mb=2048")
n = 0
fd = os.open(f"{MNT}/f", os.O_WRONLY)
try:
    while True:
        l = 2 + 2 * n
        try:
            w = os.pwrite(fd, blk(l), l * BS)
        except OSError as e:
            print("stopped at", n, e); break
        assert w == BS
        n += 1
finally:
    if os.environ.get("FSYNC"):
        try: os.fsync(fd); print("fsync: ok")
        except OSError as e: print("fsync failed:", e)
        if os.environ.get("SLEEP"): import time; time.sleep(float(os.environ["SLEEP"]))
        try:
            with open(f"{MNT}/after", "wb") as g: g.write(b"x")
            print("create after: ok")
        except OSError as e: print("create after failed:", e)
    os.close(fd)
print("accepted blocks:", n)
r = umount(); print("umount2 rc", r.returncode, r.stdout.strip()[-500:], r.stderr.strip()[-800:])
mount("rw" if MODE == "kernel" else f"rw,journal={JOURNAL}")
bad = []
with open(f"{MNT}/f", "rb") as f:
    for i in range(n):
        l = 2 + 2 * i
        f.seek(l * BS)
        if f.read(BS) != blk(l): bad.append(l)
    f.seek(FAR * BS); farok = f.read(BS) == blk(FAR)
print("lost/corrupt blocks:", len(bad), "of", n, "first:", bad[:5], "far ok:", farok)
umount()
if JOURNAL == "lazy" and MODE != "kernel":
    run("mount", "-t", "ext4", "-o", "loop", IMG, MNT); run("umount", MNT)
p = run("e2fsck", "-fn", IMG, check=False)
print("e2fsck rc", p.returncode); print("\n".join(p.stdout.splitlines()[:15]))
