#!/bin/bash
# w4.sh floor BIN: the floor's dd write (no data kept, no read-back)
cd /var/tmp/ddr; cp --sparse=always tmpl.img w.img
$2 mount -o rw,floor w.img wm || exit 1
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N); dd if=/dev/zero of=wm/f bs=1M count=4096 conv=fsync status=none; t1=$(date +%s.%N)
$2 umount wm
echo "floor write $(echo "$t1 - $t0" | bc)"
