#!/bin/bash
# Unprivileged user inside its own user namespace (unshare -Ur) fills the volume.
. /var/tmp/review34/lib-old.sh
for who in kern lazy; do
  img=$W/userns-$who.img; m=$W/userns-$who-mnt
  mkimg $img 64 -m 10
  mnt_$who $img $m
  a=$($NOBODY unshare -Ur sh -c "$fillcmd" $m/f 2>&1 | tail -1)
  df -B1 --output=avail,used $m | tail -1
  echo "$who: nobody in userns wrote $a"
  r=$(sh -c "$fillcmd" $m/r 2>&1 | tail -1); echo "$who: root then wrote $r"
  um_$who $m; fsck $img
done
