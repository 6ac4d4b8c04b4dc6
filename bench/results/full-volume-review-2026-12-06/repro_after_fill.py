#!/usr/bin/env python3
"""tests/system/test_full_volume_writeback.py's workload, then other allocations
after the fill (mkdir, long symlinks, xattrs, hard links, truncate/unlink of
files with data waiting, new small files). usage: repro_after_fill.py BS FILES journal"""
import os, subprocess, sys
BS, FILES, JOURNAL = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
D = "/var/tmp/review31b"; IMG = f"{D}/af.img"; MNT = f"{D}/mnt-af"
BIN = "/work/main/target/release/ext4lazy"
def run(*a, check=True):
    p = subprocess.run(a, capture_output=True, text=True)
    if check and p.returncode: raise SystemExit(f"{a}\n{p.stdout}{p.stderr}")
    return p
def block(tag, i): return bytes([tag]) * 16 + i.to_bytes(4, "little") * ((BS - 16) // 4)
os.makedirs(MNT, exist_ok=True)
run("truncate", "-s", "0", IMG); run("truncate", "-s", "64M", IMG)
run("mkfs.ext4", "-F", "-q", "-m", "0", "-b", str(BS), IMG)
name = lambda i: f"{MNT}/p{i:04d}"
run(BIN, "mount", "-o", "rw", IMG, MNT)
for i in range(FILES):
    with open(name(i), "wb") as f:
        for l in (0, 2, 4, 6): f.seek(l * BS); f.write(block(1, i))
        f.truncate(9 * BS)
run(BIN, "umount", MNT)
run(BIN, "mount", "-o", f"rw,journal={JOURNAL},data_expire=3600", IMG, MNT)
for i in range(FILES):
    with open(name(i), "r+b", buffering=0) as f: f.seek(8 * BS); f.write(block(2, i))
filled = 0
with open(f"{MNT}/fill", "wb", buffering=0) as f:
    for chunk in (1 << 20, BS):
        while True:
            try: filled += f.write(b"\x5a" * chunk)
            except OSError: break
ok = {"mkdir": 0, "symlink": 0, "xattr": 0, "link": 0, "small": 0}
for i in range(300):
    try: os.mkdir(f"{MNT}/d{i}"); ok["mkdir"] += 1
    except OSError: pass
    try: os.symlink("x" * 200 + str(i), f"{MNT}/s{i}"); ok["symlink"] += 1
    except OSError: pass
    try: os.setxattr(name(i % FILES), f"user.k{i}", b"v" * 900); ok["xattr"] += 1
    except OSError: pass
    try: os.link(name(i % FILES), f"{MNT}/l{i}"); ok["link"] += 1
    except OSError: pass
    try:
        with open(f"{MNT}/n{i}", "wb", buffering=0) as f: f.write(b"q" * 3000); ok["small"] += 1
    except OSError: pass
# truncate some files with data waiting, unlink others, then write again into the freed room
for i in range(0, FILES, 10): os.truncate(name(i), 8 * BS)      # drops their waiting block
for i in range(5, FILES, 10): os.unlink(name(i))
refill = 0
with open(f"{MNT}/fill2", "wb", buffering=0) as f:
    while True:
        try: refill += f.write(b"\x77" * BS)
        except OSError: break
print("after fill:", ok, "refill", refill)
r = run(BIN, "umount", MNT, check=False); print("umount rc", r.returncode)
run(BIN, "mount", "-o", f"rw,journal={JOURNAL}", IMG, MNT)
lost = []
for i in range(FILES):
    if i % 10 in (0, 5): continue
    with open(name(i), "rb") as f:
        f.seek(8 * BS)
        if f.read(BS) != block(2, i): lost.append(i)
sz = os.stat(f"{MNT}/fill").st_size; sz2 = os.stat(f"{MNT}/fill2").st_size
with open(f"{MNT}/fill", "rb") as f: fillok = f.read() == b"\x5a" * filled
run(BIN, "umount", MNT)
print(f"lost {len(lost)}; fill {sz}/{filled} ok={fillok}; fill2 {sz2}/{refill}")
run("mount", "-t", "ext4", "-o", "loop", IMG, MNT); run("umount", MNT)
p = run("e2fsck", "-fn", IMG, check=False); print("e2fsck rc", p.returncode, [l for l in p.stdout.splitlines() if "Pass" not in l][:5])
