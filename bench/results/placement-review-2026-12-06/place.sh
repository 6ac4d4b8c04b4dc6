#!/bin/bash
# usage: place.sh BIN WORKLOAD  -- runs a workload, then reports extents via filefrag on a kernel ro mount
B=$1; W=$2; D=/var/tmp/review34/r; I=$D/pl
rm -f $I.img; truncate -s ${PSZ:-2G} $I.img; mkfs.ext4 -q -F $I.img; mkdir -p $I.mnt
$B mount -o rw,image_io=direct $I.img $I.mnt || exit 1
M=$I.mnt
case $W in
untar) tar xf $D/inc.tar -C $M ;;
falloc) for i in 1 2 3; do fallocate -l 700M $M/big$i; done ;;
interleave) # two appenders with fsync per 64 KiB chunk, 64 MiB each
  for f in a b; do python3 -c "
import os,sys
fd=os.open('$M/$f',os.O_CREAT|os.O_WRONLY|os.O_APPEND,0o644)
for i in range(1024): os.write(fd,b'q'*65536); os.fsync(fd)
" & done; wait ;;
mixed) # many medium files, delete half, then a big sequential file
  python3 - $M <<'PY'
import os, sys, random
m = sys.argv[1]; r = random.Random(5); os.mkdir(m + "/m")
for i in range(6000):
    with open(f"{m}/m/f{i}", "wb") as f: f.write(b"m" * r.randint(20*4096, 300*4096))
os.sync()
for i in range(0, 6000, 2): os.unlink(f"{m}/m/f{i}")
os.sync()
for i in range(3000):
    with open(f"{m}/m/g{i}", "wb") as f: f.write(b"g" * r.randint(1, 12*4096))
os.sync()
with open(f"{m}/bigseq", "wb") as f:
    for i in range(300): f.write(b"B" * (1 << 20))
PY
;;
esac
sync -f $M/.; $B umount $M
e2fsck -fn $I.img 2>&1 | tail -1
L=$(losetup -f --show -r $I.img); mount -o ro $L $M
find $M -type f | xargs filefrag 2>/dev/null | awk '{n++; e+=$(NF-2); if ($(NF-2)>1) m++} END {printf "files %d extents %d avg %.3f multi-extent %d\n", n, e, e/n, m}'
find $M -type d | xargs filefrag 2>/dev/null | awk '{n++; e+=$(NF-2)} END {printf "dirs %d extents %d\n", n, e}'
case $W in falloc|interleave) filefrag $M/big* $M/a $M/b 2>/dev/null;; mixed) filefrag $M/bigseq; find $M/m -name 'g*' | xargs filefrag | awk '{e+=$(NF-2);n++} END {print "small g-files avg extents", e/n}';; esac
umount $M; losetup -d $L
