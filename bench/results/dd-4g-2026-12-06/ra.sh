#!/bin/bash
# ra.sh KB: cold read of r.img's f through ext4lazy ro,image_io=direct with the FUSE bdi's read_ahead_kb=KB (0 = leave)
B=/work/main/target/release/ext4lazy; m=/var/tmp/ddr/ram; mkdir -p $m
$B mount -o ro,image_io=direct,stats=/var/tmp/ddr/ra-$1.json /var/tmp/ddr/r.img $m || exit 1
dev=$(mountpoint -d $m); bdi=/sys/class/bdi/$dev
[ "$1" != 0 ] && echo $1 > $bdi/read_ahead_kb
ra=$(cat $bdi/read_ahead_kb)
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N); dd if=$m/f of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
$B umount $m
echo "ext4lazy ra=$ra read $(echo "$t1 - $t0" | bc)"
