#!/bin/bash
# rd.sh NAME [OPTS]: cold read of the 4 GiB file through ext4lazy ro,image_io=direct[,OPTS]
B=/var/tmp/bB/ext4lazy; m=/var/tmp/ddr/rm-$$; mkdir -p $m
$B mount -o ro,image_io=direct$2,stats=/var/tmp/ddr/rd-$1.json /var/tmp/ddr/r.img $m || exit 1
sync; echo 3 > /proc/sys/vm/drop_caches
dd if=$m/f of=/dev/null bs=1M status=none
$B umount $m; rmdir $m
