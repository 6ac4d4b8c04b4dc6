#!/bin/bash
# reserve's group 4242: writers with it as primary, as supplementary, and without
. /var/tmp/review34/lib.sh
for case in prim supp none; do
 case $case in
  prim) P="setpriv --reuid=65534 --regid=4242 --clear-groups";;
  supp) P="setpriv --reuid=65534 --regid=65534 --groups=4242";;
  none) P="setpriv --reuid=65534 --regid=65534 --groups=4243";;
 esac
 for who in kern lazy; do
  img=$W/grp-$who.img; m=$W/grp-$who-mnt
  mkimg $img 32 -m 10 -b 1024 ; tune2fs -g 4242 $img >/dev/null
  opt=; [ $who = kern ] && opt=resgid=4242
  mnt_$who $img $m $opt
  a=$($P sh -c "$fillcmd" $m/f 2>&1 | tail -1)
  r=$(sh -c "$fillcmd" $m/r 2>&1 | tail -1)
  echo "$case $who: writer $a, root after $r"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
 done
done
