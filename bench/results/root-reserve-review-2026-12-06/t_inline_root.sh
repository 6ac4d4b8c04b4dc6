#!/bin/bash
# inline_data 4K: root fills to ENOSPC, then root mkdir (kernel: inline dir, no block)
. /var/tmp/review34/lib.sh
for who in kern lazy; do
  img=$W/ir-$who.img; m=$W/ir-$who-mnt
  mkimg $img 32 -m 10 -b 4096 -O inline_data
  mnt_$who $img $m
  sh -c "$fillcmd" $m/f >/dev/null 2>&1
  mkdir $m/new 2>&1 && stat -c "$who mkdir ok: size %s blocks %b" $m/new
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done
