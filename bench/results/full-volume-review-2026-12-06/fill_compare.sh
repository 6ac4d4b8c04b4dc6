#!/bin/bash
# usage: fill_compare.sh MODE(ext4lazy|kernel) SIZE_MB BS NFILES CHUNK_KB [extra mount opts]
# NFILES files written round-robin in CHUNK_KB writes until every file got ENOSPC; print bytes accepted,
# then unmount, remount with the kernel, verify contents (each chunk tagged), e2fsck.
MODE=$1 SZ=$2 BS=$3 NF=$4 CK=$5 XO=$6
B=/work/main/target/release/ext4lazy; D=/var/tmp/review32/fill-$MODE-$$; mkdir -p $D/mnt
truncate -s ${SZ}M $D/img; mkfs.ext4 -q -F -m 0 -b $BS $D/img
if [ $MODE = kernel ]; then mount -t ext4 -o loop $D/img $D/mnt; else $B mount -o rw,data_expire=3600,delalloc_mb=2048$XO $D/img $D/mnt; fi
python3 - $D/mnt $NF $CK <<'PY'
import os, sys, time
mnt, nf, ck = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) * 1024
fds = [os.open(f"{mnt}/f{i}", os.O_CREAT | os.O_WRONLY) for i in range(nf)]
offs = [0] * nf; live = set(range(nf)); t = time.time(); fails = 0
while live:
    for i in list(live):
        buf = (f"{i}:{offs[i]}:".encode() * (ck // 4 + 1))[:ck]
        try:
            n = os.pwrite(fds[i], buf, offs[i])
            offs[i] += n
            if n < ck: live.discard(i)
        except OSError as e:
            live.discard(i); fails += 1
open(f"{mnt}/../offs", "w").write(" ".join(map(str, offs)))
print("accepted bytes:", sum(offs), "secs %.1f" % (time.time() - t))
PY
if [ $MODE = kernel ]; then umount $D/mnt; echo "umount rc=$?"; else $B umount $D/mnt; echo "umount rc=$?"; fi
mount -t ext4 -o loop $D/img $D/mnt
python3 - $D/mnt $CK $D/offs <<'PY'
import sys
mnt, ck = sys.argv[1], int(sys.argv[2]) * 1024
offs = list(map(int, open(sys.argv[3]).read().split()))
bad = 0
for i, o in enumerate(offs):
    data = open(f"{mnt}/f{i}", "rb").read()
    if len(data) < o: bad += o - len(data)
    for p in range(0, o, ck):
        n = min(ck, o - p)
        exp = (f"{i}:{p}:".encode() * (ck // 4 + 1))[:n]
        if data[p:p+n] != exp: bad += n
print("bad bytes after remount:", bad)
PY
umount $D/mnt; e2fsck -fn $D/img 2>&1 | tail -1; echo "e2fsck rc=${PIPESTATUS[0]}"; [ -n "$KEEP" ] || rm -rf $D
