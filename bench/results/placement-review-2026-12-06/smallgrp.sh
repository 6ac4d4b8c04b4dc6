#!/bin/bash
# usage: smallgrp.sh BIN -- 1 KiB blocks, 256-block groups (no run can reach the 2048-block whole-run target): time a 200 MiB write
B=$1; D=/var/tmp/review34/r; I=$D/sg
rm -f $I.img; truncate -s 1G $I.img; mkfs.ext4 -q -F -b 1024 -g 256 $I.img 2>&1 | tail -1; mkdir -p $I.mnt
$B mount -o rw,image_io=direct $I.img $I.mnt || exit 1
s=$(date +%s.%N); dd if=/dev/zero of=$I.mnt/big bs=1M count=200 status=none; sync -f $I.mnt/.; e=$(date +%s.%N)
$B umount $I.mnt; u=$(date +%s.%N); echo "$(basename $B) write+sync $(echo "$e - $s" | bc) s, umount $(echo "$u - $e" | bc) s"; e2fsck -fn $I.img | tail -1
