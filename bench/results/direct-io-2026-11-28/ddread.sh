#!/bin/bash
# ddread.sh kernel|ext4lazy RA_KB: cold read of a 2 GiB file on a prepared image (prepared once by ddprep)
set -e
sys=$1; ra=$2; B=/work/dio/target/release/ext4lazy; img=/var/tmp/ddr-$sys.img; mnt=/var/tmp/ddr-$sys.mnt
mkdir -p $mnt
if [ $sys = kernel ]; then loop=$(losetup -f --show --direct-io=on $img); mount -o ro $loop $mnt
else $B mount -o ro,image_io=direct,readahead_kb=$ra $img $mnt; fi
sync; echo 3 > /proc/sys/vm/drop_caches
dd if=$mnt/f of=/dev/null bs=1M status=none
if [ $sys = kernel ]; then umount $mnt; losetup -d $loop; else $B umount $mnt; fi
