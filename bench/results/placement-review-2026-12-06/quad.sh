#!/bin/bash
# Many files of 17 blocks (>= STREAM_MIN_BLOCKS) each leave a stream window;
# measure time per batch of file creations as windows accumulate.
# usage: quad.sh BIN NFILES MODE(falloc|write) [blocksize]
BIN=${1:-/var/tmp/review34/ext4lazy}; N=${2:-20000}; MODE=${3:-falloc}; BS=${4:-4096}
D=/var/tmp/review34/r; IMG=$D/quad.img; MNT=$D/quad.mnt
mkdir -p $MNT; rm -f $IMG; truncate -s ${IMGSZ:-4G} $IMG; mkfs.ext4 -q -F -b $BS $IMG
$BIN mount -o rw,image_io=direct $IMG $MNT || exit 1
mkdir $MNT/d
SZ=$((17*BS))
python3 - "$MNT/d" $N $MODE $SZ <<'PY'
import os, sys, time
d, n, mode, sz = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
buf = os.urandom(sz)
t0 = time.time(); tb = t0
for i in range(n):
    fd = os.open(f"{d}/f{i}", os.O_CREAT|os.O_WRONLY, 0o644)
    if mode == "falloc":
        os.posix_fallocate(fd, 0, sz)
    else:
        os.write(fd, buf)
    os.close(fd)
    if (i+1) % 2000 == 0:
        t = time.time(); print(f"{i+1} files: batch {t-tb:.2f}s total {t-t0:.2f}s", flush=True); tb = t
if mode != "falloc":
    os.sync()
print(f"sync total {time.time()-t0:.2f}s")
PY
$BIN umount $MNT
e2fsck -fn $IMG >/dev/null 2>&1; echo "e2fsck rc=$?"
