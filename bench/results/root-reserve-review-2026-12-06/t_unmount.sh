#!/bin/bash
# nobody and root fill concurrently without sync (delayed data), unmount while full; check accepted == on disk
. /var/tmp/review34/lib.sh
nosync='dd if=/dev/urandom of="$0" bs=64k status=none; dd if=/dev/urandom of="$0" bs=4k oflag=append conv=notrunc status=none; dd if=/dev/urandom of="$0" bs=1k oflag=append conv=notrunc status=none; md5sum < "$0" | cut -c1-8; stat -c %s "$0"'
for J in lazy ordered; do for BS in 1024 4096; do
  img=$W/um.img; m=$W/um-mnt
  mkimg $img 48 -m 20 -b $BS
  mnt_lazy $img $m journal=$J
  ( $NOBODY sh -c "$nosync" $m/nob > $W/um.nob 2>&1 ) &
  p1=$!
  sh -c "$nosync" $m/root > $W/um.root 2>&1
  wait $p1
  for k in 1 2 3; do $NOBODY sh -c 'echo x > $0/small$1' $m $k 2>/dev/null; done
  um_lazy $m
  fsck $img | grep -v "rc=0"
  cp $img $img.chk; mount -o loop $img.chk $m
  for f in nob root; do
    acc=$(tail -2 $W/um.$f | tr '\n' ' ')
    now="$(md5sum < $m/$f | cut -c1-8) $(stat -c %s $m/$f)"
    echo "journal=$J bs=$BS $f accepted: $acc on disk: $now"
  done
  umount $m
done; done
