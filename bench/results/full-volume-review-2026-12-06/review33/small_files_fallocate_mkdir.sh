#!/bin/bash
# Small files waiting in delayed allocation hold back (depth+2)*(runs+1)=4 tree blocks each.
# Then fallocate/mkdir (no writeback retry) vs df.
set -u
D=/var/tmp/review33/t1; IMG=$D/img; M=$D/mnt; FS=${FS:-lazy}
B=/work/main/target/release/ext4lazy
rm -f $IMG; truncate -s 256M $IMG; mkfs.ext4 -q -F -b 4096 $IMG; mkdir -p $M
if [ $FS = lazy ]; then $B mount $IMG $M -o rw,data_expire=3600 || exit 1; else mount -o loop $IMG $M; fi
fallocate -l 170M $M/big   # leaves ~ 60 MB free
df -B4096 $M | tail -1
mkdir $M/s
for i in $(seq 1 ${N:-1700}); do head -c 4096 /dev/urandom > $M/s/f$i || { echo "write fail at $i"; break; }; done
df -B4096 $M | tail -1
[ $FS = lazy ] && $B stat $M 2>&1 | grep -E "^(failure|delalloc)"
for mb in 20 10 5 3 2 1; do fallocate -l ${mb}M $M/pre$mb && { echo "fallocate ${mb}M ok"; break; } || echo "fallocate ${mb}M FAILED"; done
for i in $(seq 1 300); do mkdir $M/d$i || { echo "mkdir fail at $i"; break; }; done
df -B4096 $M | tail -1
if [ $FS = lazy ]; then $B umount $M; echo "umount rc=$?"; else umount $M; fi
