#!/bin/bash
# Two mounts whose mount points flatten to the same outcome file name:
#   /var/tmp/review32/oc/x_y  and  /var/tmp/review32/oc/x/y  -> var_tmp_review32_oc_x_y.outcome
# A's daemon is killed before its final write-back (delayed data lost);
# B unmounts cleanly first, removing the shared file; `ext4lazy umount A` then exits 0.
B=/work/main/target/release/ext4lazy; D=/var/tmp/review32/oc
mkdir -p $D/x_y $D/x/y
for i in a b; do truncate -s 0 $D/$i.img; truncate -s 64M $D/$i.img; mkfs.ext4 -q -F $D/$i.img; done
$B mount -o rw,data_expire=3600,delalloc_mb=512 $D/a.img $D/x_y
$B mount -o rw $D/b.img $D/x/y
ls -l /run/ext4lazy/ | grep oc_x
head -c 4M /dev/urandom > $D/x_y/data; sync -f $D/x_y 2>/dev/null; # file data waits (data_expire=3600)
PID=$(ps -eo pid,args | awk -v img=$D/a.img '$0 ~ img && /ext4lazy/ && !/awk/ {print $1}' | head -1)
echo "daemon A pid $PID"; kill -9 $PID; sleep 1
$B umount $D/x/y; echo "umount B rc=$?"
$B umount $D/x_y; echo "umount A rc=$?   (daemon A was killed before write-back)"
mount -t ext4 -o loop,ro $D/a.img $D/x_y 2>&1 && { ls -l $D/x_y/; umount $D/x_y; }
