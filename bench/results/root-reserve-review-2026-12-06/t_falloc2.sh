#!/bin/bash
# nobody fallocate around df's avail
. /var/tmp/review34/lib.sh
for d in -65536 -4096 0 4096; do for who in kern lazy; do
  img=$W/fb-$who.img; m=$W/fb-$who-mnt
  mkimg $img 64 -m 10 -b 4096
  mnt_$who $img $m
  av=$(df -B1 --output=avail $m | tail -1); len=$((av + d))
  e=$($NOBODY fallocate -l $len $m/f 2>&1 && echo ok); echo "avail$d $who: $e; $(stat -c 'size %s' $m/f) free $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done; done
