#!/usr/bin/env python3
"""One *contiguous* stream of write(2)s (1 MiB each) into a file that already has
an extent far out, on a 1 KiB-block volume whose free space is 1-block
fragments (set up by the kernel: a file filling the volume, every other block
punched out). Each fragment becomes an extent, inserted before the far one
(leaves split in half): write-back needs ~1 leaf per 42 blocks, the
reservation is 1 block for the file + min(2%, 4096).
usage: repro_fragmented.py SIZE_MB {ext4lazy|kernel}"""
import ctypes, os, subprocess, sys
SIZE = int(sys.argv[1]); MODE = sys.argv[2]
D = "/var/tmp/review31b"; IMG = f"{D}/frag-{MODE}.img"; MNT = f"{D}/mnt-{MODE}"
BIN = "/work/main/target/release/ext4lazy"; BS = 1024
libc = ctypes.CDLL("libc.so.6", use_errno=True)
def run(*a, check=True):
    p = subprocess.run(a, capture_output=True, text=True)
    if check and p.returncode: raise SystemExit(f"{a} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p
def kmount(): run("mount", "-t", "ext4", "-o", "loop", IMG, MNT)
def mount(opts):
    if MODE == "kernel": kmount()
    else: run(BIN, "mount", "-o", opts, IMG, MNT)
def umount():
    if MODE == "kernel": return run("umount", MNT, check=False)
    return run(BIN, "umount", MNT, check=False)
os.makedirs(MNT, exist_ok=True)
run("truncate", "-s", "0", IMG); run("truncate", "-s", f"{SIZE}M", IMG)
run("mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(BS), IMG)
# --- setup with the kernel: fragment the free space
kmount()
st = os.statvfs(MNT); nblk = st.f_bavail - 64
fd = os.open(f"{MNT}/frag", os.O_CREAT | os.O_WRONLY)
chunk = b"\xee" * (1 << 20); done = 0
while done < nblk * BS:
    try: done += os.write(fd, chunk[: min(len(chunk), nblk * BS - done)])
    except OSError: break
os.fsync(fd)
for i in range(0, done // BS, 2):
    if libc.fallocate(fd, 3, ctypes.c_long(i * BS), ctypes.c_long(BS)) != 0:  # PUNCH_HOLE|KEEP_SIZE
        print("punch stopped at", i, ctypes.get_errno()); break
os.fsync(fd); os.close(fd)
run("umount", MNT)
# --- the workload
FAR = 40_000_000
if not os.environ.get("NOFAR"):   # NOFAR=1: a plain new file, appends only
    mount("rw")
    with open(f"{MNT}/g", "wb") as f:
        f.seek(FAR * BS); f.write(b"Z" * BS); f.flush(); os.fsync(f.fileno())
    umount()
mount("rw,data_expire=3600,delalloc_mb=2048")
def pat(off, n): return bytes(((off + k) * 7 // BS) & 0xff for k in range(n)) if n < 0 else None
fd = os.open(f"{MNT}/g", os.O_WRONLY | os.O_CREAT)
off = 0; piece = 1 << 20
buf = bytearray(piece)
while True:
    mv = memoryview(buf)
    for k in range(0, piece, BS):       # each 1 KiB block tagged with its number
        mv[k:k + 8] = ((off + k) // BS).to_bytes(8, "little")
    try:
        w = os.pwrite(fd, buf, off)
    except OSError as e:
        if piece > BS: piece = BS; buf = bytearray(piece); continue
        print("stopped:", e); break
    off += w
os.close(fd)
n = off // BS
print("accepted bytes:", off, "blocks:", n)
r = umount(); print("umount rc", r.returncode, r.stderr.strip()[-300:])
mount("rw")
bad = 0; first = None
with open(f"{MNT}/g", "rb") as f:
    for b in range(n):
        d = f.read(BS)
        if d[:8] != b.to_bytes(8, "little"):
            bad += 1; first = b if first is None else first
print("lost/corrupt blocks:", bad, "of", n, "first:", first)
umount()
p = run("e2fsck", "-fn", IMG, check=False)
print("e2fsck rc", p.returncode, [l for l in p.stdout.splitlines() if "Pass" not in l][:6])
os.remove(IMG)
