#!/bin/bash
# usage: fragperf.sh BIN -- on a copy of frag.img (32G, free space in 256-block holes), write a 2 GiB file and time it
B=$1; D=/var/tmp/review34/r; I=$D/fp
cp --sparse=always $D/frag.img $I.img; mkdir -p $I.mnt
$B mount -o rw,image_io=direct $I.img $I.mnt || exit 1
s=$(date +%s.%N)
dd if=/dev/zero of=$I.mnt/big bs=1M count=2048 status=none; sync -f $I.mnt/.
e=$(date +%s.%N)
$B umount $I.mnt; u=$(date +%s.%N)
L=$(losetup -f --show -r $I.img); mount -o ro $L $I.mnt; ext=$(filefrag $I.mnt/big | awk '{print $2}'); umount $I.mnt; losetup -d $L
echo "$(basename $B) write+sync $(echo "$e - $s" | bc) s, umount $(echo "$u - $e" | bc) s, extents $ext"
