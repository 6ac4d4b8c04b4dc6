#!/bin/bash
# w.sh kernel|BIN : fresh copy of the template, dd 4 GiB with fsync, umount, cold read back; prints write s, read s
cd /var/tmp/ddr
cp --sparse=always tmpl.img w.img
if [ "$1" = kernel ]; then dev=$(losetup -f --show --direct-io=on w.img); mount $dev wm; else $1 mount -o rw,image_io=direct w.img wm || exit 1; fi
sync; echo 3 > /proc/sys/vm/drop_caches
t0=$(date +%s.%N); dd if=/dev/zero of=wm/f bs=1M count=4096 conv=fsync status=none; t1=$(date +%s.%N)
if [ "$1" = kernel ]; then umount wm; losetup -d $dev; dev=$(losetup -f --show --direct-io=on -r w.img); mount -o ro $dev wm; else $1 umount wm; $1 mount -o ro,image_io=direct w.img wm; fi
sync; echo 3 > /proc/sys/vm/drop_caches
t2=$(date +%s.%N); dd if=wm/f of=/dev/null bs=1M status=none; t3=$(date +%s.%N)
if [ "$1" = kernel ]; then umount wm; losetup -d $dev; else $1 umount wm; fi
echo "$1 write $(echo "$t1 - $t0" | bc) read $(echo "$t3 - $t2" | bc)"
