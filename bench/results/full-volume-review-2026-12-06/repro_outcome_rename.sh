#!/bin/bash
# The image is renamed while mounted: `ext4lazy umount` cannot open the mountinfo source to wait on
# its lock, reads "running" at once while the daemon is still writing back, reports failure and
# deletes the outcome file (a later real error is never seen).
B=/work/main/target/release/ext4lazy; D=/var/tmp/review32/ren; mkdir -p $D/mnt
truncate -s 0 $D/a.img; truncate -s 512M $D/a.img; mkfs.ext4 -q -F $D/a.img
$B mount -o rw,data_expire=3600,delalloc_mb=1024 $D/a.img $D/mnt
head -c 300M /dev/zero | tr '\0' 'q' > $D/mnt/big
mv $D/a.img $D/b.img
time $B umount $D/mnt; echo "umount rc=$?"
sleep 0.2; ls -l /run/ext4lazy/ | grep review32_ren; 
for i in $(seq 50); do flock -n $D/b.img true && break; sleep 0.2; done
ls -l /run/ext4lazy/ | grep review32_ren
e2fsck -fn $D/b.img | tail -1; mount -t ext4 -o loop $D/b.img $D/mnt && ls -l $D/mnt/big && umount $D/mnt
