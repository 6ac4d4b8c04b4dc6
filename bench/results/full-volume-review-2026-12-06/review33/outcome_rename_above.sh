#!/bin/bash
# Final write-back that fails (image is sparse on a full tmpfs); does umount report it?
# RENAME=1: rename the mount point's parent directory between mount and umount.
set -u
D=/var/tmp/review33/t3; T=$D/tmpfs; B=/work/main/target/release/ext4lazy
mkdir -p $T; mountpoint -q $T || mount -t tmpfs -o size=48M tmpfs $T
rm -rf $T/*; truncate -s 256M $T/img; mkfs.ext4 -q -F -b 4096 -O ^has_journal $T/img 2>/dev/null || mkfs.ext4 -q -F $T/img
rm -rf $D/p1 $D/p2; mkdir -p $D/p1/mnt
$B mount $T/img $D/p1/mnt -o rw,data_expire=3600 || exit 1
dd if=/dev/urandom of=$D/p1/mnt/f bs=1M count=80 status=none; echo "dd rc=$?"
df -h $T | tail -1
U=$D/p1/mnt
if [ "${RENAME:-0}" = 1 ]; then mv $D/p1 $D/p2; U=$D/p2/mnt; fi
ls /run/ext4lazy/*.outcome
cd $D; $B umount ${UARG:-$U}; echo "umount rc=$?"
df -h $T | tail -1
ls /run/ext4lazy/*.outcome
umount $T
