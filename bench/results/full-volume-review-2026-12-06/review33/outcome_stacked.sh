#!/bin/bash
# Two daemons stacked on one mount point; the lower one's final write-back fails.
set -u
D=/var/tmp/review33/t4; T=$D/tmpfs; B=/work/main/target/release/ext4lazy; M=$D/mnt
mkdir -p $T $M; mountpoint -q $T || mount -t tmpfs -o size=48M tmpfs $T
rm -f $T/img; truncate -s 256M $T/img; mkfs.ext4 -q -F $T/img
rm -f $D/img2; truncate -s 64M $D/img2; mkfs.ext4 -q -F $D/img2
$B mount $T/img $M -o rw,data_expire=3600 || exit 1
dd if=/dev/urandom of=$M/f bs=1M count=80 status=none; echo "dd into lower rc=$?"
$B mount $D/img2 $M -o rw || exit 1
echo hi > $M/top
$B umount $M; echo "umount(top) rc=$?"
ls $M
$B umount $M; echo "umount(lower, whose write-back fails) rc=$?"
df -h $T | tail -1
tail -2 /run/ext4lazy/var_tmp_review33_t4_mnt.log
umount $T
