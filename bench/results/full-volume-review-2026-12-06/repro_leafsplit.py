#!/usr/bin/env python3
"""One delayed 1 KiB block written into a hole in the middle of each of W
*full* extent leaves (sparse files built by the kernel: every other block
written, so each block is an extent; leaves appended full at 84 entries).
Each write-back insert splits a full leaf: 1 data + 1 leaf block per waiting
block, plus index splits. Free space is set to ~2W+SLACK, so the writers'
half-free flush (free < 2*waiting) never fires and the reservation
(W + W/42 + files + 4096) admits all W.
usage: repro_leafsplit.py {ext4lazy|kernel} [LEAVES_PER_FILE FILES SLACK [journal_opt]]"""
import os, subprocess, sys, re
MODE = sys.argv[1]
LPF = int(sys.argv[2]) if len(sys.argv) > 2 else 333
FILES = int(sys.argv[3]) if len(sys.argv) > 3 else 24
SLACK = int(sys.argv[4]) if len(sys.argv) > 4 else 0
XOPT = sys.argv[5] if len(sys.argv) > 5 else ""
D = "/var/tmp/review32"; IMG = f"{D}/leaf-{MODE}.img"; MNT = f"{D}/mnt-leaf-{MODE}"
BIN = "/work/main/target/release/ext4lazy"; BS = 1024; PER = 84
def run(*a, check=True):
    p = subprocess.run(a, capture_output=True, text=True)
    if check and p.returncode: raise SystemExit(f"{a} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p
def free_blocks():
    out = run("dumpe2fs", "-h", IMG).stdout
    return int(re.search(r"Free blocks:\s+(\d+)", out).group(1))
def kmount(): run("mount", "-t", "ext4", "-o", "loop", IMG, MNT)
os.makedirs(MNT, exist_ok=True)
if not os.path.exists(IMG + ".base"):
    run("truncate", "-s", "1G", IMG + ".base")
    run("mkfs.ext4", "-q", "-F", "-m", "0", "-b", str(BS), "-N", "2048", IMG + ".base")
    IMG0 = IMG; IMG = IMG + ".base"
    kmount()
    blk = b"\xaa" * BS
    for f in range(FILES):
        fd = os.open(f"{MNT}/f{f}", os.O_CREAT | os.O_WRONLY)
        for i in range(LPF * PER):
            os.pwrite(fd, blk, 2 * i * BS)
        os.fsync(fd); os.close(fd)
    run("umount", MNT)
    print(run("debugfs", "-R", "ex /f0", IMG).stdout.splitlines()[:8])
    IMG = IMG0
run("cp", "--sparse=always", IMG + ".base", IMG)
W = LPF * FILES
target = 2 * W + SLACK
# fill down to `target` free blocks, with the kernel
for step in range(4):
    fr = free_blocks()
    if fr <= target: break
    kmount()
    n = fr - target - (0 if step else 200)
    with open(f"{MNT}/fill{step}", "wb") as fh:
        fh.write(b"\x55" * (n * BS))
    run("umount", MNT)
print("free before workload:", free_blocks(), "target", target, "W", W)
if MODE == "kernel": kmount()
else: run(BIN, "mount", "-o", "rw,data_expire=3600,delalloc_mb=2048" + XOPT, IMG, MNT)
ok = 0; fails = 0; written = []
for f in range(FILES):
    fd = os.open(f"{MNT}/f{f}", os.O_WRONLY)
    for L in range(LPF):
        lblk = 2 * (PER * L + PER // 2) + 1
        data = (f"{f}:{lblk}:".encode() * 200)[:BS]
        try:
            os.pwrite(fd, data, lblk * BS); ok += 1; written.append((f, lblk))
        except OSError as e:
            fails += 1
    os.close(fd)
print("writes ok:", ok, "failed:", fails)
r = run(BIN, "umount", MNT, check=False) if MODE != "kernel" else run("umount", MNT, check=False)
print("umount rc", r.returncode, r.stderr.strip()[-400:])
kmount()
bad = 0
for f, lblk in written:
    with open(f"{MNT}/f{f}", "rb") as fh:
        fh.seek(lblk * BS)
        if fh.read(BS) != (f"{f}:{lblk}:".encode() * 200)[:BS]: bad += 1
print("lost blocks:", bad, "of", len(written))
run("umount", MNT)
p = run("e2fsck", "-fn", IMG, check=False)
print("e2fsck rc", p.returncode, [l for l in p.stdout.splitlines() if "Pass" not in l][:6])
