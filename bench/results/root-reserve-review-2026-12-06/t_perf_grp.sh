#!/bin/bash
# time to write the last ~20 MiB (into root's reserve) in 4 KiB writes: root (uid short-circuit) vs member of resgid (reads /proc)
. /var/tmp/review34/lib.sh
for P in "" "setpriv --reuid=65534 --regid=65534 --groups=4242"; do
  img=$W/pg.img; m=$W/pg-mnt
  mkimg $img 128 -m 20 -b 4096; tune2fs -g 4242 $img >/dev/null
  mnt_lazy $img $m
  av=$(df -B1 --output=avail $m | tail -1); fallocate -l $((av - (4<<20))) $m/pad
  t0=$(date +%s.%N)
  $P dd if=/dev/zero of=$m/f bs=4k count=6000 status=none
  t1=$(date +%s.%N)
  echo "${P:-root}: $(echo "$t1-$t0"|bc) s, wrote $(stat -c %s $m/f)"
  um_lazy $m >/dev/null
done
