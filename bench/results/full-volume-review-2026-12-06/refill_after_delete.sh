#!/bin/bash
# fill (ENOSPC), delete every other file, fill again, unmount, verify with the kernel. usage: MODE BS
MODE=$1 BS=$2; B=/work/main/target/release/ext4lazy; D=/var/tmp/review32/rf-$MODE-$$; mkdir -p $D/mnt
truncate -s 64M $D/img; mkfs.ext4 -q -F -m 0 -b $BS $D/img
if [ $MODE = kernel ]; then mount -t ext4 -o loop $D/img $D/mnt; else $B mount -o rw,data_expire=3600,delalloc_mb=2048 $D/img $D/mnt; fi
python3 - $D/mnt <<'PY'
import os, sys, hashlib, json
mnt = sys.argv[1]; sums = {}
def fill(prefix):
    i = 0
    while True:
        name = f"{mnt}/{prefix}{i}"; fd = os.open(name, os.O_CREAT | os.O_WRONLY); off = 0; h = hashlib.sha1()
        try:
            while off < 300000:
                b = os.urandom(7000); n = os.write(fd, b); h.update(b[:n]); off += n
        except OSError: pass
        os.close(fd); sums[name] = (off, h.hexdigest()); i += 1
        if off < 300000: return i
n1 = fill("a")
for k in range(0, n1, 2): os.unlink(f"{mnt}/a{k}"); sums.pop(f"{mnt}/a{k}")
n2 = fill("b")
json.dump(sums, open(f"{mnt}/../sums", "w")); print("files", n1, n2, "bytes", sum(v[0] for v in sums.values()))
PY
if [ $MODE = kernel ]; then umount $D/mnt; else $B umount $D/mnt; fi; echo "umount rc=$?"
mount -t ext4 -o loop $D/img $D/mnt
python3 - $D/mnt $D/sums <<'PY'
import sys, json, hashlib
sums = json.load(open(sys.argv[2])); bad = 0
for name, (n, h) in sums.items():
    d = open(name, "rb").read()
    if len(d) != n or hashlib.sha1(d).hexdigest() != h: bad += 1
print("bad files:", bad, "of", len(sums))
PY
umount $D/mnt; e2fsck -fn $D/img 2>&1 | tail -1; rm -rf $D
