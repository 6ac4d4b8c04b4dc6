#!/bin/bash
# nobody dirties 40 MiB via mmap after filling to its limit with write(2): can it take root's reserve?
. /var/tmp/review34/lib.sh
for who in kern lazy; do
  img=$W/mmap-$who.img; m=$W/mmap-$who-mnt
  mkimg $img 64 -m 10
  mnt_$who $img $m
  a=$($NOBODY sh -c "dd if=/dev/zero of=\$0 bs=1M count=40 status=none; sync \$0; stat -c %s \$0" $m/f 2>&1|tail -1)
  echo "$who: nobody wrote $a with write(2)"; df -B1 --output=avail,used $m | tail -1
  $NOBODY timeout 60 /usr/bin/python3 $W/mmapfill.py $m/g $((12<<20)); echo "mmap rc=$?"
  sync -f $m; df -B1 --output=avail,used $m | tail -1
  r=$(sh -c "$fillcmd" $m/r 2>&1 | tail -1); echo "$who: root then wrote $r"
  um_$who $m; fsck $img
  mount -o loop,ro $img $m; /usr/bin/python3 -c "
d=open('$m/g','rb').read(); print('g size',len(d),'pages with 1:',sum(1 for i in range(0,len(d),4096) if d[i]==1))"; umount $m
done
