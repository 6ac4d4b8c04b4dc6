#!/bin/bash
# inline_data 4K: nobody fills to ENOSPC, then nobody mkdir (new dir should be inline: no block needed)
. /var/tmp/review34/lib.sh
for who in kern lazy; do
  img=$W/im-$who.img; m=$W/im-$who-mnt
  mkimg $img 64 -m 10 -b 4096 -O inline_data
  mnt_$who $img $m
  mkdir $m/d; chmod 777 $m/d; for i in $(seq 1 100); do touch $m/d/e$i; done; rm $m/d/e100
  stat -c "$who d size %s blocks %b" $m/d
  $NOBODY sh -c "$fillcmd" $m/f >/dev/null 2>&1
  echo "$who free $(stat -f -c %f $m)"
  $NOBODY mkdir $m/d/new1 && echo "$who mkdir in d ok"
  $NOBODY mkdir $m/new2 && echo "$who mkdir in / ok"
  $NOBODY sh -c 'echo hi > $0' $m/d/small && echo "$who small file in d ok"
  $NOBODY sh -c 'echo hi > $0' $m/small && echo "$who small file in / ok"
  stat -c "$who %n size %s blocks %b" $m/d/new1 $m/new2 $m/d 2>/dev/null
  echo "$who free $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done
