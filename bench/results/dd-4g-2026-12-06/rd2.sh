#!/bin/bash
B=/var/tmp/bB/ext4lazy; m=/var/tmp/ddr/rm-$$; mkdir -p $m
$B mount -o ro,image_io=direct$2 /var/tmp/ddr/r.img $m || exit 1
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N); dd if=$m/f of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
$B umount $m; rmdir $m; echo "$1 $(echo "$t1-$t0"|bc)"
