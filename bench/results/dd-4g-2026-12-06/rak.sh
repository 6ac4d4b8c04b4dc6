#!/bin/bash
m=/var/tmp/ddr/ram; mkdir -p $m
dev=$(losetup -f --show --direct-io=on -r /var/tmp/ddr/r.img); mount -o ro $dev $m
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N); dd if=$m/f of=/dev/null bs=1M status=none; t1=$(date +%s.%N)
umount $m; losetup -d $dev
echo "kernel read $(echo "$t1 - $t0" | bc)"
