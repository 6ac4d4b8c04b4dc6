#!/bin/bash
# null.sh skip|wait: the kernel's ext4 on a served smr-seagate model, a fixed workload (a copy of
# /usr/include/linux, sync, unmount), then the cleaning after it through `emu wait-idle [--skip]`.
B=/work/main/target/release/ext4lazy; cd /var/tmp/nt; rm -f back.img; mkdir -p srv m
$B emu serve --model smr-seagate --size 8G --backing back.img srv || exit 1
L=$(losetup -f --show --direct-io=on srv/disk.img); mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 $L
mount $L m; cp -a /usr/include/linux m/; sync; umount m; losetup -d $L
t0=$(date +%s.%N)
if [ $1 = skip ]; then $B emu wait-idle --skip srv > out.txt; else $B emu wait-idle srv > out.txt; fi
t1=$(date +%s.%N)
echo "$1 cleaning $(tail -1 out.txt) model s, real wait $(echo "$t1 - $t0" | bc) s; $(head -1 out.txt)"
fusermount3 -u srv
