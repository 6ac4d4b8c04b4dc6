#!/bin/bash
# large reserves: -m 50, and tune2fs -r larger than the free blocks; df as nobody and root; nobody fill; root fill
. /var/tmp/review34/lib.sh
for variant in m50 rhuge; do for who in kern lazy; do
  img=$W/br-$who.img; m=$W/br-$who-mnt
  if [ $variant = m50 ]; then mkimg $img 32 -m 50 -b 1024; else mkimg $img 32 -b 4096; debugfs -w -R "ssv r_blocks_count 8000" $img 2>/dev/null; fi
  mnt_$who $img $m
  d1=$($NOBODY df -B1 --output=size,used,avail $m | tail -1); d2=$(df -B1 --output=size,used,avail $m | tail -1)
  a=$($NOBODY sh -c "$fillcmd" $m/f 2>&1 | tail -1)
  $NOBODY mkdir $m/nd 2>/dev/null && echo "$who nobody mkdir ok after fill"
  r=$(sh -c "$fillcmd" $m/r 2>&1 | tail -1)
  echo "$variant $who: df nobody [$d1] root [$d2]; nobody wrote $a; root wrote $r"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done; done
