#!/bin/bash
# fill as nobody to ENOSPC, then every allocating op as nobody, then as root; kernel vs ext4lazy
. /var/tmp/review34/lib.sh
MK=${MK:-"-m 10"}; SZ=${SZ:-32}; OPT=${OPT:-}
for who in kern lazy; do
  img=$W/ops-$who.img; m=$W/ops-$who-mnt
  mkimg $img $SZ $MK
  o=$OPT; [ $who = kern ] && o=
  mnt_$who $img $m $o
  /usr/bin/python3 $W/prep.py $m
  a=$($NOBODY sh -c "$fillcmd" $m/f 2>&1 | tail -1); echo "$who: nobody filled $a"
  $NOBODY /usr/bin/python3 $W/ops.py $m nobody | sed "s/^/$who /"
  /usr/bin/python3 $W/ops.py $m root | sed "s/^/$who /"
  df -B1 --output=avail,used $m | tail -1
  um_$who $m; fsck $img
done
