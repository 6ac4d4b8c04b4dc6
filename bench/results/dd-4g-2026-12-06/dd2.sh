#!/bin/bash
# dd2.sh BIN: fresh image, dd 2 GiB + fsync through ext4lazy (image_io=direct), unmount
d=/var/tmp/ddr/d2-$$; mkdir -p $d/m; cp --sparse=always /var/tmp/ddr/tmpl.img $d/i.img
$1 mount -o rw,image_io=direct $d/i.img $d/m || exit 1
dd if=/dev/zero of=$d/m/f bs=1M count=2048 conv=fsync status=none
$1 umount $d/m; rm -rf $d
