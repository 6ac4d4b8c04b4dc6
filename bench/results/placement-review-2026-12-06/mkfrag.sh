#!/bin/bash
# Builds frag.img for fragperf.sh: 256 GiB (2048 groups), -m 0, one kernel-fallocated filler with
# 256 blocks punched every 1024 blocks -> free space only in 1 MiB holes (no 2048-block run anywhere).
D=/var/tmp/review34/r; cd $D
rm -f frag.img && truncate -s 256G frag.img && mkfs.ext4 -q -F -m 0 frag.img && mkdir -p pl.mnt && mount -o loop frag.img pl.mnt && python3 - pl.mnt <<'PY'
import os, sys, ctypes
libc = ctypes.CDLL("libc.so.6", use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
m = sys.argv[1]; st = os.statvfs(m); sz = (st.f_bavail - 1500) * 4096
fd = os.open(m + "/filler", os.O_CREAT|os.O_WRONLY, 0o644); libc.fallocate(fd, 0, 0, sz)
for off in range(0, sz, 1024*4096): libc.fallocate(fd, 3, off, 256*4096)
os.close(fd)
PY
umount pl.mnt; e2freefrag frag.img | tail -5
