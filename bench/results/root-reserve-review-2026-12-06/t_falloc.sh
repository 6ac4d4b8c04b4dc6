#!/bin/bash
# nobody fallocate larger than what it may take: errno, size, blocks; then root fallocate
. /var/tmp/review34/lib.sh
for bs in 1024 4096; do for who in kern lazy; do
  img=$W/fa-$who.img; m=$W/fa-$who-mnt
  mkimg $img 64 -m 10 -b $bs
  mnt_$who $img $m
  e=$($NOBODY fallocate -l 100M $m/f 2>&1); echo "bs=$bs $who nobody: $e; $(stat -c 'size %s blocks %b' $m/f) free $(stat -f -c %f $m)"
  e=$($NOBODY fallocate -n -o 100M -l 100M $m/f 2>&1); echo "bs=$bs $who nobody keep-size: $e; $(stat -c 'size %s blocks %b' $m/f) free $(stat -f -c %f $m)"
  e=$(fallocate -l 100M $m/r 2>&1); echo "bs=$bs $who root: $e; $(stat -c 'size %s blocks %b' $m/r) free $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done; done
