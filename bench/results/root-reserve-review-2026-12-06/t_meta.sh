#!/bin/bash
# after nobody fills data to ENOSPC, nobody makes long symlinks / dirs / xattr blocks until ENOSPC:
# do they eat into root's reserve? (free blocks vs r_blocks_count + kernel reserve)
. /var/tmp/review34/lib.sh
MK=${MK:-"-m 10 -b 1024"}; SZ=${SZ:-32}; KIND=${KIND:-symlink}
for who in kern lazy; do
  img=$W/meta-$who.img; m=$W/meta-$who-mnt
  mkimg $img $SZ $MK
  r=$(dumpe2fs -h $img 2>/dev/null | awk -F: '/Reserved block count/{print $2+0}')
  mnt_$who $img $m
  a=$($NOBODY sh -c "$fillcmd" $m/f 2>&1 | tail -1)
  f0=$(stat -f -c %f $m)
  n=$($NOBODY /usr/bin/python3 -c "
import os,sys
d=sys.argv[1]; k=sys.argv[2]; i=0
try:
    while True:
        p=f'{d}/m{i}'
        if k=='symlink': os.symlink('t'*300,p)
        elif k=='mkdir': os.mkdir(p)
        else:
            open(p,'w').close(); os.setxattr(p,'user.big',b'v'*700)
        i+=1
except OSError as e: print(i, e.strerror)
" $m $KIND)
  sync -f $m
  echo "$who: root reserve $r; nobody data $a; free after data $f0; nobody $KIND: $n; free after $(stat -f -c %f $m)"
  um_$who $m >/dev/null; fsck $img | grep -v "rc=0"
done
